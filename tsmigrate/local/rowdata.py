"""Stored rows: building them from versions, and the view a read or a condition sees.

Visibility rules (the service's): a version is invisible once `now - ts/1000 > TTL`; at most
`max_versions` (the table's, then the request's) newest versions per column are visible; a row with
cells of which none is alive does not exist, a row written with no attribute column does.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeVar

from tsmigrate.local.filters import Filter
from tsmigrate.local.model import TableInfo
from tsmigrate.local.storage import Cells, StoredRow, Version
from tsmigrate.wire.plainbuffer import (
    HEADER,
    assemble_row,
    decode_value,
    encode_primary_key_cells,
    logical_size,
    value_size,
)

_NAME = itemgetter(0)
_T = TypeVar("_T")
_I32 = struct.Struct("<i").unpack_from
_I64 = struct.Struct("<q").unpack_from
_names: dict[bytes, str] = {}  # cell name bytes -> name (names repeat across rows)
_NAMES_MAX = 4096


def ttl_cutoff(table: TableInfo, now_ms: int) -> int | None:
    """The oldest timestamp (ms) still alive, or None when the table keeps data forever."""
    return None if table.ttl == -1 else now_ms - table.ttl * 1000


def make_row(
    key: bytes, pk: bytes, pkc: bytes, pk_values: tuple[object, ...], cells: Cells,
    lsize: int | None = None,
) -> StoredRow:
    """A stored row from its cells (name -> versions newest first); columns get sorted by name.
    `lsize` is the row's logical size (see `StoredRow.lsize`) when the caller knows it. A row of
    one version per column is lean: `latest` holds all of it."""
    names = sorted(cells)
    ordered = cells if names == list(cells) else {name: cells[name] for name in names}
    newest = [vs[0] for vs in ordered.values()]
    latest = assemble_row(pk, pkc, newest)
    mints = min([v[0] for v in newest]) if newest else None
    if lsize is None:  # from the values at hand: cheaper than walking `latest` (names are ASCII)
        lsize = logical_size(pk) + sum([len(name) + value_size(vs[0][1]) for name, vs in ordered.items()])
    if all(len(vs) == 1 for vs in ordered.values()):  # lean
        return StoredRow(key, pk, pkc, latest, mints, b"", lsize, (pk_values, ordered))
    return StoredRow(key, pk, pkc, latest, mints, StoredRow.pack(pk_values, ordered), lsize)


def make_lean_row(
    key: bytes, pk: bytes, pkc: bytes, cells: Sequence[tuple[str, object, int, bytes, int]], lsize: int,
    latest: bytes | None = None,
) -> StoredRow:
    """The lean row (see `storage`) of `cells`, (name, value, timestamp, cell bytes, checksum)
    with each name once, sorted here; `lsize`: the row's logical size. `latest`: the row of
    `cells` (sorted then) when the caller has it (`nativerow`), so it is not assembled again."""
    if latest is None:
        cells = sorted(cells, key=_NAME)
        latest = assemble_row(pk, pkc, cells)
    mints = min([cell[2] for cell in cells]) if cells else None
    return StoredRow(key, pk, pkc, latest, mints, b"", lsize)


def alive(table: TableInfo, row: StoredRow | None, now_ms: int) -> bool:
    if row is None:
        return False
    cutoff = ttl_cutoff(table, now_ms)
    if cutoff is None or row.mints is None or row.mints >= cutoff:
        return True
    return any(vs[0][0] >= cutoff for vs in row.data[1].values())


def live_cells(table: TableInfo, cells: Cells, now_ms: int) -> Cells:
    """Cells without expired versions or versions beyond the table's max_versions."""
    cutoff = ttl_cutoff(table, now_ms)
    out: Cells = {}
    for name, vs in cells.items():
        if cutoff is not None:
            vs = [v for v in vs if v[0] >= cutoff]
        if vs:
            out[name] = vs[: table.max_versions]
    return out


def filter_columns(cells: Cells) -> dict[str, list[tuple[int, object]]]:
    """The shape `Filter.matches` takes: name -> [(ts, value)] newest first."""
    return {name: [(v[0], v[1]) for v in vs] for name, vs in cells.items()}


def pk_row(row: StoredRow) -> bytes:
    """HEADER + the PK-only row of a stored row (next_start_primary_key, RT_PK)."""
    return HEADER + assemble_row(row.pk, row.pkc, ())


@dataclass(frozen=True)
class ReadSpec:
    """What a read asks for: columns_to_get split into PK and attribute names, versions, filter."""

    pk_names: frozenset[str] | None = None  # None: every PK column
    columns: frozenset[str] | None = None  # None: every attribute column
    max_versions: int | None = None
    time_range: tuple[int, int] | None = None  # [start, end) in ms
    filter: Filter | None = None
    start_column: str | None = None
    end_column: str | None = None

    @property
    def simple(self) -> bool:
        """Whole row, newest versions only: the stored `latest` encoding answers it."""
        return self.max_versions == 1 and self.whole_rows

    @property
    def whole_rows(self) -> bool:
        """Every column of every row, as many versions as `max_versions` asks."""
        return (
            self.columns is None
            and self.pk_names is None
            and self.max_versions is not None
            and self.time_range is None
            and self.filter is None
            and self.start_column is None
            and self.end_column is None
        )


