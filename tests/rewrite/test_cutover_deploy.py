"""The cut-over as a deploy lives it: several service PROCESSES move from the old model to the new
at random moments while they write, `switch` and `revert` run in the middle, and after `finish`
every acknowledged write stands; a `switch` killed with SIGKILL inside its fence holds writes
until the next `switch` or `revert`; `rewrite status` lists the clients and where each writes.

The models and the cut-over calls are ``tests/cutover_tables.py``'s, as in ``test_cutover.py``.

The worker processes are forked from a fork server (not from this process, which runs the
server's threads); each runs this file with ``__name__ == WORKER_RUN_NAME`` (``runpy``), which
calls ``_deploy_worker`` with the arguments the test gave it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import cutover_tables as ct
import pytest
import tablestore as ts
from cutover_tables import Counter, CounterV2

from tsmigrate.rewrite import driver, machine
from tsmigrate.service import Rows, routing

TARGET = ct.TARGET
ROWS = ct.ROWS


@pytest.fixture
def ready(ots_instance):
    """A rewrite of ``counters`` into ``counters_by_seq`` at ready, 20 rows copied."""
    return ct.ready(ots_instance)


def _key(i: int) -> dict[str, Any]:
    return {"device": f"d{i % 4}", "seq": i}


def _raw(client, table: str, i: int) -> dict | None:
    """Row ``i`` as stored in ``table`` (either key order), not routed."""
    key = ([("device", f"d{i % 4}"), ("seq", i)] if table == "counters"
           else [("seq", i), ("device", f"d{i % 4}")])
    _, row, _ = client.get_row(table, key, max_version=1)
    return None if row is None else {c[0]: c[1] for c in row.attribute_columns}


_catch_up, _switch, _revert = ct.catch_up, ct.switch, ct.revert


def _credentials(ots) -> dict[str, str]:
    return {"ALIBABA_CLOUD_ACCESS_KEY_ID": ots.access_key_id,
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ots.access_key_secret}


def _wait_for(condition, what: str, timeout: float, check=None) -> None:
    """Until ``condition()``, polling every 0.02 s; ``check()`` may fail early (a dead worker)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if check is not None:
            check()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# --- 1. a rolling deploy across processes ------------------------------------------------------

WORKER_RUN_NAME = "__tsmigrate_deploy_worker__"
WORKERS = 4
# Stages as the test sees them: 0 before the first switch, 1 after it, 2 after the revert,
# 3 after the second switch.
STAGES = 4
OPS_PER_STAGE = 12  # acknowledged writes each worker makes in each stage before the test moves on
PACE_S = 0.005  # between a worker's writes: four processes must not starve the switch of the CPU
SEED = 20240611
MAX_OPS = 5000  # a worker's bound, far above what the stages need (a few hundred)
# What the worker processes import, once, in the fork server they are forked from; with what
# tests/engine/cliproject.py preloads, for whichever of the two starts the shared fork server.
PRELOAD = ["tablestore", "pytest", "tsmigrate.instance.apply", "tsmigrate.schema.model",
           "tsmigrate.service", "tsmigrate.rewrite.cutover", "tsmigrate.rewrite.driver",
           "tsmigrate.rewrite.planned", "tsmigrate.cli", "tsmigrate.instance.adapter",
           "tsmigrate.commands.apply", "tsmigrate.planning.planfile", "tsmigrate.planning.planrender",
           "tsmigrate.reindex.flow", "tsmigrate.reindex.progress", "tsmigrate.rewrite.progress",
           "tsmigrate.instance.target", "tsmigrate.local.testing"]


MODELS, KINDS = ("old", "new"), ("inc", "note")


def _slot(n: int, stage: int, model: str, kind: str) -> int:
    """Where ``progress`` counts worker ``n``'s acknowledged writes of a kind through a model
    made wholly within a stage."""
    return ((n * STAGES + stage) * len(MODELS) + MODELS.index(model)) * len(KINDS) + KINDS.index(kind)


