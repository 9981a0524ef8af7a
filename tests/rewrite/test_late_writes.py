"""The net for late writes, at the commands a deploy runs: writes that land on the side services
left (raw SDK writes after `switch`, a request held in the network across `switch` or `revert`)
are carried to the table of record by `finish`/`abort`, or named as conflicts that must be
accepted; none is dropped silently. Every acknowledged write is checked with the raw SDK."""

from __future__ import annotations

import json
import threading
import time

import clirun
import cutover_tables as ct
import pytest
import tablestore as ts
from cutover_tables import Counter, CounterV2
from late_writes import missing, newest

from tsmigrate.local.testing import HeldRequest
from tsmigrate.rewrite import late, machine
from tsmigrate.service import Rows, routing

IGNORE = ts.Condition(ts.RowExistenceExpectation.IGNORE)


@pytest.fixture
def ready(ots_instance):
    return ct.ready(ots_instance)


def _cli(tmp_path, ots_instance, *args):
    return clirun.run_on(tmp_path, ots_instance, *args)


def _ack_s(client, seconds: float) -> None:
    """The rewrite's acknowledgement bound (``routing_ack_s``): finish waits lease + this."""
    machine.save(client, machine.load(client, ct.TARGET), routing_ack_s=seconds)


def test_raw_sdk_writes_to_the_old_table_after_switch_are_carried_by_finish(ready, tmp_path,
                                                                          ots_instance):
    client = ready
    switched = _cli(tmp_path, ots_instance, "rewrite", "switch", ct.TARGET)
    assert switched.returncode == 0, switched.stderr
    again = _cli(tmp_path, ots_instance, "rewrite", "switch", ct.TARGET)
    assert again.returncode == 0 and "already switched" in again.stdout  # a retried deploy step
    acked = {}
    for seq in range(100, 120):  # a script on the raw SDK that was not moved
        client.put_row("counters", ts.Row([("device", "late"), ("seq", seq)],
                                          [("count", seq), ("note", f"raw {seq}")]), IGNORE)
        acked[seq] = f"raw {seq}"
    client.update_row("counters", ts.Row([("device", "d1"), ("seq", 1)], {"PUT": [("note", "raw update")]}),
                      IGNORE)
    client.delete_row("counters", ts.Row([("device", "d2"), ("seq", 2)]), IGNORE)

    done = _cli(tmp_path, ots_instance, "rewrite", "finish", ct.TARGET)
    assert done.returncode == 0, done.stderr
    assert "Late writes: 22 found" in done.stdout and "0 conflict(s)" in done.stdout
    assert "carried by nothing" in done.stdout  # the kept old table's risk, said where it is kept
    assert missing(client, acked) == []
    assert newest(client, ct.TARGET, [("seq", 1), ("device", "d1")])["note"] == "raw update"
    assert newest(client, ct.TARGET, [("seq", 2), ("device", "d2")]) is None
    stats = machine.load(client, ct.TARGET).get("late_stats")
    assert (stats["late_writes"], stats["conflicts"]) == (22, 0)
    rerun = _cli(tmp_path, ots_instance, "rewrite", "finish", ct.TARGET)
    assert rerun.returncode == 0 and "already done" in rerun.stdout


def test_a_late_write_to_a_cell_changed_since_the_switch_is_a_conflict_until_accepted(
        ready, tmp_path, ots_instance):
    client = ready
    ct.switch(client)
    routing.clear()
    Rows(CounterV2, client).update(CounterV2(seq=3, device="d3"), set={"note": "new model"})
    time.sleep(0.01)  # a later millisecond: one cell timestamp cannot order two writes
    client.update_row("counters", ts.Row([("device", "d3"), ("seq", 3)], {"PUT": [("note", "late")]}),
                      IGNORE)
    client.update_row("counters", ts.Row([("device", "d3"), ("seq", 3)], {"PUT": [("count", 70)]}),
                      IGNORE)  # a cell the new model did not change since: carried

    refused = _cli(tmp_path, ots_instance, "rewrite", "finish", ct.TARGET)
    assert refused.returncode == 1
    assert "1 late write(s) conflict" in refused.stderr
    assert "(device='d3', seq=3) column note: late write counters: 'late'" in refused.stderr
    listed = json.loads(_cli(tmp_path, ots_instance, "rewrite", "conflicts", ct.TARGET,
                             "--format", "json").stdout)["conflicts"]
    assert [(c["column"], c["late"]["value"], c["record"]["value"], c["stands"], c["accepted"])
            for c in listed] == [("note", "late", "new model", ct.TARGET, False)]
    assert listed[0]["late"]["ts"] > listed[0]["record"]["ts"]
    text = _cli(tmp_path, ots_instance, "rewrite", "conflicts", ct.TARGET).stdout
    assert "1 conflict(s), 1 not accepted" in text
    status = json.loads(_cli(tmp_path, ots_instance, "rewrite", "status", ct.TARGET,
                             "--format", "json").stdout)
    assert status["conflicts"] == {"found": 1, "unaccepted": 1}
    assert "late-write conflicts: 1 (1 not accepted" in _cli(
        tmp_path, ots_instance, "rewrite", "status", ct.TARGET).stdout
    # The table of record keeps its value; the late cell that did not conflict was carried, and
    # the old table was given the kept value, so the two agree.
    assert newest(client, ct.TARGET, [("seq", 3), ("device", "d3")]) == {"count": 70, "note": "new model"}
    assert newest(client, "counters", [("device", "d3"), ("seq", 3)]) == {"count": 70, "note": "new model"}

    done = _cli(tmp_path, ots_instance, "rewrite", "finish", ct.TARGET, "--accept-conflicts")
    assert done.returncode == 0, done.stderr
    assert "1 accepted" in done.stdout
    history = _cli(tmp_path, ots_instance, "history", "--format", "json")
    assert "accept 1 conflict(s) of counters_by_seq: (device='d3', seq=3) column note" in history.stdout
    assert all(c["accepted"] for c in late.conflicts(client, ct.TARGET))


