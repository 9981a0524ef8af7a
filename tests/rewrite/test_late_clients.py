"""Late clients across the cut-over (issue 36, part 2: a fence that trusts no clock and never goes
back). Each case has writers through ``Rows`` (or ``AsyncRows``) putting distinct keys with
rising values while one client is late: its state read or heartbeat held in the network, its
async route offered an older state after the switch, its clock 10 s off, the process stopped
between routing a write and sending it, its SDK retrying a throttled write across the switch.
``switch`` runs meanwhile and ``finish`` at the end; every acknowledged write must then be in the
new table with its last value, read with the raw SDK.

The network is slowed on the client's side only: its SDK connection's ``send_receive`` sleeps
before sending the chosen request or before handing its answer back (``Hold``); Tablestore is the
local server, unmocked. The subprocess writers run this file (``__main__``). Their SDK clients
have a short ``socket_timeout`` (``WRITER_TIMEOUT_S``): ``finish`` waits the lease and the
longest request timeout the heartbeats report past the fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cutover_tables as ct
import pytest
import tablestore as ts
from cutover_tables import Counter, CounterV2
from hypothesis import given
from hypothesis import strategies as st
from tablestore.protobuf import table_store_pb2 as pb
from tablestore.retry import RetryPolicy

from tsmigrate.instance import clock, retry
from tsmigrate.local.faults import FaultPlan
from tsmigrate.rewrite import driver, machine, reverse
from tsmigrate.service import AsyncRows, Rows, routed, routing

TARGET = ct.TARGET
WRITER_TIMEOUT_S = 5.0  # the writers' socket_timeout (the SDK's default is 50 s)
HOT = 0  # the key (seq) each writer puts again every HOT_EVERY writes: its last value must stand
HOT_EVERY = 5
WRITE_APIS = ("PutRow", "UpdateRow", "DeleteRow", "BatchWriteRow")
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def ready(ots_instance):
    """A rewrite of ``counters`` into ``counters_by_seq`` at ready (lease 0.5 s), 20 rows copied."""
    return ct.ready(ots_instance)


def _eventually(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
    return result


# --- the network of one client, slowed for one request -------------------------------------------


def _table_of(api: str, body: bytes) -> str | None:
    request = {"GetRange": pb.GetRangeRequest, "PutRow": pb.PutRowRequest,
               "UpdateRow": pb.UpdateRowRequest, "DeleteRow": pb.DeleteRowRequest}.get(api)
    if request is None:
        return None
    message = request()
    message.ParseFromString(body)
    return message.table_name


class Sends:
    """When (``time.monotonic``) each write request a client sent to the old table left it
    (after the routing's checks: below them, at the connection); the writers' requests to it
    must all have left before ``switch`` returned."""

    def __init__(self) -> None:
        self.at: list[float] = []

    def _note(self, url: str, body: bytes) -> None:
        api = url.rsplit("/", 1)[-1]
        if api in WRITE_APIS and (api == "BatchWriteRow" or _table_of(api, body) == "counters"):
            self.at.append(time.monotonic())

    def on(self, client: Any) -> Any:
        inner, sends = client.connection, self

        class Connection:
            def send_receive(self, url: str, headers: Any, body: bytes) -> Any:
                sends._note(url, body)
                return inner.send_receive(url, headers, body)

            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

        client.connection = Connection()
        return client

    def on_async(self, client: Any) -> Any:
        """``on`` for an ``AsyncOTSClient`` (its pool is made when first used)."""
        create, sends = client._get_or_create_connection, self

        class Connection:
            def __init__(self, inner: Any) -> None:
                self.inner = inner

            async def send_receive(self, url: str, headers: Any, body: bytes) -> Any:
                sends._note(url, body)
                return await self.inner.send_receive(url, headers, body)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.inner, name)

        wrapped: list[Connection] = []

        def connection() -> Any:
            pool = create()
            if not wrapped or wrapped[0].inner is not pool:
                wrapped[:] = [Connection(pool)]
            return wrapped[0]

        client._get_or_create_connection = connection
        return client

    def after(self, moment: float) -> list[float]:
        return [t - moment for t in self.at if t > moment]


class Hold:
    """The next ``api`` request to ``table`` a client sends once ``arm``ed is held ``seconds``
    (or until ``until()`` holds) in its network: before it is sent (``answer=False``: the
    service sees it late), or after the service answered (``answer=True``: the answer comes
    late). ``holding`` is set while it is held, ``released`` once it went on."""

    def __init__(self, api: str, table: str, seconds: float, *, answer: bool,
                 until: Callable[[], bool] | None = None) -> None:
        self.api, self.table, self.seconds, self.answer, self.until = api, table, seconds, answer, until
        self._armed = False
        self._lock = threading.Lock()
        self.holding = threading.Event()
        self.released = threading.Event()
        self.held_s = 0.0

    def arm(self) -> Hold:
        with self._lock:
            self._armed = True
        return self

    def _take(self, url: str, body: bytes) -> bool:
        api = url.rsplit("/", 1)[-1]
        if api != self.api or _table_of(api, body) != self.table:
            return False
        with self._lock:
            taken, self._armed = self._armed, False
        return taken

    def _over(self, started: float) -> bool:
        return time.monotonic() - started >= self.seconds or bool(self.until and self.until())

    def _done(self, started: float) -> None:
        self.held_s = time.monotonic() - started
        self.released.set()

    def on(self, client: Any) -> Any:
        """Slow ``client``'s network (an ``OTSClient``), before anything else wraps it."""
        inner, hold = client.connection, self

        class Connection:
            def send_receive(self, url: str, headers: Any, body: bytes) -> Any:
                if not hold._take(url, body):
                    return inner.send_receive(url, headers, body)
                started = time.monotonic()
                answer = inner.send_receive(url, headers, body) if hold.answer else None
                hold.holding.set()
                while not hold._over(started):
                    time.sleep(0.01)
                if not hold.answer:
                    answer = inner.send_receive(url, headers, body)
                hold._done(started)
                return answer

            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

        client.connection = Connection()
        return client

    def on_async(self, client: Any) -> Any:
        """``on`` for an ``AsyncOTSClient`` (its pool is made when first used)."""
        create, hold = client._get_or_create_connection, self

        class Connection:
            def __init__(self, inner: Any) -> None:
                self.inner = inner

            async def send_receive(self, url: str, headers: Any, body: bytes) -> Any:
                if not hold._take(url, body):
                    return await self.inner.send_receive(url, headers, body)
                started = time.monotonic()
                answer = await self.inner.send_receive(url, headers, body) if hold.answer else None
                hold.holding.set()
                while not hold._over(started):
                    await asyncio.sleep(0.01)
                if not hold.answer:
                    answer = await self.inner.send_receive(url, headers, body)
                hold._done(started)
                return answer

            def __getattr__(self, name: str) -> Any:
                return getattr(self.inner, name)

        held: list[Connection] = []

        def connection() -> Any:
            pool = create()
            if not held or held[0].inner is not pool:
                held[:] = [Connection(pool)]
            return held[0]

        client._get_or_create_connection = connection
        return client


# --- writers and what they were told -----------------------------------------------------------


def _rows(model: type, name: str, i: int) -> list[Any]:
    """Write ``i`` of writer ``name``: a key of its own (seq i), and every ``HOT_EVERY`` writes
    its hot key again."""
    rows = [model(device=name, seq=i, count=i, note=f"{name}-{i}")]
    if i % HOT_EVERY == 0:
        rows.append(model(device=name, seq=HOT, count=i, note=f"{name}-{i}"))
    return rows


class Writers:
    """Threads putting rows through ``Rows``: writer ``name`` owns the keys device=name and puts
    ``_rows`` 1, 2, 3, ...; ``acknowledged`` holds the last count each key was acknowledged
    with."""

    def __init__(self, writers: list[tuple[str, type, Any]]) -> None:
        self.acknowledged: dict[tuple[str, int], int] = {}
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._write, args=w, daemon=True) for w in writers]

    def _write(self, name: str, model: type, client: Any) -> None:
        rows = Rows(model, client)
        i = 0
        try:
            while not self._stop.is_set():
                i += 1
                for row in _rows(model, name, i):
                    rows.put(row)
                    with self._lock:
                        self.acknowledged[(name, row.seq)] = i
                time.sleep(0.002)
        except BaseException as exc:
            self.errors.append(exc)

    def count(self) -> int:
        with self._lock:
            return len(self.acknowledged)

    def more(self, n: int = 20) -> None:
        start = self.count()
        _eventually(lambda: self.errors or self.count() >= start + n, f"{n} more writes")
        assert not self.errors, self.errors

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        assert not self.errors, self.errors