def _deploy_worker(*, n: int, endpoint: str, instance: str, key_id: str, key_secret: str,
                   redeploy_stage: int, stage: Any, progress: Any, redeployed: Any, stop: Any,
                   out: str, deadline_s: float) -> None:
    """One service process: starts on the old model, is redeployed on the new one (a new
    ``Rows`` of ``CounterV2``) after a seeded random number of writes in stage
    ``redeploy_stage``; increments ``count`` of random rows and sets ``note`` of the rows it owns
    (row i is owned by process i % WORKERS) to ``p{n}-{seq}``. Every acknowledged write is logged
    with its per-process sequence number and the test's stage before and after it."""
    rng = random.Random(SEED * 100 + n)
    client = ts.OTSClient(endpoint, key_id, key_secret, instance)
    rows, model = Rows(Counter, client), "old"
    redeploy_after = rng.randint(1, OPS_PER_STAGE - 1)
    own = [i for i in range(ROWS) if i % WORKERS == n]
    done = [0] * STAGES
    kinds: list[set[str]] = [set() for _ in range(STAGES)]  # of writes wholly in a stage
    log: list[list[Any]] = []
    error = None
    redeploy_seq = None
    seq = 0
    deadline = time.monotonic() + deadline_s
    try:
        while not stop.is_set() and seq < MAX_OPS and time.monotonic() < deadline:
            before = stage.value
            if (model == "old" and before == redeploy_stage and done[before] >= redeploy_after
                    and kinds[before] == {"inc", "note"}):
                rows, model = Rows(CounterV2, client), "new"  # this process is redeployed
                redeploy_seq = seq + 1
                redeployed[n] = 1
            seq += 1
            if rng.random() < 0.5:
                kind, row, value = "inc", rng.randrange(ROWS), 1
                rows.update(_key(row), increment={"count": 1})
            else:
                kind, row, value = "note", rng.choice(own), f"p{n}-{seq}"
                rows.update(_key(row), set={"note": value})
            after = stage.value
            log.append([seq, kind, row, value, model, before, after])  # acknowledged
            if before == after:
                done[before] += 1
                kinds[before].add(kind)
                progress[_slot(n, before, model, kind)] += 1  # only this process writes its slots
            time.sleep(PACE_S)
    except BaseException:
        error = traceback.format_exc()
    finally:
        Path(out).write_text(json.dumps({"log": log, "error": error, "redeploy_seq": redeploy_seq,
                                         "timed_out": time.monotonic() >= deadline}))


if __name__ == WORKER_RUN_NAME:  # a worker process (see the module docstring)
    _deploy_worker(**globals()["WORKER"])


