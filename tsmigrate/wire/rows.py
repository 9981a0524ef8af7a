"""GetRange and BatchWriteRow encoded and decoded by the model layer itself (``calls.Raw``).

The SDK's PlainBuffer writer is pure Python on this interpreter (its native encoder is built
for another), and computes a CRC byte by byte: that was most of a batch's client CPU. Here a
batch row is encoded from its key and cells straight into the request. Its reader has a native
parser, which a GetRange page goes through as in the SDK, but without the SDK's ``Row`` object
per row: the rows become models (``ModelCodec.row_model``) as the caller takes them.

The bytes are the SDK's: values are typed as its writer types them (``bytes`` go as STRING,
``bytearray`` as BINARY, which is why the codec hands BINARY fields over as a bytearray; bool
before int), and anything rarer than an IGNORE put or delete (a condition, an update, a return
type) is encoded by the SDK's own encoder, row by row.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

from tablestore import metadata as md
from tablestore.encoder import OTSProtoBufferEncoder
from tablestore.error import OTSClientError
from tablestore.native import NATIVE_AVAILABLE, parse_multiple_rows
from tablestore.protobuf import table_store_filter_pb2 as filter_pb2
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.wire.plainbuffer import (
    HEADER,
    assemble_row,
    crc8_bytes,
    decode_primary_key,
    decode_rows,
)
from tsmigrate.wire.protowire import varint

_TAG_LEN = struct.Struct("<Bi").pack
_INT = struct.Struct("<Bq").pack
_DOUBLE = struct.Struct("<Bd").pack
_CELL_CHECKSUM = tuple(bytes((0x0A, i)) for i in range(256))
_BOOLS = {True: b"\x02\x01", False: b"\x02\x00"}
_SENTINELS = {md.INF_MIN: b"\x09", md.INF_MAX: b"\x0a", md.PK_AUTO_INCR: b"\x0b"}

_encoder: OTSProtoBufferEncoder | None = None


def sdk_encoder() -> OTSProtoBufferEncoder:
    """The SDK's encoder (filters, conditions, the rare batch rows); built on first use."""
    global _encoder
    if _encoder is None:
        _encoder = OTSProtoBufferEncoder("utf-8", enable_native=False)
    return _encoder


# -- values and cells ----------------------------------------------------------------------------


def _variant(value: Any) -> bytes:
    """``vtype + payload`` as the SDK's writer types the value."""
    kind = type(value)
    if kind is str:
        raw = value.encode("utf-8")
        return _TAG_LEN(0x03, len(raw)) + raw
    if kind is int:
        return _INT(0x00, value)
    if kind is float:
        return _DOUBLE(0x01, value)
    if kind is bool:
        return _BOOLS[value]
    if kind is bytes:
        return _TAG_LEN(0x03, len(value)) + value  # the SDK sends bytes as STRING
    if kind is bytearray:
        return _TAG_LEN(0x07, len(value)) + bytes(value)
    if isinstance(value, type) and value in _SENTINELS:
        return _SENTINELS[value]
    for base in (bool, int, float, str, bytes, bytearray):  # subclasses, as the SDK's isinstance
        if isinstance(value, base):
            return _variant(base(value))
    raise OTSClientError(f"Unsupported column type: {kind}")


_names: dict[str, tuple[bytes, int]] = {}
_NAMES_MAX = 4096
_TIMESTAMP = struct.Struct("<q").pack


def _cell(name: str, value: Any, timestamp: int | None = None) -> tuple[bytes, int]:
    """One cell and its checksum (over the name, the value, then the timestamp)."""
    named = _names.get(name)
    if named is None:
        if len(_names) >= _NAMES_MAX:
            _names.clear()
        raw = name.encode("utf-8")
        named = _names[name] = (b"\x03" + _TAG_LEN(0x04, len(raw)) + raw, crc8_bytes(0, raw))
    v = _variant(value)
    crc = crc8_bytes(named[1], v)
    if timestamp is None:
        return b"".join((named[0], _TAG_LEN(0x05, len(v)), v, _CELL_CHECKSUM[crc])), crc
    ts = _TIMESTAMP(timestamp)
    crc = crc8_bytes(crc, ts)
    return b"".join((named[0], _TAG_LEN(0x05, len(v)), v, b"\x07", ts, _CELL_CHECKSUM[crc])), crc


def _key_cells(key: Iterable[tuple[str, Any]]) -> tuple[bytes, list[int]]:
    cells = [_cell(name, value) for name, value in key]
    return b"".join(c[0] for c in cells), [c[1] for c in cells]


def primary_key(key: Iterable[tuple[str, Any]]) -> bytes:
    pk, crcs = _key_cells(key)
    return HEADER + assemble_row(pk, crcs, ())


def put_row(key: Iterable[tuple[str, Any]], cells: Sequence[tuple[Any, ...]]) -> bytes:
    """A put's row: cells are (name, value) or (name, value, timestamp)."""
    pk, crcs = _key_cells(key)
    return HEADER + assemble_row(pk, crcs, [_cell(*c) for c in cells])


def delete_row(key: Iterable[tuple[str, Any]]) -> bytes:
    pk, crcs = _key_cells(key)
    return HEADER + assemble_row(pk, crcs, (), delete_marker=True)


# -- GetRange --------------------------------------------------------------------------------------


def column_filter(condition: Any) -> bytes | None:
    """A filter (an SDK column condition, ``conditions.sdk_condition``) as GetRange sends it."""
    if condition is None:
        return None
    proto = filter_pb2.Filter()
    sdk_encoder()._make_column_condition(proto, condition)
    return proto.SerializeToString()


