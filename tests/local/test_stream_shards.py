"""Stream shards split and merged (the test knobs that stand in for the service's partition
changes) and origin columns, read through tsmigrate's raw client as the rewrite reads them."""

from __future__ import annotations

from typing import Any

import pytest
from tablestore import CapacityUnit, OTSClient, ReservedThroughput, Row, TableMeta, TableOptions

from tsmigrate.instance.rawclient import RawClient
from tsmigrate.local import streams
from tsmigrate.local.testing import LocalTablestore

CU0 = ReservedThroughput(CapacityUnit(0, 0))


def _table(client: OTSClient, origin: tuple[str, ...] = ()) -> RawClient:
    client.create_table(TableMeta("t", [("id", "INTEGER")]), TableOptions(), CU0)
    raw = RawClient(client)
    raw.update_stream("t", True, 24, origin_columns=origin)
    return raw


def _read_shard(raw: RawClient, stream_id: str, shard_id: str) -> tuple[list[Any], bool]:
    """Every record of a shard, and whether the shard ended (no next iterator)."""
    iterator: str | None = raw.shard_iterator(stream_id, shard_id)
    records: list[Any] = []
    while iterator is not None:
        page, following = raw.stream_records(iterator, limit=3)
        records += page
        if not page and following is not None:
            return records, False  # an open shard: caught up
        iterator = following
    return records, True


def test_split_then_merge_routes_every_record_to_one_shard(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    raw = _table(client)
    stream_id = raw.list_streams("t")[0][0]
    for i in range(10):
        client.put_row("t", Row([("id", i)], [("v", i)]))
    (root,) = raw.describe_shards(stream_id)
    left, right = streams.split_shard(ots_instance.server, ots_instance.instance, "t")
    for i in range(10, 40):
        client.put_row("t", Row([("id", i)], [("v", i)]))
    merged = streams.merge_shards(ots_instance.server, ots_instance.instance, "t")
    for i in range(40, 50):
        client.put_row("t", Row([("id", i)], [("v", i)]))

    shards = {s.shard_id: s for s in raw.describe_shards(stream_id)}
    assert set(shards) == {root.shard_id, left, right, merged}
    assert shards[left].parent_id == root.shard_id == shards[right].parent_id
    assert (shards[merged].parent_id, shards[merged].parent_sibling_id) == (left, right)

    seen: dict[str, list[int]] = {}
    for shard_id in shards:
        records, ended = _read_shard(raw, stream_id, shard_id)
        assert ended == (shard_id != merged)  # closed shards end; the open one goes on
        seen[shard_id] = [r.row.primary_key[0][1] for r in records]
    assert seen[root.shard_id] == list(range(10))
    assert sorted(seen[left] + seen[right]) == list(range(10, 40))
    assert seen[left] and seen[right]  # both halves took keys
    assert seen[merged] == list(range(40, 50))


def test_origin_columns_carry_the_values_before_the_write(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    raw = _table(client, origin=("region",))
    details = raw.describe_table("t").stream_details
    assert RawClient.origin_columns(details) == ["region"]
    client.put_row("t", Row([("id", 1)], [("region", "eu"), ("v", 1)]))
    client.update_row("t", Row([("id", 1)], {"put": [("region", "us")]}), None)
    client.delete_row("t", Row([("id", 1)]), None)
    stream_id = raw.list_streams("t")[0][0]
    (shard,) = raw.shards(stream_id)
    records, _ended = _read_shard(raw, stream_id, shard)
    assert [r.action for r in records] == ["put", "update", "delete"]
    assert records[0].origin is None  # the row did not exist before
    assert [(c.name, c.value) for c in records[1].origin.cells] == [("region", "eu")]
    assert [(c.name, c.value) for c in records[2].origin.cells] == [("region", "us")]


def test_shard_knobs_need_an_enabled_stream(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    client.create_table(TableMeta("plain", [("id", "INTEGER")]), TableOptions(), CU0)
    with pytest.raises(ValueError, match="no enabled stream"):
        streams.split_shard(ots_instance.server, ots_instance.instance, "plain")
