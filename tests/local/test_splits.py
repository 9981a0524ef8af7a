"""ComputeSplitPointsBySize over raw protobuf: split points read as the Java SDK reads them cover the
whole key range without overlap (checked with GetRange), in ranges of about the requested size."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from rawhttp import call
from tablestore import (
    INF_MAX,
    INF_MIN,
    BatchWriteRowRequest,
    CapacityUnit,
    Condition,
    OTSClient,
    OTSServiceError,
    PutRowItem,
    ReservedThroughput,
    Row,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
)
from tablestore.plainbuffer.plain_buffer_coded_stream import PlainBufferCodedInputStream
from tablestore.plainbuffer.plain_buffer_stream import PlainBufferInputStream
from tablestore.protobuf import table_store_pb2 as pb

CU0 = ReservedThroughput(CapacityUnit(0, 0))


def splits(client: OTSClient, table: str, size: int = 1, unit: int | None = None) -> Any:
    request = pb.ComputeSplitPointsBySizeRequest(table_name=table, split_size=size)
    if unit is not None:
        request.split_size_unit_in_byte = unit
    return call(client, "ComputeSplitPointsBySize", request, pb.ComputeSplitPointsBySizeResponse)


def ranges(resp: Any) -> list[tuple[list, list]]:
    """The splits as the Java SDK builds them: points padded with INF_MIN, INF_MIN.. to INF_MAX.."""
    names = [s.name for s in resp.schema]
    lower = [(n, INF_MIN) for n in names]
    out = []
    for data in resp.split_points:
        pk, attrs = PlainBufferCodedInputStream(PlainBufferInputStream(data)).read_row()
        assert attrs == [] and len(pk) == 1 and pk[0][0] == names[0]  # only the partition key
        upper = pk + [(n, INF_MIN) for n in names[1:]]
        out.append((lower, upper))
        lower = upper
    out.append((lower, [(n, INF_MAX) for n in names]))
    return out


def scan(client: OTSClient, table: str, start: list, end: list) -> list[tuple]:
    keys = []
    while start is not None:
        _, start, rows, _ = client.get_range(table, "FORWARD", start, end, max_version=1, limit=5000)
        keys += [tuple(v for _, v in r.primary_key) for r in rows]
    return keys


def fill(client: OTSClient, table: str, rows: list[Row]) -> None:
    for i in range(0, len(rows), 200):
        chunk = rows[i : i + 200]
        request = BatchWriteRowRequest()
        request.add(TableInBatchWriteRowItem(table, [PutRowItem(r, Condition("IGNORE")) for r in chunk]))
        assert client.batch_write_row(request).is_all_succeed()


def check_cover(client: OTSClient, table: str, resp: Any) -> list[list[tuple]]:
    """Every stored row falls in exactly one split, in order; the split contents."""
    names = [s.name for s in resp.schema]
    everything = scan(client, table, [(n, INF_MIN) for n in names], [(n, INF_MAX) for n in names])
    parts = [scan(client, table, lo, hi) for lo, hi in ranges(resp)]
    assert [k for part in parts for k in part] == everything
    assert sum(loc.repeat for loc in resp.locations) == len(resp.split_points) + 1
    assert resp.consumed.capacity_unit.read >= 1
    return parts


@pytest.mark.parametrize("kind", ["STRING", "INTEGER", "BINARY"])
def test_split_points_cover_the_table(ots_client: OTSClient, kind: str) -> None:
    client = ots_client
    client.create_table(TableMeta("t", [("p", kind), ("n", "INTEGER")]), TableOptions(), CU0)

    def part(i: int) -> object:
        # Binary keys hold zero bytes and prefixes of each other: the key codec's hard cases.
        if kind == "STRING":
            return f"user{i:03d}"
        return i * 7 - 100 if kind == "INTEGER" else bytearray(b"\x00" * (i % 3) + bytes([i]))

    rows = [
        Row([("p", part(i)), ("n", j)], [("v", "x" * (20 + 10 * (i % 5)))])
        for i in range(60)
        for j in range(5)
    ]
    fill(client, "t", rows)

    whole = splits(client, "t")  # 100 MB: one split for this little data
    assert list(whole.split_points) == [] and [loc.repeat for loc in whole.locations] == [1]
    assert [(s.name, s.type) for s in whole.schema] == [("p", getattr(pb, kind)), ("n", pb.INTEGER)]

    resp = splits(client, "t", size=2, unit=1000)  # about 2000 bytes per split
    parts = check_cover(client, "t", resp)
    assert len(parts) > 5
    partitions = [{bytes(k[0]) if isinstance(k[0], bytearray) else k[0] for k in p} for p in parts]
    assert all(p for p in partitions)  # no empty split
    # A partition key never spans two splits.
    assert all(a.isdisjoint(b) for a, b in itertools.combinations(partitions, 2))
    # Roughly equal sizes: every split but the last reaches the requested size (rows ~60-110 B).
    row_bytes = 2000 // 110
    assert all(len(p) >= row_bytes for p in parts[:-1])
    assert all(len(p) <= 2000 // 50 + 5 for p in parts)


def test_empty_table_and_errors(ots_client: OTSClient) -> None:
    client = ots_client
    client.create_table(TableMeta("t", [("p", "STRING")]), TableOptions(), CU0)
    resp = splits(client, "t", unit=1)
    assert list(resp.split_points) == [] and check_cover(client, "t", resp) == [[]]
    client.put_row("t", Row([("p", "only")], [("v", 1)]))
    assert list(splits(client, "t", unit=1).split_points) == []  # one partition key cannot split
    for size, unit, message in [
        (0, None, "The split size must be greater than 0: 0."),
        (1, 0, "The split size unit must be greater than 0: 0."),
    ]:
        with pytest.raises(OTSServiceError) as info:
            splits(client, "t", size, unit)
        error = info.value
        assert (error.get_error_code(), error.get_error_message()) == ("OTSParameterInvalid", message)
    with pytest.raises(OTSServiceError) as info:
        splits(client, "missing")
    assert (info.value.get_http_status(), info.value.get_error_code()) == (404, "OTSObjectNotExist")
