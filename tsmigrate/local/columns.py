"""AddDefinedColumn / DeleteDefinedColumn: change a table's predefined columns (spec §4.6).

Messages: `table_protocol.AddDefinedColumnRequest` / `DeleteDefinedColumnRequest` (Java SDK field
numbers). Rules, all `400 OTSParameterInvalid` (the service's wording is not published; these
messages say plainly what is wrong):

- `No defined column is specified.`: an empty column list;
- `Duplicated defined column name: 'c'.`: a name twice in one request;
- add: a name already defined (`Defined column already exists: 'c'.`) or a primary key column
  (`Duplicated attribute column name with primary key column: 'c'.`, CreateTable's message), a bad
  name or type, more than 32 defined columns in all;
- delete: a name not defined (`Defined column does not exist: 'c'.`) or one a secondary index uses
  as key or attribute (`Defined column 'c' is used by index 'i'.`; the spec marks the service's
  behaviour uncertain, refusing is the safe reading: the index would lose its column).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.errors import invalid
from tsmigrate.local.table_rules import MAX_DEFINED_COLUMNS, check_column_name, get_table
from tsmigrate.wire import table_protocol as tp

if TYPE_CHECKING:
    from tsmigrate.local.context import Context

_TYPES = {pb.DCT_INTEGER, pb.DCT_DOUBLE, pb.DCT_BOOLEAN, pb.DCT_STRING, pb.DCT_BLOB}


def _check_request(names: list[str]) -> None:
    if not names:
        raise invalid("No defined column is specified.")
    seen: set[str] = set()
    for name in names:
        check_column_name(name)
        if name in seen:
            raise invalid(f"Duplicated defined column name: '{name}'.")
        seen.add(name)


def add_defined_column(ctx: Context, req: Any) -> Any:
    _check_request([c.name for c in req.columns])
    with ctx.storage.transaction():
        info = copy.deepcopy(get_table(ctx, req.table_name))
        defined = {name for name, _ in info.defined_columns}
        for col in req.columns:
            if col.name in info.pk_name_set:
                raise invalid(
                    f"Duplicated attribute column name with primary key column: '{col.name}'."
                )
            if col.name in defined:
                raise invalid(f"Defined column already exists: '{col.name}'.")
            if col.type not in _TYPES:
                raise invalid(f"Invalid type for the defined column: '{col.name}'.")
            info.defined_columns.append((col.name, col.type))
        if len(info.defined_columns) > MAX_DEFINED_COLUMNS:
            raise invalid(f"The number of defined columns must be in range: [0, {MAX_DEFINED_COLUMNS}].")
        ctx.storage.save_table(ctx.instance, info)
    return tp.AddDefinedColumnResponse()


def delete_defined_column(ctx: Context, req: Any) -> Any:
    names = list(req.columns)
    _check_request(names)
    with ctx.storage.transaction():
        info = copy.deepcopy(get_table(ctx, req.table_name))
        defined = {name for name, _ in info.defined_columns}
        for name in names:
            if name not in defined:
                raise invalid(f"Defined column does not exist: '{name}'.")
            for index in info.indexes:
                if name in index.primary_key or name in index.defined_columns:
                    raise invalid(f"Defined column '{name}' is used by index '{index.name}'.")
        info.defined_columns = [c for c in info.defined_columns if c[0] not in names]
        ctx.storage.save_table(ctx.instance, info)
    return tp.DeleteDefinedColumnResponse()


HANDLERS: dict[str, tuple[type, Any]] = {
    "AddDefinedColumn": (tp.AddDefinedColumnRequest, add_defined_column),
    "DeleteDefinedColumn": (tp.DeleteDefinedColumnRequest, delete_defined_column),
}
