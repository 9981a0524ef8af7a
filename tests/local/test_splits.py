"""ComputeSplitPointsBySize over raw protobuf: split points read as the Java SDK reads them cover the
whole key range without overlap (checked with GetRange), in ranges of about the requested size."""

from __future__ import annotations

import itertools
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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

from tsmigrate.local import splits as splits_module
from tsmigrate.local.splits import _decode_first as decode_first
from tsmigrate.local.splits import _first_column as first_column
from tsmigrate.local.storage import Storage
from tsmigrate.local.testing import LocalTablestore

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


# -- the shortcuts of `_split_points` give today's points exactly ------------------------------------

# (MIN_SKIP, SCAN_PAGE, FIRST_PAGE, SUM_FIRST): the real ones, and small ones that put skips,
# walks and page ends among a few hundred rows.
KNOBS = [
    (splits_module.MIN_SKIP, splits_module.SCAN_PAGE, splits_module.FIRST_PAGE,
     splits_module.SUM_FIRST),
    (2, 7, 3, 1),
    (4, 16, 16, 10**6),
]
KNOB_NAMES = ("MIN_SKIP", "SCAN_PAGE", "FIRST_PAGE", "SUM_FIRST")


def reference_points(storage: Storage, table_id: int, pk_type: int, target: int) -> list[bytes]:
    """The loop ComputeSplitPointsBySize ran before its shortcuts: every row walked in Python."""
    points: list[bytes] = []
    size, previous, start = 0, None, b"\x00"
    while True:
        rows = storage.key_sizes(table_id, start, 5000)
        for key, length in rows:
            if previous is not None:
                prefix = first_column(key, pk_type)
                if prefix == previous:
                    continue
                points.append(prefix)
                size, previous = 0, None
            size += length
            if size >= target:
                previous = first_column(key, pk_type)
        if len(rows) < 5000:
            return points
        start = rows[-1][0] + b"\x00"


def point_values(resp: Any) -> list[object]:
    out = []
    for data in resp.split_points:
        pk, _ = PlainBufferCodedInputStream(PlainBufferInputStream(data)).read_row()
        out.append(bytes(pk[0][1]) if isinstance(pk[0][1], bytearray) else pk[0][1])
    return out


def check_against_reference(
    ots: LocalTablestore, table: str, size: int, unit: int, knobs: tuple[int, ...]
) -> list[object]:
    """The server's points (with `knobs`) equal the reference loop's; the points."""
    client = ots.client()
    with patch.multiple(splits_module, **dict(zip(KNOB_NAMES, knobs, strict=True))):
        resp = splits(client, table, size, unit)
    storage = ots.server.storage
    info = storage.table(ots.instance, table)
    assert info is not None
    pk_type = info.primary_key[0].type
    with storage.lock:
        expected = reference_points(storage, info.table_id, pk_type, size * unit)
    got = point_values(resp)
    assert got == [decode_first(p, pk_type) for p in expected]
    assert [loc.repeat for loc in resp.locations] == [len(got) + 1]
    return got