def get_range_request(table: str, backward: bool, start: Iterable[tuple[str, Any]],
                      end: Iterable[tuple[str, Any]], columns: Sequence[str] | None,
                      limit: int | None, filter_bytes: bytes | None) -> bytes:
    """A GetRange of the newest version of each cell, as the SDK's encoder builds it."""
    request = pb.GetRangeRequest(
        table_name=table, direction=pb.BACKWARD if backward else pb.FORWARD, max_versions=1,
        inclusive_start_primary_key=primary_key(start), exclusive_end_primary_key=primary_key(end),
    )
    if columns:
        request.columns_to_get.extend(columns)
    if filter_bytes is not None:
        request.filter = filter_bytes
    if limit is not None:
        request.limit = limit
    return request.SerializeToString()


Row = tuple[list[tuple[str, Any]], list[tuple[str, Any, int | None]]]  # (key, cells), as the SDK's


class Page:
    """One GetRange answer: its rows as the SDK's parser gives them, where the next one starts."""

    __slots__ = ("next_start", "rows")

    def __init__(self, rows: list[Row], next_start: list[tuple[str, Any]] | None):
        self.rows = rows
        self.next_start = next_start


def page(answer: bytes) -> Page:
    """The rows of a GetRangeResponse: parsed by the SDK's native parser when it has one (what
    its own ``get_range`` does, less a ``Row`` object per row), else here."""
    response = pb.GetRangeResponse.FromString(answer)
    next_start = None
    if response.next_start_primary_key:  # binaries as the SDK reads them, to send them back
        next_start = [(name, bytearray(v) if type(v) is bytes else v)
                      for name, v in decode_primary_key(response.next_start_primary_key)]
    buf = response.rows
    if not buf:
        return Page([], next_start)
    return Page(parse_multiple_rows(buf) if NATIVE_AVAILABLE else parse_rows(buf), next_start)


def _sdk(value: Any) -> Any:
    return bytearray(value) if type(value) is bytes else value  # BINARY, as the SDK reads it


def parse_rows(buf: bytes) -> list[Row]:
    """``parse_multiple_rows`` in Python, for an SDK without its native parser: the rows as the
    project's PlainBuffer decoder reads them (checksums checked too), in the native shape."""
    return [([(name, _sdk(value)) for name, value in row.primary_key],
             [(cell.name, _sdk(cell.value), cell.timestamp) for cell in row.cells])
            for row in decode_rows(buf)]


# -- BatchWriteRow ---------------------------------------------------------------------------------

_IGNORE_CONDITION = b"\x1a\x02\x08" + bytes((pb.IGNORE,))
_PUT_HEAD = b"\x08" + bytes((pb.PUT,)) + b"\x12"
_DELETE_HEAD = b"\x08" + bytes((pb.DELETE,)) + b"\x12"
_SDK_ROWS = {md.PutRowItem: "_make_put_row_item", md.UpdateRowItem: "_make_update_row_item",
             md.DeleteRowItem: "_make_delete_row_item"}


def batch_row(item: Any) -> bytes:
    """A ``RowInBatchWriteRowRequest`` of an SDK row item (md.PutRowItem, ...), encoded."""
    condition = item.condition
    plain = item.return_type is None and (condition is None or (
        condition.row_existence_expectation == md.RowExistenceExpectation.IGNORE
        and condition.column_condition is None))
    kind = type(item)
    if plain and kind is md.PutRowItem:
        row = put_row(item.row.primary_key, item.row.attribute_columns)
        return b"".join((_PUT_HEAD, varint(len(row)), row, _IGNORE_CONDITION))
    if plain and kind is md.DeleteRowItem:
        row = delete_row(item.row.primary_key)
        return b"".join((_DELETE_HEAD, varint(len(row)), row, _IGNORE_CONDITION))
    proto = pb.RowInBatchWriteRowRequest()
    getattr(sdk_encoder(), _SDK_ROWS[kind])(proto, item)
    return proto.SerializeToString()


def batch_write_request(tables: Iterable[tuple[str, Sequence[bytes]]]) -> bytes:
    """A BatchWriteRowRequest of encoded rows (``batch_row``), table by table."""
    parts = []
    for table, rows in tables:
        name = table.encode("utf-8")
        entry = [b"\x0a", varint(len(name)), name]
        for row in rows:
            entry += (b"\x12", varint(len(row)), row)
        body = b"".join(entry)
        parts += (b"\x0a", varint(len(body)), body)
    return b"".join(parts)


def batch_answers(response: Any, tables: Sequence[str]) -> dict[str, list[tuple[bool, str, str]]]:
    """(ok, error code, message) of each row, per table in request order, from the answer to a
    ``Raw`` BatchWriteRow: its bytes, or the SDK's response when a routed client sent it as a
    ``Call`` (a rewrite's phase translated the rows)."""
    if isinstance(response, bytes):
        parsed = pb.BatchWriteRowResponse.FromString(response)
        return {table: [(row.is_ok, row.error.code, row.error.message) for row in answer.rows]
                for table, answer in zip(tables, parsed.tables, strict=True)}
    answers = {}
    for table in tables:
        rows = (response.table_of_put.get(table, []) + response.table_of_update.get(table, [])
                + response.table_of_delete.get(table, []))
        rows.sort(key=lambda row: row.index)
        answers[table] = [(row.is_ok, row.error_code, row.error_message) for row in rows]
    return answers