@pytest.mark.slow  # four processes writing through two switches and a revert
def test_a_rolling_deploy_across_processes_loses_no_acknowledged_write(ready, ots_instance, tmp_path):
    client = ready
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    stage = context.Value("i", 0)
    progress = context.Array("i", WORKERS * STAGES * len(MODELS) * len(KINDS))
    redeployed = context.Array("i", WORKERS)
    stop = context.Event()
    # Which stage each process is redeployed in: one in each (the moment in it is random).
    redeploy_stages = random.Random(SEED).sample(range(STAGES), WORKERS)
    outputs = [tmp_path / f"worker-{n}.json" for n in range(WORKERS)]
    processes = [
        context.Process(target=runpy.run_path, args=(__file__,), daemon=True, name=f"service-{n}",
                        kwargs={"run_name": WORKER_RUN_NAME, "init_globals": {"WORKER": {
                            "n": n, "endpoint": ots_instance.endpoint,
                            "instance": ots_instance.instance,
                            "key_id": ots_instance.access_key_id,
                            "key_secret": ots_instance.access_key_secret,
                            "redeploy_stage": redeploy_stages[n], "stage": stage,
                            "progress": progress, "redeployed": redeployed, "stop": stop,
                            "out": str(outputs[n]), "deadline_s": 90.0}}})
        for n in range(WORKERS)
    ]

    def no_worker_died() -> None:
        for n, process in enumerate(processes):
            if not process.is_alive():
                text = outputs[n].read_text() if outputs[n].exists() else "(no output)"
                pytest.fail(f"worker {n} stopped early (exit {process.exitcode}): {text[-3000:]}")

    def stage_done(s: int) -> bool:
        """Each process made its writes in stage ``s`` (and was redeployed if its turn came);
        both kinds of write were made through both models."""
        def made(n: int, model: str, kind: str) -> int:
            return progress[_slot(n, s, model, kind)]

        return all(
            sum(made(n, m, k) for m in MODELS for k in KINDS) >= OPS_PER_STAGE
            and (redeploy_stages[n] > s or redeployed[n]) for n in range(WORKERS)
        ) and all(any(made(n, m, k) for n in range(WORKERS)) for m in MODELS for k in KINDS)

    for process in processes:
        process.start()
    at_revert: dict[int, dict] = {}
    moves = []
    try:
        _wait_for(lambda: stage_done(0), "writes before the switch", 60, no_worker_died)
        moves.append(_switch(client, lease_s=0.5))
        stage.value = 1
        _wait_for(lambda: stage_done(1), "writes after the switch", 30, no_worker_died)
        moves.append(_revert(client))
        stage.value = 2
        # The source, side of record again: it must hold every write acknowledged so far.
        at_revert = {i: _raw(client, "counters", i) for i in range(ROWS)}
        _wait_for(lambda: stage_done(2), "writes after the revert", 30, no_worker_died)
        moves.append(_switch(client))
        stage.value = 3
        _wait_for(lambda: stage_done(3), "writes after the second switch", 30, no_worker_died)
    finally:
        stop.set()
        for process in processes:
            process.join(20)
        for process in processes:
            if process.is_alive():  # never expected: its own deadline would have ended it
                process.kill()
                process.join(5)
    assert [(m.phase, m.side) for m in moves] == [
        (machine.SWITCHED, machine.TARGET), (machine.READY, machine.SOURCE),
        (machine.SWITCHED, machine.TARGET)]
    with machine.Runner(client, TARGET, handover=True) as runner:
        done = driver.finish(client, driver.spec_of(client, True), runner, allow_destructive=False)
    assert done.phase == machine.DONE

    results = [json.loads(path.read_text()) for path in outputs]
    assert [(r["error"], r["timed_out"]) for r in results] == [(None, False)] * WORKERS
    assert all(r["redeploy_seq"] is not None for r in results)  # every process was redeployed
    ops = [(n, *op) for n, r in enumerate(results) for op in r["log"]]
    # Writes were acknowledged in every stage, through both models, so the test could fail.
    for s in range(STAGES):
        for model in MODELS:
            for kind in KINDS:
                assert any(o[2] == kind and o[5] == model and o[6] == o[7] == s for o in ops), (
                    s, model, kind)

    def expected(upto_stage: int) -> tuple[dict[int, int], dict[int, tuple[int, str]]]:
        """Increments per row and the last note per row (its seq and value) acknowledged while
        the test's stage was at most ``upto_stage``."""
        counts = dict.fromkeys(range(ROWS), 0)
        notes = dict.fromkeys(range(ROWS), (0, "start"))
        for _n, seq, kind, row, value, _model, _before, after in ops:
            if after > upto_stage:
                continue
            if kind == "inc":
                counts[row] += 1
            elif seq > notes[row][0]:  # one process writes a row's notes: seq orders them
                notes[row] = (seq, value)
        return counts, notes

    # Revert kept the writes made after the switch: each row of the source already had every
    # increment and note acknowledged before the revert returned (and perhaps later ones).
    counts, notes = expected(upto_stage=1)
    for i in range(ROWS):
        assert at_revert[i]["count"] >= counts[i], (i, at_revert[i], counts[i])
        owner_seq = 0 if at_revert[i]["note"] == "start" else int(at_revert[i]["note"].split("-")[1])
        assert at_revert[i]["note"] == notes[i][1] or (
            at_revert[i]["note"].startswith(f"p{i % WORKERS}-") and owner_seq > notes[i][0]), (
            i, at_revert[i], notes[i])

    # After finish every acknowledged write stands: every increment counted, each row's note
    # the last one acknowledged; in the new table, through the new model, and in the old table
    # (finish: "reverse capture stopped, the source has every write up to now").
    counts, notes = expected(upto_stage=STAGES)
    want = {i: {"count": counts[i], "note": notes[i][1]} for i in range(ROWS)}
    new = Rows(CounterV2, client)
    assert {i: {"count": r.count, "note": r.note} for i in range(ROWS)
            if (r := new.get(seq=i, device=f"d{i % 4}"))} == want
    assert {i: _raw(client, TARGET, i) for i in range(ROWS)} == want
    assert {i: _raw(client, "counters", i) for i in range(ROWS)} == want
    assert sum(counts.values()) > 0 and sum(1 for v in notes.values() if v[1] != "start") > 0


# --- 2. a switch killed inside its fence -------------------------------------------------------

FAKE_CLIENT = "somehost:1:abc"  # a service that never acknowledges: the fence lasts its lease
KILLED_LEASE_S = 5.0


