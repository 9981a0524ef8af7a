"""The whole rewrite through apply() and the rewrite commands' library calls, against the local
server: prepare, backfill with capture, catch-up and verification, ready, follow, finish, abort;
moving rows, shard splits and merges, trimmed streams, collisions, faults."""

from __future__ import annotations

import threading
import time

import attrs
import pytest
import rewrite_tables as rt
import tablestore as ts

from tsmigrate.instance.apply import ApplyOptions, apply
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.keys import HashPrefix
from tsmigrate.local import streams
from tsmigrate.rewrite import capture, checkpoints, driver, machine, prepare
from tsmigrate.rewrite.planned import RewriteSettings
from tsmigrate.schema import Catalog

IDENTITY = "local:test"
TARGET = attrs.evolve(rt.TARGET, replaces=rt.SOURCE.name)
SETTINGS = RewriteSettings(options=driver.RunOptions(workers=2))


def _source(ots_instance, rows: int) -> ts.OTSClient:
    client = ots_instance.client()
    apply(client, Catalog([rt.SOURCE]), target_identity=IDENTITY)
    rt.fill(client, rows)
    return client


def _rewrite(client, settings: RewriteSettings = SETTINGS):
    return apply(client, Catalog([TARGET]), ApplyOptions(rewrite=settings), target_identity=IDENTITY)


def _job(client):
    return driver.job_of(machine.load(client, TARGET.name))


def _equal(client) -> None:
    """The target holds exactly the transform of every source row, versions and timestamps."""
    job = _job(client)
    assert _normalize(rt.read_all(client, job.target)) == _normalize(rt.expected_target(client, job))


def _normalize(rows):
    return sorted(
        ([(n, v) for n, v in key], [(n, bytes(v) if isinstance(v, bytearray) else v, t) for n, v, t in cells])
        for key, cells in rows
    )


def _runner(client) -> machine.Runner:
    return machine.Runner(client, TARGET.name)


@pytest.mark.slow
def test_apply_takes_the_rewrite_to_ready_and_finish_completes_it(ots_instance):
    client = ots_instance.client()
    apply(client, Catalog([rt.SOURCE]), target_identity=IDENTITY)
    now_ms = rt.fill(client, 600)
    outcome = _rewrite(client)
    assert [r.phase for r in outcome.rewrites] == [machine.READY]
    assert [s.kind for s in outcome.plan.steps] == ["create_table", "rewrite_table"]
    _equal(client)
    # The same rows, as written out by hand rather than by the transform under test.
    assert _normalize(rt.read_all(client, TARGET)) == _normalize(rt.hand_built_target(600, now_ms))
    rewrite = machine.load(client, TARGET.name)
    assert rewrite.get("verification")["ok"] and rewrite.get("verification")["rows_source"] == 600
    # Prepare widened the target's deviation (cells keep timestamps a day old) and turned the
    # source's stream on with the key-source column as origin column; plan does not see either.
    described = client.describe_table(TARGET.name).table_options
    assert described.max_time_deviation == prepare.MAX_DEVIATION_S
    details = RawClient(client).describe_table(rt.SOURCE.name).stream_details
    assert details.enable_stream and RawClient.origin_columns(details) == ["region"]
    again = _rewrite(client)
    assert not again.plan.has_changes and again.rewrites == ()

    with _runner(client) as runner:
        done = driver.finish(client, driver.spec_of(client, True), runner, allow_destructive=False,
                              force=True, accept_target_writes=True)
    assert done.phase == machine.DONE and machine.finished(client, rt.SOURCE.name)
    assert client.describe_table(TARGET.name).table_options.max_time_deviation == rt.YEAR_S
    assert not RawClient(client).describe_table(rt.SOURCE.name).stream_details.enable_stream
    assert rt.SOURCE.name in client.list_table()  # kept without --allow-destructive