def _writer_client(ots_instance: Any) -> ts.OTSClient:
    return ots_instance.client(socket_timeout=WRITER_TIMEOUT_S)


def _finish(client: Any) -> machine.Rewrite:
    routing.clear()
    with machine.Runner(client, TARGET, handover=True) as runner:
        return driver.finish(client, driver.spec_of(client, True), runner, allow_destructive=False)


def _target_rows(client: Any) -> dict[tuple[str, int], dict[str, Any]]:
    """Every row of the new table (read with the raw SDK, not routed)."""
    start = [("seq", ts.INF_MIN), ("device", ts.INF_MIN)]
    end = [("seq", ts.INF_MAX), ("device", ts.INF_MAX)]
    rows = {}
    while start:
        _, start, page, _ = client.get_range(TARGET, ts.Direction.FORWARD, start, end, max_version=1)
        for row in page:
            pk = dict(row.primary_key)
            rows[(pk["device"], pk["seq"])] = {c[0]: c[1] for c in row.attribute_columns}
    return rows


def _assert_all_in_target(client: Any, acknowledged: dict[tuple[str, int], int]) -> None:
    """Every acknowledged write is in the new table with its last value."""
    assert acknowledged
    stored = _target_rows(client)
    wrong = {key: (count, stored.get(key)) for key, count in acknowledged.items()
             if stored.get(key) != {"count": count, "note": f"{key[0]}-{count}"}}
    assert not wrong, f"{len(wrong)} of {len(acknowledged)} acknowledged writes are not in {TARGET}: {wrong}"