def _silent_client(client) -> None:
    """A live heartbeat row, as ``routing.Router.heartbeat_op`` writes it, of a process that saw
    the rewrite at ready and never reads the state again; its lease (an hour) lets it write on
    what it read past any fence, so switch waits the fence's whole lease for it."""
    row = ts.Row(
        [("kind", routing.CLIENT_KIND), ("id", f"{TARGET}/{FAKE_CLIENT}/counters")],
        [("host", "somehost"), ("pid", 1), ("table", "counters"), ("side", routing.SOURCE),
         ("phase", machine.READY), ("seen_version", 0), ("at_ms", int(time.time() * 1000)),
         ("lease_s", 3600.0)],
    )
    client.put_row(routing.STATE_TABLE, row, ts.Condition("IGNORE"))


def _kill_switch_in_its_fence(ots, tmp_path: Path) -> machine.Rewrite:
    """`tsmigrate rewrite switch` in a process of its own, SIGKILLed once its fence is up (it
    waits ~5 s for the silent client there); the rewrite as the kill left it."""
    client = ots.client()
    _silent_client(client)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TSMIGRATE_", "ALIBABA_"))}
    environ.update(_credentials(ots))
    with open(tmp_path / "switch.out", "w+") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "tsmigrate.cli", "rewrite", "switch", TARGET,
             "--endpoint", ots.endpoint, "--instance", ots.instance,
             "--lease", str(KILLED_LEASE_S)],
            cwd=tmp_path, env=environ, stdin=subprocess.DEVNULL, stdout=output,
            stderr=subprocess.STDOUT)
        try:
            def alive() -> None:
                if process.poll() is not None:
                    output.seek(0)
                    pytest.fail(f"switch ended ({process.returncode}) before its fence: {output.read()}")

            _wait_for(lambda: machine.load(client, TARGET).phase == machine.SWITCHING,
                      "the switch to raise its fence", 60, alive)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(10)  # reaped: the rewrite's runner lease names a pid that is gone
    assert process.returncode == -signal.SIGKILL
    left = machine.load(client, TARGET)
    assert left.phase == machine.SWITCHING and left.side == machine.HOLD  # killed inside the fence
    return left


def _held_write(rows: Rows, key: dict, **changes: Any) -> tuple[threading.Thread, dict]:
    """``rows.update(key, **changes)`` in a thread; the dict gets "done" (monotonic time) or
    "error" once it returns."""
    outcome: dict[str, Any] = {}

    def write() -> None:
        try:
            rows.update(key, **changes)
            outcome["done"] = time.monotonic()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.slow  # a `tsmigrate` process, killed; its fence runs its 5 s lease out
def test_a_switch_killed_in_its_fence_holds_writes_until_a_second_switch_lands_them(
        ready, ots_instance, tmp_path):
    client = ready
    left = _kill_switch_in_its_fence(ots_instance, tmp_path)
    routing.clear()  # a service that reads the state now
    old = Rows(Counter, client)
    assert old.get(**_key(1)).note == "start"  # reads go on, to the side before the fence
    thread, outcome = _held_write(old, _key(1), set={"note": "held"}, increment={"count": 1})
    thread.join(0.3)
    assert thread.is_alive() and not outcome, outcome  # held by the fence the kill left up
    assert _raw(client, "counters", 1) == _raw(client, TARGET, 1) == {"count": 0, "note": "start"}

    switched = _switch(client)
    assert (switched.phase, switched.side) == (machine.SWITCHED, machine.TARGET)
    thread.join(10)
    assert set(outcome) == {"done"}, outcome
    # The held write went on to the new side of record, not to the source.
    assert _raw(client, TARGET, 1) == {"count": 1, "note": "held"}
    assert _raw(client, "counters", 1) == {"count": 0, "note": "start"}  # until reverse capture
    fence = switched.get("fence")
    # The silent client never acknowledged: the fence the killed switch raised lasted its lease.
    assert fence["unacknowledged"] == ["somehost:1"]
    assert fence["held_ms"] >= KILLED_LEASE_S * 1000
    assert switched.get("fence_ms") == left.get("fence_ms")  # the same fence, finished
    routing.clear()
    Rows(CounterV2, client).update(_key(2), increment={"count": 5})
    assert _raw(client, TARGET, 2)["count"] == 5


