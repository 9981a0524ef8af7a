"""The cut-over through the model API: services on both models during a rolling deploy write one
side at a time (the source until `switch`, the target after), `revert` goes back losing nothing,
`finish` needs the switch. Cases A, B and C of the cut-over issue, through ``Rows``."""

from __future__ import annotations

import json
import threading
import time

import clirun
import cutover_tables as ct
import pytest
import tablestore as ts
from cutover_tables import Counter, CounterV2

from tsmigrate.instance.rawclient import RawClient
from tsmigrate.rewrite import cutover, driver, machine, reverse
from tsmigrate.service import Rows, routing


@pytest.fixture
def ready(ots_instance):
    """A rewrite of ``counters`` into ``counters_by_seq`` at ready, 20 rows copied."""
    return ct.ready(ots_instance)


def _raw(client, table: str, key: list) -> dict | None:
    _, row, _ = client.get_row(table, key, max_version=1)
    return None if row is None else {c[0]: c[1] for c in row.attribute_columns}


_catch_up, _switch, _revert = ct.catch_up, ct.switch, ct.revert


def test_both_models_write_the_source_until_the_switch_cases_a_b_c(ready):
    client = ready
    old, new = Rows(Counter, client), Rows(CounterV2, client)
    # C: a row created through the new model is seen at once through the old one (no lag):
    # before the switch its write went to the source.
    new.put(CounterV2(seq=100, device="dX", count=7, note="made by v2"))
    assert old.get(device="dX", seq=100).note == "made by v2"
    assert _raw(client, "counters", [("device", "dX"), ("seq", 100)])["count"] == 7
    assert _raw(client, "counters_by_seq", [("seq", 100), ("device", "dX")]) is None  # not yet
    # A: the new model sets note; later the old model increments count on the same row.
    new.update({"seq": 1, "device": "d1"}, set={"note": "set by v2"})
    time.sleep(0.01)
    old.update({"device": "d1", "seq": 1}, increment={"count": 1})
    # B: the old model writes note, then the new model writes it again: the later one stands.
    old.update({"device": "d2", "seq": 2}, set={"note": "old first"})
    new.update({"seq": 2, "device": "d2"}, set={"note": "new second"})
    _catch_up(client)
    row1, row2 = new.get(seq=1, device="d1"), new.get(seq=2, device="d2")
    assert (row1.note, row1.count) == ("set by v2", 1)
    assert row2.note == "new second"
    # Both tables say the same, whichever model reads.
    assert _raw(client, "counters_by_seq", [("seq", 1), ("device", "d1")]) == {
        "count": 1, "note": "set by v2"}
    assert old.get(device="d2", seq=2).note == "new second"


@pytest.mark.slow
def test_switch_then_writes_go_to_the_target_revert_keeps_them_finish_needs_the_switch(ready):
    client = ready
    old, new = Rows(Counter, client), Rows(CounterV2, client)
    with machine.Runner(client, CounterV2.table_name()) as runner, pytest.raises(
            machine.RewriteError, match=r"not switched.*rewrite switch"):
        driver.finish(client, driver.spec_of(client, True), runner, allow_destructive=False)

    switched = _switch(client)
    assert switched.phase == machine.SWITCHED and switched.side == machine.TARGET
    assert switched.get("fence")["held_ms"] >= 0
    routing.clear()  # the routes other processes would read after their lease
    old.put(Counter(device="dY", seq=200, count=5, note="old model, after the switch"))
    # The old model's write landed in the target; the new model reads it at once.
    assert _raw(client, "counters_by_seq", [("seq", 200), ("device", "dY")])["count"] == 5
    assert new.get(seq=200, device="dY").note == "old model, after the switch"
    assert _raw(client, "counters", [("device", "dY"), ("seq", 200)]) is None  # until reverse capture
    _catch_up(client)  # reverse capture: readers of the old table see it too
    assert _raw(client, "counters", [("device", "dY"), ("seq", 200)])["count"] == 5

    old.update({"device": "d3", "seq": 3}, increment={"count": 2})
    reverted = _revert(client)
    assert reverted.phase == machine.READY and reverted.side == machine.SOURCE
    routing.clear()
    # Writes made after the switch are in the source, the side of record again.
    assert _raw(client, "counters", [("device", "d3"), ("seq", 3)])["count"] == 2
    new.update({"seq": 3, "device": "d3"}, increment={"count": 1})
    assert _raw(client, "counters", [("device", "d3"), ("seq", 3)])["count"] == 3

    _switch(client)
    routing.clear()
    with machine.Runner(client, CounterV2.table_name(), handover=True) as runner:
        done = driver.finish(client, driver.spec_of(client, True), runner, allow_destructive=False)
    assert done.phase == machine.DONE and done.side == machine.TARGET
    assert old.get(device="d3", seq=3).count == 3  # an old service still reads the table of record
    assert new.get(seq=200, device="dY").count == 5