# --- (a) a state read held 4 s, (b) a heartbeat held 5 s (the 6 s and 8 s, shortened: held
# well past the lease, 0.5 s, and past the switch either way) ----------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("answer", [False, True], ids=["request-held", "answer-held"])
def test_a_state_read_held_across_the_switch_loses_nothing(ready, ots_instance, answer):
    """One client's read of the rewrite's state is held 4 s, the switch runs meanwhile. Held as
    a request, the service answers it after the switch; held as an answer, the service answered
    it before the fence and it arrives well after its lease (counted from when it was sent):
    either way the client reads the state again and writes the new table."""
    client = ready
    late, sends = Hold("GetRange", routing.STATE_TABLE, 4.0, answer=answer), Sends()
    slow = late.on(sends.on(_writer_client(ots_instance)))  # the Counter writers' router reads here
    fast = sends.on(_writer_client(ots_instance))
    with Writers([("a1", Counter, slow), ("a2", Counter, slow), ("b1", CounterV2, fast)]) as w:
        w.more()
        late.arm()
        assert late.holding.wait(5)
        switched = ct.switch(client)
        over = time.monotonic()
        assert switched.phase == machine.SWITCHED
        assert late.released.wait(10)
        w.more()
    assert late.held_s >= 4.0
    assert sends.after(over) == []  # no write left for the old table after the switch
    _finish(client)
    _assert_all_in_target(client, w.acknowledged)


