"""tsmigrate's bookkeeping inside the target instance: the apply lock, the history of steps, and
the catalog last applied. State lives in the instance, not on a disk, so every machine that
deploys sees the same lock and history.

One table, ``tsmigrate_state``, keyed (kind, id):

- ``("lock", "apply")``: who holds the apply lock and until when (a lease renewed per step);
  taken with a conditional write (row must not exist), taken over only when the lease ran out or
  its holder is a dead process on this same host, released only by its holder.
- ``("history", "<run started ms>-<run id>-<step no>")``: one row per step and run, with status.
- ``("catalog", "applied")``: the declared catalog of the last complete apply, which keeps what
  the service cannot report (key derivations) for the next diff.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from typing import Any

import attrs
import tablestore as ts

from tsmigrate import adapter, retry
from tsmigrate.errors import TsmigrateError
from tsmigrate.schema import Catalog

STATE_TABLE = "tsmigrate_state"
LOCK_KEY = [("kind", "lock"), ("id", "apply")]
CATALOG_KEY = [("kind", "catalog"), ("id", "applied")]
LEASE_S = 300


class LockHeld(TsmigrateError):
    """Another apply holds the lock."""


@attrs.frozen
class Owner:
    run_id: str
    host: str
    pid: int

    @classmethod
    def me(cls) -> Owner:
        return cls(uuid.uuid4().hex[:12], socket.gethostname(), os.getpid())

    @property
    def text(self) -> str:
        return f"{self.run_id}@{self.host}:{self.pid}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(lock: dict[str, Any], now_ms: int) -> bool:
    if lock.get("expires_ms", 0) < now_ms:
        return True
    return lock.get("host") == socket.gethostname() and not _pid_alive(int(lock.get("pid", 0)))


class State:
    def __init__(self, client: Any, owner: Owner | None = None):
        self.client = retry.install(client)
        self.owner = owner or Owner.me()
        self.run_started_ms = int(time.time() * 1000)
        self._step_no = 0

    def ensure_table(self) -> None:
        adapter.create_state_table(self.client, STATE_TABLE)

    # -- lock ----------------------------------------------------------------------------------

    def _lock_columns(self) -> dict[str, Any]:
        now_ms = int(time.time() * 1000)
        return {
            "owner": self.owner.text,
            "host": self.owner.host,
            "pid": self.owner.pid,
            "acquired_ms": now_ms,
            "expires_ms": now_ms + LEASE_S * 1000,
        }

    def acquire(self) -> str | None:
        """Take the lock; returns a note when a stale lock was taken over."""
        try:
            adapter.put_row(self.client, STATE_TABLE, LOCK_KEY, self._lock_columns(), expect="not_exist")
            return None
        except adapter.ConditionFailed:
            pass
        held = adapter.get_row(self.client, STATE_TABLE, LOCK_KEY) or {}
        if self._mine(held):  # our own write landed before a retry of it found the row
            return None
        if held and not _stale(held, int(time.time() * 1000)):
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(held.get("acquired_ms", 0) / 1000))
            raise LockHeld(
                f"another apply holds the lock ({held.get('owner')}, since {since} UTC); "
                "wait for it to finish, or for its lease to run out"
            )
        try:
            # Compare-and-swap on the old owner, so two takers cannot both win.
            adapter.put_row(
                self.client, STATE_TABLE, LOCK_KEY, self._lock_columns(),
                expect="ignore" if not held else "exist",
                column_equals=("owner", held["owner"]) if held else None,
            )
        except adapter.ConditionFailed:
            if not self._mine(adapter.get_row(self.client, STATE_TABLE, LOCK_KEY) or {}):
                raise LockHeld("another apply took the lock at the same moment") from None
        return f"took over a stale lock left by {held.get('owner', 'an unknown run')}"

    def _mine(self, lock: dict[str, Any]) -> bool:
        return lock.get("owner") == self.owner.text

    def renew(self) -> None:
        try:
            adapter.put_row(
                self.client, STATE_TABLE, LOCK_KEY, self._lock_columns(),
                expect="exist", column_equals=("owner", self.owner.text),
            )
        except adapter.ConditionFailed:
            raise LockHeld("the apply lock was lost (its lease ran out and another run took it)") from None

    def release(self) -> None:
        # A lock that is not ours any more stays with its holder.
        with contextlib.suppress(adapter.ConditionFailed):
            adapter.delete_row(self.client, STATE_TABLE, LOCK_KEY, column_equals=("owner", self.owner.text))

    # -- history -------------------------------------------------------------------------------

    def record(self, step: Any, status: str, *, plan_id: str, error: str = "") -> None:
        if status == "started":
            self._step_no += 1
        row_id = f"{self.run_started_ms:013d}-{self.owner.run_id}-{self._step_no:03d}"
        adapter.put_row(
            self.client,
            STATE_TABLE,
            [("kind", "history"), ("id", row_id)],
            {
                "step": step.kind,
                "summary": step.summary(),
                "risk": step.risk,
                "status": status,
                "plan": plan_id,
                "owner": self.owner.text,
                "at_ms": int(time.time() * 1000),
                **({"error": error} if error else {}),
            },
        )

    def history(self) -> list[dict[str, Any]]:
        rows = adapter.scan_prefix(self.client, STATE_TABLE, ("kind", "history"), "id")
        return [{"id": row_id, **columns} for row_id, columns in rows]

    # -- applied catalog -----------------------------------------------------------------------

    def save_catalog(self, catalog: Catalog) -> None:
        adapter.put_row(self.client, STATE_TABLE, CATALOG_KEY, {"json": catalog.to_json(indent=None)})

    def applied_catalog(self) -> Catalog | None:
        # A GetRow, not a ListTable: row reads are not table-level operations, so they cost
        # nothing of the instance's table-operation budget.
        try:
            row = adapter.get_row(self.client, STATE_TABLE, CATALOG_KEY)
        except ts.OTSServiceError as exc:
            if exc.code == "OTSObjectNotExist":  # never applied: no state table yet
                return None
            raise
        return Catalog.from_dict(json.loads(row["json"])) if row else None
