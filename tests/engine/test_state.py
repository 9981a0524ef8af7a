"""The apply lock, history and settle waits under malformed rows, kills and slow index builds.

Through the local server and the SDK; CLI tests run the command against the session server
(in this process, so a test can end an index build by moving the server's clock).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tablestore as ts
from cliproject import CREDENTIALS, cli_process, project, run
from samples import events

from tsmigrate.instance import state as state_module
from tsmigrate.instance.apply import ApplyHooks, apply
from tsmigrate.instance.state import LOCK_KEY, STATE_TABLE, LockHeld, Owner, State, StateRowError
from tsmigrate.planning.plan import make_plan
from tsmigrate.schema import Catalog

IDENTITY = "local:test"
HOUR_S = 3600


def _target(ots_instance) -> list[str]:
    return ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]


def _plant_lock(client, **columns) -> None:
    State(client).ensure_table()
    row = {"owner": "other@host:1", "host": "elsewhere", "pid": 1,
           "acquired_ms": int(time.time() * 1000), "expires_ms": int(time.time() * 1000) + 600_000}
    row.update(columns)
    client.put_row(STATE_TABLE, ts.Row(LOCK_KEY, [(k, v) for k, v in row.items() if v is not None]))


class _SleeplessClock:
    """``time`` for the state module in which a sleep passes at once on its monotonic clock."""

    def __init__(self) -> None:
        self.skew = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.skew

    def sleep(self, seconds: float) -> None:
        self.skew += seconds

    def __getattr__(self, name: str):
        return getattr(time, name)


def _lock_row(client) -> dict | None:
    _consumed, row, _token = client.get_row(STATE_TABLE, LOCK_KEY, max_version=1)
    return None if row is None else {n: v for n, v, *_ in row.attribute_columns}


# --- item 8: malformed rows, unlock, --lock-timeout ------------------------------------------------


@pytest.mark.parametrize("damage, named", [
    ({"owner": None}, "column 'owner' is missing"),
    ({"pid": "12ab"}, "column 'pid' is '12ab', not an integer"),
    ({"expires_ms": None, "acquired_ms": "yesterday"}, "column 'acquired_ms' is 'yesterday'"),
])
def test_malformed_lock_row_is_a_clear_error(ots_client, damage, named):
    _plant_lock(ots_client, **damage)
    with pytest.raises(StateRowError) as caught:
        apply(ots_client, Catalog([events()]), target_identity=IDENTITY)
    message = str(caught.value)
    assert "row kind='lock', id='apply'" in message and named in message
    assert "tsmigrate unlock --force" in message


def test_cli_malformed_lock_then_unlock_force(tmp_path: Path, ots_instance):
    client = ots_instance.client()
    _plant_lock(client, owner=None, pid="not-a-pid")
    proj = project(tmp_path, tables=1)
    target = _target(ots_instance)
    refused = run(proj, "apply", "--yes", *target, extra_env=CREDENTIALS)
    assert refused.returncode == 1
    assert "malformed" in refused.stderr and "'owner' is missing" in refused.stderr
    assert "Traceback" not in refused.stderr and "KeyError" not in refused.stderr
    # Without --force, unlock will not remove a lock it cannot judge.
    kept = run(proj, "unlock", *target, extra_env=CREDENTIALS)
    assert kept.returncode == 1 and "--force" in kept.stderr
    assert _lock_row(client) is not None
    removed = run(proj, "unlock", "--force", *target, extra_env=CREDENTIALS)
    assert removed.returncode == 0, removed.stderr
    assert "removed the malformed lock row" in removed.stdout
    assert _lock_row(client) is None
    applied = run(proj, "apply", "--yes", *target, extra_env=CREDENTIALS)
    assert applied.returncode == 0, applied.stderr


def test_cli_unlock_refuses_a_live_holder_without_force(tmp_path: Path, ots_instance):
    client = ots_instance.client()
    holder = State(client, Owner("live1234", socket.gethostname(), os.getpid()))
    holder.ensure_table()
    holder.acquire()
    proj = project(tmp_path, tables=1)
    target = _target(ots_instance)
    refused = run(proj, "unlock", *target, extra_env=CREDENTIALS)
    assert refused.returncode == 1
    assert "live1234" in refused.stderr and "--force" in refused.stderr
    assert _lock_row(client)["owner"] == holder.owner.text
    forced = run(proj, "unlock", "--force", *target, extra_env=CREDENTIALS)
    assert forced.returncode == 0, forced.stderr
    assert "released the apply lock held by live1234" in forced.stdout
    assert _lock_row(client) is None
    free = run(proj, "unlock", *target, extra_env=CREDENTIALS)
    assert free.returncode == 0 and "free" in free.stdout


def test_cli_unlock_releases_a_dead_holder_without_force(tmp_path: Path, ots_instance):
    client = ots_instance.client()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    _plant_lock(client, owner=f"dead5678@{socket.gethostname()}:{dead}",
                host=socket.gethostname(), pid=int(dead))
    released = run(project(tmp_path, tables=1), "unlock", *_target(ots_instance),
                   extra_env=CREDENTIALS)
    assert released.returncode == 0, released.stderr
    assert "dead5678" in released.stdout and "is gone" in released.stdout
    assert _lock_row(client) is None


def test_cli_apply_waits_for_the_lock_with_lock_timeout(tmp_path: Path, ots_instance, monkeypatch):
    client = ots_instance.client()
    holder = State(client, Owner("busy0001", socket.gethostname(), os.getpid()))
    holder.ensure_table()
    holder.acquire()
    proj = project(tmp_path, tables=1)
    target = _target(ots_instance)
    at_once = run(proj, "apply", "--yes", *target, extra_env=CREDENTIALS)
    assert at_once.returncode == 1
    assert "busy0001" in at_once.stderr and "--lock-timeout" in at_once.stderr
    with monkeypatch.context() as waits:
        # The waiting apply's second passes on its own clock: it gives up as after a second.
        waits.setattr(state_module, "time", _SleeplessClock())
        short = run(proj, "apply", "--yes", "--lock-timeout", "1", *target, extra_env=CREDENTIALS)
    assert short.returncode == 1 and "waited 1s" in short.stderr
    # The holder lets go once the waiting apply has said it waits (a hook on that message, as
    # the test cannot read its output while it runs in this process); the waiter looks again
    # soon after (not the 2 s between looks of the product), and applies.
    monkeypatch.setattr(state_module, "LOCK_POLL_S", 0.05)
    said_waiting = threading.Event()
    acquire = State.acquire

    def telling_acquire(self, timeout_s=0.0, on_wait=None):
        def told(lock):
            on_wait(lock)
            said_waiting.set()
        return acquire(self, timeout_s, told if on_wait is not None else None)

    monkeypatch.setattr(State, "acquire", telling_acquire)
    waited: list = []
    waiter = threading.Thread(target=lambda: waited.append(run(
        proj, "apply", "--yes", "--lock-timeout", "120", *target, extra_env=CREDENTIALS)))
    waiter.start()
    try:
        deadline = time.monotonic() + 120
        while not said_waiting.wait(0.05) and waiter.is_alive() and time.monotonic() < deadline:
            pass
        assert said_waiting.is_set(), f"the apply never said it waits for the lock: {waited}"
    finally:
        holder.release()
        waiter.join(120)
    [done] = waited
    line = done.stderr.splitlines()[0]
    assert "waiting up to 2m for the apply lock held by busy0001" in line, done.stderr
    assert done.returncode == 0, done.stderr
    assert "Applied 2 step(s)." in done.stdout


# --- item 9: interrupted steps, the lease during settle waits, progress ---------------------------


def test_steps_left_started_are_marked_interrupted(ots_client):
    killed = State(ots_client, Owner("killed99", "elsewhere", 1))
    killed.ensure_table()
    step = make_plan(Catalog(), Catalog([events()])).steps[0]
    killed.record(step, "started", plan_id="p")
    outcome = apply(ots_client, Catalog([events()]), target_identity=IDENTITY)
    assert "marked 1 step(s)" in outcome.note and "interrupted" in outcome.note
    statuses = {h["owner"]: h["status"] for h in State(ots_client).history()
                if h["owner"].startswith("killed99")}
    assert statuses == {killed.owner.text: "interrupted"}
    # Only once: the next apply has nothing to mark.
    assert "interrupted" not in apply(ots_client, Catalog([events()]), target_identity=IDENTITY).note


@pytest.mark.slow
def test_lease_is_renewed_while_a_step_waits_for_an_index_build(ots_instance, ots_server_options,
                                                                 monkeypatch):
    monkeypatch.setattr(state_module, "LEASE_S", 2.0)  # renewed every 0.4 s
    ots_server_options.search_full_sync_s = HOUR_S  # search indexes build until the clock moves
    client = ots_instance.client()
    seen: list[str] = []
    contender: list[object] = []

    def waiting(step, what, elapsed_s):
        seen.append(what)
        if "to finish building" in what and not contender:
            # The lease runs out, as if the step had waited longer than it: only a renewal
            # (within 0.4 s) makes the lock live again; without one, the contender takes it.
            held = _lock_row(client)
            expired_ms = int(time.time() * 1000) - 1000
            client.put_row(STATE_TABLE, ts.Row(LOCK_KEY, [
                (k, expired_ms if k == "expires_ms" else v) for k, v in held.items()]))
            deadline = time.monotonic() + 10
            while _lock_row(client)["expires_ms"] == expired_ms and time.monotonic() < deadline:
                time.sleep(0.02)
            try:
                State(client).acquire()
                contender.append("took the lock")
            except LockHeld as exc:
                contender.append(exc)
            ots_instance.server.clock_offset += HOUR_S  # the build finishes

    outcome = apply(client, Catalog([events()]), hooks=ApplyHooks(waiting=waiting), target_identity=IDENTITY)
    assert isinstance(contender[0], LockHeld), contender
    assert "events: search index events_search to finish building (full sync)" in seen
    assert outcome.executed == 2
    assert [h["status"] for h in State(client).history()].count("done") == 2


def test_apply_stops_when_its_lock_is_taken_over_during_a_wait(ots_instance, ots_server_options,
                                                               monkeypatch):
    monkeypatch.setattr(state_module, "LEASE_S", 1.0)
    ots_server_options.search_full_sync_s = HOUR_S  # the build never ends in this test
    client = ots_instance.client()
    intruder = State(client, Owner("intruder", "elsewhere", 1))

    def waiting(step, what, elapsed_s):
        if _lock_row(client)["owner"] != intruder.owner.text:
            intruder.unlock(force=True)
            intruder.acquire()

    with pytest.raises(LockHeld, match="lock was lost"):
        apply(client, Catalog([events()]), hooks=ApplyHooks(waiting=waiting), target_identity=IDENTITY)
    history = State(client).history()
    assert history[-1]["status"] == "failed" and history[-1]["step"] == "create_search_index"
    assert _lock_row(client)["owner"] == intruder.owner.text  # the intruder keeps it


def test_cli_kill_during_an_index_build_then_rerun(tmp_path: Path, ots_instance, ots_server_options):
    """The apply shows what it waits for; killed then, the next run marks the step interrupted."""
    ots_server_options.search_full_sync_s = HOUR_S
    proj = project(tmp_path, tables=1)
    target = _target(ots_instance)
    victim = cli_process(proj, "apply", "--yes", *target, extra_env=CREDENTIALS)
    try:
        line = ""
        while "waiting for" not in line:
            line = victim.stderr.readline()
            assert line, "apply ended without waiting for the index build"
        assert "t0: search index search to finish building (full sync)" in line
        assert re.search(r"\(full sync\) \(\d+[smhd]\)$", line.strip()), line  # durations as 42s
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
    finally:
        victim.kill()
        victim.stderr.close()
    rerun = run(proj, "apply", "--yes", *target, extra_env=CREDENTIALS)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "took over a stale lock" in rerun.stdout
    assert "marked 1 step(s)" in rerun.stdout and "interrupted" in rerun.stdout
    statuses = [h["status"] for h in State(ots_instance.client()).history()]
    assert statuses.count("interrupted") == 1 and "started" not in statuses
