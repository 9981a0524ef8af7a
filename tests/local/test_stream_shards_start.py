"""Streams that start with several shards (`ServerOptions.stream_shards`, `tsmigrate local serve
--stream-shards N`), as the service gives a partitioned table's stream one shard per partition:
read through tsmigrate's raw client, as the rewrite's capture reads them."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from click.testing import CliRunner
from tablestore import (
    BatchWriteRowRequest,
    CapacityUnit,
    Condition,
    OTSClient,
    PutRowItem,
    ReservedThroughput,
    Row,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
)
from tablestore.protobuf import table_store_pb2 as pb
from tablestore.retry import NoRetryPolicy

from tsmigrate.instance.rawclient import RawClient, Shard
from tsmigrate.local import streams
from tsmigrate.local.auth import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET
from tsmigrate.local.cli import local
from tsmigrate.local.context import MAX_STREAM_SHARDS, ServerOptions
from tsmigrate.local.testing import LocalTablestore, local_tablestore

CU0 = ReservedThroughput(CapacityUnit(0, 0))
# A write as its record reads: (key, action, value of v or None).
Write = tuple[int, str, Any]


def _stream_table(client: OTSClient, name: str = "t") -> tuple[RawClient, str]:
    """A table with its stream enabled by UpdateTable; the raw client and the stream id."""
    client.create_table(TableMeta(name, [("id", "INTEGER")]), TableOptions(), CU0)
    raw = RawClient(client)
    raw.update_stream(name, True, 24)
    return raw, raw.list_streams(name)[0][0]


def _create_with_stream(client: OTSClient, name: str) -> str:
    """A table created with its stream (CreateTable's stream_spec); the stream id."""
    raw = RawClient(client)
    request = pb.CreateTableRequest(
        table_meta=pb.TableMeta(
            table_name=name, primary_key=[pb.PrimaryKeySchema(name="id", type=pb.INTEGER)]
        ),
        reserved_throughput=pb.ReservedThroughput(capacity_unit=pb.CapacityUnit(read=0, write=0)),
        table_options=pb.TableOptions(time_to_live=-1, max_versions=1),
        stream_spec=pb.StreamSpecification(enable_stream=True, expiration_time=24),
    )
    raw.call("CreateTable", request, pb.CreateTableResponse)
    return raw.list_streams(name)[0][0]


def _put(client: OTSClient, ids: range, value: int, expected: list[Write]) -> None:
    """Puts in batches of 100 (BatchWriteRow), noted in `expected`."""
    for start in range(ids.start, ids.stop, 100):
        request = BatchWriteRowRequest()
        chunk = range(start, min(start + 100, ids.stop))
        request.add(TableInBatchWriteRowItem("t", [
            PutRowItem(Row([("id", i)], [("v", value)]), Condition("IGNORE")) for i in chunk
        ]))
        assert client.batch_write_row(request).is_all_succeed()
        expected += [(i, "put", value) for i in chunk]


def _read_shard(raw: RawClient, stream_id: str, shard_id: str) -> tuple[list[Write], bool]:
    """Every record of a shard, and whether the shard ended (no next iterator)."""
    iterator: str | None = raw.shard_iterator(stream_id, shard_id)
    records: list[Write] = []
    while iterator is not None:
        page, following = raw.stream_records(iterator, limit=100)
        for r in page:
            cells = {c.name: c.value for c in r.row.cells}
            records.append((r.row.primary_key[0][1], r.action, cells.get("v")))
        if not page and following is not None:
            return records, False  # an open shard: caught up
        iterator = following
    return records, True


def _parents_first(shards: list[Shard]) -> list[Shard]:
    """The shards in an order that puts every shard after its parents (as readers must)."""
    done: set[str] = set()
    ordered: list[Shard] = []
    while len(ordered) < len(shards):
        for shard in shards:
            parents = {p for p in (shard.parent_id, shard.parent_sibling_id) if p}
            if shard.shard_id not in done and parents <= done:
                ordered.append(shard)
                done.add(shard.shard_id)
    return ordered


def _check_records(raw: RawClient, stream_id: str, expected: list[Write]) -> dict[str, list[Write]]:
    """Read every shard parents first: each key's records lie in one open shard at a time and
    in write order, and all of them together are every write exactly once. The records by shard."""
    shards = _parents_first(raw.describe_shards(stream_id))
    by_shard = {s.shard_id: _read_shard(raw, stream_id, s.shard_id)[0] for s in shards}
    assert Counter(w for records in by_shard.values() for w in records) == Counter(expected)
    read_in_order = [w for s in shards for w in by_shard[s.shard_id]]
    for key in {w[0] for w in expected}:
        assert [w for w in read_in_order if w[0] == key] == [w for w in expected if w[0] == key]
    return by_shard


def test_a_new_stream_starts_with_n_root_shards(
    ots_instance: LocalTablestore, ots_server_options: ServerOptions
) -> None:
    ots_server_options.stream_shards = 4  # a running server: streams enabled from now on
    client = ots_instance.client()
    raw, stream_id = _stream_table(client)
    shards = raw.describe_shards(stream_id)
    assert len(shards) == 4 == len({s.shard_id for s in shards})
    assert all(s.parent_id is None and s.parent_sibling_id is None for s in shards)
    expected: list[Write] = []
    _put(client, range(200), 1, expected)
    for i in range(0, 200, 4):  # every fourth key updated, every tenth deleted: three kinds
        client.update_row("t", Row([("id", i)], {"put": [("v", 2)]}), None)
        expected.append((i, "update", 2))
    for i in range(0, 200, 10):
        client.delete_row("t", Row([("id", i)]), None)
        expected.append((i, "delete", None))

    by_shard = _check_records(raw, stream_id, expected)
    for shard in shards:
        assert _read_shard(raw, stream_id, shard.shard_id)[1] is False  # all open
    # Each key in exactly one shard; the hash ranges split the keys about evenly.
    owners = {key: {s for s, records in by_shard.items() if any(w[0] == key for w in records)}
              for key in range(200)}
    assert all(len(found) == 1 for found in owners.values())
    assert all(20 <= len({w[0] for w in records}) <= 80 for records in by_shard.values())

    # Updating the stream keeps it and its shards; a new stream after disabling gets new ones,
    # as many as the option says then, and takes the writes.
    raw.update_stream("t", True, 48)
    assert raw.describe_shards(stream_id) == shards
    raw.update_stream("t", False)
    ots_server_options.stream_shards = 2
    raw.update_stream("t", True, 24)
    (again, _table, _created), = raw.list_streams("t")
    renewed = raw.describe_shards(again)
    assert again != stream_id and len(renewed) == 2
    assert not {s.shard_id for s in renewed} & {s.shard_id for s in shards}
    expected = []
    _put(client, range(100), 3, expected)
    assert all(_check_records(raw, again, expected).values())


def test_create_table_with_a_stream_starts_with_n_shards() -> None:
    with local_tablestore(stream_shards=3) as ots:
        client = ots.client()
        stream_id = _create_with_stream(client, "t")
        shards = RawClient(client).describe_shards(stream_id)
        assert len(shards) == 3 and all(s.parent_id is None for s in shards)
        # Shard ids follow from the stream id and the shard's place alone.
        assert sorted(s.shard_id for s in shards) == sorted(
            hashlib.sha256(f"{stream_id}/root/{i}".encode()).hexdigest()[:16] for i in range(3)
        )
        expected: list[Write] = []
        _put(client, range(150), 1, expected)
        assert all(_check_records(RawClient(client), stream_id, expected).values())


def test_split_and_merge_work_on_a_stream_of_several_shards(
    ots_instance: LocalTablestore, ots_server_options: ServerOptions
) -> None:
    ots_server_options.stream_shards = 4
    client = ots_instance.client()
    server, instance = ots_instance.server, ots_instance.instance
    raw, stream_id = _stream_table(client)
    roots = raw.describe_shards(stream_id)
    expected: list[Write] = []
    _put(client, range(100), 1, expected)
    split_root = roots[-1].shard_id
    left, right = streams.split_shard(server, instance, "t", split_root)
    _put(client, range(50, 150), 2, expected)  # old keys again and new ones
    merged = streams.merge_shards(server, instance, "t")
    _put(client, range(100, 200), 3, expected)

    shards = {s.shard_id: s for s in raw.describe_shards(stream_id)}
    assert len(shards) == 7
    assert shards[left].parent_id == split_root == shards[right].parent_id
    parents = (shards[merged].parent_id, shards[merged].parent_sibling_id)
    # The merge took two shards open until then that are neighbours in the hash space.
    ranges = {s["shard_id"]: (s["lo"], s["hi"]) for s in streams._shards(server.storage, stream_id)}
    assert ranges[parents[0]][1] == ranges[parents[1]][0]
    assert ranges[merged] == (ranges[parents[0]][0], ranges[parents[1]][1])
    closed = {split_root, *parents}
    for shard_id in shards:
        assert _read_shard(raw, stream_id, shard_id)[1] == (shard_id in closed)

    by_shard = _check_records(raw, stream_id, expected)
    assert {w[2] for w in by_shard[split_root]} == {1}  # nothing after the split
    assert by_shard[left] and by_shard[right] and by_shard[merged]
    assert {w[2] for w in by_shard[merged]} == {3}
    # A second merge takes the next neighbours; splitting a child works as on a root.
    streams.merge_shards(server, instance, "t")
    streams.split_shard(server, instance, "t")
    more: list[Write] = []
    _put(client, range(200, 260), 4, more)
    _check_records(raw, stream_id, expected + more)


def test_one_shard_is_the_implicit_shard_as_before(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    raw, stream_id = _stream_table(client)
    (shard,) = raw.describe_shards(stream_id)
    assert shard == Shard(hashlib.sha256(stream_id.encode()).hexdigest()[:16])
    (rows,) = ots_instance.server.storage.execute(
        "SELECT count(*) FROM stream_shards WHERE stream_id = ?", (stream_id,)
    ).fetchone()
    assert rows == 0
    expected: list[Write] = []
    _put(client, range(50), 1, expected)
    assert _check_records(raw, stream_id, expected) == {shard.shard_id: expected}


def test_the_shard_count_is_checked() -> None:
    ServerOptions(stream_shards=MAX_STREAM_SHARDS)
    for bad in (0, MAX_STREAM_SHARDS + 1):
        with pytest.raises(ValueError, match="stream_shards must be in range"):
            ServerOptions(stream_shards=bad)
    runner = CliRunner()
    assert "--stream-shards" in runner.invoke(local, ["serve", "--help"]).output
    (flag,) = [p for p in local.commands["serve"].params if p.name == "stream_shards"]
    assert (flag.type.min, flag.type.max) == (1, MAX_STREAM_SHARDS)  # type: ignore[attr-defined]
    for bad in ("0", str(MAX_STREAM_SHARDS + 1), "many"):
        result = runner.invoke(local, ["serve", "--stream-shards", bad])
        assert result.exit_code == 2 and "--stream-shards" in result.output, result.output


@pytest.mark.slow
def test_serve_starts_streams_with_the_flags_shards() -> None:
    cmd = [sys.executable, "-c", "from tsmigrate.cli import main; main()", "local", "serve"]
    cmd += ["--port", "0", "--memory", "--stream-shards", "5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().strip()
        client = OTSClient(endpoint, DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, "local",
                           retry_policy=NoRetryPolicy())
        stream_id = _create_with_stream(client, "t")
        assert len(RawClient(client).describe_shards(stream_id)) == 5
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
