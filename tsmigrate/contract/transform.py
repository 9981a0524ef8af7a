"""Source row -> target row: the new key through tsmigrate.keys, and the cells that move.

A row's *natural values* are the field values its key was built from: the source key with its
derivations inverted (hash prefix stripped, concatenation split and unpadded, descending integer
undone; a time bucket is recomputed, not read), plus the attribute columns the new key needs.
The target key is built from them with the target's derivations, the same code services use.

Cells: every version of every attribute cell is kept with its timestamp, except the attributes
that enter the new key as columns (they leave the attributes). Fields of the old key that the new
key does not hold become attributes (declared columns of the target, or fields the new key could
not give back), timestamped like the row's newest cell, so nothing of the source row is lost and
the source key can always be recovered from the target row (``source_key_of``), which
verification and collision reports rely on.

Two ways in: ``apply`` for one row as the SDK returns it (capture re-reads rows this way), and
``page`` for a GetRange page as bytes (the backfill), which carries attribute cells through as
bytes. Both give the same target row, byte for byte, and the same digest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from tsmigrate.contract import functions
from tsmigrate.contract.rekey import NotRekeyable, Rekey
from tsmigrate.contract.rowbytes import (
    DIGEST_MASK,
    ROW_CHECKSUM,
    ScannedRow,
    key_cell,
    row_checksum,
    row_digest,
    scan_rows,
)
from tsmigrate.errors import KeyDerivationError, TsmigrateError
from tsmigrate.keys import Derivation
from tsmigrate.schema import BINARY, INTEGER, STRING, Table
from tsmigrate.wire.plainbuffer import HEADER, PlainBufferError, encode_cell, encode_primary_key_cells

try:
    from tsmigrate.wire._rowwalk import plain_key as _plain_key
except ImportError:  # not built (no C compiler), or built before plain_key: the general path
    _plain_key = None

_PK_TYPES: dict[str, frozenset[type]] = {
    STRING: frozenset({str}), INTEGER: frozenset({int}), BINARY: frozenset({bytes, bytearray}),
}

Key = list[tuple[str, Any]]
Cells = list[tuple[str, Any, int]]


def format_key(key: Iterable[tuple[str, Any]]) -> str:
    return "(" + ", ".join([f"{name}={value!r}" for name, value in key]) + ")"


class TransformError(TsmigrateError):
    """A source row cannot become a target row; names the row and why."""

    def __init__(self, source_key: Key, reason: str, table: str = ""):
        self.source_key = list(source_key)
        self.reason = reason
        where = f" of table {table!r}" if table else ""
        super().__init__(
            f"source row {format_key(self.source_key)}{where} cannot be rewritten: {reason}; "
            "fix or delete that row in the source (or change the new key's derivation), then run "
            "the rewrite again: it continues from its checkpoints"
        )


@attrs.frozen
class TargetRow:
    primary_key: Key
    columns: Cells  # (name, value, timestamp), every version


@attrs.frozen
class Page:
    """A transformed GetRange page: BatchWriteRow-ready rows (HEADER + row each)."""

    rows: list[bytes]
    digest: int  # sum of the rows' digests, mod 2**128: independent of order and of paging
    bytes: int
    # (source key, target key, digest) of each row, when asked for (verification)
    detail: list[tuple[Key, Key, int]] | None = None


def _natural_sources(derivation: Derivation | None, name: str) -> tuple[str, ...]:
    if derivation is None:
        return (name,)
    return derivation.sources if derivation.invertible else ()


def _coerce(value: Any, kind: str | None) -> Any:
    """A value read back from a text key (hash prefix) as its column's type."""
    if isinstance(value, str):
        if kind == INTEGER:
            return int(value)
        if kind == BINARY:
            return value.encode()
    return value