@pytest.mark.slow
def test_verification_reads_again_the_source_splits_the_stream_saw_change(ots_instance):
    """Untouched splits are verified against their copy's totals, and only those: a source row
    changed after the copy puts its split's source rows under a re-read."""
    from tsmigrate.rewrite import splits

    client = _source(ots_instance, 600)
    _rewrite(client)
    rewrite = machine.load(client, TARGET.name)
    ranges = splits.load(client, _job(client).id)
    assert len(ranges) > 1
    assert rewrite.get("touched_splits") == []
    assert rewrite.get("verification")["splits_from_copy"] == len(ranges)  # a quiet source

    key, _ = rt.source_row(123, int(time.time() * 1000))
    client.update_row(rt.SOURCE.name, ts.Row(key, {"put": [("note", "changed after the copy")]}),
                      ts.Condition("IGNORE"))
    with _runner(client) as runner:
        done = driver.finish(client, driver.spec_of(client, True), runner, allow_destructive=False,
                              force=True, accept_target_writes=True)
    touched = done.get("touched_splits")
    assert touched == [splits.split_of(ranges, key)]
    assert done.get("verification")["ok"]
    assert done.get("verification")["splits_from_copy"] == len(ranges) - 1
    _equal(client)


def test_capture_moves_rows_deletes_and_never_resurrects(ots_instance):
    client = _source(ots_instance, 300)
    _rewrite(client)
    now = int(time.time() * 1000)
    key_of = rt.source_row
    # An update of the column the new key is built from moves the row; deletes and new rows.
    moved_key, _ = key_of(5, now)
    client.update_row(rt.SOURCE.name, ts.Row(moved_key, {"put": [("region", "zz")]}), None)
    gone_key, _ = key_of(6, now)
    client.delete_row(rt.SOURCE.name, ts.Row(gone_key), None)
    new_key, new_cells = key_of(1000, now)
    client.put_row(rt.SOURCE.name, ts.Row(new_key, new_cells))
    with _runner(client) as runner:
        driver.follow(client, runner, seconds=0)
        capture_run = driver.make_capture(client, runner.rewrite)
        driver.catch_up(runner, capture_run, driver.quiet)
    assert capture_run.stats.moved >= 1
    _equal(client)


def test_a_late_backfill_write_never_brings_back_a_deleted_row(ots_instance):
    """Records of a split whose backfill runs wait as dirty keys and are re-synced after it."""
    client = _source(ots_instance, 200)
    assert _rewrite(client).rewrites
    rewrite = machine.load(client, TARGET.name)
    job = driver.job_of(rewrite)
    now = int(time.time() * 1000)
    key, cells = rt.source_row(7, now)
    target_row = capture.read_rows(client, job.source.name, [tuple(key)], 3)
    assert target_row  # the row exists at the source
    # Pretend its split never finished: the record is kept as a dirty key, not applied.
    client.delete_row(rt.SOURCE.name, ts.Row(key), None)
    finished = {"yes": False}
    with _runner(client) as runner:
        follower = driver.make_capture(client, runner.rewrite)
        follower.split_done = lambda index: finished["yes"]
        follower.finished_splits.clear()
        follower.step()
        assert follower.dirty and not follower.stats.caught_up
        # The stale backfill write lands after the delete...
        from tsmigrate.contract import transform
        from tsmigrate.rewrite import writer

        stale = transform.build(job).apply(key, cells)
        writer.write_rows(client, job.target.name, [stale])
        # ...and the split's end re-syncs the key from the source: the row is gone again.
        finished["yes"] = True
        follower.step()
        follower.step()
        assert follower.stats.resynced >= 1 and follower.stats.caught_up
    _equal(client)