def _held_writer(ots_instance, model, row) -> tuple[HeldRequest, threading.Thread, list]:
    """A client whose one write is held in the network; what it was told (acknowledged or the
    error) lands in the returned list."""
    slow = ots_instance.client()
    held = HeldRequest(slow, "PutRow", marker=b"late")
    told: list = []

    def write() -> None:
        try:
            Rows(model, slow).put(row)
            told.append("acknowledged")
        except Exception as exc:  # what the service would see
            told.append(exc)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    assert held.held.wait(10)
    return held, thread, told


def test_a_write_held_in_the_network_across_switch_lands_on_the_old_table_and_is_carried(
        ready, ots_instance):
    client = ready
    _ack_s(client, 5.0)
    routing.clear()
    held, thread, told = _held_writer(ots_instance, Counter, Counter(device="late", seq=500, count=1,
                                                                note="late held"))
    ct.switch(client)  # the held process never acknowledges: the fence waits out its lease
    held.release.set()
    thread.join(10)
    assert told == ["acknowledged"]
    assert newest(client, "counters", [("device", "late"), ("seq", 500)])["note"] == "late held"
    ct.finish(client)
    assert missing(client, {500: "late held"}) == []
    assert machine.load(client, ct.TARGET).get("late_stats")["carried"] >= 2


def test_a_write_answered_after_the_acknowledgement_bound_is_not_acknowledged_yet_carried(
        ready, ots_instance):
    """finish waits lease + ack past the fence: an answer later than that is an error the
    service sees (the write may have landed), never an acknowledgement finish could miss."""
    client = ready
    _ack_s(client, 0.5)
    routing.clear()
    held, thread, told = _held_writer(ots_instance, Counter, Counter(device="late", seq=700, count=1,
                                                                      note="answered late"))
    ct.switch(client)
    time.sleep(1.0)  # past the route's lease (0.5 s) + the bound (0.5 s)
    held.release.set()
    thread.join(10)
    assert len(told) == 1 and isinstance(told[0], routing.WriteUnconfirmed), told
    assert "acknowledgement bound (0.5s)" in str(told[0])
    ct.finish(client)  # it landed on the old table anyway: carried
    assert newest(client, ct.TARGET, [("seq", 700), ("device", "late")])["note"] == "answered late"


def test_a_write_held_across_revert_lands_on_the_new_table_and_abort_carries_it_back(
        ready, tmp_path, ots_instance):
    client = ready
    _ack_s(client, 5.0)
    ct.switch(client)
    routing.clear()
    held, thread, told = _held_writer(ots_instance, CounterV2, CounterV2(seq=600, device="late", count=1,
                                                                    note="late held"))
    ct.revert(client)
    held.release.set()
    thread.join(10)
    assert told == ["acknowledged"]
    # Its only copy is in the new table, which abort drops: abort carries it first.
    assert newest(client, ct.TARGET, [("seq", 600), ("device", "late")])["note"] == "late held"
    Rows(Counter, client).update(Counter(device="d3", seq=3), set={"note": "source since revert"})
    time.sleep(0.01)  # a later millisecond: one cell timestamp cannot order two writes
    client.update_row(ct.TARGET, ts.Row([("seq", 3), ("device", "d3")], {"PUT": [("note", "late raw")]}),
                      IGNORE)  # after the source's change: a conflict
    refused = _cli(tmp_path, ots_instance, "rewrite", "abort", ct.TARGET)
    assert refused.returncode == 1
    assert "the new table holds writes tsmigrate did not copy" in refused.stderr
    assert "(seq=3, device='d3') column note" in refused.stderr
    assert newest(client, "counters", [("device", "late"), ("seq", 600)])["note"] == "late held"
    aborted = _cli(tmp_path, ots_instance, "rewrite", "abort", ct.TARGET, "--discard-target-writes")
    assert aborted.returncode == 0, aborted.stderr
    assert newest(client, "counters", [("device", "late"), ("seq", 600)])["note"] == "late held"
    assert newest(client, "counters", [("device", "d3"), ("seq", 3)])["note"] == "source since revert"
    history = _cli(tmp_path, ots_instance, "history", "--format", "json").stdout
    assert "discard 1 late write(s) to counters_by_seq" in history
    rerun = _cli(tmp_path, ots_instance, "rewrite", "abort", ct.TARGET)
    assert rerun.returncode == 0 and "already aborted" in rerun.stdout


def test_revert_rerun_and_switch_rerun_exit_zero_saying_what_is_done(ready, tmp_path, ots_instance):
    ct.switch(ready)
    assert _cli(tmp_path, ots_instance, "rewrite", "revert", ct.TARGET).returncode == 0
    again = _cli(tmp_path, ots_instance, "rewrite", "revert", ct.TARGET)
    assert again.returncode == 0, again.stderr
    assert "nothing to revert" in again.stdout and "already write counters since the revert" in again.stdout