@pytest.mark.slow
def test_a_write_to_the_target_before_the_switch_refuses_it_unless_accepted(ready):
    client = ready
    client.put_row("counters_by_seq", ts.Row([("seq", 5), ("device", "d1")], [("note", "raw sdk")]),
                   ts.Condition("IGNORE"))
    with pytest.raises(cutover.WrongSideWrites, match="accept-target-writes"):
        _switch(client)
    assert machine.load(client, CounterV2.table_name()).phase == machine.READY
    assert _switch(client, accept_target_writes=True).phase == machine.SWITCHED


@pytest.mark.slow
def test_writers_on_both_models_through_a_switch_and_a_revert_lose_no_increment(ready):
    _busy_switch_and_revert(ready)


def _busy_switch_and_revert(client) -> dict[int, int]:
    """Writers on both models increment counters while a switch and a revert run; returns the
    increments acknowledged per row, which the old table (side of record again) must hold."""
    stop = threading.Event()
    acknowledged = {i: 0 for i in range(20)}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(model, n: int) -> None:
        rows = Rows(model, client)
        i = n
        try:
            while not stop.is_set():
                key = {"device": f"d{i % 4}", "seq": i}
                rows.update(key, increment={"count": 1})
                with lock:
                    acknowledged[i] += 1
                i = (i + 3) % 20
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(m, n)) for n, m in
               enumerate([Counter, CounterV2, Counter, CounterV2])]
    for t in threads:
        t.start()
    def more_writes(n: int = 40) -> None:
        """Until the writers made ``n`` more increments (whatever the machine's speed)."""
        with lock:
            start = sum(acknowledged.values())
        _eventually(lambda: errors or sum(acknowledged.values()) >= start + n)

    try:
        more_writes()
        assert _switch(client).phase == machine.SWITCHED
        more_writes()
        assert _revert(client).phase == machine.READY
        more_writes()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert sum(acknowledged.values()) >= 120  # the writers did write throughout
    # Reverted: the old table is the side of record, and it holds every acknowledged increment,
    # those made through either model before, during and after the switch.
    assert {i: _raw(client, "counters", [("device", f"d{i % 4}"), ("seq", i)])["count"]
            for i in range(20)} == acknowledged
    return acknowledged


@pytest.mark.slow
def test_a_second_switch_after_a_busy_revert_then_finish_keeps_every_increment(ready):
    client = ready
    acknowledged = _busy_switch_and_revert(client)
    assert _switch(client).phase == machine.SWITCHED
    with machine.Runner(client, CounterV2.table_name(), handover=True) as runner:
        driver.finish(client, driver.spec_of(client, True), runner, allow_destructive=False)
    new = Rows(CounterV2, client)
    assert {i: new.get(seq=i, device=f"d{i % 4}").count for i in range(20)} == acknowledged