@pytest.mark.slow
def test_a_heartbeat_held_across_the_switch_loses_nothing(ready, ots_instance):
    """One client's heartbeat write is held 5 s before it is sent, the switch runs meanwhile:
    its writes wait, and once the heartbeat went they are routed by a state read sent after it
    (the switch is over by then), never on the route it had before."""
    client = ready
    late, sends = Hold("PutRow", routing.STATE_TABLE, 5.0, answer=False), Sends()
    slow = late.on(sends.on(_writer_client(ots_instance)))
    fast = sends.on(_writer_client(ots_instance))
    with Writers([("a1", Counter, slow), ("a2", Counter, slow), ("b1", CounterV2, fast)]) as w:
        w.more()
        late.arm()
        assert late.holding.wait(5)
        assert ct.switch(client).phase == machine.SWITCHED
        over = time.monotonic()
        assert late.released.wait(10)
        w.more()
    assert late.held_s >= 5.0
    assert sends.after(over) == []
    _finish(client)
    _assert_all_in_target(client, w.acknowledged)


# --- (c) AsyncRows: a late state answer does not move the route back -----------------------------


@pytest.mark.slow
def test_async_rows_a_late_state_answer_does_not_move_the_route_back(ready, ots_instance, monkeypatch):
    """Coroutines refresh their route at once: one state read's answer (the rewrite at ready)
    is held until another refresh has moved the route to switched; when it comes it is
    dropped (older version), and no write goes to the old table."""
    client = ready
    router_box: dict[str, routing.Router] = {}
    offered: list[tuple[int, str, int]] = []  # (version read, phase read, version held after)
    install = routing.Router._ainstall

    async def recording(self: routing.Router, read: routing.Route) -> routing.Route:
        held = await install(self, read)
        if self.table == "counters":
            offered.append((read.version, read.phase, held.version))
        return held

    monkeypatch.setattr(routing.Router, "_ainstall", recording)

    def switched_held() -> bool:
        router = router_box.get("r")
        return router is not None and router.route.phase == machine.SWITCHED

    late = Hold("GetRange", routing.STATE_TABLE, 10.0, answer=True, until=switched_held)
    sends = Sends()
    acknowledged: dict[tuple[str, int], int] = {}
    errors: list[BaseException] = []
    switch_over: list[float] = []

    async def scenario() -> machine.Rewrite:
        async_client = late.on_async(sends.on_async(
            ots_instance.async_client(socket_timeout=WRITER_TIMEOUT_S)))
        stop = asyncio.Event()

        async def writer(name: str) -> None:
            rows = AsyncRows(Counter, async_client)
            router_box["r"] = rows.client._router
            i = 0
            try:
                while not stop.is_set():
                    i += 1
                    for row in _rows(Counter, name, i):
                        await rows.put(row)
                        acknowledged[(name, row.seq)] = i
                    await asyncio.sleep(0.002)
            except BaseException as exc:
                errors.append(exc)

        tasks = [asyncio.create_task(writer(f"c{n}")) for n in range(4)]
        try:
            await asyncio.sleep(0.3)
            late.arm()
            while not late.holding.is_set():  # a refresh sent before the fence, answer held
                assert not errors, errors
                await asyncio.sleep(0.01)
            switched = await asyncio.to_thread(ct.switch, client)
            switch_over.append(time.monotonic())
            while not late.released.is_set():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)  # writes go on after the late answer came
            return switched
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            await async_client.close()

    switched = asyncio.run(scenario())
    assert not errors, errors
    assert switched.phase == machine.SWITCHED
    # The held answer (at ready) came after the route had moved to switched, and was dropped.
    moved = next(i for i, (v, phase, held) in enumerate(offered)
                 if phase == machine.SWITCHED and held == v)
    switched_version = offered[moved][0]
    late_answers = [(v, held) for v, phase, held in offered[moved + 1:] if phase == machine.READY]
    assert late_answers, offered
    assert all(v < switched_version <= held for v, held in late_answers), offered
    held_versions = [held for _, _, held in offered]
    assert held_versions == sorted(held_versions), offered  # never back
    assert sends.after(switch_over[0]) == []
    _finish(client)
    _assert_all_in_target(client, acknowledged)


