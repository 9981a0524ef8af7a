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

from typing import TYPE_CHECKING, Any

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.errors import OTSError, invalid, invalid_pk
from tsmigrate.local.model import PK_BINARY, PK_INTEGER, PK_STRING, TableInfo
from tsmigrate.local.table_rules import check_table_name, get_table
from tsmigrate.wire.plainbuffer import decode_primary_key

if TYPE_CHECKING:
    from tsmigrate.local.context import Context
    from tsmigrate.local.txn_registry import Transaction

_PK_TYPES = {PK_INTEGER: int, PK_STRING: str, PK_BINARY: bytes}


def _disabled() -> OTSError:
    return invalid("Try to call method using explicit transaction on explicit-transaction-disabled table.")


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
