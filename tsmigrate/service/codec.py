"""A model compiled once for the row path: Python values <-> the cells the SDK sends and reads.

``Model.key()``, ``attribute_columns()`` and ``from_row()`` are the reference; this is the same
mapping (``model.stored_value`` / ``python_value`` and the derivations of ``tsmigrate.keys``)
with the per-call work done once per model, since it runs for every row of every batch.

Types: ``None`` means "not stored" (never cast to 0 or ""); an ``int`` column refuses a float
(money goes in integers of minor units, or ``Column(Decimal, scale=2)``); a ``float`` column
takes an int as the same number; ``datetime`` fields are epoch milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tsmigrate import schema
from tsmigrate.keys import INT64_MAX
from tsmigrate.schema.model import (
    AUTO_INCREMENT,
    CONVERTED_TYPES,
    Column,
    Model,
    PrimaryKey,
    SearchIndex,
    _SecondaryIndex,
    python_value,
    stored_value,
)
from tsmigrate.service import rowmodels
from tsmigrate.service.errors import QueryError, RowValueError

INT64_MIN = -INT64_MAX - 1

_ACCEPTS: dict[str, tuple[type, ...]] = {
    schema.STRING: (str,),
    schema.INTEGER: (int,),
    schema.DOUBLE: (float, int),
    schema.BOOLEAN: (bool,),
    schema.BINARY: (bytes, bytearray),
}


# INTEGER is not here: every int is checked against the 64-bit range (the SDK would fail
# with a bare struct.error naming nothing).
_EXACT: dict[str, frozenset[type]] = {
    schema.STRING: frozenset({str}),
    schema.DOUBLE: frozenset({float}),
    schema.BOOLEAN: frozenset({bool}),
    # Only a bytearray: the SDK writes ``bytes`` as a STRING cell (``stored`` converts them).
    schema.BINARY: frozenset({bytearray}),
}


class KeyColumn:
    """One column of a table's or an index's primary key, in key order."""

    __slots__ = ("column", "declaration", "derive", "field")

    def __init__(self, column: str, field: str | None, declaration: Any, derive: Any = None):
        self.column = column
        self.field = field  # the model field that holds the value (None for derived columns)
        self.declaration = declaration
        self.derive = derive

    def __repr__(self) -> str:
        return f"KeyColumn({self.column!r})"


class Field:
    """One field of the model: its column, declaration and how values are checked."""

    __slots__ = ("column", "converts", "declaration", "exact", "int64", "name", "type")

    def __init__(self, declaration: PrimaryKey | Column):
        self.name = declaration.name
        self.declaration = declaration
        self.column = declaration.column_name or declaration.name
        self.type = declaration.type
        self.converts = declaration.python_type in CONVERTED_TYPES
        # Value types that pass unchanged (checked by exact type: the common, fast case).
        self.exact = frozenset() if self.converts else _EXACT.get(self.type, frozenset())
        self.int64 = self.type == schema.INTEGER and not self.converts  # ints, range-checked


class ModelCodec:
    def __init__(self, model: type[Model]):
        self.model = model
        self.name = model.__name__
        self.table = model.table_name()
        self.family = model.table_family()
        declared = model._declared((PrimaryKey, Column))
        self.fields: dict[str, Field] = {d.name: Field(d) for d in declared}
        self.by_column: dict[str, Field] = {f.column: f for f in self.fields.values()}
        self.attributes = [f for f in self.fields.values() if isinstance(f.declaration, Column)]
        self.key_columns = [
            KeyColumn(f.column, None if pk.derive else f.name, pk, pk.derive)
            for pk in model._declared(PrimaryKey)
            for f in [self.fields[pk.name]]
        ]
        self.key_column_names = frozenset(k.column for k in self.key_columns)
        self.renamed = any(f.column != f.name for f in self.fields.values())
        self.field_names = frozenset(self.fields)
        # Fields whose stored value is not the Python value (datetime, Decimal; bytes arrive as
        # bytearray).
        self.read_converts = [f for f in self.fields.values() if f.converts or f.type == schema.BINARY]
        self._new = object.__new__
        # Values need converting or renaming before derivations read them by column name.
        self.slow_key = any(f.column != f.name or f.converts for f in self.fields.values())
        self.version = model.version_field()
        self.version_column = self.fields[self.version].column if self.version else None
        self.request_id_column = model.request_id_column()
        # False: the table refuses UpdateRow, so updates are refused before any request.
        self.allow_update = model.table().options.allow_update
        self.indexes = {
            (d.index_name or d.name): d for d in model._declared(_SecondaryIndex)
        }
        self.search_indexes = sorted(
            d.index_name or d.name for d in model._declared(SearchIndex)
        )
        # A model from a row of a GetRange page (``wire.page``: key cells, attribute cells).
        self.row_model: rowmodels.RowModel = self.to_model
        if not (self.renamed or self.read_converts):
            self.row_model = rowmodels.full_row(
                model, [k.column for k in self.key_columns], [f.column for f in self.attributes],
                rowmodels.any_row(model, self.field_names),
            )

    # -- values --------------------------------------------------------------------------------

    def stored(self, field: Field, value: Any) -> Any:
        """A field's value as sent to Tablestore; raises RowValueError when it does not fit."""
        if field.int64 and type(value) is int and INT64_MIN <= value <= INT64_MAX:
            return value  # the common case of every integer column, first
        if field.converts:
            try:
                value = stored_value(field.declaration, value)
            except ValueError as exc:
                raise RowValueError(f"{self.name}: {exc}") from None
        accepted = _ACCEPTS.get(field.type)
        if accepted is not None and (
            not isinstance(value, accepted) or (isinstance(value, bool) and field.type != schema.BOOLEAN)
        ):
            raise RowValueError(
                f"{self.name}.{field.name} is {field.type}, got {type(value).__name__} {value!r}"
                + (" (store money as an int of minor units or a Decimal column)"
                   if field.type == schema.INTEGER and isinstance(value, float) else "")
            )
        if field.type == schema.DOUBLE and type(value) is int:
            return float(value)
        if field.type == schema.BINARY and not isinstance(value, bytearray):
            return bytearray(value)  # the SDK (and wire/rows.py) types bytes as STRING
        if field.type == schema.INTEGER and not INT64_MIN <= value <= INT64_MAX:
            raise RowValueError(
                f"{self.name}.{field.name} = {value} does not fit Tablestore's 64-bit integers "
                f"({INT64_MIN} to {INT64_MAX})"
            )
        return value

    def field(self, name: str) -> Field:
        try:
            return self.fields[name]
        except KeyError:
            raise RowValueError(
                f"{self.name} has no field {name!r}; fields: {', '.join(sorted(self.fields))}"
            ) from None

    def value(self, name: str, value: Any) -> tuple[str, Any]:
        """(column, stored value) for a field (conditions, filters, updates)."""
        field = self.field(name)
        return field.column, self.stored(field, value)

    # -- rows ----------------------------------------------------------------------------------

    def by_column_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Field values keyed by column name, converted to stored values (derivations read them)."""
        out = {}
        for name, value in values.items():
            field = self.fields.get(name)
            if field is None:
                raise RowValueError(
                    f"{self.name} has no field {name!r}; fields: {', '.join(sorted(self.fields))}"
                )
            if value is not None:
                out[field.column] = self.stored(field, value) if field.converts else value
        return out

    def key(self, values: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """The primary key for these field values, derivations applied."""
        by_column = self.by_column_values(values) if self.slow_key else values
        key = []
        for column in self.key_columns:
            if column.derive is not None:
                try:
                    key.append((column.column, column.derive.derive(by_column)))
                except ValueError as exc:
                    raise RowValueError(f"{self.name}: {exc}") from None
                continue
            value = by_column.get(column.column)
            if value is None:
                if column.declaration.auto_increment:
                    key.append((column.column, AUTO_INCREMENT))
                    continue
                raise RowValueError(f"{self.name}: primary-key field {column.field!r} is missing")
            field = self.fields[column.field]
            key.append((column.column, value if type(value) in field.exact else self.stored(field, value)))
        return key

    def row_key(self, row: Model) -> list[tuple[str, Any]]:
        self.check_model(row)
        return self.key(row.__dict__)

    def row_attributes(self, row: Model, skip: frozenset[str] = frozenset()) -> list[tuple[str, Any]]:
        """The attribute cells of a row: every set Column (None is not stored)."""
        values = row.__dict__
        cells = []
        for field in self.attributes:
            value = values.get(field.name)
            if value is None or field.name in skip:
                continue
            cells.append((field.column, value if type(value) in field.exact else self.stored(field, value)))
        return cells

    def to_model(self, primary_key: Any, attributes: Any) -> Model:
        """A model from a row as the SDK returns it (attributes may carry timestamps)."""
        if self.renamed:
            return self._to_model_renamed(primary_key, attributes)
        # Column names are field names: build the dict at C speed, then drop columns the model
        # does not declare and convert the few fields that need it.
        values = dict(primary_key) if primary_key else {}
        for cell in attributes or ():
            values[cell[0]] = cell[1]
        if not values.keys() <= self.field_names:
            for name in values.keys() - self.field_names:
                del values[name]
        for field in self.read_converts:
            value = values.get(field.name)
            if value is not None:
                values[field.name] = self._python(field, value)
        row = self._new(self.model)
        row.__dict__ = values
        return row

    def _python(self, field: Field, value: Any) -> Any:
        if type(value) is bytearray:
            return bytes(value)
        return python_value(field.declaration, value) if field.converts else value

    def _to_model_renamed(self, primary_key: Any, attributes: Any) -> Model:
        values: dict[str, Any] = {}
        by_column = self.by_column
        for cell in (*(primary_key or ()), *(attributes or ())):
            field = by_column.get(cell[0])
            if field is not None:
                values[field.name] = self._python(field, cell[1])
        row = self._new(self.model)
        row.__dict__ = values
        return row

    def check_model(self, row: Any) -> None:
        if type(row) is not self.model:
            raise RowValueError(f"expected a {self.name} row, got {type(row).__name__}")

    # -- tables --------------------------------------------------------------------------------

    def table_for(self, values: Mapping[str, Any]) -> str:
        """The physical table of a row: the model's table, or its month in a family."""
        family = self.family
        if family is None:
            return self.table
        value = values.get(family.field)
        if value is None:
            raise RowValueError(
                f"{self.name}: the family's field {family.field!r} is needed to find the month table"
            )
        try:
            return family.table_for(self.table, value)
        except ValueError as exc:
            raise RowValueError(f"{self.name}.{family.field}: {exc}") from None

    def index_key_columns(self, index: str) -> list[KeyColumn]:
        """The key of a secondary index: its keys, then the table's key columns it lacks."""
        declaration = self.indexes.get(index)
        if declaration is None:
            raise QueryError(
                f"{self.name} declares no secondary index {index!r}; indexes: "
                f"{', '.join(sorted(self.indexes)) or 'none'}"
            )
        columns = []
        for name in declaration.keys:
            field = self.by_column.get(name) or self.fields.get(name)
            if field is None:
                raise QueryError(f"{self.name}: index {index!r} names unknown column {name!r}")
            base = next((k for k in self.key_columns if k.column == field.column), None)
            columns.append(base or KeyColumn(field.column, field.name, field.declaration))
        listed = {c.column for c in columns}
        columns += [k for k in self.key_columns if k.column not in listed]
        return columns


_CODECS: dict[type[Model], ModelCodec] = {}


def codec(model: type[Model]) -> ModelCodec:
    """The compiled codec of a model (built once; the model is validated on first use)."""
    found = _CODECS.get(model)
    if found is None:
        model.table()  # raises SchemaError listing every declaration problem
        found = _CODECS[model] = ModelCodec(model)
    return found
