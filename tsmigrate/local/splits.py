"""ComputeSplitPointsBySize: cut a table's key range into ranges of about `split_size` bytes.

Request `{table_name, split_size (units of 100 MB), split_size_unit_in_byte?}`; the unit, when
given, replaces 100 MB (tests force many splits on little data with it). Response as the service
gives it and the Java SDK's `ResponseFactory.createComputeSplitsBySizeResponse` reads it:

- `schema`: the table's primary key schema;
- `split_points`: PlainBuffer PK rows (with header) holding only the partition key (first PK
  column): the trailing columns are INF_MIN and omitted. N points make N + 1 splits
  [INF_MIN, p1), [p1, p2), ... [pN, INF_MAX), the missing columns padded with INF_MIN;
- `locations`: location hints as (location, repeat) runs covering the N + 1 splits; the local
  server has no machine to name, so one run with the empty string, the service's "no hint";
- `consumed`: one read capacity unit (the service's charge is not published).

Sizes are the stored encoded rows (newest versions), summed in key order. A split ends once it
holds `split_size` bytes, at the next change of partition key, since points carry only the
partition key: points are strictly increasing and a partition key never spans two splits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.errors import invalid
from tsmigrate.local.model import PK_INTEGER, PK_STRING
from tsmigrate.local.table_rules import get_table
from tsmigrate.wire.plainbuffer import encode_primary_key

if TYPE_CHECKING:
    from tsmigrate.local.context import Context
    from tsmigrate.local.storage import Storage

DEFAULT_UNIT = 100 * 1024 * 1024
SCAN_PAGE = 5000
FIRST_PAGE = 256  # rows walked first, whose average size guides the rest
SUM_FIRST = DEFAULT_UNIT  # from this split size, sum the table first: most tables are smaller
# Skipping a run of rows costs two queries, ~10 us: worth it from this many rows (walking one
# in Python costs ~0.5 us, summing it in SQLite ~0.2 us).
MIN_SKIP = 64
SKIP_SHARE = 0.85  # of the rows a split still needs, at the average row size, skipped at once
_SIGN = 1 << 63


def _first_column(key: bytes, pk_type: int) -> bytes:
    """The order-preserving encoding (keycodec) of a stored key's first column."""
    if pk_type == PK_INTEGER:
        return key[:9]
    i = 1
    while True:  # escaped bytes end at `00 00`; `00 FF` is an escaped zero byte
        j = key.index(b"\x00", i)
        if key[j + 1] == 0:
            return key[: j + 2]
        i = j + 2


def _decode_first(prefix: bytes, pk_type: int) -> object:
    if pk_type == PK_INTEGER:
        return int.from_bytes(prefix[1:9], "big") - _SIGN
    raw = prefix[1:-2].replace(b"\x00\xff", b"\x00")
    return raw.decode() if pk_type == PK_STRING else raw


def _successor(prefix: bytes) -> bytes:
    """The smallest key above every key starting with `prefix`. A first column's encoding is
    self-delimiting, so these keys are exactly the rows of that partition key, contiguous."""
    stripped = prefix.rstrip(b"\xff")  # never empty: the type byte is not FF
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _split_points(storage: Storage, table_id: int, pk_type: int, target: int) -> list[bytes]:
    """The first columns of the rows that start a split, by the rule of the module docstring.

    Fetching every row's (key, size) into Python (the rule as written) costs ~0.5 us a row;
    SQLite sums sizes at ~0.2 us a row. So a large split size starts with one sum of the table
    (no point when it is no larger); runs of rows that leave the split short are summed in SQLite
    (`key_size_run`, sized from the average row of the first page); only the rows near where a
    split fills are walked one by one, and the rest of a partition key after that is jumped over
    (`_successor`). Each shortcut ends in the state walking those rows would."""
    points: list[bytes] = []
    if target >= SUM_FIRST and storage.key_size_total(table_id, b"\x00") <= target:
        return points
    size = 0  # of the current split
    start = b"\x00"  # below every stored key (their first column starts with 01)
    average = 0.0  # bytes a row, once the first page is walked
    dense = True  # splits of a few rows each: skipping saves nothing, walk whole pages
    share = SKIP_SHARE
    while True:
        walk = FIRST_PAGE
        if average:
            wanted = (target - size) / average  # rows the split still needs, about
            if wanted * share >= MIN_SKIP:
                run = storage.key_size_run(table_id, start, int(wanted * share))
                if run is not None and size + run[1] < target:
                    start, size = run[0] + b"\x00", size + run[1]
                    continue
                if run is None and size + storage.key_size_total(table_id, start) <= target:
                    break  # the rows left fill the split at best at the last row: no point after
                share /= 2  # larger rows than the average here: try a shorter run
                continue
            walk = SCAN_PAGE if dense else min(SCAN_PAGE, int(1.25 * wanted) + 16)
        share = SKIP_SHARE
        page = storage.key_sizes(table_id, start, walk)
        if not average and page:
            average = sum(length for _, length in page) / len(page)
            dense = target < MIN_SKIP * average
        filled = None  # first column of the row that filled the current split
        for key, length in page:
            if filled is not None:  # full: the split ends where the partition key changes
                prefix = _first_column(key, pk_type)
                if prefix == filled:
                    continue
                points.append(prefix)
                size, filled = 0, None
                if not dense:  # back to skipping, from this row
                    start = key
                    break
            size += length
            if size >= target:
                filled = _first_column(key, pk_type)
        else:
            if filled is None and len(page) < walk:
                break  # the table's end
            start = page[-1][0] + b"\x00"  # the smallest key after the last one read
            if filled is not None:  # the partition key goes on past the page: skip the rest of it
                following = storage.key_sizes(table_id, _successor(filled), 1)
                if not following:
                    break
                after = following[0][0]
                points.append(_first_column(after, pk_type))
                size, start = 0, after
    return points


def compute_split_points_by_size(
    ctx: Context, req: pb.ComputeSplitPointsBySizeRequest
) -> pb.ComputeSplitPointsBySizeResponse:
    if req.split_size <= 0:
        raise invalid(f"The split size must be greater than 0: {req.split_size}.")
    unit = DEFAULT_UNIT
    if req.HasField("split_size_unit_in_byte"):
        if req.split_size_unit_in_byte <= 0:
            raise invalid(
                f"The split size unit must be greater than 0: {req.split_size_unit_in_byte}."
            )
        unit = req.split_size_unit_in_byte
    table = get_table(ctx, req.table_name)
    first = table.primary_key[0]
    with ctx.storage.lock:
        points = _split_points(ctx.storage, table.table_id, first.type, req.split_size * unit)
    resp = pb.ComputeSplitPointsBySizeResponse(
        consumed=pb.ConsumedCapacity(capacity_unit=pb.CapacityUnit(read=1, write=0))
    )
    for col in table.primary_key:
        schema = resp.schema.add(name=col.name, type=col.type)
        if col.auto_increment:
            schema.option = pb.AUTO_INCREMENT
    resp.split_points.extend(
        encode_primary_key([(first.name, _decode_first(p, first.type))]) for p in points
    )
    resp.locations.add(location="", repeat=len(points) + 1)
    return resp


HANDLERS: dict[str, tuple[type, Any]] = {
    "ComputeSplitPointsBySize": (pb.ComputeSplitPointsBySizeRequest, compute_split_points_by_size),
}
