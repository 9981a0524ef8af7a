"""The rewrite state machine: transitions (property-tested), the row in tsmigrate_state with its
compare-and-swap, the runner's lease, and refusing two rewrites of one table."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tsmigrate.instance.state import State
from tsmigrate.rewrite import machine


@given(st.lists(st.sampled_from(machine.PHASES), max_size=12))
def test_only_machine_transitions_are_allowed_and_ended_rewrites_stay_ended(moves):
    phase, resume_to = machine.PREPARE, None
    for new in moves:
        if not machine.allowed(phase, new, resume_to):
            continue
        if new in (machine.PAUSED, machine.FAILED) and phase in machine.RUNNING_PHASES:
            resume_to = phase
        assert phase not in machine.ENDED  # nothing leaves done or aborted
        if phase in (machine.PAUSED, machine.FAILED) and new not in (machine.PAUSED, machine.FAILED):
            assert new in (resume_to, machine.ABORTED)  # resume goes back where it left
        phase = new


def test_the_happy_path_and_pause_resume():
    path = [machine.PREPARE, machine.BACKFILL, machine.CATCH_UP, machine.READY,
            machine.FINISHING, machine.DONE]
    for current, new in itertools.pairwise(path):
        assert machine.allowed(current, new)
    assert not machine.allowed(machine.PREPARE, machine.READY)  # no skipping verification
    assert machine.allowed(machine.BACKFILL, machine.PAUSED)
    assert machine.allowed(machine.PAUSED, machine.BACKFILL, resume_to=machine.BACKFILL)
    assert not machine.allowed(machine.PAUSED, machine.READY, resume_to=machine.BACKFILL)
    assert not machine.allowed(machine.DONE, machine.ABORTED)


def _started(client, source="events", target="events_v2"):
    State(client).ensure_table()
    return machine.start(client, source=source, target=target, doc={"job": "{}"})


def test_row_round_trip_and_compare_and_swap(ots_client):
    rewrite = _started(ots_client)
    # Written, then given the service's time of its creation (created_server_ms): version 2.
    assert (rewrite.phase, rewrite.version) == (machine.PREPARE, 2)
    assert rewrite.get("created_server_ms") >= rewrite.get("created_ms") - 5_000
    moved = machine.save(ots_client, rewrite, phase=machine.BACKFILL, note="x")
    assert machine.load(ots_client, "events_v2").to_dict() == moved.to_dict()
    with pytest.raises(machine.RewriteConflict, match="changed by another process"):
        machine.save(ots_client, rewrite, phase=machine.BACKFILL)  # a stale read loses
    with pytest.raises(machine.RewriteError, match="cannot go to done"):
        machine.save(ots_client, moved, phase=machine.DONE)


def test_two_rewrites_of_one_table_are_refused(ots_client):
    first = _started(ots_client)
    assert _started(ots_client).version == first.version  # the same rewrite: continued
    with pytest.raises(machine.RewriteConflict, match="already being rewritten into events_v2"):
        _started(ots_client, target="events_v3")
    machine.save(ots_client, first, phase=machine.ABORTED)
    assert _started(ots_client, target="events_v3").phase == machine.PREPARE


def test_finished_tells_prune_when_the_old_table_may_go(ots_client):
    assert machine.finished(ots_client, "events")  # never rewritten
    rewrite = _started(ots_client)
    assert not machine.finished(ots_client, "events")
    for phase in (machine.BACKFILL, machine.CATCH_UP, machine.READY, machine.FINISHING,
                  machine.DONE):
        rewrite = machine.save(ots_client, rewrite, phase=phase)
    assert machine.finished(ots_client, "events")


def test_one_runner_at_a_time_and_pause_interrupts_it(ots_client):
    _started(ots_client)
    runner = machine.Runner(ots_client, "events_v2")
    with pytest.raises(machine.RewriteConflict, match="is being run by"):
        machine.Runner(ots_client, "events_v2")
    current = machine.load(ots_client, "events_v2")
    machine.save(ots_client, current, phase=machine.PAUSED)
    with pytest.raises(machine.Interrupted, match="paused"):
        runner.save(phase=machine.BACKFILL)
    runner.release()
    assert machine.load(ots_client, "events_v2").get("runner") is None
    assert machine.Runner(ots_client, "events_v2").rewrite.resume_to == machine.PREPARE


def test_a_pause_landing_between_the_runners_read_and_write_interrupts_it(ots_client, monkeypatch):
    """The race a running backfill meets: the runner reads its row, `rewrite pause` writes, then
    the runner's compare-and-swap fails. It must read again and stop as paused, not fail."""
    _started(ots_client)
    runner = machine.Runner(ots_client, "events_v2")
    runner.save(phase=machine.BACKFILL)
    read = machine.refresh
    paused = []

    def read_then_pause(client, rewrite):
        current = read(client, rewrite)
        if not paused:
            paused.append(machine.request(ots_client, "events_v2", machine.PAUSED))
        return current

    monkeypatch.setattr(machine, "refresh", read_then_pause)
    with pytest.raises(machine.Interrupted, match="paused"):
        runner.save(note="a checkpoint")
    assert paused and machine.load(ots_client, "events_v2").phase == machine.PAUSED
    assert machine.load(ots_client, "events_v2").resume_to == machine.BACKFILL


def test_a_heartbeat_renews_the_lease_while_a_long_step_saves_nothing(ots_client):
    import time

    from tsmigrate.rewrite import driver

    _started(ots_client)
    runner = machine.Runner(ots_client, "events_v2")
    before = runner.rewrite.get("runner")["expires_ms"]
    beats = []

    def beats_reach(n: int) -> None:
        deadline = time.monotonic() + 30
        while len(beats) < n:
            assert time.monotonic() < deadline, beats
            time.sleep(0.01)

    with driver.heartbeat(runner, lambda event, data: beats.append(event), every_s=0.05):
        beats_reach(2)
        runner.save(note="the run saves meanwhile")  # no conflict with the heartbeat's saves
        beats_reach(len(beats) + 2)  # ...nor theirs with it
    assert beats and set(beats) == {"heartbeat"}
    assert machine.load(ots_client, "events_v2").get("runner")["expires_ms"] > before