def _load(custom: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A custom key transform by reference: ``"module:function"``, or a migration script's
    function (``"/path/script.py:function"``, what ``op.rewrite_table(transform=fn)`` records)."""
    return functions.resolve(custom, "custom transform")


@attrs.define
class _KeySide:
    """How one table's key relates to natural values: read them from a key, build a key."""

    table: Table
    types: dict[str, str]
    # (name, derivation, the Python types the column takes), per key column: read once per row
    _columns: list[tuple[str, Derivation | None, frozenset[type]]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._columns = [
            (c.name, c.derivation, _PK_TYPES.get(c.type, frozenset())) for c in self.table.primary_key
        ]

    def naturals(self, key: Sequence[tuple[str, Any]]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        checks = []
        for column, (name, value) in zip(self.table.primary_key, key, strict=True):
            if name != column.name:
                raise KeyDerivationError(f"key column {name!r} where {column.name!r} was expected")
            derivation = column.derivation
            if derivation is None:
                values[name] = value
            elif derivation.invertible:
                for field, field_value in derivation.invert(value).items():
                    values[field] = _coerce(field_value, self.types.get(field))
            else:
                checks.append((column.name, derivation, value))
        for name, derivation, value in checks:  # recomputable derivations must agree
            if derivation.sources[0] in values and derivation.derive(values) != value:
                raise KeyDerivationError(
                    f"{name}={value!r} is not {derivation.kind} of {derivation.sources[0]!r}"
                )
        return values

    def key(self, values: dict[str, Any]) -> Key:
        key = []
        for name, derivation, allowed in self._columns:
            if derivation is not None:
                value = derivation.derive(values)
            else:
                try:
                    value = values[name]
                except KeyError:
                    raise KeyDerivationError(f"the row has no {name!r}") from None
            if type(value) not in allowed:
                kind = next(c.type for c in self.table.primary_key if c.name == name)
                raise KeyDerivationError(f"key column {name!r} is {kind}, the row gives {value!r}")
            key.append((name, value))
        return key


def _plain_copies(source: Table, target: Table) -> list[int | None]:
    """For each target key column, the source key column it is a plain copy of (the same
    name, neither derived), whose encoded cell it can reuse as it is; None: computed."""
    plain = {c.name: i for i, c in enumerate(source.primary_key) if c.derivation is None}
    return [plain.get(c.name) if c.derivation is None else None for c in target.primary_key]


def _types(*tables: Table) -> dict[str, str]:
    types: dict[str, str] = {}
    for table in tables:
        for column in (*table.primary_key, *table.defined_columns, *table.attributes):
            if column.name in table.primary_key_names and any(
                c.name == column.name and c.derivation for c in table.primary_key
            ):
                continue  # a derived column's type is not its sources'
            types.setdefault(column.name, column.type)
    return types


@attrs.define
class RowTransform:
    source: Table
    target: Table
    key_sources: frozenset[str]  # source attributes the new key needs: capture moves rows on them
    dropped: frozenset[str]  # source attributes that enter the key as columns
    added: tuple[str, ...]  # fields of the old key that become target attributes
    default_timestamp: int
    _source_side: _KeySide
    _target_side: _KeySide
    _custom: Callable[[dict[str, Any]], dict[str, Any]] | None
    _recover: frozenset[str]  # target attributes the source key is rebuilt from
    # For each target key column, the source key column it is a plain copy of (None: computed)
    _pk_copies: list[int | None]
    _rekey: Rekey | None  # the fast path of ``page`` when the new key only moves columns
    # ``key_of``'s compiled path where neither key derives a column and no custom transform
    # runs: the source key's names, the target key's names and the Python types each takes
    _plain: tuple[tuple[str, ...], tuple[str, ...], tuple[frozenset[type], ...]] | None = None

    def __attrs_post_init__(self) -> None:
        source_pk, target_pk = self.source.primary_key, self.target.primary_key
        if self._custom is None and not any(c.derivation for c in (*source_pk, *target_pk)):
            self._plain = (tuple(c.name for c in source_pk), tuple(c.name for c in target_pk),
                           tuple(_PK_TYPES.get(c.type, frozenset()) for c in target_pk))

    @classmethod
    def build(
        cls, source: Table, target: Table, custom: str | None = None, default_timestamp: int = 0
    ) -> RowTransform:
        types = _types(source, target)
        source_naturals = [f for c in source.primary_key for f in _natural_sources(c.derivation, c.name)]
        target_naturals = [f for c in target.primary_key for f in _natural_sources(c.derivation, c.name)]
        needed = {
            f for c in target.primary_key for f in (c.derivation.sources if c.derivation else (c.name,))
        }
        target_plain = {c.name for c in target.primary_key if c.derivation is None}
        declared = {c.name for c in (*target.defined_columns, *target.attributes)}
        recoverable = set(target_naturals)
        dropped = target_plain | {
            f for c in target.primary_key if c.derivation and c.derivation.invertible
            for f in c.derivation.sources if f not in declared
        }
        added = tuple(dict.fromkeys(
            f for f in source_naturals
            if f not in target_plain and (f in declared or f not in recoverable)
        ))
        copies = [None] * len(target.primary_key) if custom else _plain_copies(source, target)
        return cls(
            source=source,
            target=target,
            key_sources=frozenset(needed - set(source_naturals)),
            dropped=frozenset(dropped),
            added=added,
            default_timestamp=default_timestamp,
            source_side=_KeySide(source, types),
            target_side=_KeySide(target, types),
            custom=_load(custom) if custom else None,
            recover=frozenset(f for f in source_naturals if f not in recoverable),
            pk_copies=copies,
            rekey=None if custom or added else Rekey.plan(source, target, copies, frozenset(dropped)),
        )

    @property
    def recover_columns(self) -> frozenset[str]:
        """Target attributes that hold fields of the source key (``source_key_of`` reads them)."""
        return self._recover

    # -- one row, as the SDK gives it ------------------------------------------------------------

    def natural(self, pk: Sequence[tuple[str, Any]], columns: Sequence[Sequence[Any]] = ()) -> dict[str, Any]:
        """The natural field values of a source row: its key inverted, then the newest value of
        each attribute the new key needs (versions come newest first)."""
        attributes: dict[str, Any] = {}
        for cell in columns:
            if cell[0] in self.key_sources and cell[0] not in attributes:
                attributes[cell[0]] = cell[1]
        return self._naturals(pk, attributes)

    def _naturals(self, pk: Sequence[tuple[str, Any]], attributes: dict[str, Any]) -> dict[str, Any]:
        try:
            values = self._source_side.naturals(pk)
        except (KeyDerivationError, ValueError) as exc:
            raise TransformError(list(pk), str(exc), self.source.name) from None
        for name, value in attributes.items():
            values.setdefault(name, value)
        if self._custom is not None:
            try:
                values = self._custom(values)
            except Exception as exc:
                raise TransformError(list(pk), f"custom transform raised {exc!r}", self.source.name) from exc
        return values

    def target_key(self, values: dict[str, Any], source_key: Key | None = None) -> Key:
        try:
            return self._target_side.key(values)
        except (KeyDerivationError, ValueError, TypeError) as exc:
            raise TransformError(source_key or [], f"{exc} (table {self.target.name!r} needs it)",
                                 self.source.name) from None

    def key_of(self, pk: Sequence[tuple[str, Any]], attributes: dict[str, Any],
               source_key: Key | None = None) -> tuple[tuple[str, Any], ...]:
        """``target_key(natural(pk, attributes.items()), source_key)`` as a tuple, for
        ``attributes`` given once each (a dict: the newest value of each column). Where neither
        key derives a column (``_plain``) and the compiled walks are built, one call looks the
        values up (``_rowwalk.plain_key``); anything else, and any key that does not fit (the
        error it raises), takes the general path."""
        plain = self._plain
        if plain is not None and _plain_key is not None:
            source_names, names, allowed = plain
            key = _plain_key(pk, attributes, source_names, self.key_sources, names, allowed)
            if key is not None:
                return key
        return tuple(self.target_key(self.natural(pk, list(attributes.items())), source_key))

    def apply(self, pk: Sequence[tuple[str, Any]], columns: Sequence[Sequence[Any]]) -> TargetRow:
        """The target row of a source row; ``columns`` are (name, value, timestamp), every version."""
        source_key = list(pk)
        values = self.natural(source_key, columns)
        key = self.target_key(values, source_key)
        kept = [(c[0], c[1], c[2]) for c in columns if c[0] not in self.dropped]
        present = {c[0] for c in columns}
        extra = [f for f in self.added if f not in present and f in values]
        if extra:
            stamp = max((c[2] for c in columns), default=self.default_timestamp)
            kept = sorted(kept + [(f, values[f], stamp) for f in extra], key=lambda c: c[0])
        return TargetRow(key, kept)

    def source_key_of(
        self, target_pk: Sequence[tuple[str, Any]], target_columns: Sequence[Sequence[Any]] = ()
    ) -> Key:
        """The source key a target row came from (its natural values, through the source's
        derivations)."""
        try:
            values = self._target_side.naturals(target_pk)
            for cell in target_columns:
                if cell[0] in self._recover and cell[0] not in values:
                    values[cell[0]] = cell[1]
            return self._source_side.key(values)
        except (KeyDerivationError, ValueError, TypeError) as exc:
            raise TsmigrateError(
                f"target row {format_key(target_pk)} of table {self.target.name!r} does not tell its "
                f"source key: {exc}"
            ) from None

    # -- encoded rows --------------------------------------------------------------------------

    @staticmethod
    def encode(row: TargetRow) -> tuple[bytes, int]:
        """HEADER + the row as BatchWriteRow takes it, and its digest."""
        pk_cells, pk_crcs = encode_primary_key_cells(row.primary_key)
        cells = [encode_cell(name, value, ts) for name, value, ts in row.columns]
        attributes = b"".join(c for c, _ in cells)
        crc = row_checksum(pk_crcs, bytes(crc for _, crc in cells))
        body = b"\x01" + pk_cells + (b"\x02" + attributes if cells else b"") + ROW_CHECKSUM[crc]
        return HEADER + body, row_digest(pk_cells, attributes)

    def page(self, buf: bytes, detail: bool = False) -> Page:
        """Transform a GetRange page (PlainBuffer bytes) into encoded target rows."""
        if self._rekey is not None and not detail:
            try:
                rows_out, total, size = self._rekey.page(buf)
                return Page(rows_out, total & DIGEST_MASK, size)
            except NotRekeyable:
                pass  # the general path names the row that does not fit, and why
        adds = bool(self.added)
        rows = scan_rows(buf, self.key_sources, self.dropped, with_cells=adds)
        copies = self._pk_copies
        only_copies = None not in copies  # the key only reordered or shortened
        out = []
        digest = 0
        size = 0
        keys: list[tuple[Key, Key, int]] | None = [] if detail else None
        for row in rows:
            if only_copies:  # the new key's cells are cells of the old key, as they are
                spans = [row.pk_cells[i] for i in copies]  # type: ignore[index]
                pk_cells = b"".join([buf[start:end] for start, end, _ in spans])
                pk_crcs: Any = bytes([crc for _, _, crc in spans])
                target_key: Key = [row.primary_key[i] for i in copies]  # type: ignore[index]
            else:
                target_key = self._target_key_of(row)
                pk_cells, pk_crcs = self._encode_key(buf, row, target_key)
            attributes, crcs = self._add_cells(buf, row) if adds else (row.attributes, row.crcs)
            body = b"".join((
                b"\x01", pk_cells, b"\x02" if attributes else b"", attributes,
                ROW_CHECKSUM[row_checksum(pk_crcs, crcs)],
            ))
            out.append(HEADER + body)
            size += len(body)
            row_hash = row_digest(pk_cells, attributes)
            digest += row_hash
            if keys is not None:
                keys.append((row.primary_key, target_key, row_hash))
        return Page(out, digest & DIGEST_MASK, size, keys)

    def _encode_key(self, buf: bytes, row: ScannedRow, key: Key) -> tuple[bytes, bytes]:
        """The target key's cells: those copied from the old key as the page's bytes, the
        others encoded."""
        parts = []
        crcs = bytearray()
        for (name, value), source in zip(key, self._pk_copies, strict=True):
            if source is None:
                cell, crc = key_cell(name, value)
                parts.append(cell)
            else:
                start, end, crc = row.pk_cells[source]
                parts.append(buf[start:end])
            crcs.append(crc)
        return b"".join(parts), bytes(crcs)

    def _target_key_of(self, row: ScannedRow) -> Key:
        return self.target_key(self._naturals(row.primary_key, row.values), row.primary_key)

    def _add_cells(self, buf: bytes, row: ScannedRow) -> tuple[bytes, bytes]:
        """The kept cells with the fields of the old key that become attributes, in name order."""
        assert row.cells is not None
        dropped = self.dropped
        cells = [(c[0], buf[c[1] : c[2]], c[3]) for c in row.cells if c[0] not in dropped]
        present = {c[0] for c in row.cells}
        extra = [f for f in self.added if f not in present]
        if extra:
            values = self._naturals(row.primary_key, row.values)
            stamp = max((c[4] for c in row.cells), default=self.default_timestamp)
            for field in extra:
                if field in values:
                    encoded, crc = encode_cell(field, values[field], stamp)
                    cells.append((field, encoded, crc))
            cells.sort(key=lambda c: c[0])  # stable: versions keep their order
        return b"".join(c[1] for c in cells), bytes(c[2] for c in cells)


def build(job: Any) -> RowTransform:
    """The transform of a RewriteJob."""
    return RowTransform.build(job.source, job.target, job.custom, job.created_ms)


def check_rows(transform: RowTransform, pages: Iterable[bytes]) -> int:
    """Transform every row of ``pages``, writing nothing; the first row that cannot be rewritten
    raises TransformError. Returns how many rows were checked."""
    count = 0
    for buf in pages:
        try:
            count += len(transform.page(buf).rows)
        except PlainBufferError as exc:
            raise TsmigrateError(f"a page of {transform.source.name!r} cannot be read: {exc}") from None
    return count