@pytest.mark.slow  # a `tsmigrate` process, killed
def test_a_switch_killed_in_its_fence_is_undone_by_revert(ready, ots_instance, tmp_path):
    client = ready
    _kill_switch_in_its_fence(ots_instance, tmp_path)
    routing.clear()
    new = Rows(CounterV2, client)
    thread, outcome = _held_write(new, _key(3), set={"note": "held by the fence"})
    thread.join(0.3)
    assert thread.is_alive() and not outcome, outcome

    reverted = _revert(client)
    assert (reverted.phase, reverted.side) == (machine.READY, machine.SOURCE)
    thread.join(10)
    assert set(outcome) == {"done"}, outcome
    # Back to ready: both models write the source again (the held write included).
    assert _raw(client, "counters", 3)["note"] == "held by the fence"
    Rows(Counter, client).update(_key(4), increment={"count": 2})
    new.update(_key(4), increment={"count": 3})
    assert _raw(client, "counters", 4)["count"] == 5
    assert _raw(client, TARGET, 4)["count"] == 0  # until capture
    _catch_up(client)  # forward capture carries them to the target
    assert _raw(client, TARGET, 3)["note"] == "held by the fence"
    assert _raw(client, TARGET, 4)["count"] == 5


# --- 3. status lists the clients; switch says how long writes were held ------------------------


@pytest.mark.slow
def test_status_lists_the_clients_with_their_side_and_switch_says_how_long_writes_were_held(
        ready, ots_instance, tmp_path):
    from clirun import run

    client = ready
    target = ("--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance)
    credentials = _credentials(ots_instance)
    # A process that starts now (the fixture's writes routed before the rewrite existed, and
    # trust that for a lease): it registers before its first write.
    routing.clear()
    old, new = Rows(Counter, client), Rows(CounterV2, client)
    old.update(_key(1), increment={"count": 1})
    new.update(_key(2), increment={"count": 1})

    def clients() -> list[tuple[str, str]]:
        shown = run(tmp_path, "rewrite", "status", TARGET, "--format", "json", *target,
                    extra_env=credentials)
        assert shown.returncode == 0, shown.stderr
        data = json.loads(shown.stdout)
        assert all(c["host"] and c["side"] in (routing.SOURCE, routing.TARGET) for c in data["clients"])
        return sorted((c["table"], c["side"]) for c in data["clients"] if c["pid"] == os.getpid())

    assert clients() == [("counters", "source"), ("counters_by_seq", "source")]

    # Both models write throughout the switch: each sees the fence, acknowledges it, is held.
    stop = threading.Event()
    after_switch = {"old": 0, "new": 0}
    switched = threading.Event()
    errors: list[BaseException] = []

    def writer(name: str, rows: Rows, i: int) -> None:
        try:
            while not stop.is_set():
                rows.update(_key(i), increment={"count": 1})
                if switched.is_set():
                    after_switch[name] += 1
                time.sleep(0.01)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=("old", old, 5)),
               threading.Thread(target=writer, args=("new", new, 6))]
    for thread in threads:
        thread.start()
    try:
        result = run(tmp_path, "rewrite", "switch", TARGET, *target, "--lease", "0.5",
                     extra_env=credentials)
        switched.set()
        assert result.returncode == 0, result.stderr
        # Capture's requests went out on the event loop; its pools closed at exit, unwarned.
        assert "Unclosed" not in result.stderr and "Traceback" not in result.stderr, result.stderr
        _wait_for(lambda: min(after_switch.values()) >= 3, "writes after the switch", 10)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert not errors, errors
    line = re.search(r"Before the fence: capture reached the stream's end in ([\d.]+)s, verification "
                     r"took ([\d.]+)s\. Writes held (\d+) ms \(clients ([\d.]+)s, drain ([\d.]+)s\), "
                     r"(\d+) client\(s\) acknowledged", result.stdout)
    assert line, result.stdout
    fence = machine.load(client, TARGET).get("fence")
    assert (int(line[3]), int(line[6])) == (fence["held_ms"], fence["acknowledged"])
    # How long it waited for each: before the fence, and with writes held.
    assert float(line[1]) == pytest.approx(fence["before_catch_up_s"], abs=0.05)
    assert float(line[2]) == pytest.approx(fence["before_verify_s"], abs=0.05)
    assert float(line[4]) + float(line[5]) <= fence["held_ms"] / 1000 + 0.1
    assert fence["acknowledged"] >= 2 and fence["unacknowledged"] == []
    # The number printed is how long a write waited at most (give or take a poll of the state).
    held = [s for rows in (old, new) for s in rows.client._router.held_s]
    assert held, "no write met the fence"
    assert max(held) * 1000 <= fence["held_ms"] + 500, (held, fence)
    # Each client now writes the target, and says so.
    assert clients() == [("counters", "target"), ("counters_by_seq", "target")]
    text = run(tmp_path, "rewrite", "status", TARGET, *target, extra_env=credentials).stdout
    assert f"client {socket.gethostname()}:{os.getpid()} (counters): target" in text