def read(table: TableInfo, row: StoredRow, spec: ReadSpec, now_ms: int) -> bytes | None:
    """The encoded row (no header) this read returns, or None when the row is not returned."""
    cutoff = ttl_cutoff(table, now_ms)
    # A lean row has one version per column: any number of versions reads as its newest ones.
    simple = spec.simple or (not row.blob and spec.whole_rows)
    if simple and (cutoff is None or row.mints is None or row.mints >= cutoff):
        return row.latest
    if not row.blob:
        return _read_lean(table, row, spec, cutoff)
    pk_values, cells = row.data
    exists = not cells
    limit = min(table.max_versions, spec.max_versions or table.max_versions)
    selected: list[tuple[str, list[Version]]] = []
    for name, versions in cells.items():
        vs = versions if cutoff is None else [v for v in versions if v[0] >= cutoff]
        if not vs:
            continue
        exists = True
        if not _wanted(spec, name):
            continue
        if spec.time_range is not None:
            start, end = spec.time_range
            vs = [v for v in vs if start <= v[0] < end]
        if vs:
            selected.append((name, vs[:limit]))
    if not exists:
        return None
    if spec.filter is not None:
        seen = {name: [(v[0], v[1]) for v in vs] for name, vs in selected}
        filtered = _filtered(spec.filter, seen, selected)
        if filtered is None:
            return None
        selected = filtered
    if spec.pk_names is None:
        pk, pkc = row.pk, row.pkc
    else:
        subset = [(n, v) for n, v in zip(table.pk_names, pk_values, strict=True) if n in spec.pk_names]
        pk_bytes, crcs = encode_primary_key_cells(subset)
        pk, pkc = pk_bytes, bytes(crcs)
    if not selected and not (spec.pk_names or (not cells and spec.columns is None)):
        return None
    return assemble_row(pk, pkc, [v for _, vs in selected for v in vs])


def read_size(row: StoredRow, data: bytes) -> int:
    """The logical size of `data`, what `read` answered for `row`: the stored one when the
    answer is the whole row."""
    if data is row.latest and row.lsize is not None:
        return row.lsize
    return logical_size(data)


def _read_lean(table: TableInfo, row: StoredRow, spec: ReadSpec, cutoff: int | None) -> bytes | None:
    """`read` of a lean row (one version per column): cells are picked from `latest` as bytes,
    and only the values a filter looks at are decoded."""
    latest = row.latest
    has_cells = len(latest) > len(row.pk) + 3  # more than 0x01 pk 0x09 crc
    selected = _pick(latest, len(row.pk) + 2, spec, cutoff) if has_cells else []
    if selected is None:  # every cell expired
        return None
    if spec.filter is not None:
        filtered = _filtered(spec.filter, _LazyColumns(latest, selected), selected)
        if filtered is None:
            return None
        selected = filtered
    if spec.pk_names is None:
        pk, pkc = row.pk, row.pkc
    else:
        every = _pick(b"\x01" + row.pk + b"\x09", 1, ReadSpec(columns=spec.pk_names), None) or []
        pk, pkc = b"".join([c[2] for c in every]), bytes([c[3] for c in every])
    if not selected and not (spec.pk_names or (not has_cells and spec.columns is None)):
        return None
    return assemble_row(pk, pkc, [(c[2], c[3]) for c in selected])


def _pick(buf: bytes, pos: int, spec: ReadSpec, cutoff: int | None) -> list[_LeanCell] | None:
    """The cells from `pos` on, in a row the server encoded, that `spec` wants and are alive at
    `cutoff`; None when none is alive."""
    i32, i64, names = _I32, _I64, _names
    columns, time_range = spec.columns, spec.time_range
    alive = cutoff is None
    picked: list[_LeanCell] = []
    while buf[pos] == 0x03:
        start = pos
        size = i32(buf, pos + 2)[0]
        pos += 6 + size
        raw = buf[pos - size : pos]
        name = names.get(raw)
        if name is None:
            if len(names) >= _NAMES_MAX:
                names.clear()
            name = names[raw] = raw.decode()
        value_start = value_end = pos + 5
        if buf[pos] == 0x05:
            value_end = pos = value_start + i32(buf, pos + 1)[0]
        ts = 0
        if buf[pos] == 0x07:
            ts = i64(buf, pos + 1)[0]
            pos += 9
        pos += 2  # TAG_CELL_CHECKSUM crc
        if cutoff is not None:
            if ts < cutoff:
                continue
            alive = True
        if columns is not None and name not in columns:
            continue
        if (spec.start_column is not None or spec.end_column is not None) and not _wanted(spec, name):
            continue
        if time_range is not None and not time_range[0] <= ts < time_range[1]:
            continue
        picked.append((name, ts, buf[start:pos], buf[pos - 1], value_start, value_end))
    return picked if alive else None


# (name, timestamp (0: none), cell bytes, checksum, value start, value end) of a lean row's cell
_LeanCell = tuple[str, int, bytes, int, int, int]


class _LazyColumns:
    """What `Filter.matches` reads (name -> [(timestamp, value)]), decoding a value when asked."""

    def __init__(self, buf: bytes, cells: list[_LeanCell]) -> None:
        self._buf = buf
        self._cells = {cell[0]: cell for cell in cells}

    def get(self, name: str, default: object = None) -> object:
        cell = self._cells.get(name)
        if cell is None:
            return default
        return [(cell[1], decode_value(self._buf[cell[4] : cell[5]]))]


def _filtered(row_filter: Filter, seen: Any, selected: list[_T]) -> list[_T] | None:
    """The selected columns a row filter leaves (its column pagination), or None when it
    refuses the row; `seen` is what it reads (name -> [(timestamp, value)])."""
    if not row_filter.matches(seen):
        return None
    page = row_filter.pagination
    if page is None:
        return selected
    offset, count = page
    return selected[offset : offset + count]


def _wanted(spec: ReadSpec, name: str) -> bool:
    if spec.columns is not None and name not in spec.columns:
        return False
    if spec.start_column is not None and name < spec.start_column:
        return False
    return spec.end_column is None or name < spec.end_column
