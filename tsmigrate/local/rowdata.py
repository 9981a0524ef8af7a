"""Stored rows: building them from versions, and the view a read or a condition sees.

Visibility rules (the service's): a version is invisible once `now - ts/1000 > TTL`; at most
`max_versions` (the table's, then the request's) newest versions per column are visible; a row with
cells of which none is alive does not exist, a row written with no attribute column does.
"""

from __future__ import annotations

from dataclasses import dataclass

from tsmigrate.local.filters import Filter
from tsmigrate.local.model import TableInfo
from tsmigrate.local.plainbuffer import (
    HEADER,
    assemble_row,
    encode_primary_key_cells,
    logical_size,
    value_size,
)
from tsmigrate.local.storage import Cells, StoredRow, Version


def ttl_cutoff(table: TableInfo, now_ms: int) -> int | None:
    """The oldest timestamp (ms) still alive, or None when the table keeps data forever."""
    return None if table.ttl == -1 else now_ms - table.ttl * 1000


def make_row(
    key: bytes, pk: bytes, pkc: bytes, pk_values: tuple[object, ...], cells: Cells,
    lsize: int | None = None,
) -> StoredRow:
    """A stored row from its cells (name -> versions newest first); columns get sorted by name.
    `lsize` is the row's logical size (see `StoredRow.lsize`) when the caller knows it."""
    names = sorted(cells)
    ordered = cells if names == list(cells) else {name: cells[name] for name in names}
    newest = [vs[0] for vs in ordered.values()]
    latest = assemble_row(pk, pkc, [(v[2], v[3]) for v in newest])
    mints = min([v[0] for v in newest]) if newest else None
    if lsize is None:  # from the values at hand: cheaper than walking `latest` (names are ASCII)
        lsize = logical_size(pk) + sum([len(name) + value_size(vs[0][1]) for name, vs in ordered.items()])
    return StoredRow(key, pk, pkc, latest, mints, StoredRow.pack(pk_values, ordered), lsize)


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
        return (
            self.columns is None
            and self.pk_names is None
            and self.max_versions == 1
            and self.time_range is None
            and self.filter is None
            and self.start_column is None
            and self.end_column is None
        )


def read(table: TableInfo, row: StoredRow, spec: ReadSpec, now_ms: int) -> bytes | None:
    """The encoded row (no header) this read returns, or None when the row is not returned."""
    cutoff = ttl_cutoff(table, now_ms)
    if spec.simple and (cutoff is None or row.mints is None or row.mints >= cutoff):
        return row.latest
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
        if not spec.filter.matches({name: [(v[0], v[1]) for v in vs] for name, vs in selected}):
            return None
        page = spec.filter.pagination
        if page is not None:
            offset, count = page
            selected = selected[offset : offset + count]
    if spec.pk_names is None:
        pk, pkc = row.pk, row.pkc
    else:
        subset = [(n, v) for n, v in zip(table.pk_names, pk_values, strict=True) if n in spec.pk_names]
        pk_bytes, crcs = encode_primary_key_cells(subset)
        pk, pkc = pk_bytes, bytes(crcs)
    if not selected and not (spec.pk_names or (not cells and spec.columns is None)):
        return None
    return assemble_row(pk, pkc, [(v[2], v[3]) for _, vs in selected for v in vs])


def read_size(row: StoredRow, data: bytes) -> int:
    """The logical size of `data`, what `read` answered for `row`: the stored one when the
    answer is the whole row."""
    if data is row.latest and row.lsize is not None:
        return row.lsize
    return logical_size(data)


def _wanted(spec: ReadSpec, name: str) -> bool:
    if spec.columns is not None and name not in spec.columns:
        return False
    if spec.start_column is not None and name < spec.start_column:
        return False
    return spec.end_column is None or name < spec.end_column
