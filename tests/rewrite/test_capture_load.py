"""The cut-over under a load capture must keep up with: forty ``AsyncRows`` coroutines increment
counters as fast as they can while `switch`, `revert` and `switch` run, on a stream of four
shards. Each command catches capture up to the stream's end before its fence (within a bound,
or refuses), drains the rest with writes held, and returns; every acknowledged increment is in
the table of record and, through reverse capture, in the old one; no row is named a foreign
write for capture's lag."""

from __future__ import annotations

import asyncio
import collections
import threading
import time

import cutover_tables as ct
import pytest

from tsmigrate.rewrite import cutover, machine
from tsmigrate.service import AsyncRows, routing
from tsmigrate.service.routing import WriteUnconfirmed

WRITERS = 40
KEYS = 4  # per writer: 160 counters
COMMAND_BOUND_S = cutover.CATCH_UP_S + cutover.DRAIN_S  # no command may take longer


class Load:
    """``WRITERS`` coroutines on a thread of their own, each incrementing its ``KEYS`` counters
    in turn, as fast as the service answers; counts what was acknowledged, and what may or may
    not have landed (a write the routing could not confirm)."""

    def __init__(self, ots_instance) -> None:
        self.ots = ots_instance
        self.acked: collections.Counter = collections.Counter()
        self.unsure: collections.Counter = collections.Counter()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        client = self.ots.async_client()
        try:
            await asyncio.gather(*(self._writer(client, n) for n in range(WRITERS)))
        finally:
            await client.close()

    async def _writer(self, client, n: int) -> None:
        rows = AsyncRows(ct.Counter, client)
        i = 0
        while not self.stop.is_set():
            key = (f"w{n:02d}", 1000 + i % KEYS)
            i += 1
            try:
                await rows.update({"device": key[0], "seq": key[1]}, increment={"count": 1})
            except WriteUnconfirmed:
                self.unsure[key] += 1
            except Exception as exc:  # every other failure is the test's failure
                self.errors.append(f"{type(exc).__name__}: {exc}")
                return
            else:
                self.acked[key] += 1

    def total(self) -> int:
        return sum(self.acked.values())

    def wait_for(self, more: int, timeout_s: float = 30.0) -> None:
        target = self.total() + more
        deadline = time.monotonic() + timeout_s
        while self.total() < target:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"the writers stalled at {self.total()} writes"
            time.sleep(0.05)


def _counts(client, table: str, key_order: tuple[str, str]) -> dict[tuple[str, int], int]:
    import tablestore as ts

    start = [(name, ts.INF_MIN) for name in key_order]
    end = [(name, ts.INF_MAX) for name in key_order]
    found = {}
    while start:
        _, start, rows, _ = client.get_range(table, "FORWARD", start, end, max_version=1)
        for row in rows:
            key = dict(row.primary_key)
            cells = {name: value for name, value, _ts in row.attribute_columns}
            found[(key["device"], key["seq"])] = cells.get("count")
    return found


@pytest.mark.slow
def test_forty_async_writers_at_full_speed_through_switch_revert_and_switch(
        ots_instance, ots_server_options):
    ots_server_options.stream_shards = 4  # the streams the rewrite turns on
    client = ct.ready(ots_instance)
    load = Load(ots_instance)
    load.thread.start()
    took = {}
    try:
        load.wait_for(200)
        for name, command in (("switch", ct.switch), ("revert", ct.revert), ("switch again", ct.switch)):
            started = time.monotonic()
            done = command(client)
            took[name] = time.monotonic() - started
            assert took[name] < COMMAND_BOUND_S, took
            fence = done.get("fence")
            # How long it waited for each is kept: catching up before the fence, with writes held.
            assert fence["before_catch_up_s"] >= 0 and fence["clients_s"] >= 0
            assert fence["drain_s"] <= cutover.DRAIN_S and not fence.get("lowered_after_failure")
            load.wait_for(200)  # the writers go on, on the side the phase names
    finally:
        load.stop.set()
        load.thread.join(30)
    assert not load.errors, load.errors[:5]
    assert machine.load(client, ct.TARGET).phase == machine.SWITCHED
    assert load.total() >= 800
    routing.clear()
    ct.catch_up(client)  # reverse capture brings the last writes to the old table
    record = _counts(client, ct.TARGET, ("seq", "device"))
    old = _counts(client, "counters", ("device", "seq"))
    written = set(load.acked) | set(load.unsure)
    for key in written:  # every acknowledged increment, at most the unconfirmed ones more
        assert load.acked[key] <= (record.get(key) or 0) <= load.acked[key] + load.unsure[key], key
        assert old.get(key) == record.get(key), key


def test_a_switch_capture_cannot_catch_up_for_refuses_before_its_fence(ots_instance, monkeypatch):
    from tsmigrate.rewrite import capture
    from tsmigrate.service import Rows

    client = ct.ready(ots_instance)
    rows = Rows(ct.Counter, client)
    for i in range(60):  # a backlog of more than a page
        rows.update({"device": "d1", "seq": i}, set={"note": f"n{i}"})
    monkeypatch.setattr(capture, "PAGE_RECORDS", 10)
    monkeypatch.setattr(capture, "STEP_BUDGET_S", 0.0)  # a page per round
    monkeypatch.setattr(cutover, "CATCH_UP_S", 0.0)
    with pytest.raises(capture.CaptureBehind) as refused:
        ct.switch(client)
    message = str(refused.value)
    assert message.startswith("switch: capture did not reach the end of counters's stream within 0s")
    assert "records/s over 1 shard(s)" in message and "--workers N" in message
    rewrite = machine.load(client, ct.TARGET)
    assert rewrite.phase == machine.READY and rewrite.side != machine.HOLD  # no fence went up
    assert rewrite.get("fence_ms") is None
    monkeypatch.undo()
    assert ct.switch(client).phase == machine.SWITCHED  # once capture keeps up, it switches
