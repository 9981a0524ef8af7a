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
from tsmigrate.local.plainbuffer import encode_primary_key
from tsmigrate.local.table_rules import get_table

if TYPE_CHECKING:
    from tsmigrate.local.context import Context

DEFAULT_UNIT = 100 * 1024 * 1024
SCAN_PAGE = 5000
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
    target = req.split_size * unit
    first = table.primary_key[0]
    points: list[bytes] = []
    with ctx.storage.lock:
        size = 0
        previous = None  # first column of the row that filled the current split
        start = b"\x00"  # below every stored key (their first column starts with 01)
        while True:
            rows = ctx.storage.key_sizes(table.table_id, start, SCAN_PAGE)
            for key, length in rows:
                if previous is not None:
                    # The split is full: it ends where the partition key changes. Only these
                    # rows have their first column decoded; the rest only add their size.
                    prefix = _first_column(key, first.type)
                    if prefix == previous:
                        continue
                    points.append(prefix)
                    size, previous = 0, None
                size += length
                if size >= target:
                    previous = _first_column(key, first.type)
            if len(rows) < SCAN_PAGE:
                break
            start = rows[-1][0] + b"\x00"  # the smallest key after the last one read
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