# --- (d) a writer whose clock is 10 s off, (e) a writer stopped between routing and sending ------


WORKER_PAUSE_ACK = "stop-before-ack"  # the worker stops itself before it acknowledges a fence
WORKER_PAUSE_SEND = "stop-before-send"  # ... after routing its next write, before sending it


def _worker(endpoint: str, instance: str, key_id: str, key_secret: str, name: str,
            skew_s: str, mode: str) -> None:
    """A service process (this file run as a script): puts its keys through ``Rows(Counter)``,
    printing ``ack KEY COUNT`` per acknowledged write, with its clock ``skew_s`` off. ``mode``:
    ``WORKER_PAUSE_ACK`` stops the process (SIGSTOP) the first time its router is about to
    acknowledge a fence; ``WORKER_PAUSE_SEND`` stops it between ``Router.begin_write`` and the
    send of the first write after the line ``pause`` came on stdin. ``stop`` ends it."""
    real_time = time.time
    time.time = lambda: real_time() + float(skew_s)  # the whole process: heartbeats' at_ms too
    stop, pause = threading.Event(), threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                stop.set()
            elif line.strip() == "pause":
                pause.set()
        stop.set()

    threading.Thread(target=commands, daemon=True).start()
    if mode == WORKER_PAUSE_ACK:
        heartbeat_op = routing.Router.heartbeat_op

        def acknowledging(self: routing.Router, route: routing.Route) -> Any:
            if route.phase == machine.SWITCHING and not pause.is_set():
                pause.set()
                print("stopping", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            return (yield from heartbeat_op(self, route))

        routing.Router.heartbeat_op = acknowledging  # type: ignore[method-assign]
    elif mode == WORKER_PAUSE_SEND:
        begin_write = routing.Router.begin_write
        stopped = threading.Event()

        def routed_then_stopped(self: routing.Router, client: Any) -> routing.Route:
            route = begin_write(self, client)
            if pause.is_set() and not stopped.is_set():
                stopped.set()
                print(f"stopping {route.side} {route.version}", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            return route

        routing.Router.begin_write = routed_then_stopped  # type: ignore[method-assign]
    client = ts.OTSClient(endpoint, key_id, key_secret, instance, socket_timeout=WRITER_TIMEOUT_S)
    sends = Sends()
    sends.at = _Printed()  # type: ignore[assignment]
    rows = Rows(Counter, sends.on(client))
    i = 0
    while not stop.is_set():
        i += 1
        for row in _rows(Counter, name, i):
            rows.put(row)
            print(f"ack {row.seq} {i}", flush=True)
        time.sleep(0.005)
    print("done", flush=True)


class _Printed(list):
    """A worker's ``Sends.at``: each time printed as ``sent T`` (monotonic times are the
    machine's, so the test compares them with its own)."""

    def append(self, at: float) -> None:
        print(f"sent {at!r}", flush=True)


class Worker:
    """A ``_worker`` subprocess and what it printed."""

    def __init__(self, ots: Any, name: str, *, skew_s: float = 0.0, mode: str = "") -> None:
        self.name = name
        self.lines: list[str] = []
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen(
            [sys.executable, __file__, ots.endpoint, ots.instance, ots.access_key_id,
             ots.access_key_secret, name, str(skew_s), mode],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=environ)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    @property
    def pid(self) -> int:
        return self.process.pid

    def acks(self) -> int:
        return sum(1 for line in list(self.lines) if line.startswith("ack "))

    def sent_after(self, moment: float) -> list[float]:
        """Its writes to the old table that left it after ``moment`` (seconds after it)."""
        times = [float(line.split()[1]) for line in list(self.lines) if line.startswith("sent ")]
        return [t - moment for t in times if t > moment]

    def wait_acks(self, n: int) -> None:
        def enough() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"worker {self.name} ended: {self.process.stderr.read()}")
            return self.acks() >= n

        _eventually(enough, f"{n} writes of {self.name}", 30)

    def stopped(self) -> bool:
        """SIGSTOPped (its state in /proc is T)."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")

    def command(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def finish(self) -> dict[tuple[str, int], int]:
        """Stop it; the last count each of its keys was acknowledged with."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
        self.command("stop")
        assert self.process.wait(30) == 0, self.process.stderr.read()
        self._reader.join(10)
        assert self.lines[-1] == "done", self.lines[-5:]
        acknowledged = {}
        for line in self.lines:
            if line.startswith("ack "):
                _, key, count = line.split()
                acknowledged[(self.name, int(key))] = int(count)
        return acknowledged

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.mark.slow
@pytest.mark.parametrize("skew_s", [-10.0, 10.0], ids=["clock-10s-behind", "clock-10s-ahead"])
def test_a_writer_whose_clock_is_10s_off_is_waited_for_and_named(ready, ots_instance, skew_s):
    """A service process whose clock is 10 s behind (or ahead) is as live as any: its heartbeat
    is aged by the service's clock. It stops before acknowledging the fence: the switch waits
    the lease out for it and names it unacknowledged; continued, it writes the new table."""
    client = ready
    worker = Worker(ots_instance, "skewed", skew_s=skew_s, mode=WORKER_PAUSE_ACK)
    try:
        worker.wait_acks(20)
        [row] = reverse.clients(client, TARGET)
        now = clock.server_now_ms(client)
        assert row["age_s"] < 2.0  # by the service's clock ...
        assert abs(row["at_ms"] - now - skew_s * 1000) < 2000  # ... not by the worker's own
        assert row["request_timeout_s"] == WRITER_TIMEOUT_S
        started = time.monotonic()
        switched = ct.switch(client)
        over = time.monotonic()
        # It saw the fence and stopped before saying so (or, starved of the CPU, did not even
        # read it): never acknowledged, so the switch waited the lease out and names it.
        assert f"{row['host']}:{worker.pid}" in switched.get("fence")["unacknowledged"]
        assert over - started >= ct.LEASE_S
        os.kill(worker.pid, signal.SIGCONT)
        worker.wait_acks(worker.acks() + 20)  # on the new route
        acknowledged = worker.finish()
        assert worker.sent_after(over) == []
    finally:
        worker.kill()
    _finish(client)
    _assert_all_in_target(client, acknowledged)


@pytest.mark.slow
def test_a_writer_stopped_between_routing_and_sending_across_the_switch_writes_the_target(
        ready, ots_instance):
    """A service process stopped (SIGSTOP) after its write was routed to the old table and
    before it was sent, across the switch: continued, the write finds its route's lease run out,
    is routed again and lands in the new table; finish then has every write."""
    client = ready
    worker = Worker(ots_instance, "paused", mode=WORKER_PAUSE_SEND)
    try:
        worker.wait_acks(20)
        worker.command("pause")
        _eventually(worker.stopped, "the worker to stop between routing and sending", 10)
        before = worker.acks()
        assert any(line.startswith("stopping source ") for line in worker.lines)  # the old table
        switched = ct.switch(client)
        over = time.monotonic()
        assert switched.phase == machine.SWITCHED
        os.kill(worker.pid, signal.SIGCONT)
        worker.wait_acks(before + 10)
        acknowledged = worker.finish()
        assert worker.sent_after(over) == []  # the write routed before the pause went to the new table
    finally:
        worker.kill()
    _finish(client)
    _assert_all_in_target(client, acknowledged)


# --- the SDK's own retries stop where the lease ends, whatever the client's policy --------------


class EveryBusy(RetryPolicy):
    """A custom policy: every OTSServerBusy retried, 0.2 s apart, 200 times."""

    def should_retry(self, retry_times: int, exception: Any, api_name: str) -> bool:
        return retry_times < 200 and getattr(exception, "code", "") == "OTSServerBusy"

    def get_retry_delay(self, retry_times: int, exception: Any, api_name: str) -> float:
        return 0.2


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["custom", "sdk-default", "tsmigrate"])
def test_the_sdks_retries_of_a_write_stop_where_its_route_runs_out(
        ready, ots_instance, ots_server_options, policy):
    """Every UpdateRow is refused (OTSServerBusy) while the switch runs: the client's policy
    retries it, each attempt checked against the lease of its route; once it ran out the write
    is routed again, and when the service takes it again it lands in the new table, not the old
    one its first attempt went to."""
    client = ready
    kwargs = {"custom": {"retry_policy": EveryBusy()}, "sdk-default": {},
              "tsmigrate": {"retry_policy": retry.RETRY_POLICY}}[policy]
    writer = ots_instance.client(socket_timeout=WRITER_TIMEOUT_S, **kwargs)
    rows = Rows(Counter, writer)
    rows.put(Counter(device="r1", seq=1, count=1, note="before"))
    attempts: list[float] = []
    sent = retry.GuardedConnection.send_receive

    def counting(self: Any, url: str, headers: Any, body: bytes) -> Any:
        if url.endswith("/UpdateRow"):
            attempts.append(time.monotonic())
        return sent(self, url, headers, body)

    outcome: dict[str, Any] = {}

    def update() -> None:
        try:
            rows.update({"device": "r1", "seq": 1}, set={"note": "after"})
            outcome["done"] = True
        except BaseException as exc:
            outcome["error"] = exc

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(retry.GuardedConnection, "send_receive", counting)
        ots_server_options.faults = FaultPlan.parse("server_busy@UpdateRow=1.0")
        thread = threading.Thread(target=update)
        thread.start()
        _eventually(lambda: len(attempts) >= 2, "the update to be refused twice")
        assert ct.switch(client).phase == machine.SWITCHED
        ots_server_options.faults = None
        thread.join(30)
    assert outcome == {"done": True}, outcome
    # It landed in the new table, and the old one never took it.
    assert _target_rows(client)[("r1", 1)] == {"count": 1, "note": "after"}
    _, old, _ = client.get_row("counters", [("device", "r1"), ("seq", 1)], max_version=1)
    assert {c[0]: c[1] for c in old.attribute_columns}["note"] == "before"