def test_status_lists_the_clients_and_the_side_they_write(ready):
    from tsmigrate.rewrite.progress import status_data, status_text

    client = ready
    routing.clear()  # a process that starts now: it registers before its first write
    Rows(Counter, client).put(Counter(device="dZ", seq=300, count=1))
    data = status_data(client, machine.load(client, CounterV2.table_name()))
    assert data["side"] == machine.SOURCE
    assert [(c["table"], c["side"]) for c in data["clients"]] == [("counters", "source")]
    assert "writes of the model API go to: counters" in status_text(data)


# --- at the entry points a user touches: the commands ---------------------------------------------

_cli = clirun.run_on


@pytest.mark.slow
def test_switch_revert_and_finish_commands(tmp_path, ots_instance):
    routing.clear()
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(ct.MODELS_V1)
    assert _cli(tmp_path, ots_instance, "apply", "--yes").returncode == 0
    writer = ots_instance.client(socket_timeout=1.0)  # finish waits lease + this past the fence
    Rows(Counter, writer).put(Counter(device="d1", seq=1, count=1))
    (tmp_path / "app_models.py").write_text(ct.MODELS_V2)
    assert _cli(tmp_path, ots_instance, "apply", "--yes").returncode == 0

    early = _cli(tmp_path, ots_instance, "rewrite", "finish", "counters_by_seq")
    assert early.returncode == 1
    assert "ready, not switched" in early.stderr
    assert "tsmigrate rewrite switch counters_by_seq" in early.stderr
    switched = _cli(tmp_path, ots_instance, "rewrite", "switch", "counters_by_seq", "--lease", "1")
    assert switched.returncode == 0, switched.stderr
    assert "counters_by_seq: switched; services on the model API write counters_by_seq." in switched.stdout
    assert "Writes held" in switched.stdout
    status = json.loads(_cli(tmp_path, ots_instance, "rewrite", "status", "counters_by_seq",
                             "--format", "json").stdout)
    assert (status["phase"], status["side"], status["fence"]["to"]) == ("switched", "target", "target")
    assert machine.load(ots_instance.client(), "counters_by_seq").get("routing_lease_s") == 1.0
    # The stream switch turned on for reverse capture is the rewrite's, not drift to undo.
    planned = _cli(tmp_path, ots_instance, "plan", "--detailed-exitcode")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "stream" not in planned.stdout
    abort = _cli(tmp_path, ots_instance, "rewrite", "abort", "counters_by_seq")
    assert abort.returncode == 1 and "rewrite revert counters_by_seq" in abort.stderr
    reverted = _cli(tmp_path, ots_instance, "rewrite", "revert", "counters_by_seq")
    assert reverted.returncode == 0, reverted.stderr
    assert "reverted; services on the model API write counters." in reverted.stdout
    assert _cli(tmp_path, ots_instance, "rewrite", "switch", "counters_by_seq").returncode == 0
    routing.clear()
    Rows(Counter, writer).put(Counter(device="d2", seq=2, count=2))  # a service
    assert [c["table"] for c in reverse.clients(ots_instance.client(), "counters_by_seq")] == ["counters"]
    done = _cli(tmp_path, ots_instance, "rewrite", "finish", "counters_by_seq")
    assert done.returncode == 0, done.stderr
    assert "reverse capture stopped" in done.stdout
    assert reverse.clients(ots_instance.client(), "counters_by_seq") == []  # heartbeats removed
    assert not RawClient(ots_instance.client()).describe_table("counters_by_seq").stream_details.enable_stream
    assert _cli(tmp_path, ots_instance, "plan", "--detailed-exitcode").returncode == 0
    assert machine.load(ots_instance.client(), "counters_by_seq").phase == machine.DONE


