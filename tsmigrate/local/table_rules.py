"""Table rules the table APIs share: names, limits, the instance's namespace and quota, and the
definition of a secondary index (CreateTable and CreateIndex both check one).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.errors import invalid, table_not_exist
from tsmigrate.local.model import IndexInfo, TableInfo

if TYPE_CHECKING:
    from tsmigrate.local.context import Context

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}\Z")
TABLE_QUOTA = 64
MAX_PK_COLUMNS = 4
MAX_DEFINED_COLUMNS = 32
MAX_INDEXES_PER_TABLE = 5
MAX_INDEX_ATTRIBUTES = 32

_INDEXABLE_DEFINED = {pb.DCT_INTEGER, pb.DCT_STRING, pb.DCT_BLOB}


def check_table_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise invalid(f"Invalid table name: '{name}'.")


def check_column_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise invalid(f"Invalid column name: '{name}'.")


def get_table(ctx: Context, name: str) -> TableInfo:
    check_table_name(name)
    info = ctx.storage.table(ctx.instance, name)
    if info is None:
        raise table_not_exist()
    return info


def quota_used(ctx: Context) -> int:
    """Tables and indexes of the caller's instance: they share the quota of TABLE_QUOTA."""
    return sum(1 + len(t.indexes) for t in ctx.storage.tables(ctx.instance))


def names_in_use(ctx: Context) -> set[str]:
    """Table and index names of the caller's instance (one namespace)."""
    names: set[str] = set()
    for t in ctx.storage.tables(ctx.instance):
        names.add(t.name)
        names.update(i.name for i in t.indexes)
    return names


def check_index(info: TableInfo, meta: pb.IndexMeta) -> IndexInfo:
    """Secondary index rules (spec §4.2): columns from PK ∪ defined, key types, local vs global."""
    check_table_name(meta.name)
    pk_types = {c.name: c.type for c in info.primary_key}
    defined = dict(info.defined_columns)
    if not 1 <= len(meta.primary_key) <= MAX_PK_COLUMNS:
        raise invalid(f"The number of primary key columns of index must be in range: [1, 4]: {meta.name}.")
    if len(set(meta.primary_key)) != len(meta.primary_key):
        raise invalid(f"Duplicated primary key name in index: {meta.name}.")
    for col in meta.primary_key:
        if col in pk_types:
            continue
        if col not in defined:
            raise invalid(f"Column [{col}] of index [{meta.name}] is not a primary key or defined column.")
        if defined[col] not in _INDEXABLE_DEFINED:
            raise invalid(f"Column [{col}] of index [{meta.name}] has a type that cannot be indexed.")
    auto = next((c.name for c in info.primary_key if c.auto_increment), None)
    if meta.primary_key[0] == auto:
        raise invalid(f"The first primary key of index [{meta.name}] can't be auto increment.")
    if len(meta.defined_column) > MAX_INDEX_ATTRIBUTES:
        raise invalid(f"The number of defined columns of index must be in range: [0, 32]: {meta.name}.")
    if len(set(meta.defined_column)) != len(meta.defined_column):
        raise invalid(f"Duplicated defined column name in index: {meta.name}.")
    for col in meta.defined_column:
        if col not in defined:
            raise invalid(f"Column [{col}] of index [{meta.name}] is not a defined column.")
        if col in meta.primary_key:
            raise invalid(f"Column [{col}] of index [{meta.name}] is both key and attribute.")
    if meta.index_type == pb.IT_LOCAL_INDEX:
        if meta.primary_key[0] != info.primary_key[0].name:
            raise invalid(
                f"The first primary key of local index [{meta.name}] must be the first primary key"
                " of the table."
            )
        if meta.index_update_mode != pb.IUM_SYNC_INDEX:
            raise invalid(f"Local index [{meta.name}] must use synchronous update mode.")
    elif meta.index_update_mode != pb.IUM_ASYNC_INDEX:
        raise invalid(f"Global index [{meta.name}] must use asynchronous update mode.")
    return IndexInfo(
        meta.name,
        list(meta.primary_key),
        list(meta.defined_column),
        meta.index_update_mode,
        meta.index_type,
    )


def check_index_base_options(info: TableInfo) -> None:
    """Table options a table with secondary indexes must have (spec §4.2)."""
    if not info.indexes:
        return
    if len(info.indexes) > MAX_INDEXES_PER_TABLE:
        raise invalid(f"The number of indexes of table [{info.name}] exceeds the limit: 5.")
    if info.max_versions != 1:
        raise invalid("The max versions of a table with index must be 1.")
    if info.ttl != -1 and info.allow_update:
        raise invalid("The table with index and TTL must disable update (allow_update=false).")
