"""What request handlers share, below them all: the request's `Context`, the server as handlers
see it (`Server`), its runtime knobs (`ServerOptions`) and the shapes of handlers and mutation
hooks. `server.py` builds on this module and the handler modules; none of them imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from google.protobuf.message import Message

from tsmigrate.local.faults import FaultPlan
from tsmigrate.local.model import TableInfo
from tsmigrate.local.search import ScanSessions
from tsmigrate.local.storage import Storage, StoredRow
from tsmigrate.local.txn_registry import Transaction, Transactions

# A handler returns the response message, or its serialization when it builds that itself.
Handler = Callable[["Context", Any], "Message | bytes"]
# Called after every row mutation inside the request's transaction, with the row before and after
# (None when absent). Secondary-index maintenance and streams hook in here.
MutationHook = Callable[["Context", TableInfo, bytes, "StoredRow | None", "StoredRow | None"], None]
# Which tables a table-scoped hook acts on (see `Server.add_table_hook`).
HookScope = Callable[[TableInfo], bool]
# The most root shards a new stream may start with (`ServerOptions.stream_shards`).
MAX_STREAM_SHARDS = 64


@dataclass
class ServerOptions:
    """Runtime knobs; change them on `server.options` while the server runs."""

    latency_ms: float = 0.0
    table_ops_per_s: int = 0  # 0: no limit
    cu_adjust_interval_s: float = 120.0  # minimum spacing of reserved-throughput changes
    faults: FaultPlan | None = None
    allow_any_instance: bool = False  # accept any instance name (each one separate)
    instances: set[str] = field(default_factory=lambda: {"local"})
    search_full_sync_s: float = 0.0  # a new search index reports sync phase FULL this long
    search_splits_size: int = 1  # ComputeSplits' splits_size (read when the server starts)
    # Global secondary indexes trail their table by this long (server clock); 0: synchronous.
    global_index_lag_ms: int = 0
    # Whether tables created without CreateTable's enable_local_txn allow local transactions.
    local_transactions_default: bool = True
    # Root shards of a stream enabled from now on (one per partition of the table, hash ranges
    # split evenly); 1: one implicit shard over every key (`streams.open_shards`).
    stream_shards: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.stream_shards <= MAX_STREAM_SHARDS:
            raise ValueError(
                f"stream_shards must be in range [1, {MAX_STREAM_SHARDS}]: {self.stream_shards}"
            )


class Server(Protocol):
    """The server as handlers use it (`server.LocalServer` is the one implementation)."""

    options: ServerOptions
    storage: Storage
    scan_sessions: ScanSessions
    transactions: Transactions
    clock_offset: float  # moves the data clock (TTL, versions, stream trimming)

    def now(self) -> float: ...

    def add_table_hook(self, scope: HookScope, hook: MutationHook) -> None: ...

    def hooks_for(self, table: TableInfo) -> list[MutationHook]: ...


class RowChange(NamedTuple):
    """A write in the request's terms, for mutation hooks (`Context.row_change`): the operation
    (pb.PUT / UPDATE / DELETE) and its cells as (name, value, op, timestamp), with the server's
    timestamps filled in. An increment appears as the value it produced."""

    op: int
    cells: list[tuple[str, object, int | None, int | None]]


@dataclass
class Context:
    """What a handler may use: the server, the caller's instance and the request's clock."""

    server: Server
    instance: str
    api: str
    now: float  # seconds since the epoch
    now_ms: int = field(init=False)  # the same instant in ms: the server's cell timestamp
    # The write being applied, in the request's terms, while mutation hooks run (streams log it).
    row_change: RowChange | None = field(default=None, init=False)
    # The local transaction the request runs in (its `transaction_id`), if any.
    txn: Transaction | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.now_ms = int(self.now * 1000)

    @property
    def storage(self) -> Storage:
        return self.server.storage