# --- units: the route never goes back, the send window, the heartbeat's timeout ----------------


def _route(version: int, read: int, rewrite: str | None = TARGET) -> routing.Route:
    return routing.Route(rewrite, "ready", version, routing.SOURCE, sent=time.monotonic(), read=read)


@given(st.permutations(list(range(1, 9))), st.lists(st.integers(0, 3), min_size=8, max_size=8))
def test_a_route_never_moves_to_an_older_state_version(order, bumps):
    """Reads of the state (version i sent i-th; some repeat a version) answered in any order:
    the route held only ever moves forward, and ends on the newest."""
    versions = [1]
    for bump in bumps[1:]:
        versions.append(versions[-1] + bump)
    reads = [_route(version, read) for read, version in enumerate(versions, start=1)]
    router = routing.Router("counters")
    held = []
    for position in order:
        held.append(router._install(reads[position - 1]).version)
    assert held == sorted(held)
    assert router.route.version == max(versions)
    # The same for coroutines.
    router = routing.Router("counters")
    for position in order:
        asyncio.run(router._ainstall(reads[position - 1]))
    assert router.route.version == max(versions)


def test_another_rewrite_or_none_goes_by_the_order_of_the_reads():
    """An aborted rewrite (no route) or another one replaces the route only when read later."""
    router = routing.Router("counters")
    router._install(_route(9, read=5))
    assert router._install(_route(0, read=4, rewrite=None)).version == 9  # an answer sent earlier
    assert router._install(_route(0, read=6, rewrite=None)).rewrite is None  # the abort, read later


