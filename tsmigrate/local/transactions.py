"""Local transactions: StartLocalTransaction, CommitTransaction, AbortTransaction.

A transaction holds one partition key value of one table (the value of its first primary-key
column) for up to 60 seconds (server clock). Its writes go to an overlay, not to storage: reads
that carry the transaction id see them, everyone else sees the committed rows (read committed).
Writes to the partition without the id are refused with OTSRowOperationConflict while it is
held, as a second StartLocalTransaction on it is. Commit replays the writes in order, in one
storage transaction, with the mutation hooks (secondary indexes, streams) run as for any write;
abort, or the timeout, drops them.

Whether a table allows transactions is its `enable_local_txn` option (CreateTable field 8, the
Java SDK's `setLocalTxnEnabled`); a table created without it follows
`ServerOptions.local_transactions_default` (the service's default depends on the instance, and
the Python SDK cannot set the option). Tables with an auto-increment key never allow them.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.errors import OTSError, invalid, invalid_pk
from tsmigrate.local.model import PK_BINARY, PK_INTEGER, PK_STRING, TableInfo
from tsmigrate.local.plainbuffer import decode_primary_key
from tsmigrate.local.storage import StoredRow
from tsmigrate.local.tables import check_table_name, get_table

if TYPE_CHECKING:
    from tsmigrate.local.server import Context

TIMEOUT_S = 60.0
_ID_RE = re.compile(r"^[0-9A-F]{32}$")
_PK_TYPES = {PK_INTEGER: int, PK_STRING: str, PK_BINARY: bytes}


def conflict() -> OTSError:
    return OTSError(409, "OTSRowOperationConflict", "Data is being modified by the other request.")


def _session_gone() -> OTSError:
    return OTSError(404, "OTSSessionNotExist", "Session not exist or may be timeout.")


def _disabled() -> OTSError:
    return invalid("Try to call method using explicit transaction on explicit-transaction-disabled table.")


# One row write made in a transaction, replayed on commit: the table, the row's storage key,
# the row after the write (None: deleted) and the change in the request's terms (for streams).
Write = tuple[TableInfo, bytes, "StoredRow | None", Any]


@dataclass
class Transaction:
    id: str
    instance: str
    table_name: str
    table_id: int
    partition: object  # the value of the first primary-key column
    deadline: float  # server time (s)
    rows: dict[bytes, StoredRow | None] = field(default_factory=dict)  # overlay: key -> row
    writes: list[Write] = field(default_factory=list)

    @property
    def lock(self) -> tuple[str, int, object]:
        return (self.instance, self.table_id, self.partition)

    def row(self, storage_get: Callable[[int, bytes], StoredRow | None], key: bytes) -> StoredRow | None:
        """The row as this transaction sees it: its own write, else the committed row."""
        if key in self.rows:
            return self.rows[key]
        return storage_get(self.table_id, key)

    def check_row(self, table: TableInfo, partition: object) -> None:
        """A row this transaction may read or write: same table, same partition key."""
        if table.table_id != self.table_id or partition != self.partition:
            raise invalid("The row to access is out of the range of the transaction's partition key.")


class Transactions:
    """The server's open transactions and the partitions they hold."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Transaction] = {}
        self._held: dict[tuple[str, int, object], Transaction] = {}

    def _expire(self, now: float) -> None:
        for txn in [t for t in self._by_id.values() if t.deadline <= now]:
            self._drop(txn)

    def _drop(self, txn: Transaction) -> None:
        self._by_id.pop(txn.id, None)
        if self._held.get(txn.lock) is txn:
            del self._held[txn.lock]

    def start(self, ctx: Context, table: TableInfo, partition: object) -> Transaction:
        with self._lock:
            self._expire(ctx.now)
            lock = (ctx.instance, table.table_id, partition)
            if lock in self._held:
                raise conflict()
            txn = Transaction(uuid.uuid4().hex.upper(), ctx.instance, table.name, table.table_id,
                              partition, ctx.now + TIMEOUT_S)
            self._by_id[txn.id] = txn
            self._held[lock] = txn
            return txn

    def get(self, ctx: Context, txn_id: str) -> Transaction:
        """The open transaction `txn_id` of the caller's instance."""
        if not _ID_RE.match(txn_id):
            raise invalid("TransactionID is invalid.")
        with self._lock:
            self._expire(ctx.now)
            txn = self._by_id.get(txn_id)
        if txn is None or txn.instance != ctx.instance:
            raise _session_gone()
        return txn

    def finish(self, txn: Transaction) -> None:
        with self._lock:
            self._drop(txn)

    def check_write(self, ctx: Context, table: TableInfo, partition: object) -> None:
        """Refuse a write outside a transaction to a partition a transaction holds."""
        if not self._held:
            return
        with self._lock:
            self._expire(ctx.now)
            held = self._held.get((ctx.instance, table.table_id, partition))
        if held is not None and held is not ctx.txn:
            raise conflict()