def test_plan_says_what_a_model_needs_when_its_key_cannot_locate_rows_in_the_other_table(
        tmp_path, ots_instance):
    import rewrite_tables as rt

    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(rt.MODELS_V1)
    assert _cli(tmp_path, ots_instance, "apply", "--yes").returncode == 0
    (tmp_path / "app_models.py").write_text(rt.MODELS_V2)
    text = _cli(tmp_path, ots_instance, "plan")
    need = ("get, update and delete through the model of readings need region (not in its key) "
            "after the switch")
    assert need in " ".join(text.stdout.split())
    plan = json.loads(_cli(tmp_path, ots_instance, "plan", "--format", "json").stdout)
    [step] = [s for s in plan["steps"] if s["kind"] == "rewrite_table"]
    assert need in step["reason"]


@pytest.mark.slow
def test_async_rows_route_by_the_phase_too(ready, ots_instance):
    import asyncio

    from tsmigrate.service import AsyncRows

    client = ready

    async def scenario(seq: int) -> tuple:
        routing.clear()
        async_client = ots_instance.async_client()
        try:
            new = AsyncRows(CounterV2, async_client)
            await new.put(CounterV2(seq=seq, device="dA", count=seq))
            got = await new.get(seq=seq, device="dA")
            return got.count, await AsyncRows(Counter, async_client).batch_get(
                [{"device": "dA", "seq": seq}])
        finally:
            await async_client.close()

    count, batch = asyncio.run(scenario(400))
    assert count == 400 and batch.rows[0].count == 400
    assert _raw(client, "counters", [("device", "dA"), ("seq", 400)]) == {"count": 400}  # the source
    _switch(client)
    count, batch = asyncio.run(scenario(401))
    assert count == 401 and batch.rows[0].count == 401
    assert _raw(client, "counters_by_seq", [("seq", 401), ("device", "dA")]) == {"count": 401}
    assert _raw(client, "counters", [("device", "dA"), ("seq", 401)]) is None  # until reverse capture


@pytest.mark.slow
def test_a_fence_left_up_holds_writes_then_says_so_and_an_unreadable_state_stops_them(
        ready, monkeypatch):
    client = ready
    monkeypatch.setattr(routing, "HOLD_S", 0.3)
    machine.request(client, CounterV2.table_name(), machine.SWITCHING)  # a switch killed mid-fence
    routing.clear()
    rows = Rows(Counter, client)
    assert rows.get(device="d1", seq=1).count == 0  # reads go on, to the side before the fence
    with pytest.raises(routing.WritesHeld, match=r"writes held .* is switching; .*run it again"):
        rows.update({"device": "d1", "seq": 1}, increment={"count": 1})
    assert _raw(client, "counters", [("device", "d1"), ("seq", 1)])["count"] == 0
    assert _revert(client).phase == machine.READY  # revert lowers a killed switch's fence
    routing.clear()
    rows = Rows(Counter, client)
    rows.update({"device": "d1", "seq": 1}, increment={"count": 1})
    assert _raw(client, "counters", [("device", "d1"), ("seq", 1)])["count"] == 1

    monkeypatch.setattr(routing, "REFRESH_WAIT_S", 0.2)
    router = rows.client._router
    router.expires = 0.0  # the lease ran out

    def unreadable(*_args, **_kwargs):
        raise ts.OTSServiceError(503, "OTSServerUnavailable", "down")

    monkeypatch.setattr(routing, "_rewrites_op", unreadable)
    with pytest.raises(routing.RoutingUnavailable, match="writes stop rather than guess a side"):
        rows.update({"device": "d1", "seq": 1}, increment={"count": 1})
    assert _raw(client, "counters", [("device", "d1"), ("seq", 1)])["count"] == 1


