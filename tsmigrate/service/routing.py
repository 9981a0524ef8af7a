"""Which table a model's rows go to while a rewrite moves them: the rewrite's phase decides.

Tablestore has no rename, so a key-changing rewrite ends with two tables and services on two
versions of the model during their rolling deploy. ``Rows``/``AsyncRows`` of either model (the
replaced table's, or the one declaring ``replaces=``) read and write the side the rewrite's row in
``tsmigrate_state`` names (``machine.side``): the source until ``tsmigrate rewrite switch``, the
target after it. A row of one side is written to the other through the rewrite's key transform
(old model -> new table) or its inverse (new model -> old table), so at any moment one table takes
the writes of every service on the model API, whichever model it was built with.

- The state is read at most once per lease (``LEASE_S``, or the rewrite's ``routing_lease_s``)
  per process and table: a steady-state call costs no extra round trip.
- A process that cannot read the state within ``REFRESH_WAIT_S`` stops writing
  (``RoutingUnavailable``): it never writes a side it is not sure of.
- While a fence is up (switching, reverting) writes wait (``HOLD_S`` at most, then
  ``WritesHeld``); reads go on to the side that was current before the fence.
- Each process routing an unfinished rewrite keeps a heartbeat row (host, pid, the side it writes,
  the state version it saw); a process that sees a fence acknowledges it there once its writes
  in flight have landed, so ``switch`` need not wait out the whole lease.
- Range queries, index and search queries read the model's own table, whose key order serves
  them; capture keeps it in step with the side of record within its lag.

This module decides the route; ``routed.py`` sends the calls of ``Rows`` along it and
``translate.py`` rebuilds a row for the other table.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
from typing import Any

import attrs
from tablestore import OTSServiceError
from tablestore import metadata as md

from tsmigrate.service.calls import Call, Op, arun, run
from tsmigrate.service.errors import RowError
from tsmigrate.service.translate import Translator

STATE_TABLE = "tsmigrate_state"  # tsmigrate.instance.state.STATE_TABLE, without importing the engine
REWRITE_KIND = "rewrite"
CLIENT_KIND = "rewrite-client"
LEASE_S = 2.0  # how long a process trusts the state it read (a rewrite may set its own)
# A routed write answered later than this after it was sent is not acknowledged (an error says
# it may have landed): so no acknowledged write lands on a side more than LEASE_S + ACK_S after
# the fence, which is how long finish waits for late writes (a rewrite may set its own).
ACK_S = 10.0
HOLD_S = 30.0  # the longest a write waits for a fence (switch, revert) to come down
REFRESH_WAIT_S = 10.0  # how long an expired lease is retried before writes stop with an error
POLL_S = 0.05  # how often a held write reads the state again
RETRY_S = 0.2  # between attempts to read the state when a read failed
SOURCE, TARGET, HOLD = "source", "target", "hold"
ENDED = ("done", "aborted")  # machine.ENDED, without importing the engine into services


class RoutingError(RowError):
    """A write cannot be routed to a side of a rewrite now."""


class RoutingUnavailable(RoutingError):
    """The rewrite state could not be read: writes stop rather than guess a side."""


class WritesHeld(RoutingError):
    """A switch or revert kept its fence up longer than this process waits."""


def _side(phase: str, doc: dict[str, Any]) -> str:
    from tsmigrate.rewrite.machine import side

    return side(phase, doc.get("resume_to"), doc.get("finish_from"))


@attrs.frozen
class Route:
    """What the state said for one table when last read."""

    rewrite: str | None  # the target table of the rewrite that moves this table; None: none
    phase: str = ""
    version: int = 0
    side: str = SOURCE  # SOURCE / TARGET / HOLD, of the rewrite
    own_is_source: bool = True
    translator: Translator | None = None
    lease_s: float = LEASE_S

    @property
    def holding(self) -> bool:
        return self.side == HOLD

    @property
    def active(self) -> bool:
        return self.rewrite is not None and self.phase not in ENDED

    def _is_other(self, side: str) -> bool:
        return self.rewrite is not None and side != (SOURCE if self.own_is_source else TARGET)

    @property
    def writes_other(self) -> bool:
        return not self.holding and self._is_other(self.side)

    @property
    def reads_other(self) -> bool:
        """Reads go to the side of record; under a fence, to the side before it."""
        if not self.holding:
            return self.writes_other
        before = SOURCE if self.phase in ("switching", "finishing") else TARGET
        if self.phase in ("paused", "failed"):
            before = SOURCE  # a fence a failure left up: the source still has every write
        return self._is_other(before)


_NO_REWRITE = Route(None)


# --- reading the state: one operation for both clients -------------------------------------------


def _process_id() -> str:
    global _PROCESS
    if _PROCESS is None or _PROCESS[0] != os.getpid():  # a forked child is another client
        _PROCESS = (os.getpid(), f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}")
    return _PROCESS[1]


_PROCESS: tuple[int, str] | None = None


def _rewrites_op() -> Op[list[tuple[str, dict[str, Any]]]]:
    start = [("kind", REWRITE_KIND), ("id", md.INF_MIN)]
    end = [("kind", REWRITE_KIND), ("id", md.INF_MAX)]
    found = []
    while start:
        try:
            _, start, page, _ = yield Call("get_range", STATE_TABLE, md.Direction.FORWARD, start, end,
                                           max_version=1)
        except OTSServiceError as exc:
            if exc.code == "OTSObjectNotExist":
                return []  # nothing was ever applied to this instance
            raise
        for row in page:
            found.append((row.primary_key[1][1], {c[0]: c[1] for c in row.attribute_columns}))
    return found


class Router:
    """The route of one table in this process, shared by every ``Rows`` of it on one instance."""

    def __init__(self, table: str):
        self.table = table
        self.route: Route = _NO_REWRITE
        self.expires = 0.0  # monotonic time the route stops being trusted
        # The condition's lock, taken directly where nothing waits: a C-level context manager,
        # as every write takes it (Condition's own __enter__ is Python code).
        self.lock = threading.RLock()
        self.condition = threading.Condition(self.lock)
        self.inflight = 0  # writes sent on the current route and not yet answered
        self.draining = False  # a refresh waits for those writes before it moves the route
        self.beat_version: tuple[str | None, str] = (None, "")
        self._translators: dict[tuple[str, bool], Translator] = {}
        self.held_s: list[float] = []  # how long writes waited for fences (bench, tests)

    # -- deciding from the state -----------------------------------------------------------------

    def decide(self, rows: list[tuple[str, dict[str, Any]]]) -> Route:
        from tsmigrate.rewrite.machine import row_problems

        mine = []
        for target, columns in rows:
            if self.table not in (target, columns.get("source")) or columns.get("phase") == "aborted":
                continue
            problems, doc = row_problems(columns)
            if problems:  # a side read from a damaged row would be a guess: writes stop
                raise RoutingUnavailable(
                    f"{self.table}: the rewrite row (kind='rewrite', id={target!r}) of {STATE_TABLE} "
                    f"is malformed: {'; '.join(problems)}; writes stop rather than guess a side "
                    "(`tsmigrate rewrite status` says how to repair it)"
                )
            mine.append((int(doc.get("created_ms", 0)), target, columns, doc))
        if not mine:
            return _NO_REWRITE
        _, target, columns, doc = max(mine, key=lambda m: m[0])
        phase = str(columns["phase"])
        own_is_source = self.table == columns["source"]
        side = _side(phase, doc)
        translator = None
        if "job" in doc and side != (SOURCE if own_is_source else TARGET):
            try:
                translator = self._translator(doc, own_is_source)
            except Exception as exc:  # the job in the row does not describe the tables
                raise RoutingUnavailable(
                    f"{self.table}: the rewrite row (kind='rewrite', id={target!r}) of {STATE_TABLE} "
                    f"is malformed: doc field 'job' is not a rewrite job ({type(exc).__name__}: {exc}); "
                    "writes stop rather than guess a side"
                ) from None
        lease = float(doc.get("routing_lease_s") or LEASE_S)
        return Route(target, phase, int(columns["version"]), side, own_is_source, translator, lease)

    def _translator(self, doc: dict[str, Any], own_is_source: bool) -> Translator:
        from tsmigrate.rewrite.job import RewriteJob

        job = RewriteJob.from_json(doc["job"])
        key = (job.id, own_is_source)
        if key not in self._translators:
            self._translators[key] = Translator(job, own_is_source)
        return self._translators[key]

    def heartbeat_op(self, route: Route) -> Op[None]:
        """This process's row for the rewrite: the side it writes and the state it saw."""
        row = md.Row(
            [("kind", CLIENT_KIND), ("id", f"{route.rewrite}/{_process_id()}/{self.table}")],
            [("host", socket.gethostname()), ("pid", os.getpid()), ("table", self.table),
             ("side", route.side), ("phase", route.phase), ("seen_version", route.version),
             ("at_ms", int(time.time() * 1000)), ("lease_s", route.lease_s)],
        )
        yield Call("put_row", STATE_TABLE, row, md.Condition(md.RowExistenceExpectation.IGNORE))

    def _read_op(self) -> Op[Route]:
        """The route the state names now. A process that starts routing a rewrite writes its
        heartbeat before its first write: one switch cannot see could write the old side after
        the fence."""
        route = self.decide((yield from _rewrites_op()))
        if route.active and self.beat_version[0] != route.rewrite:
            yield from self.heartbeat_op(route)
            self.beaten(route)
        return route

    def _unavailable(self, exc: Exception) -> RoutingUnavailable:
        self.expires = 0.0
        return RoutingUnavailable(
            f"{self.table}: cannot read {STATE_TABLE} to learn which table takes writes "
            f"({type(exc).__name__}: {exc}); writes stop rather than guess a side"
        )

    def beat_due(self, route: Route) -> bool:
        """A heartbeat at every read of an unfinished rewrite's state: its time says until when
        this process may write on what it read (so ``switch`` need not wait for a process that
        stopped routing), its version that it saw a fence (its acknowledgement)."""
        return route.active

    def beaten(self, route: Route) -> None:
        self.beat_version = (route.rewrite, route.phase)

    # -- the synchronous client ------------------------------------------------------------------

    def current(self, client: Any, *, holding: bool = False) -> Route:
        """The route, read again once its lease ran out (every ``POLL_S`` while a write is held)."""
        with self.lock:
            now = time.monotonic()
            if now < self.expires and not (holding and self.route.holding):
                return self.route
            return self._refresh(client)

    def _refresh(self, client: Any) -> Route:
        deadline = time.monotonic() + REFRESH_WAIT_S
        while True:
            try:
                route = run(client, self._read_op())
                break
            except RoutingUnavailable:  # a malformed row does not mend itself: no retries
                self.expires = 0.0
                raise
            except Exception as exc:
                if time.monotonic() >= deadline:
                    raise self._unavailable(exc) from exc
                time.sleep(RETRY_S)
        changed = (route.rewrite, route.side) != (self.route.rewrite, self.route.side)
        if changed and self.inflight:
            # Writes sent on the old route land before this process says it has moved; no new
            # write starts on it meanwhile (the wait releases the lock).
            self.draining = True
            try:
                self.condition.wait_for(lambda: self.inflight == 0, timeout=route.lease_s)
            finally:
                self.draining = False
        self.route = route
        self.expires = time.monotonic() + (POLL_S if route.holding else route.lease_s)
        if self.beat_due(route):
            try:
                run(client, self.heartbeat_op(route))
                self.beaten(route)
            except Exception:  # a missed heartbeat only makes a switch wait longer
                pass
        return route

    def begin_write(self, client: Any) -> Route:
        """The route a write takes, once no fence holds it; counted until ``end_write``."""
        with self.lock:  # the steady state: a route within its lease, no fence, no refresh
            route = self.route
            if time.monotonic() < self.expires and not route.holding and not self.draining:
                self.inflight += 1
                return route
        started = None
        while True:
            route = self.current(client, holding=started is not None)
            if not route.holding:
                with self.lock:
                    # Not replaced by another thread's refresh meanwhile, nor being left.
                    if self.route is route and not self.draining:
                        return self._admitted(route, started)
                continue
            started = self._held(route, started)
            time.sleep(POLL_S)

    def _admitted(self, route: Route, held_since: float | None) -> Route:
        """A write goes on ``route`` (counted in flight); how long it was held is kept."""
        self.inflight += 1
        if held_since is not None:
            self.held_s.append(time.monotonic() - held_since)
        return route

    def _held(self, route: Route, since: float | None) -> float:
        """A write waits for the fence of ``route``: since when, or WritesHeld past HOLD_S."""
        if since is None:
            return time.monotonic()
        if time.monotonic() - since > HOLD_S:
            raise WritesHeld(
                f"{self.table}: writes held {HOLD_S:.0f}s while the rewrite into "
                f"{route.rewrite} is {route.phase}; `tsmigrate rewrite status {route.rewrite}` "
                "says what it waits for (a killed switch or revert: run it again)"
            )
        return since

    def end_write(self) -> None:
        with self.lock:
            self.inflight -= 1
            if self.draining:  # only a refresh moving the route waits for writes to land
                self.condition.notify_all()

    # -- the asyncio client ----------------------------------------------------------------------

    async def acurrent(self, client: Any, *, holding: bool = False) -> Route:
        now = time.monotonic()
        if now < self.expires and not (holding and self.route.holding):
            return self.route
        deadline = now + REFRESH_WAIT_S
        while True:
            try:
                route = await arun(client, self._read_op())
                break
            except RoutingUnavailable:
                self.expires = 0.0
                raise
            except Exception as exc:
                if time.monotonic() >= deadline:
                    raise self._unavailable(exc) from exc
                await asyncio.sleep(RETRY_S)
        changed = (route.rewrite, route.side) != (self.route.rewrite, self.route.side)
        wait_until = time.monotonic() + route.lease_s
        while changed and self.inflight and time.monotonic() < wait_until:
            await asyncio.sleep(POLL_S / 5)
        self.route = route
        self.expires = time.monotonic() + (POLL_S if route.holding else route.lease_s)
        if self.beat_due(route):
            try:
                await arun(client, self.heartbeat_op(route))
                self.beaten(route)
            except Exception:  # a missed heartbeat only makes a switch wait longer
                pass
        return route

    async def abegin_write(self, client: Any) -> Route:
        started = None
        while True:
            route = await self.acurrent(client, holding=started is not None)
            if not route.holding:
                return self._admitted(route, started)
            started = self._held(route, started)
            await asyncio.sleep(POLL_S)


_ROUTERS: dict[tuple[str, str, str], Router] = {}
_ROUTERS_LOCK = threading.Lock()


def router_for(client: Any, table: str) -> Router:
    """This process's router of ``table`` on the instance ``client`` talks to."""
    protocol = getattr(client, "protocol", None)
    where = (str(getattr(client, "host", "") or getattr(protocol, "endpoint", "")),
             str(getattr(protocol, "instance_name", "")), table)
    with _ROUTERS_LOCK:
        if where not in _ROUTERS:
            _ROUTERS[where] = Router(table)
        return _ROUTERS[where]


def clear() -> None:
    """Forget every route (tests that start a new server on a port another one used)."""
    with _ROUTERS_LOCK:
        _ROUTERS.clear()

