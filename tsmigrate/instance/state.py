"""tsmigrate's bookkeeping inside the target instance: the apply lock, the history of steps, and
the catalog last applied. State lives in the instance, not on a disk, so every machine that
deploys sees the same lock and history.

One table, ``tsmigrate_state``, keyed (kind, id):

- ``("lock", "apply")``: who holds the apply lock and until when (a lease of ``LEASE_S``,
  renewed from a background thread while a step runs, see ``Lease``); taken with a conditional
  write (row must not exist), taken over only when the lease ran out or its holder is a dead
  process on this same host, released by its holder or by ``tsmigrate unlock``.
- ``("history", "<run started ms>-<run id>-<step no>")``: one row per step and run, with status
  ``started``, then ``done`` or ``failed``; a row an apply left ``started`` (it was killed) is
  marked ``interrupted`` by the next apply. Runs of rewrite commands (switch, finish, ...) are
  recorded the same way, their rows naming the command (see ``tsmigrate.instance.records``).
- ``("catalog", "applied")``: the declared catalog of the last complete apply, which keeps what
  the service cannot report (key derivations) for the next diff; and the schema that apply left
  the instance with, when and by whom (``tsmigrate status`` compares the live schema with it).

Rows are validated when read: a row that is not as tsmigrate writes it is a ``StateRowError``
naming the row, what is wrong and how to fix it, never a raw KeyError.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import tablestore as ts

from tsmigrate.errors import TsmigrateError
from tsmigrate.instance import adapter, retry
from tsmigrate.schema import Catalog
from tsmigrate.schema.render import duration

STATE_TABLE = "tsmigrate_state"
LOCK_KEY = [("kind", "lock"), ("id", "apply")]
CATALOG_KEY = [("kind", "catalog"), ("id", "applied")]
LEASE_S = 300
LOCK_POLL_S = 2.0  # how often a waiting apply (--lock-timeout) looks at the lock again


HISTORY_STATUSES = ("started", "done", "failed", "interrupted")


class LockHeld(TsmigrateError):
    """Another apply holds the lock."""

    def __init__(self, message: str, holder: Lock | None = None):
        super().__init__(message)
        self.holder = holder


class StateRowError(TsmigrateError):
    """A row of ``tsmigrate_state`` is not as tsmigrate writes it (edited by hand, or written
    by something else)."""


def _login() -> str:
    """The user running this process, for the lock and the history ("" when the system has no
    name for it, as in a container running under an arbitrary uid)."""
    try:
        return getpass.getuser()
    except Exception:  # KeyError / OSError: no passwd entry and no LOGNAME or USER
        return ""


@attrs.frozen
class Owner:
    run_id: str
    host: str
    pid: int
    user: str = ""  # who ran it; not part of ``text``, which lock writes compare

    @classmethod
    def me(cls) -> Owner:
        return cls(uuid.uuid4().hex[:12], socket.gethostname(), os.getpid(), _login())

    @property
    def text(self) -> str:
        return f"{self.run_id}@{self.host}:{self.pid}"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (one we may not signal, or a pid no process
    could have, counts as running: only its lease then tells)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _row_problems(row: dict[str, Any], columns: dict[str, type]) -> list[str]:
    problems = []
    for name, kind in columns.items():
        if name not in row:
            problems.append(f"column {name!r} is missing")
        elif not isinstance(row[name], kind) or isinstance(row[name], bool):
            wanted = "a string" if kind is str else "an integer"
            problems.append(f"column {name!r} is {row[name]!r}, not {wanted}")
    return problems


_LOCK_COLUMNS = {"owner": str, "host": str, "pid": int, "acquired_ms": int, "expires_ms": int}
_HISTORY_COLUMNS = {"step": str, "summary": str, "status": str, "owner": str, "at_ms": int}


@attrs.frozen
class Lock:
    """The lock row, validated."""

    owner: str
    host: str
    pid: int
    acquired_ms: int
    expires_ms: int
    user: str = ""  # rows written before tsmigrate recorded it have none

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Lock:
        problems = _row_problems(row, _LOCK_COLUMNS)
        if problems:
            raise StateRowError(
                f"the apply lock in {STATE_TABLE} (row kind='lock', id='apply') is malformed: "
                f"{'; '.join(problems)}. If no apply is running, remove it with "
                "`tsmigrate unlock --force`"
            )
        user = row.get("user")
        return cls(**{name: row[name] for name in _LOCK_COLUMNS},
                   user=user if isinstance(user, str) else "")

    def describe(self) -> str:
        who = f" (user {self.user})" if self.user else ""
        return (f"{self.owner}{who}, since {_utc(self.acquired_ms)}, "
                f"lease until {_utc(self.expires_ms)}")

    def stale_reason(self, now_ms: int) -> str | None:
        """Why the holder is gone (None: it may be running)."""
        if self.expires_ms < now_ms:
            return "its lease ran out"
        if self.host == socket.gethostname() and not pid_alive(self.pid):
            return f"process {self.pid} on this host is gone"
        return None


class State:
    def __init__(self, client: Any, owner: Owner | None = None):
        self.client = retry.install(client)
        self.owner = owner or Owner.me()
        self.run_started_ms = int(time.time() * 1000)
        self._step_no = 0
        self.command = "apply"  # what `history` names the run (rows of apply leave it out)
        self.revisions = ""  # an upgrade's or downgrade's move, "b2 -> c3" (others leave it out)
        self.resumes: set[str] = set()  # the runs of interrupted steps this run takes up

    def ensure_table(self) -> None:
        adapter.create_state_table(self.client, STATE_TABLE)

    # -- lock ----------------------------------------------------------------------------------

    def _lock_columns(self) -> dict[str, Any]:
        now_ms = int(time.time() * 1000)
        return {
            "owner": self.owner.text,
            "host": self.owner.host,
            "pid": self.owner.pid,
            **({"user": self.owner.user} if self.owner.user else {}),
            "acquired_ms": now_ms,
            "expires_ms": now_ms + int(LEASE_S * 1000),
        }

    def read_lock(self) -> Lock | None:
        """The lock as it stands (None: free, or no state table yet)."""
        try:
            row = adapter.get_row(self.client, STATE_TABLE, LOCK_KEY)
        except ts.OTSServiceError as exc:
            if exc.code == "OTSObjectNotExist":
                return None
            raise
        return Lock.from_row(row) if row else None

    def acquire(
        self, timeout_s: float = 0.0, on_wait: Callable[[Lock], None] | None = None
    ) -> str | None:
        """Take the lock, waiting up to ``timeout_s`` for a live holder to let it go (``on_wait``
        is told who holds it, once per holder); returns a note when a stale lock was taken over."""
        deadline = time.monotonic() + timeout_s
        told: str | None = None
        while True:
            try:
                return self._try_acquire()
            except LockHeld as exc:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if timeout_s > 0:
                        raise LockHeld(f"{exc} (waited {duration(round(timeout_s))})", exc.holder) from None
                    raise
                if on_wait is not None and exc.holder is not None and exc.holder.owner != told:
                    on_wait(exc.holder)
                    told = exc.holder.owner
                time.sleep(min(LOCK_POLL_S, remaining))

    def _try_acquire(self) -> str | None:
        try:
            adapter.put_row(self.client, STATE_TABLE, LOCK_KEY, self._lock_columns(), expect="not_exist")
            return None
        except adapter.ConditionFailed:
            pass
        held = self.read_lock()
        if held is not None and held.owner == self.owner.text:
            return None  # our own write landed before a retry of it found the row
        if held is not None and held.stale_reason(int(time.time() * 1000)) is None:
            raise LockHeld(
                f"another apply holds the lock ({held.describe()}); wait for it to finish "
                "(apply --lock-timeout SECONDS waits), or, if it is not running any more, "
                "release it with `tsmigrate unlock`",
                held,
            )
        try:
            # Compare-and-swap on the old owner, so two takers cannot both win.
            adapter.put_row(
                self.client, STATE_TABLE, LOCK_KEY, self._lock_columns(),
                expect="ignore" if held is None else "exist",
                column_equals=("owner", held.owner) if held is not None else None,
            )
        except adapter.ConditionFailed:
            now = self.read_lock()
            if now is None or now.owner != self.owner.text:
                raise LockHeld("another apply took the lock at the same moment", now) from None
        if held is None:
            return None
        return f"took over a stale lock left by {held.owner} ({held.stale_reason(int(time.time() * 1000))})"

    def unlock(self, force: bool = False) -> str:
        """Release the lock whoever holds it: at once when its holder is gone, only with
        ``force`` while it may be running. Returns what was done."""
        try:
            held = self.read_lock()
        except StateRowError:
            if not force:
                raise
            row = adapter.get_row(self.client, STATE_TABLE, LOCK_KEY) or {}
            adapter.delete_row(self.client, STATE_TABLE, LOCK_KEY)
            return f"removed the malformed lock row ({'; '.join(_row_problems(row, _LOCK_COLUMNS))})"
        if held is None:
            return "the apply lock is free; nothing to do"
        reason = held.stale_reason(int(time.time() * 1000))
        if reason is None and not force:
            raise LockHeld(
                f"the apply lock is held by {held.describe()}, which may still be running; "
                "wait for it, or pass --force if you are sure it is not running "
                "(a forced unlock lets another apply start beside it)",
                held,
            )
        try:
            adapter.delete_row(self.client, STATE_TABLE, LOCK_KEY, column_equals=("owner", held.owner))
        except adapter.ConditionFailed:
            raise LockHeld(
                f"the apply lock changed while it was being released (now: "
                f"{self.read_lock() or 'free'}); run unlock again", None
            ) from None
        return f"released the apply lock held by {held.describe()} ({reason or 'forced'})"

    def renew(self) -> None:
        try:
            adapter.put_row(
                self.client, STATE_TABLE, LOCK_KEY, self._lock_columns(),
                expect="exist", column_equals=("owner", self.owner.text),
            )
        except adapter.ConditionFailed:
            raise LockHeld(
                "the apply lock was lost (its lease ran out, or `tsmigrate unlock --force` released "
                f"it, and another run took it: {self.read_lock() or 'now free'}); stopping"
            ) from None

    def release(self) -> None:
        # A lock that is not ours any more stays with its holder.
        with contextlib.suppress(adapter.ConditionFailed):
            adapter.delete_row(self.client, STATE_TABLE, LOCK_KEY, column_equals=("owner", self.owner.text))

    # -- history -------------------------------------------------------------------------------

    def record(self, step: Any, status: str, *, plan_id: str, error: str = "") -> None:
        """``step``: an ``ops.Step`` or anything with ``kind``, ``summary()``, ``risk`` and
        ``table`` (a rewrite command's action). The row keeps the command that ran it (apply
        unless ``command`` says otherwise), the table, the revisions an upgrade or downgrade
        moves between, and the runs this one resumes."""
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
                **({"user": self.owner.user} if self.owner.user else {}),
                "at_ms": int(time.time() * 1000),
                **({"error": error} if error else {}),
                **({"table": step.table} if isinstance(getattr(step, "table", None), str) else {}),
                **({"command": self.command} if self.command != "apply" else {}),
                **({"revisions": self.revisions} if self.revisions else {}),
                **({"resumes": ",".join(sorted(self.resumes))} if self.resumes else {}),
            },
        )

    def history(self) -> list[dict[str, Any]]:
        """Every history row, oldest first, validated (none when no apply ever ran here: no
        state table)."""
        try:
            rows = adapter.scan_prefix(self.client, STATE_TABLE, ("kind", "history"), "id")
        except ts.OTSServiceError as exc:
            if exc.code == "OTSObjectNotExist":
                return []
            raise
        entries = []
        for row_id, columns in rows:
            problems = _row_problems(columns, _HISTORY_COLUMNS)
            if not problems and columns["status"] not in HISTORY_STATUSES:
                problems.append(f"status {columns['status']!r} is not one of {', '.join(HISTORY_STATUSES)}")
            if problems:
                raise StateRowError(
                    f"history row (kind='history', id={row_id!r}) of {STATE_TABLE} is malformed: "
                    f"{'; '.join(problems)}. It is a record only: remove it with "
                    f"`tsmigrate state remove history {row_id} --force`"
                )
            entries.append({"id": row_id, **columns})
        return entries

    def mark_interrupted(self) -> list[dict[str, Any]]:
        """Mark the steps that earlier applies left ``started`` (they were killed: a live apply
        would hold the lock, which the caller holds now) as ``interrupted``; returns them."""
        # Read leniently: a malformed history row must not block applies (history() reports it).
        rows = adapter.scan_prefix(self.client, STATE_TABLE, ("kind", "history"), "id")
        # A malformed row is left as it is (its readers name it): apply prints what it marks.
        left = [
            {"id": row_id, **columns} for row_id, columns in rows
            if columns.get("status") == "started" and columns.get("owner") != self.owner.text
            and not _row_problems(columns, _HISTORY_COLUMNS)
        ]
        for entry in left:
            columns = {k: v for k, v in entry.items() if k != "id"}
            adapter.put_row(
                self.client, STATE_TABLE, [("kind", "history"), ("id", entry["id"])],
                {**columns, "status": "interrupted", "noticed_by": self.owner.text,
                 "noticed_ms": int(time.time() * 1000)},
            )
        return left

    def keep_lease(self) -> Lease:
        """Renew the lease in the background while a step runs (see ``Lease``)."""
        return Lease(self)

    # -- applied catalog -----------------------------------------------------------------------

    def save_catalog(self, catalog: Catalog, left: Catalog | None = None) -> None:
        """``catalog``: the declared one; ``left``: the live schema the apply left."""
        columns: dict[str, Any] = {"json": catalog.to_json(indent=None)}
        if left is not None:
            columns.update({"left_json": left.to_json(indent=None), "at_ms": int(time.time() * 1000),
                            "owner": self.owner.text,
                            **({"user": self.owner.user} if self.owner.user else {})})
        adapter.put_row(self.client, STATE_TABLE, CATALOG_KEY, columns)

    def applied_catalog(self) -> Catalog | None:
        record = self.applied_record()
        return record.catalog if record is not None else None

    def applied_record(self) -> AppliedRecord | None:
        # A GetRow, not a ListTable: row reads are not table-level operations, so they cost
        # nothing of the instance's table-operation budget.
        try:
            row = adapter.get_row(self.client, STATE_TABLE, CATALOG_KEY)
        except ts.OTSServiceError as exc:
            if exc.code == "OTSObjectNotExist":  # never applied: no state table yet
                return None
            raise
        if not row:
            return None
        try:
            left = row.get("left_json")
            return AppliedRecord(
                catalog=Catalog.from_dict(json.loads(row["json"])),
                left=Catalog.from_dict(json.loads(left)) if left is not None else None,
                at_ms=int(row["at_ms"]) if "at_ms" in row else None,
                owner=str(row.get("owner", "")),
                user=str(row.get("user", "")),
            )
        except Exception as exc:  # any shape of damage: a missing column, bad JSON, a bad IR
            raise StateRowError(
                f"the applied catalog in {STATE_TABLE} (row kind='catalog', id='applied') is "
                f"malformed ({type(exc).__name__}: {exc}). It keeps the key derivations of the last "
                "apply; delete that row and apply again (the models' derivations are then used)"
            ) from None


@attrs.frozen
class AppliedRecord:
    """The catalog row: what the last complete apply declared, and what it left."""

    catalog: Catalog  # the declared catalog (key derivations included)
    # The live schema the apply left (physical); None in rows written before tsmigrate kept it.
    left: Catalog | None = None
    at_ms: int | None = None
    owner: str = ""
    user: str = ""

    @property
    def who(self) -> str:
        """user@host, or host:pid when the user was not recorded."""
        host = self.owner.split("@", 1)[1] if "@" in self.owner else self.owner
        return f"{self.user}@{host.rsplit(':', 1)[0]}" if self.user else host


class Lease:
    """Renews the apply lock every ``LEASE_S / 5`` from a background thread, so that a step that
    waits long (an index build) never outlasts the lease. When a renewal finds the lock taken
    over, renewing stops and ``check()`` raises: the apply must stop changing the instance.
    Transient renewal failures are retried by the policy, then at the next interval."""

    def __init__(self, state: State):
        self._state = state
        self._stop = threading.Event()
        self._lost: LockHeld | None = None
        self._thread = threading.Thread(target=self._run, name="tsmigrate-lease", daemon=True)

    def __enter__(self) -> Lease:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(LEASE_S / 5):
            try:
                self._state.renew()
            except LockHeld as exc:
                self._lost = exc
                return
            except Exception:  # the service is flaky now; try again at the next interval
                continue

    def check(self) -> None:
        """Raise ``LockHeld`` if the lock was taken over while this lease was kept."""
        if self._lost is not None:
            raise self._lost
