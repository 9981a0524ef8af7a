"""Change capture applies a stream's shards in parallel (``tsmigrate.rewrite.shards``): on
threads, on processes and on a Dask cluster, over streams of several shards that split and merge
while it runs. Each key's records stay in order (rows that move between target keys end where
their last write put them), and the target ends as the exact transform of the source."""

from __future__ import annotations

import time

import attrs
import pytest
import rewrite_tables as rt
import tablestore as ts

from tsmigrate.local import streams
from tsmigrate.rewrite import driver, executors, machine, shards
from tsmigrate.rewrite.job import ConnectionSpec

ROWS = 120
REGIONS = ["eu", "us", "ap"]
TARGET = attrs.evolve(rt.TARGET, replaces=rt.SOURCE.name)


def _ready(ots_instance, ots_server_options, shard_count: int = 4) -> ts.OTSClient:
    ots_server_options.stream_shards = shard_count  # the source's stream, turned on by prepare
    client, _ = rt.ready_capture(ots_instance, TARGET, ROWS)
    return client


def _rounds(client: ts.OTSClient, rounds: int, first: int = 0) -> None:
    """Every row written ``rounds`` times, each time with a later timestamp: a new temp, and
    (every other round) another region, which is part of the new key: the row moves."""
    base = int(time.time() * 1000)
    for number in range(first, first + rounds):
        request = ts.BatchWriteRowRequest()
        items = []
        for i in range(ROWS):
            key, _ = rt.source_row(i, base)
            cells = [("temp", float(number * 1000 + i), base + number)]
            if number % 2:
                cells.append(("region", REGIONS[(i + number) % 3], base + number))
            items.append(ts.UpdateRowItem(ts.Row(key, {"put": cells}), ts.Condition("IGNORE")))
        for start in range(0, len(items), 200):
            request = ts.BatchWriteRowRequest()
            request.add(ts.TableInBatchWriteRowItem(rt.SOURCE.name, items[start:start + 200]))
            assert client.batch_write_row(request).is_all_succeed()


def _equal(client: ts.OTSClient) -> None:
    job = driver.job_of(machine.load(client, rt.TARGET.name))
    got = sorted(([tuple(k) for k in key], cells) for key, cells in rt.read_all(client, job.target))
    want = sorted(([tuple(k) for k in key], cells) for key, cells in rt.expected_target(client, job))
    assert got == want


def _capture(client: ts.OTSClient, runner: shards.ShardRunner):
    return driver.make_capture(client, machine.load(client, rt.TARGET.name), runner)


def test_shards_applied_on_threads_keep_each_keys_order(ots_instance, ots_server_options):
    client = _ready(ots_instance, ots_server_options)
    _rounds(client, 6)
    follower = _capture(client, shards.Threads(4))
    rt.drain(follower)
    assert len(follower.shards) == 4
    per_shard = follower.stats.shards
    assert sorted(per_shard) == sorted(follower.shards)
    assert all(s["records"] > 0 for s in per_shard.values())  # each shard had its keys' records
    assert sum(s["records"] for s in per_shard.values()) >= 6 * ROWS
    assert follower.stats.workers == 4 and follower.stats.moved > 0
    _equal(client)


@pytest.mark.slow
def test_split_and_merged_shards_on_threads_read_parents_first(ots_instance, ots_server_options):
    client = _ready(ots_instance, ots_server_options)
    server, instance = ots_instance.server, ots_instance.instance
    _rounds(client, 2)
    streams.split_shard(server, instance, rt.SOURCE.name)
    _rounds(client, 2, first=2)
    streams.merge_shards(server, instance, rt.SOURCE.name)
    _rounds(client, 2, first=4)
    follower = _capture(client, shards.Threads(4))
    rounds = 0
    while not follower.stats.caught_up:
        follower.step()
        rounds += 1
        for shard in follower.shards.values():  # a child is read only once its parents ended
            if shard.records:
                assert all(follower.shards[p].done for p in shard.parents)
        assert rounds < 50
    assert len(follower.shards) == 4 + 2 + 1
    _equal(client)


def _spec(ots_instance) -> ConnectionSpec:
    return ConnectionSpec(ots_instance.endpoint, ots_instance.instance, local_defaults=True)


@pytest.mark.slow
def test_shards_applied_on_worker_processes(ots_instance, ots_server_options):
    client = _ready(ots_instance, ots_server_options)
    _rounds(client, 4)
    runner = shards.OnExecutor(executors.InProcessExecutor(2, processes=True), _spec(ots_instance),
                               own=True)
    try:
        follower = _capture(client, runner)
        rt.drain(follower)
        # Another round after the workers built their capture: their cached copy serves it.
        _rounds(client, 2, first=4)
        rt.drain(follower)
    finally:
        runner.close()
    assert all(s["records"] > 0 for s in follower.stats.shards.values())
    _equal(client)


@pytest.mark.slow
def test_shards_applied_on_a_dask_cluster(ots_instance, ots_server_options):
    distributed = pytest.importorskip("distributed")
    client = _ready(ots_instance, ots_server_options)
    _rounds(client, 4)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False,
                                  dashboard_address=":0") as cluster:  # any free port
        runner = shards.runner(dask=cluster.scheduler_address, spec=_spec(ots_instance))
        try:
            assert runner.workers == 4
            follower = _capture(client, runner)
            rt.drain(follower)
        finally:
            runner.close()
    assert len(follower.stats.shards) == 4
    _equal(client)


def test_a_row_changed_after_capture_read_it_is_not_deleted_by_its_vacate(ots_instance,
                                                                         ots_server_options):
    """Shards run at once: a worker may delete a target row (its source row left that key) just
    as another worker moves another source row into it. The delete is guarded by the row as
    read: refused when the row changed meanwhile, and the key is merged again."""
    from tsmigrate.rewrite.capture import _TargetRow, read_raw_rows

    client = _ready(ots_instance, ots_server_options, shard_count=1)
    follower = _capture(client, shards.Threads(2))
    keys = [tuple(key) for key, _ in rt.read_all(client, TARGET)[:2]]
    read = read_raw_rows(follower.raw, TARGET.name, keys, 3)
    moved_in, left = (_TargetRow.read(k, read[k]) for k in keys)
    client.update_row(TARGET.name, ts.Row(list(keys[0]), {"put": [("temp", -5.0)]}), None)
    for row in (moved_in, left):
        row.exists = False  # what a vacate decides from the row as it read it
    assert follower._write([moved_in, left]) == [keys[0]]
    _, row, _ = client.get_row(TARGET.name, list(keys[0]), max_version=1)
    assert row is not None and dict((c[0], c[1]) for c in row.attribute_columns)["temp"] == -5.0
    _, gone, _ = client.get_row(TARGET.name, list(keys[1]), max_version=1)
    assert gone is None  # unchanged since read: deleted