def allowed(table: TableInfo, default: bool) -> bool:
    if any(c.auto_increment for c in table.primary_key):
        return False
    return default if table.local_txn is None else table.local_txn


def bind(ctx: Context, req: Any) -> None:
    """Attach the transaction a row request names (`transaction_id`) to the context."""
    if req.HasField("transaction_id"):
        ctx.txn = ctx.server.transactions.get(ctx, req.transaction_id)


# -- handlers ------------------------------------------------------------------------------------


def start_local_transaction(
    ctx: Context, req: pb.StartLocalTransactionRequest
) -> pb.StartLocalTransactionResponse:
    check_table_name(req.table_name)
    table = get_table(ctx, req.table_name)
    key = decode_primary_key(req.key)
    if len(key) != 1:
        raise invalid("StartLocalTransaction support only one primary key.")
    name, value = key[0]
    first = table.primary_key[0]
    if name != first.name:
        raise invalid_pk(f"Validate PK name fail. Input: {name}, Meta: {first.name}.")
    if type(value) is not _PK_TYPES[first.type]:
        raise invalid_pk(f"Validate PK type fail. Input: {type(value).__name__}, Meta: {first.type}.")
    if not allowed(table, ctx.server.options.local_transactions_default):
        raise _disabled()
    txn = ctx.server.transactions.start(ctx, table, value)
    return pb.StartLocalTransactionResponse(transaction_id=txn.id)


def commit_transaction(ctx: Context, req: pb.CommitTransactionRequest) -> pb.CommitTransactionResponse:
    txn = ctx.server.transactions.get(ctx, req.transaction_id)
    try:
        table = ctx.storage.table(ctx.instance, txn.table_name)
        if table is not None and table.table_id == txn.table_id:
            _apply(ctx, txn)
    finally:
        ctx.server.transactions.finish(txn)
    return pb.CommitTransactionResponse()


def abort_transaction(ctx: Context, req: pb.AbortTransactionRequest) -> pb.AbortTransactionResponse:
    txn = ctx.server.transactions.get(ctx, req.transaction_id)
    ctx.server.transactions.finish(txn)
    return pb.AbortTransactionResponse()


def _apply(ctx: Context, txn: Transaction) -> None:
    """Replay the transaction's writes on storage, hooks included, atomically."""
    storage = ctx.storage
    with storage.transaction():
        for table, key, new, change in txn.writes:
            hooks = ctx.server.hooks_for(table)
            old = storage.get(table.table_id, key) if hooks else None
            if new is None:
                storage.delete(table.table_id, key)
            else:
                storage.put(table.table_id, new)
            ctx.row_change = change
            for hook in hooks:
                hook(ctx, table, key, old, new)
            ctx.row_change = None


HANDLERS: dict[str, tuple[type, Any]] = {
    "StartLocalTransaction": (pb.StartLocalTransactionRequest, start_local_transaction),
    "CommitTransaction": (pb.CommitTransactionRequest, commit_transaction),
    "AbortTransaction": (pb.AbortTransactionRequest, abort_transaction),
}