def key_value(kind: str, i: int) -> object:
    if kind == "STRING":
        return f"k{i:04d}"
    return i * 3 - 50 if kind == "INTEGER" else bytearray([0, i % 7, i // 7])


# A value length: mostly a few sizes, so that sums land exactly on a split's size.
LENGTHS = st.one_of(st.sampled_from([0, 10, 200]), st.integers(0, 300))


@pytest.mark.slow
@settings(max_examples=60)
@given(
    kind=st.sampled_from(["STRING", "INTEGER", "BINARY"]),
    # rows per partition key, and each row's value length
    partitions=st.one_of(
        st.lists(st.lists(LENGTHS, min_size=1, max_size=3), max_size=10),
        st.lists(st.lists(LENGTHS, min_size=1, max_size=30), min_size=20, max_size=60),
    ),
    split_rows=st.lists(st.floats(0.5, 200), min_size=1, max_size=6),  # units, in average rows
    size=st.integers(1, 3),
    knobs=st.sampled_from(KNOBS),
)
def test_points_match_the_row_by_row_rule(
    local_ots: LocalTablestore, kind: str, partitions: list[list[int]], split_rows: list[float],
    size: int, knobs: tuple[int, ...],
) -> None:
    ots = local_ots.fresh_instance("splits")
    client = ots.client()
    client.create_table(TableMeta("t", [("p", kind), ("n", "INTEGER")]), TableOptions(), CU0)
    rows = [
        Row([("p", key_value(kind, i)), ("n", j)], [("v", bytearray(b"x" * length))])
        for i, lengths in enumerate(partitions)
        for j, length in enumerate(lengths)
    ]
    fill(client, "t", rows)
    average = 40 + sum(map(sum, partitions)) / max(1, len(rows))  # bytes a row, about
    for rows_a_split in split_rows:
        check_against_reference(ots, "t", size, max(1, int(rows_a_split * average)), knobs)


@pytest.mark.slow
@pytest.mark.parametrize("knobs", KNOBS, ids=["real", "tiny", "small"])
def test_points_match_the_row_by_row_rule_for_every_unit(
    ots_instance: LocalTablestore, knobs: tuple[int, ...]
) -> None:
    """Small rows, then large ones (more than the average: skips overshoot and shrink), then small
    again, in partitions of 1-3 rows: units up to a fifth of the table, 19 bytes apart, give
    today's points."""
    client = ots_instance.client()
    client.create_table(TableMeta("t", [("p", "STRING"), ("n", "INTEGER")]), TableOptions(), CU0)
    lengths = [0] * 150 + [200] * 150 + [0] * 150
    fill(client, "t", [Row([("p", f"k{i // (1 + i % 3):04d}"), ("n", i)], [("v", "x" * n)])
                       for i, n in enumerate(lengths)])
    total = sum(length for length in lengths) + 40 * len(lengths)
    for unit in range(1, total // 5, 19):
        check_against_reference(ots_instance, "t", 1, unit, knobs)


def uniform_table(ots: LocalTablestore, partitions: list[int]) -> int:
    """A table whose rows all have one size (returned); `partitions[i]` rows of key i."""
    client = ots.client()
    client.create_table(TableMeta("u", [("p", "STRING"), ("n", "INTEGER")]), TableOptions(), CU0)
    fill(client, "u", [Row([("p", f"k{i:04d}"), ("n", j)], [("v", "x" * 50)])
                       for i, count in enumerate(partitions) for j in range(count)])
    storage = ots.server.storage
    info = storage.table(ots.instance, "u")
    assert info is not None
    with storage.lock:
        sizes = {length for _, length in storage.key_sizes(info.table_id, b"\x00", 10**6)}
    if not partitions:
        return 0
    assert len(sizes) == 1
    return sizes.pop()


# (rows per partition key, split size in rows, expected points as partition indexes). With
# knobs (2, 7) a dense walk reads 7 rows a page; a sparse one skips, then walks 1.25 * need + 16.
BOUNDARY_CASES = {
    "empty table": ([], 1, []),
    "smaller than one split": ([1] * 10, 11, []),
    "exactly one split, nothing after": ([1] * 10, 10, []),
    "fills mid page": ([1] * 20, 3, [3, 6, 9, 12, 15, 18]),
    "fills at a page end": ([1] * 21, 7, [7, 14]),
    "partition key spans a page end": ([5, 9, 1, 1, 1], 6, [2]),
    "partition key spans many pages": ([1, 40, 1, 1], 2, [2]),
    "every row a split": ([1] * 12, 1, list(range(1, 12))),
    "large splits, skipped then walked": ([1] * 400, 150, [150, 300]),
    "large partition after a skip": ([1] * 100 + [300] + [1] * 200, 120, [101, 221]),
}


@pytest.mark.parametrize("knobs", KNOBS, ids=["real", "tiny", "small"])
@pytest.mark.parametrize("case", BOUNDARY_CASES)
def test_split_boundaries(ots_instance: LocalTablestore, case: str, knobs: tuple[int, ...]) -> None:
    partitions, split_rows, expected = BOUNDARY_CASES[case]
    row = uniform_table(ots_instance, partitions)
    got = check_against_reference(ots_instance, "u", 1, split_rows * max(row, 1), knobs)
    assert got == [f"k{i:04d}" for i in expected]


def test_split_size_beyond_64_bits(ots_client: OTSClient) -> None:
    """split_size x unit overflows SQLite's integers: still one split."""
    ots_client.create_table(TableMeta("t", [("p", "STRING")]), TableOptions(), CU0)
    ots_client.put_row("t", Row([("p", "a")], [("v", 1)]))
    ots_client.put_row("t", Row([("p", "b")], [("v", 1)]))
    assert list(splits(ots_client, "t", 2**62, 2**62).split_points) == []
    assert len(splits(ots_client, "t", 1, 1).split_points) == 1
