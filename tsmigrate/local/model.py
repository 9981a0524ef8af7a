"""Table metadata as the server keeps it (persisted as JSON next to the rows)."""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field
from functools import cached_property

# PK types by protobuf enum value (table_store.proto PrimaryKeyType).
PK_INTEGER = 1
PK_STRING = 2
PK_BINARY = 3
PK_BOOLEAN = 5  # not as the first column (the partition key)


@dataclass
class PKColumn:
    name: str
    type: int  # PrimaryKeyType enum value
    auto_increment: bool = False


@dataclass
class IndexInfo:
    """A secondary index declared on a table; its rows are maintained by `indexes.py`."""

    name: str
    primary_key: list[str]
    defined_columns: list[str]
    update_mode: int
    index_type: int
    table_id: int = 0  # storage id of the index table's rows

    @property
    def queue_id(self) -> int:
        """Storage id of the index's queued changes (global index lag, see indexes.py)."""
        return -self.table_id


@dataclass
class TableInfo:
    name: str
    table_id: int
    primary_key: list[PKColumn]
    defined_columns: list[tuple[str, int]]  # (name, DefinedColumnType enum value)
    ttl: int = -1
    max_versions: int = 1
    deviation: int = 86400
    allow_update: bool = True
    read_cu: int = 0
    write_cu: int = 0
    last_increase_time: int = 0  # seconds, as the service reports it
    last_decrease_time: int | None = None
    last_cu_update: float | None = None  # when UpdateTable last changed CU (spacing rule)
    stream_enabled: bool = False
    stream_expiration: int | None = None
    stream_id: str | None = None
    stream_last_enable_time: int | None = None
    stream_columns: list[str] = field(default_factory=list)  # origin columns records carry
    sse_enabled: bool = False
    sse_key_type: int | None = None
    sse_key_id: str | None = None  # bytes on the wire, kept as latin-1 text
    sse_role_arn: str | None = None
    shard_splits: list[bytes] = field(default_factory=list)
    indexes: list[IndexInfo] = field(default_factory=list)
    creation_time: int = 0  # microseconds
    local_txn: bool | None = None  # CreateTable's enable_local_txn; None: the server's default

    @cached_property
    def pk_names(self) -> list[str]:
        return [c.name for c in self.primary_key]

    @cached_property
    def pk_name_set(self) -> frozenset[str]:
        return frozenset(c.name for c in self.primary_key)

    def to_json(self) -> str:
        data = asdict(self)
        data["shard_splits"] = [base64.b64encode(s).decode() for s in self.shard_splits]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> TableInfo:
        data = json.loads(text)
        data["primary_key"] = [PKColumn(**c) for c in data["primary_key"]]
        data["defined_columns"] = [tuple(c) for c in data["defined_columns"]]
        data["shard_splits"] = [base64.b64decode(s) for s in data["shard_splits"]]
        data["indexes"] = [IndexInfo(**i) for i in data["indexes"]]
        return cls(**data)