def test_a_route_is_trusted_for_its_lease_from_when_its_read_was_sent():
    route = routing.Route(TARGET, "ready", 3, routing.SOURCE, lease_s=0.5,
                          sent=time.monotonic() - 0.6, read=1)
    assert route.expires < time.monotonic() and not route.valid()  # answered late: expired
    fresh = routing.Route(TARGET, "ready", 3, routing.SOURCE, lease_s=0.5, sent=time.monotonic())
    assert fresh.valid()


class _Pool:
    """A connection pool that records the attempts it sends and answers with ``answer``."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.sent: list[str] = []

    def send_receive(self, url: str, headers: Any, body: bytes) -> Any:
        self.sent.append(url)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def _busy() -> tuple[int, str, dict, bytes]:
    error = pb.Error()
    error.code, error.message = "OTSServerBusy", "busy"
    return 503, "Service Unavailable", {}, error.SerializeToString()


def test_the_guard_sends_only_within_the_window_and_says_what_was_sent():
    pool = _Pool(_busy())
    guarded = retry.GuardedConnection(pool)
    assert guarded.send_receive("/PutRow", {}, b"") == _busy()  # no window: as it is
    token = retry.SEND_WINDOW.set(retry.SendWindow(time.monotonic() + 60))
    try:
        guarded.send_receive("/PutRow", {}, b"")
        window = retry.SEND_WINDOW.get()
        assert window.sent == 1 and window.failure.code == "OTSServerBusy"
        assert retry.RETRY_POLICY.should_retry(0, window.failure, "PutRow")
        window.deadline = time.monotonic() - 1  # the route's lease ran out
        assert not retry.RETRY_POLICY.should_retry(0, window.failure, "PutRow")  # the policy stops
        with pytest.raises(retry.WindowClosed) as closed:
            guarded.send_receive("/PutRow", {}, b"")  # and any other policy's retry is not sent
        assert (closed.value.sent, closed.value.failure.code) == (1, "OTSServerBusy")
    finally:
        retry.SEND_WINDOW.reset(token)
    assert len(pool.sent) == 2


@pytest.mark.parametrize(("exc", "api", "again"), [
    (retry.WindowClosed(0, None), "UpdateRow", True),  # never sent: routed again
    (retry.WindowClosed(2, ts.OTSServiceError(503, "OTSServerBusy", "")), "UpdateRow", True),
    (retry.WindowClosed(1, ts.OTSServiceError(503, "OTSTimeout", "")), "PutRow", True),
    (retry.WindowClosed(1, ts.OTSServiceError(503, "OTSTimeout", "")), "UpdateRow", False),
    (ts.OTSServiceError(503, "OTSServerBusy", ""), "UpdateRow", True),  # the policy stopped: expired
    (ts.OTSServiceError(400, "OTSConditionCheckFail", ""), "PutRow", False),
])
def test_which_failed_writes_are_routed_again(exc, api, again):
    expired = routing.Route(TARGET, "ready", 3, routing.SOURCE, sent=time.monotonic() - 60)
    assert (routed._again(exc, expired, api, 0) is None) == again
    token = retry.SINGLE_ATTEMPT.set(True)  # the operation repeats its own sent attempts
    try:
        assert (routed._again(exc, expired, api, 0) is None) == (
            isinstance(exc, retry.WindowClosed) and exc.sent == 0)
    finally:
        retry.SINGLE_ATTEMPT.reset(token)
    live = routing.Route(TARGET, "ready", 3, routing.SOURCE, sent=time.monotonic())
    if not isinstance(exc, retry.WindowClosed):
        assert routed._again(exc, live, api, 0) is exc  # within its lease: the error stands
    assert routed._again(retry.WindowClosed(0, None), expired, api, routed.REROUTES) is not None


@pytest.mark.parametrize(("timeout", "seconds"), [
    (None, 50.0), (5, 5.0), (7.5, 7.5), ((2, 9), 9.0), ([3, 4.5], 4.5)])
def test_the_heartbeat_reports_the_clients_read_timeout(timeout, seconds):
    class Client:
        socket_timeout = timeout

    assert routing.request_timeout_s(Client()) == seconds


if __name__ == "__main__":  # a service process of the subprocess cases
    _worker(*sys.argv[1:])