def _eventually(check, deadline_s: float = 10.0) -> None:
    """Wait for ``check()`` (capture runs in another thread), at most ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.05)


@pytest.mark.slow
def test_follow_hands_over_to_switch_and_revert_then_captures_the_phases_direction(ready):
    client = ready
    stop = threading.Event()
    followed: list[BaseException] = []

    def follow() -> None:
        try:
            with machine.Runner(client, CounterV2.table_name()) as runner:
                driver.follow(client, runner, 30, stop=stop)
        except BaseException as exc:
            followed.append(exc)

    thread = threading.Thread(target=follow)
    thread.start()
    try:
        _eventually(lambda: (machine.load(client, CounterV2.table_name()).get("runner") or {}).get("owner"))
        Rows(Counter, client).update({"device": "d1", "seq": 1}, set={"note": "before"})
        _eventually(lambda: (_raw(client, "counters_by_seq", [("seq", 1), ("device", "d1")]) or {})
                    .get("note") == "before")  # forward capture, by follow
        assert _switch(client).phase == machine.SWITCHED  # follow handed its lease over
        routing.clear()
        Rows(Counter, client).update({"device": "d1", "seq": 1}, set={"note": "after"})
        assert _raw(client, "counters_by_seq", [("seq", 1), ("device", "d1")])["note"] == "after"
        _eventually(lambda: (_raw(client, "counters", [("device", "d1"), ("seq", 1)]) or {})
                    .get("note") == "after")
        assert _revert(client).phase == machine.READY
        routing.clear()
        Rows(CounterV2, client).update({"seq": 1, "device": "d1"}, set={"note": "reverted"})
        _eventually(lambda: (_raw(client, "counters_by_seq", [("seq", 1), ("device", "d1")]) or {})
                    .get("note") == "reverted")
    finally:
        stop.set()
        thread.join()
    assert not followed, followed


@pytest.mark.slow
def test_a_switch_killed_on_another_host_is_taken_over_once_its_short_lease_runs_out(ready):
    client = ready
    target = CounterV2.table_name()
    rewrite = machine.request(client, target, machine.SWITCHING)
    # Its runner lease, as a fence leaves it: short, held by a process this host cannot check.
    machine.save(client, rewrite, fence_ms=machine.now_ms(), fence_version=rewrite.version + 1,
                 runner={"owner": "26743d68@otherhost:4242", "expires_ms": machine.now_ms() + 1500})
    started = time.monotonic()
    switched = _switch(client)
    assert switched.phase == machine.SWITCHED
    assert 1.0 < time.monotonic() - started < cutover.FENCE_LEASE_S  # waited out, not refused


@pytest.mark.slow
@pytest.mark.parametrize("command", ["switch", "revert"])
def test_a_command_that_fails_under_its_fence_lowers_it(ready, monkeypatch, command):
    """An error with the fence up never holds every service's writes: the command that raised
    the fence lowers it back to the side of record before it, where nothing was written."""
    client = ready
    if command == "revert":
        assert _switch(client).phase == machine.SWITCHED
        target, back, back_table = "make_reverse_capture", machine.SWITCHED, "counters_by_seq"
    else:
        target, back, back_table = "_verify_keys", machine.READY, "counters"

    def broken(*args, **kwargs):
        assert machine.load(client, CounterV2.table_name()).side == machine.HOLD  # the fence is up
        raise RuntimeError("the stream could not be read")

    monkeypatch.setattr(cutover, target, broken)
    with pytest.raises(machine.RewriteError) as failed:
        (_switch if command == "switch" else _revert)(client)
    assert "the stream could not be read" in str(failed.value)  # the reason, and what to do:
    assert f"the fence was lowered and services on the model API write {back_table}" in str(failed.value)
    assert f"run `tsmigrate rewrite {command} counters_by_seq` again" in str(failed.value)
    rewrite = machine.load(client, CounterV2.table_name())
    assert rewrite.phase == back and rewrite.side != machine.HOLD
    assert "failed under the fence, which was lowered" in rewrite.get("error")
    assert rewrite.get("fence")["lowered_after_failure"] is True
    routing.clear()
    Rows(Counter, client).put(Counter(device="d1", seq=900, count=1))  # not held
