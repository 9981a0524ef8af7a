"""Model instances from the rows of a GetRange page, ``(key, cells)`` as the SDK's parser gives
them (``wire.page``), for a model whose fields are its columns and need no converting
(``ModelCodec.row_model``; the others go through ``to_model``).

This runs for every row a query returns, and a query's cost over the SDK's own is mostly this
(issue #25: client CPU per row at most 1.10x the SDK's). Two paths:

- a row holding every column of the model, in the order Tablestore returns them (the key's,
  then the attributes sorted by name): a function generated for the model, as ``attrs`` and
  ``dataclasses`` generate ``__init__``, unpacks the cells by position, checks their names by
  comparison and builds the dict with the model's own field names, interned, so no column name
  of the row is ever hashed;
- any other row (a column missing, one the model does not declare, another order): the cells
  by name, columns the model does not declare dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tsmigrate.schema.model import Model

RowModel = Callable[[Any, Any], Model]  # (key cells, attribute cells) -> model


def any_row(model: type[Model], field_names: frozenset[str]) -> RowModel:
    """A model from a row with any of the model's columns, and maybe others (dropped)."""
    new = object.__new__
    known = field_names.issuperset

    def row_model(key: Any, cells: Any) -> Model:
        values = dict(key)
        for name, value, _ in cells:  # the SDK's cells: (name, value, timestamp)
            values[name] = value
        if not known(values):
            for name in values.keys() - field_names:
                del values[name]
        instance = new(model)
        instance.__dict__ = values
        return instance

    return row_model


def full_row(model: type[Model], key: Sequence[str], attributes: Sequence[str],
             other: RowModel) -> RowModel:
    """A model from a row with exactly the columns ``key`` then ``attributes`` (sorted by
    name, as Tablestore returns them); ``other`` makes the model of any other row."""
    columns = [*key, *sorted(attributes)]
    unpack_key = "".join(f"(n{i}, v{i}), " for i in range(len(key)))
    unpack_cells = "".join(f"(n{i}, v{i}, _), " for i in range(len(key), len(columns)))
    lines = [
        "def row_model(key, cells):",
        # Unpacking checks the shape at no cost when it fits (exceptions cost only when raised).
        "    try:",
        f"        {unpack_key}= key",
        f"        {unpack_cells or '[] '}= cells",
        "    except (TypeError, ValueError):",
        "        return other(key, cells)",
        # Names compared as the interpreter compares strings (equal contents), never hashed.
        f"    if {' and '.join(f'n{i} == {c!r}' for i, c in enumerate(columns))}:",
        "        instance = new(model)",
        f"        instance.__dict__ = {{{', '.join(f'{c!r}: v{i}' for i, c in enumerate(columns))}}}",
        "        return instance",
        "    return other(key, cells)",
    ]
    namespace: dict[str, Any] = {"new": object.__new__, "model": model, "other": other}
    exec(compile("\n".join(lines), f"<row_model of {model.__name__}>", "exec"), namespace)
    return namespace["row_model"]