@pytest.mark.slow
def test_shard_split_and_merge_during_capture(ots_instance):
    client = _source(ots_instance, 200)
    _rewrite(client)
    now = int(time.time() * 1000)
    server, instance = ots_instance.server, ots_instance.instance
    streams.split_shard(server, instance, rt.SOURCE.name)
    for i in range(200, 260):
        key, cells = rt.source_row(i, now)
        client.put_row(rt.SOURCE.name, ts.Row(key, cells))
    streams.merge_shards(server, instance, rt.SOURCE.name)
    for i in range(0, 40):
        key, _cells = rt.source_row(i, now)
        client.update_row(rt.SOURCE.name, ts.Row(key, {"put": [("temp", -1.0, now)]}), None)
    with _runner(client) as runner:
        follower = driver.make_capture(client, runner.rewrite)
        driver.catch_up(runner, follower, driver.quiet)
        assert len(follower.shards) == 4 and all(
            s.done for s in follower.shards.values() if s.shard_id != max(
                follower.shards, key=lambda k: len(follower.shards[k].parents)))
    _equal(client)


def test_trimmed_stream_stops_with_how_to_restart(ots_instance, ots_server_options):
    client = _source(ots_instance, 50)
    _rewrite(client)
    key, cells = rt.source_row(3, int(time.time() * 1000))
    client.put_row(rt.SOURCE.name, ts.Row(key, cells))
    ots_instance.server.clock_offset += 200 * 3600  # past the stream's 168 h: records trimmed
    client.put_row(rt.SOURCE.name, ts.Row(key, cells), ts.Condition("IGNORE"))
    with _runner(client) as runner, pytest.raises(capture.CaptureLost) as lost:
        driver.follow(client, runner, seconds=1)
    message = str(lost.value)
    assert "tsmigrate rewrite abort readings_by_seq" in message and "tsmigrate apply" in message


def test_collisions_stop_the_rewrite_before_ready(ots_instance):
    client = ots_instance.client()
    apply(client, Catalog([rt.SOURCE]), target_identity=IDENTITY)
    rt.fill(client, 60)
    # A new key made of the device alone: many readings of one device map to one target row.
    narrow = attrs.evolve(
        TARGET, primary_key=[attrs.evolve(rt.TARGET.primary_key[0],
                                          derivation=HashPrefix("device", 4, "|"))],
        attributes=[])
    with pytest.raises(machine.RewriteError, match="collision"):
        apply(client, Catalog([narrow]), ApplyOptions(rewrite=SETTINGS), target_identity=IDENTITY)
    rewrite = machine.load(client, TARGET.name)
    assert rewrite.phase == machine.FAILED and rewrite.resume_to == machine.CATCH_UP
    assert "collision" in rewrite.error and "dev-" in rewrite.error
    with _runner(client) as runner, pytest.raises(
            machine.RewriteError, match=r"is failed; finish needs phase ready \(it failed: .*collision"):
        driver.finish(client, driver.spec_of(client, True), runner, allow_destructive=False,
                              force=True, accept_target_writes=True)


@pytest.mark.slow
def test_abort_drops_the_target_and_leaves_the_source_as_it_was(ots_instance):
    client = _source(ots_instance, 100)
    before = rt.read_all(client, rt.SOURCE)
    _rewrite(client)
    with _runner(client) as runner:
        aborted = driver.abort(client, runner)
    assert aborted.phase == machine.ABORTED
    assert TARGET.name not in client.list_table()
    assert rt.read_all(client, rt.SOURCE) == before
    assert not RawClient(client).describe_table(rt.SOURCE.name).stream_details.enable_stream
    # The next apply starts a new rewrite from scratch.
    again = _rewrite(client)
    assert [r.phase for r in again.rewrites] == [machine.READY]
    _equal(client)


def test_a_target_that_exists_with_other_rows_is_refused(ots_instance):
    client = _source(ots_instance, 20)
    rt.create(client, rt.TARGET)
    client.put_row(TARGET.name, ts.Row([("key", "x"), ("region", "eu")], [("v", 1)]))
    with pytest.raises(prepare.TargetNotEmpty, match="already exists with rows"):
        _rewrite(client)


def _target_row(i: int, cells):
    """Reading ``i`` with these cells, as a service on the new model writes it."""
    from tsmigrate.contract.transform import RowTransform

    key, _ = rt.source_row(i, 0)
    return RowTransform.build(rt.SOURCE, TARGET).apply(key, cells)


