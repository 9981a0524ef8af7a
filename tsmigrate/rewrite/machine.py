"""The life of one rewrite, as an explicit state machine kept in ``tsmigrate_state``.

One row per rewrite, keyed ``("rewrite", <target table>)``: its phase, the job (source and
target IR), what prepare changed on the tables (so finish and abort can put it back), the
capture position per stream shard, the last verification, and who is running it (a lease).
Every write is a compare-and-swap on the row's ``version``, so two processes cannot both move
one rewrite, and a process killed at any moment leaves a phase the next run continues from.

The phases and their transitions, ``side`` (which table takes the writes of services in each)
and the row's format (``row_problems``, the job it holds) are the rewrite's contract with
services (``tsmigrate.contract.phases``, ``staterow``), named here too; this module reads,
moves and leases the row.

The split checkpoints (rows copied per split) are kept by the data plane next to this row
(``tsmigrate.rewrite.checkpoints``); this row holds everything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import tablestore as ts

from tsmigrate.contract.phases import (  # noqa: F401 (the contract's, named here too)
    ABORTED,
    BACKFILL,
    CATCH_UP,
    CUT_OVER,
    DONE,
    ENDED,
    FAILED,
    FINISHING,
    HOLD,
    PAUSED,
    PHASES,
    PREPARE,
    READY,
    REVERTING,
    RUNNING_PHASES,
    SOURCE,
    SWITCHED,
    SWITCHING,
    TARGET,
    side,
)
from tsmigrate.contract.staterow import KIND, RewriteJob, row_problems
from tsmigrate.contract.staterow import key as _key
from tsmigrate.errors import TsmigrateError
from tsmigrate.instance import adapter, retry
from tsmigrate.instance.state import STATE_TABLE, StateRowError, pid_alive

LEASE_S = 120

# The phases each phase may move to (pause, fail and abort are added for every running phase).
_NEXT: dict[str, tuple[str, ...]] = {
    PREPARE: (BACKFILL,),
    BACKFILL: (CATCH_UP,),
    CATCH_UP: (READY,),
    READY: (FINISHING, CATCH_UP, SWITCHING),
    SWITCHING: (SWITCHED, READY),
    SWITCHED: (REVERTING, FINISHING),
    REVERTING: (READY, SWITCHED),
    FINISHING: (DONE, READY, SWITCHED),
}

class RewriteError(TsmigrateError):
    """A rewrite cannot go on as asked; the message says why and what to run next."""


class RewriteConflict(RewriteError):
    """Another process moved or runs this rewrite."""


class Interrupted(RewriteError):
    """The rewrite was paused or aborted (by another command) while this process ran it."""


def now_ms() -> int:
    return int(time.time() * 1000)


def allowed(current: str, new: str, resume_to: str | None = None) -> bool:
    """Whether ``current -> new`` is a transition of the machine."""
    if new == ABORTED:
        return current not in (*ENDED, *CUT_OVER)  # the driver also refuses after a switch
    if current in (PAUSED, FAILED):
        return new == resume_to or new in (FAILED, PAUSED)
    if current in RUNNING_PHASES:
        return new in (*_NEXT[current], PAUSED, FAILED)
    return False


@attrs.frozen
class Rewrite:
    """The rewrite row, as a value. ``doc`` holds everything but the key fields."""

    target: str
    source: str
    phase: str
    version: int
    doc: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def resume_to(self) -> str | None:
        """The phase a paused or failed rewrite goes back to."""
        return self.doc.get("resume_to")

    @property
    def active(self) -> bool:
        return self.phase not in ENDED

    @property
    def side(self) -> str:
        """The table services on the model API write now (see ``side``)."""
        return side(self.phase, self.resume_to, self.doc.get("finish_from"))

    @property
    def error(self) -> str:
        return str(self.doc.get("error", ""))

    def get(self, name: str, default: Any = None) -> Any:
        return self.doc.get(name, default)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "source": self.source, "phase": self.phase,
                "version": self.version, **self.doc}


# The two captures' positions, each with the rows it set aside (``Capture.set_aside``)
FORWARD, REVERSE = "capture", "reverse_capture"


def set_aside(rewrite: Rewrite, which: str = FORWARD) -> dict[str, dict[str, Any]]:
    """The rows capture (``FORWARD``) or reverse capture (``REVERSE``) could not carry, by
    source key: {"reason", "at_ms"}."""
    return dict((rewrite.get(which) or {}).get("set_aside") or {})


def set_aside_error(rewrite: Rewrite, which: str, refused: str) -> RewriteError | None:
    """The refusal of ``refused`` (a sentence's start) while rows are set aside, naming them,
    or None when none is."""
    rows = set_aside(rewrite, which)
    if not rows:
        return None
    into, table = ((rewrite.target, rewrite.source) if which == FORWARD
                   else (rewrite.source, rewrite.target))
    named = "; ".join(f"{key}: {row.get('reason', '')}" for key, row in list(rows.items())[:5])
    more = f" (and {len(rows) - 5} more)" if len(rows) > 5 else ""
    return RewriteError(
        f"{refused}: {len(rows)} row(s) of {table} could not be carried into {into} and are set "
        f"aside{more}: {named}. Fix or delete each in {table} (the next change of a row takes it "
        f"off the list once it can be carried); `tsmigrate rewrite status {rewrite.target}` "
        "lists them"
    )


def _malformed(target: str, problems: list[str]) -> StateRowError:
    return StateRowError(
        f"the rewrite row (kind='rewrite', id={target!r}) of {STATE_TABLE} is malformed: "
        f"{'; '.join(problems)}. It records the rewrite into {target}: put back what was edited, "
        f"or, if that rewrite is to be forgotten (its tables stay as they are), remove the row "
        f"with `tsmigrate state remove rewrite {target} --force`"
    )


def _from_row(target: str, columns: Mapping[str, Any]) -> Rewrite:
    problems, doc = row_problems(columns)
    if problems:
        raise _malformed(target, problems)
    return Rewrite(target=target, source=columns["source"], phase=columns["phase"],
                   version=columns["version"], doc=doc)


def job_of(rewrite: Rewrite) -> RewriteJob:
    """The rewrite's job; a job the row's doc does not describe is a ``StateRowError``."""
    try:
        return RewriteJob.from_json(rewrite.doc["job"])
    except Exception as exc:  # any shape of damage: bad JSON, a missing key, a bad table
        raise _malformed(rewrite.target, [f"doc field 'job' is not a rewrite job "
                                          f"({type(exc).__name__}: {exc})"]) from None


@contextlib.contextmanager
def _no_state_table() -> Iterator[None]:
    """Row reads, not ListTable (a table-level call the instance limits): a missing state table
    means nothing was ever applied."""
    try:
        yield
    except ts.OTSServiceError as exc:
        if exc.code != "OTSObjectNotExist":
            raise


def load(client: Any, target: str) -> Rewrite | None:
    with _no_state_table():
        row = adapter.get_row(client, STATE_TABLE, _key(target))
        return _from_row(target, row) if row else None
    return None


def all_rewrites(client: Any) -> list[Rewrite]:
    with _no_state_table():
        rows = adapter.scan_prefix(client, STATE_TABLE, ("kind", KIND), "id")
        return [_from_row(str(target), columns) for target, columns in rows]
    return []


def finished(client: Any, table: str) -> bool:
    """True when the rewrite that replaces ``table`` (or writes into it) is done: services have
    moved and the old table may be dropped. ``plan --prune`` asks this before dropping it."""
    for rewrite in all_rewrites(client):
        if table in (rewrite.source, rewrite.target) and rewrite.phase != ABORTED:
            return rewrite.phase == DONE
    return True  # no rewrite ever touched it


def in_progress(client: Any, table: str) -> Rewrite | None:
    """The unfinished rewrite whose source or target is ``table``, if any."""
    for rewrite in all_rewrites(client):
        if rewrite.active and table in (rewrite.source, rewrite.target):
            return rewrite
    return None


def start(client: Any, *, source: str, target: str, doc: Mapping[str, Any]) -> Rewrite:
    """Create the rewrite row in ``prepare``. Refuses a second rewrite of the same table."""
    for other in all_rewrites(client):
        if not other.active:
            continue
        if other.target == target:
            return other  # the same rewrite, started before: continue it
        if source in (other.source, other.target) or target in (other.source, other.target):
            raise RewriteConflict(
                f"{other.source} is already being rewritten into {other.target} "
                f"(phase {other.phase}); finish or abort that rewrite first "
                f"(tsmigrate rewrite finish|abort {other.target})"
            )
    old = load(client, target)
    write = uuid.uuid4().hex
    columns = {"source": source, "phase": PREPARE, "version": 1,
               "doc": json.dumps({**doc, "created_ms": now_ms(), "updated_ms": now_ms(),
                                  "write": write})}
    try:
        if old is None:
            adapter.put_row(client, STATE_TABLE, _key(target), columns, expect="not_exist")
        else:  # an ended rewrite of the same name: a new one replaces its row
            columns["version"] = old.version + 1
            adapter.put_row(client, STATE_TABLE, _key(target), columns, expect="exist",
                            column_equals=("version", old.version))
    except adapter.ConditionFailed:
        if not _landed(client, target, write):
            raise RewriteConflict(
                f"another process started the rewrite into {target} meanwhile") from None
    started = load(client, target)
    assert started is not None
    # When it was created, by the service's clock (read after the row was written, so never
    # before it): the fence knows from then on which processes may have read the state without it.
    from tsmigrate.instance import clock

    return save(client, started, created_server_ms=clock.server_now_ms(client))


def save(client: Any, rewrite: Rewrite, *, phase: str | None = None, **changes: Any) -> Rewrite:
    """Write ``changes`` (and a new phase) if nobody moved the row since ``rewrite`` was read."""
    new_phase = phase or rewrite.phase
    if phase is not None and phase != rewrite.phase and not allowed(rewrite.phase, phase, rewrite.resume_to):
        raise RewriteError(
            f"the rewrite into {rewrite.target} is {rewrite.phase}; it cannot go to {phase}"
        )
    doc = {**rewrite.doc, **changes, "updated_ms": now_ms(), "write": uuid.uuid4().hex}
    if phase in (PAUSED, FAILED) and rewrite.phase in RUNNING_PHASES:
        doc["resume_to"] = rewrite.phase
    columns = {"source": rewrite.source, "phase": new_phase, "version": rewrite.version + 1,
               "doc": json.dumps(doc)}
    try:
        adapter.put_row(client, STATE_TABLE, _key(rewrite.target), columns, expect="exist",
                        column_equals=("version", rewrite.version))
    except adapter.ConditionFailed:
        if _landed(client, rewrite.target, doc["write"]):
            return Rewrite(rewrite.target, rewrite.source, new_phase, rewrite.version + 1, doc)
        raise RewriteConflict(
            f"the rewrite into {rewrite.target} was changed by another process meanwhile "
            "(see tsmigrate rewrite status)"
        ) from None
    return Rewrite(rewrite.target, rewrite.source, new_phase, rewrite.version + 1, doc)


def _landed(client: Any, target: str, write: str) -> bool:
    """Whether our write is the row's current state: a write retried after an ambiguous failure
    (see tsmigrate.instance.retry) fails its condition when its first attempt did land."""
    current = load(client, target)
    return current is not None and current.get("write") == write


def request(client: Any, target: str, phase: str, attempts: int = 20) -> Rewrite:
    """Move the rewrite into ``target`` to ``phase`` from another process (pause): the process
    running it saves its row often, so a lost compare-and-swap is read again and retried."""
    for _attempt in range(attempts):
        current = load(client, target)
        if current is None:
            raise RewriteError(f"no rewrite into {target}")
        try:
            return save(client, current, phase=phase)
        except RewriteConflict:
            time.sleep(0.05)
    raise RewriteConflict(f"the rewrite into {target} kept changing; try again")


def refresh(client: Any, rewrite: Rewrite) -> Rewrite:
    current = load(client, rewrite.target)
    if current is None:
        raise RewriteError(f"the rewrite into {rewrite.target} is gone from {STATE_TABLE}")
    return current


# --- who runs it: a lease in the row, so two processes never drive one rewrite ------------------


def _me() -> str:
    return f"{uuid.uuid4().hex[:8]}@{socket.gethostname()}:{os.getpid()}"


def _holder_alive(holder: str) -> bool:
    host_pid = holder.partition("@")[2]
    host, _, pid = host_pid.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine: only its lease tells
    return pid_alive(int(pid))


SAVE_ATTEMPTS = 5  # a runner's save lost to another command's write is read and tried again


HANDOVER_S = 10.0  # how long a command waits for `follow` to hand the rewrite over
TAKEOVER_S = 30.0  # a lease running out within this is waited for rather than refused


class Runner:
    """Holds the rewrite's lease while a process drives it (apply, follow, finish, abort).

    ``handover=True`` (switch, revert, finish): a running ``follow`` holds the lease; it is asked
    (``wants_runner`` in the row) to hand it over at its next save, and takes it back once this
    command released it."""

    def __init__(self, client: Any, target: str, *, handover: bool = False):
        self.client = retry.install(client)  # the shared policy for every call the run makes
        self.target = target
        self.owner = _me()
        self._lock = threading.RLock()  # saves from the capture or heartbeat thread and the run
        # How long the lease outlives this process's last save; a fence shortens it, so the
        # next command can take over a killed switch before services give up waiting.
        self.lease_s: float = LEASE_S
        self.rewrite = self._take_over() if handover else self._take()

    def _take_over(self) -> Rewrite:
        deadline = time.monotonic() + HANDOVER_S
        current = load(self.client, self.target)
        expires_ms = int(((current.get("runner") if current else None) or {}).get("expires_ms", 0))
        if 0 < expires_ms - now_ms() <= TAKEOVER_S * 1000:
            # A holder that does not answer (a killed switch on another host) is waited out.
            deadline = max(deadline, time.monotonic() + (expires_ms - now_ms()) / 1000 + 0.5)
        asked = False
        while True:
            try:
                return self._take()
            except RewriteConflict:
                if time.monotonic() >= deadline:
                    raise
                if not asked:
                    current = load(self.client, self.target)
                    if current is not None:
                        with contextlib.suppress(RewriteConflict):
                            save(self.client, current, wants_runner=self.owner)
                            asked = True
                time.sleep(0.05)

    @property
    def handover_requested(self) -> bool:
        """Another command (switch, revert, finish) asked for this rewrite."""
        wanted = self.rewrite.get("wants_runner")
        return bool(wanted) and wanted != self.owner

    def retake(self) -> Rewrite:
        """Take the lease again after ``release`` (follow, once a switch is over)."""
        self.rewrite = self._take()
        return self.rewrite

    def _take(self) -> Rewrite:
        rewrite = load(self.client, self.target)
        if rewrite is None:
            raise RewriteError(f"no rewrite into {self.target} (tsmigrate rewrite status lists them)")
        lease = rewrite.get("runner") or {}
        if lease and lease.get("expires_ms", 0) > now_ms() and _holder_alive(lease["owner"]):
            raise RewriteConflict(
                f"the rewrite into {self.target} is being run by {lease['owner']}; "
                "stop that process first (or wait for its lease to run out)"
            )
        return save(self.client, rewrite, runner={"owner": self.owner,
                                                  "expires_ms": now_ms() + self.lease_s * 1000},
                    wants_runner=None if rewrite.get("wants_runner") == self.owner
                    else rewrite.get("wants_runner"))

    def save(self, *, phase: str | None = None, **changes: Any) -> Rewrite:
        """Save changes under the lease (renewing it)."""
        with self._lock:
            return self._save(phase, changes)

    def _save(self, phase: str | None, changes: dict[str, Any]) -> Rewrite:
        changes["runner"] = {"owner": self.owner, "expires_ms": now_ms() + self.lease_s * 1000}
        for _attempt in range(SAVE_ATTEMPTS):
            current = refresh(self.client, self.rewrite)
            if (current.get("runner") or {}).get("owner") != self.owner:
                raise RewriteConflict(
                    f"the rewrite into {self.target} was taken over by another process")
            if current.phase in (PAUSED, ABORTED) and current.phase != self.rewrite.phase:
                self.rewrite = current
                raise Interrupted(
                    f"the rewrite into {self.target} was {current.phase} by another command; "
                    + ("tsmigrate rewrite resume continues it" if current.phase == PAUSED else "")
                )
            try:
                self.rewrite = save(self.client, current, phase=phase, **changes)
                return self.rewrite
            except RewriteConflict:
                continue  # a pause or abort landed between our read and write: read it again
        raise RewriteConflict(
            f"the rewrite into {self.target} kept changing under its runner; try again")

    def release(self) -> None:
        try:
            current = refresh(self.client, self.rewrite)
            if (current.get("runner") or {}).get("owner") == self.owner:
                self.rewrite = save(self.client, current, runner=None)
        except (RewriteError, adapter.ConditionFailed):
            pass  # someone else owns it now; their lease stays

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
