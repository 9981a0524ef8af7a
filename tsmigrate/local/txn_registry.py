"""The open local transactions of a server: which partition each holds, until when, and the
writes it has made (an overlay replayed on commit). The handlers are in `transactions`.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tsmigrate.local.errors import OTSError, invalid
from tsmigrate.local.model import TableInfo
from tsmigrate.local.storage import StoredRow


class Request(Protocol):
    """What the registry reads of a request's context (`context.Context`)."""

    instance: str
    now: float
    txn: Transaction | None


TIMEOUT_S = 60.0
_ID_RE = re.compile(r"^[0-9A-F]{32}$")


def conflict() -> OTSError:
    return OTSError(409, "OTSRowOperationConflict", "Data is being modified by the other request.")


def _session_gone() -> OTSError:
    return OTSError(404, "OTSSessionNotExist", "Session not exist or may be timeout.")


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

    def start(self, ctx: Request, table: TableInfo, partition: object) -> Transaction:
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

    def get(self, ctx: Request, txn_id: str) -> Transaction:
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

    def check_write(self, ctx: Request, table: TableInfo, partition: object) -> None:
        """Refuse a write outside a transaction to a partition a transaction holds."""
        if not self._held:
            return
        with self._lock:
            self._expire(ctx.now)
            held = self._held.get((ctx.instance, table.table_id, partition))
        if held is not None and held is not ctx.txn:
            raise conflict()