@pytest.mark.slow
def test_writers_and_deleters_throughout_the_whole_sequence(ots_instance):
    """Services write and delete source rows during backfill and capture, then move to the new
    table; the target ends equal, row for row with timestamps, to every acknowledged write."""
    import random

    client = _source(ots_instance, 400)
    # The ground truth: reading number -> its cells as last acknowledged (None: deleted).
    truth: dict[int, list | None] = {}
    for key, cells in rt.read_all(client, rt.SOURCE):
        truth[dict(key)["seq"]] = cells
    moved = threading.Event()
    switching = threading.Event()
    stop = threading.Event()
    errors: list[BaseException] = []
    seeds = (1, 2)
    # Set by a service once switching: its last write to the old table was acknowledged.
    parked = {seed: threading.Event() for seed in seeds}
    new_model_writes = dict.fromkeys(seeds, 0)

    def service(seed: int) -> None:
        rng = random.Random(seed)
        writer = ots_instance.client()
        # Each service owns its readings: some backfilled ones, some it creates.
        mine = [*range(seed * 100, seed * 100 + 60), *range(seed * 1000, seed * 1000 + 60)]
        try:
            while not stop.is_set():
                if switching.is_set() and not moved.is_set():  # being redeployed
                    parked[seed].set()
                    moved.wait(0.01)
                    continue
                i = rng.choice(mine)
                now = int(time.time() * 1000)
                cells = sorted([("region", rng.choice(["eu", "us"]), now), ("temp", rng.random(), now)])
                delete = rng.random() < 0.3
                if not moved.is_set():
                    key, _ = rt.source_row(i, now)
                    if delete:
                        writer.delete_row(rt.SOURCE.name, ts.Row(key), None)
                    else:
                        writer.put_row(rt.SOURCE.name, ts.Row(key, cells))
                else:  # on the new model: the target, keyed the new way (a moved row: old key gone)
                    old = truth.get(i)
                    if old is not None:
                        writer.delete_row(TARGET.name, ts.Row(_target_row(i, old).primary_key), None)
                    if not delete:
                        row = _target_row(i, cells)
                        writer.put_row(TARGET.name, ts.Row(row.primary_key, row.columns))
                    if old is not None or not delete:
                        new_model_writes[seed] += 1
                truth[i] = None if delete else cells
                time.sleep(0.003)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=service, args=(seed,)) for seed in seeds]
    for thread in threads:
        thread.start()
    try:
        outcome = _rewrite(client)
        assert [r.phase for r in outcome.rewrites] == [machine.READY]
        with _runner(client) as runner:
            driver.follow(client, runner, seconds=0.5)
            # The redeploy: services stop writing the old table, capture catches up with
            # their last writes (follow shows the lag), then they write the new table.
            switching.set()
            assert all(event.wait(60) for event in parked.values())
            driver.catch_up(runner, driver.make_capture(client, runner.rewrite), driver.quiet)
        moved.set()
        # Until each service made a good number of writes on the new model.
        deadline = time.monotonic() + 60
        while min(new_model_writes.values()) < 30 and not errors:
            assert time.monotonic() < deadline, new_model_writes
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors
    with _runner(client) as runner:
        done = driver.finish(client, driver.spec_of(client, True), runner, allow_destructive=True,
                              force=True, accept_target_writes=True)
    assert done.phase == machine.DONE and rt.SOURCE.name not in client.list_table()
    assert done.get("verification")["changed_meanwhile"] > 0  # the services' new-model writes
    expected = _normalize(
        [(_target_row(i, cells).primary_key, _target_row(i, cells).columns)
         for i, cells in truth.items() if cells is not None]
    )
    assert _normalize(rt.read_all(client, TARGET)) == expected


@pytest.mark.slow
def test_with_injected_throttling_and_failed_batch_rows_the_target_equals_the_source(
        ots_instance, ots_server_options, monkeypatch):
    from tsmigrate.instance import retry
    from tsmigrate.local.faults import FaultPlan

    # Retried as ever, only without the back-off a real service needs (seconds, here).
    monkeypatch.setattr(retry.RETRY_POLICY, "base_delay_s", 0.001)
    monkeypatch.setattr(retry.RETRY_POLICY, "throttled_delay_s", 0.001)
    client = _source(ots_instance, 800)
    ots_server_options.faults = FaultPlan.parse("server_busy=0.05,batch_row=0.05,seed=5")
    outcome = _rewrite(client)
    now = int(time.time() * 1000)
    for i in range(0, 60):  # changes during capture, under the same faults
        key, cells = rt.source_row(i, now)
        client.put_row(rt.SOURCE.name, ts.Row(key, [("region", "zz", now), *cells[2:]]))
    with _runner(client) as runner:
        driver.catch_up(runner, driver.make_capture(client, runner.rewrite), driver.quiet)
    ots_server_options.faults = None
    assert [r.phase for r in outcome.rewrites] == [machine.READY]
    _equal(client)


def test_a_row_the_transform_rejects_stops_the_rewrite_before_anything_is_written(ots_instance):
    client = _source(ots_instance, 50)
    key, _ = rt.source_row(10**9, 0)  # a seq the new key's 8 padded digits cannot hold
    client.put_row(rt.SOURCE.name, ts.Row(key, [("region", "eu")]))
    with pytest.raises(Exception, match="1000000000"):
        _rewrite(client)
    rewrite = machine.load(client, TARGET.name)
    assert rewrite.phase == machine.FAILED and rewrite.resume_to == machine.PREPARE
    assert "1000000000" in rewrite.error
    assert rt.read_all(client, rt.TARGET) == []  # nothing written


@pytest.mark.slow
def test_pause_stops_a_running_backfill_and_resume_completes_it(ots_instance, monkeypatch):
    rows = 1000  # a few splits: the first is held, the others wait
    client = _source(ots_instance, rows)
    one_worker = RewriteSettings(options=driver.RunOptions(workers=1))
    # Capture saves its position this often: where a running backfill sees the pause.
    monkeypatch.setattr(driver, "SAVE_EVERY_S", 0.05)
    checkpointed = threading.Event()
    save = checkpoints.save

    def save_then_hold(client_, job_id, checkpoint) -> None:
        """The backfill's first checkpoint is kept, then its copy waits there until the pause
        has stopped the backfill (its stop request): the pause lands mid-copy, every time."""
        save(client_, job_id, checkpoint)
        if not checkpointed.is_set():
            checkpointed.set()
            deadline = time.monotonic() + 60
            while not checkpoints.stop_requested(client_, job_id) and time.monotonic() < deadline:
                time.sleep(0.01)

    monkeypatch.setattr(checkpoints, "save", save_then_hold)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            _rewrite(ots_instance.client(), one_worker)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert checkpointed.wait(60), failure
        assert machine.load(client, TARGET.name).phase == machine.BACKFILL
        machine.request(client, TARGET.name, machine.PAUSED)
    finally:
        thread.join(120)
    assert not thread.is_alive()
    assert failure and isinstance(failure[0], machine.Interrupted)
    paused = machine.load(client, TARGET.name)
    assert paused.phase == machine.PAUSED and paused.resume_to == machine.BACKFILL
    from tsmigrate.rewrite import splits

    at_pause = checkpoints.list_splits(client, _job(client).id)
    copied = sum(c.rows for c in at_pause)
    done = [c.index for c in at_pause if c.done]
    assert 0 < copied < rows and len(done) < len(splits.load(client, _job(client).id))  # mid-copy
    with rt.rows_read(ots_instance, rt.SOURCE.name) as read, _runner(client) as runner:
        done = driver.run_to_ready(client, driver.spec_of(client, True), runner,
                                   driver.RunOptions(workers=2))
    assert done.phase == machine.READY
    # Resumed from the checkpoints: the rows they count were not read again (verification
    # takes the source's totals from them: no stream record touched a split).
    assert read.rows == rows - copied
    _equal(client)
