"""Which table a model's rows go to while a rewrite moves them: the rewrite's phase decides.

Tablestore has no rename, so a key-changing rewrite ends with two tables and services on two
versions of the model during their rolling deploy. ``Rows``/``AsyncRows`` of either model (the
replaced table's, or the one declaring ``replaces=``) read and write the side the rewrite's row in
``tsmigrate_state`` names (``tsmigrate.contract.phases.side``): the source until ``tsmigrate
rewrite switch``, the target after it. A row of one side is written to the other through the
rewrite's key transform (old model -> new table) or its inverse (new model -> old table), so at
any moment one table takes the writes of every service on the model API, whichever model it was
built with.

- The state is read at most once per lease (``LEASE_S``, or the rewrite's ``routing_lease_s``)
  per process and table: a steady-state call costs no extra round trip.
- A process that cannot read the state within ``REFRESH_WAIT_S`` (nor, while a rewrite is
  unfinished, write its heartbeat) stops writing (``RoutingUnavailable``): it never writes a side
  it is not sure of, nor one ``switch`` cannot see it write.
- While a fence is up (switching, reverting) writes wait (``HOLD_S`` at most, then
  ``WritesHeld``); reads go on to the side that was current before the fence.
- Each process routing an unfinished rewrite keeps a heartbeat row (host, pid, the side it writes,
  the state version it writes by, its lease, the read timeout of its SDK client as
  ``request_timeout_s``); a process that sees a fence acknowledges it there once its writes in
  flight have landed, so ``switch`` need not wait out the whole lease.
- Range queries, index and search queries read the model's own table, whose key order serves
  them; capture keeps it in step with the side of record within its lag.

What the lease guarantees, whatever the clocks of the hosts say (none is compared with another):

- A route is trusted for its lease from when the refresh that read it *began* (``time.monotonic``
  before its first request), not from when the answer came: an answer held in the network for
  longer than the lease arrives already expired and is read again.
- A write is sent only while the lease of the route it took still holds at the moment it is
  sent: checked after translation, waits and heartbeats, and again by the client's connection
  before each attempt (``retry.guard``, ``retry.SEND_WINDOW``), so the SDK's retries stop there
  too, whatever the client's retry policy (tsmigrate's, the SDK's ``DefaultRetryPolicy`` or a
  custom one: the connection checks, not the policy). A write whose route ran out before it was
  sent is routed again (the state read anew) and sent on the new route; one whose earlier
  attempt was sent and failed is sent again only when ``retry.retryable`` allows it (rejected:
  always; ambiguous: idempotent APIs), and never under ``retry.SINGLE_ATTEMPT`` (the operation
  judges its own repeats).
- A route never moves to an older state version of its rewrite (two refreshes in flight, the
  older answer last: it is dropped).
- A process routing an unfinished rewrite writes its heartbeat before each read of the state,
  and registers (a heartbeat, then a second read) before it writes on a rewrite it had not seen:
  whatever route it writes by, the service stamped a heartbeat of it no earlier than that
  route's lease began. ``switch`` judges heartbeats by those stamps against the service's own
  clock (``tsmigrate.instance.clock``), so a process it sees no heartbeat of within the lease
  (plus a margin) holds no route read before the fence, and one it does see is waited for until
  it acknowledges or the lease has run out since the fence.

What remains: a request already sent when its lease ends (in the network, or queued in the
service) may land later, on the side it was sent to: the SDK cannot recall it. It lands within
the client's read timeout of being sent or its answer is an error (the write is then not
acknowledged); the heartbeat reports that timeout (``request_timeout_s``) so ``finish`` can wait
lease + the largest of them past the fence, and the old side's stream, read after the switch,
carries such late writes over. A process paused between its check and the bytes leaving (a few
microseconds of Python) is the same case.

This module decides the route; ``routed.py`` sends the calls of ``Rows`` along it and
``translate.py`` rebuilds a row for the other table. What it shares with the rewrite engine (the
phases, the state row's format, the timing above, the key transform) is ``tsmigrate.contract``:
routing loads no module of the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import threading
import time
import uuid
from typing import Any

import attrs
from tablestore import OTSServiceError
from tablestore import metadata as md

from tsmigrate.contract.phases import (
    ABORTED,
    ENDED,
    FAILED,
    FINISHING,
    HOLD,
    PAUSED,
    SOURCE,
    SWITCHING,
    TARGET,
)
from tsmigrate.contract.phases import side as side_in
from tsmigrate.contract.routes import ACK_S, HOLD_S, LEASE_S, POLL_S, SDK_SOCKET_TIMEOUT_S
from tsmigrate.contract.staterow import CLIENT_KIND, KIND, STATE_TABLE, RewriteJob, row_problems
from tsmigrate.service.calls import Call, Op, arun, run
from tsmigrate.service.errors import RowError
from tsmigrate.service.translate import Translator

REFRESH_WAIT_S = 10.0  # how long an expired lease is retried before writes stop with an error
RETRY_S = 0.2  # between attempts to read the state when a read failed
REWRITE_KIND = KIND  # the rewrite's row (tsmigrate.contract.staterow.KIND)

class RoutingError(RowError):
    """A write cannot be routed to a side of a rewrite now."""


class RoutingUnavailable(RoutingError):
    """The rewrite state could not be read: writes stop rather than guess a side."""


class WriteUnconfirmed(RoutingError):
    """A routed write was answered too late to count as acknowledged: it may have landed on a
    side the cut-over has left (the late-write net carries it or names it until finish)."""


class WritesHeld(RoutingError):
    """A switch or revert kept its fence up longer than this process waits."""


def _side(phase: str, doc: dict[str, Any]) -> str:
    return side_in(phase, doc.get("resume_to"), doc.get("finish_from"))


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
    sent: float = 0.0  # time.monotonic() when the refresh that read it began: its lease starts there
    ack_s: float = ACK_S  # a write on it answered later than expires + ack_s is not acknowledged
    read: int = 0  # which of this process's reads of the state it came from (later reads: larger)

    @property
    def holding(self) -> bool:
        return self.side == HOLD

    @property
    def expires(self) -> float:
        """When (``time.monotonic``) it stops being trusted; a fence's route is read again soon."""
        return self.sent + (POLL_S if self.holding else self.lease_s)

    def valid(self) -> bool:
        """Whether a write may be sent on it now (its lease still holds)."""
        return time.monotonic() < self.expires

    def supersedes(self, held: Route) -> bool:
        """Whether this route, just read, may replace ``held``: a later state version of the same
        rewrite (or the same version, read later: a longer lease); for another rewrite or none,
        the later read. A route never goes back to an older version of its rewrite."""
        if self.rewrite is not None and self.rewrite == held.rewrite and self.version != held.version:
            return self.version > held.version
        return self.read > held.read

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
        before = SOURCE if self.phase in (SWITCHING, FINISHING) else TARGET
        if self.phase in (PAUSED, FAILED):
            before = SOURCE  # a fence a failure left up: the source still has every write
        return self._is_other(before)


_NO_REWRITE = Route(None)
_READS = itertools.count(1)  # the order this process sends its reads of the state in


def request_timeout_s(client: Any) -> float:
    """The read timeout of an SDK client (``socket_timeout``; a tuple or list is (connect, read)),
    the SDK's default when it has none: how long after a request was sent its answer may come."""
    timeout = getattr(client, "socket_timeout", None)
    timeout = getattr(timeout, "read_timeout", timeout)  # a urllib3 Timeout
    if isinstance(timeout, (tuple, list)):
        timeout = timeout[-1] if timeout else None
    try:
        return float(timeout) if timeout else SDK_SOCKET_TIMEOUT_S
    except (TypeError, ValueError):
        return SDK_SOCKET_TIMEOUT_S


def _registration(route: Route) -> Route:
    """What a process that just found ``route``'s rewrite writes by until it has registered: its
    own table, no version of the rewrite seen."""
    own = SOURCE if route.own_is_source else TARGET
    return Route(route.rewrite, "", 0, own, route.own_is_source, None, route.lease_s)


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
        # What this process's heartbeat last said: (rewrite, phase, side, version).
        self.announced: tuple[str | None, str, str, int] = (None, "", "", -1)
        self.request_timeout_s = 0.0  # the longest read timeout of the clients routing with it
        self._translators: dict[tuple[str, bool], Translator] = {}
        self.held_s: list[float] = []  # how long writes waited for fences (bench, tests)

    def uses(self, client: Any) -> None:
        """``client`` routes with this router: its read timeout counts (``request_timeout_s``)."""
        self.request_timeout_s = max(self.request_timeout_s, request_timeout_s(client))

    # -- deciding from the state -----------------------------------------------------------------

    def decide(self, rows: list[tuple[str, dict[str, Any]]]) -> Route:
        mine = []
        for target, columns in rows:
            if self.table not in (target, columns.get("source")) or columns.get("phase") == ABORTED:
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
        return Route(target, phase, int(columns["version"]), side, own_is_source, translator, lease,
                     ack_s=float(doc.get("routing_ack_s") or ACK_S))

    def _translator(self, doc: dict[str, Any], own_is_source: bool) -> Translator:
        job = RewriteJob.from_json(doc["job"])
        key = (job.id, own_is_source)
        if key not in self._translators:
            self._translators[key] = Translator(job, own_is_source)
        return self._translators[key]

    def heartbeat_op(self, route: Route) -> Op[None]:
        """This process's row for ``route``'s rewrite: the side it writes, the state version it
        writes by (``seen_version``: a fence of that version or older is acknowledged), its
        lease and the read timeout of its SDK clients (``request_timeout_s``: how long after it
        was sent a write of it may still land). The service stamps the cells (no timestamps are
        given): their timestamps say how old the row is; ``at_ms``, this host's clock, is only
        information."""
        row = md.Row(
            [("kind", CLIENT_KIND), ("id", f"{route.rewrite}/{_process_id()}/{self.table}")],
            [("host", socket.gethostname()), ("pid", os.getpid()), ("table", self.table),
             ("side", route.side), ("phase", route.phase), ("seen_version", route.version),
             ("at_ms", int(time.time() * 1000)), ("lease_s", route.lease_s),
             ("request_timeout_s", self.request_timeout_s or SDK_SOCKET_TIMEOUT_S)],
        )
        yield Call("put_row", STATE_TABLE, row, md.Condition(md.RowExistenceExpectation.IGNORE))
        self.announced = (route.rewrite, route.phase, route.side, route.version)

    def _read_op(self) -> Op[Route]:
        """One refresh: the route the state names now, with when the refresh began (``sent``:
        its lease counts from there). A process routing an unfinished rewrite writes its
        heartbeat first, then reads; one that finds a rewrite it had not registered with
        registers (a heartbeat) and reads again. So whatever route it writes by, ``switch`` has
        seen a heartbeat of it stamped after that route's lease began (see the module
        docstring)."""
        current = self.route
        for _attempt in range(3):
            sent, read = time.monotonic(), next(_READS)
            if current.active:
                yield from self.heartbeat_op(current)
            route = attrs.evolve(self.decide((yield from _rewrites_op())), sent=sent, read=read)
            if not route.active or (current.active and current.rewrite == route.rewrite):
                return route
            current = _registration(route)  # registered by the next pass, which reads again
        raise RoutingUnavailable(
            f"{self.table}: the rewrites of {STATE_TABLE} kept changing while this process read "
            "them; writes stop rather than guess a side"
        )

    def _announce_op(self, route: Route) -> Op[None]:
        """A heartbeat at once when the route moved to another phase or side (a fence seen is
        acknowledged now, not at the next refresh); otherwise the next refresh's will do."""
        if route.active and self.announced[:3] != (route.rewrite, route.phase, route.side):
            yield from self.heartbeat_op(route)

    def _unavailable(self, exc: Exception) -> RoutingUnavailable:
        self.expires = 0.0
        return RoutingUnavailable(
            f"{self.table}: cannot read {STATE_TABLE} to learn which table takes writes "
            f"({type(exc).__name__}: {exc}); writes stop rather than guess a side"
        )

    def _late(self, route: Route) -> RoutingUnavailable:
        self.expires = 0.0
        return RoutingUnavailable(
            f"{self.table}: the answers of {STATE_TABLE} came after the lease ({route.lease_s:g}s) "
            f"of what they said had run out, for {REFRESH_WAIT_S:g}s; writes stop rather than "
            "write on a route nobody vouches for"
        )

    # -- the synchronous client ------------------------------------------------------------------

    def current(self, client: Any, *, holding: bool = False) -> Route:
        """The route, read again once its lease ran out (every ``POLL_S`` while a write is held)."""
        with self.lock:
            while self.draining:  # another thread's refresh is moving the route: its answer will do
                self.condition.wait()
            now = time.monotonic()
            if now < self.expires and not (holding and self.route.holding):
                return self.route
            return self._refresh(client)

    def _refresh(self, client: Any) -> Route:
        """Read the state until it gives a route still within its lease (``REFRESH_WAIT_S`` at
        most); the route held afterwards."""
        deadline = time.monotonic() + REFRESH_WAIT_S
        while True:
            try:
                route = self._install(run(client, self._read_op()))
            except RoutingUnavailable:  # a malformed row does not mend itself: no retries
                self.expires = 0.0
                raise
            except Exception as exc:
                if time.monotonic() >= deadline:
                    raise self._unavailable(exc) from exc
                time.sleep(RETRY_S)
                continue
            with contextlib.suppress(Exception):  # missed: the next refresh's heartbeat says it
                run(client, self._announce_op(route))
            if route.holding or route.valid():
                return route
            if time.monotonic() >= deadline:  # every answer came after its lease had run out
                raise self._late(route)

    def _install(self, read: Route) -> Route:
        """Move to the route ``read`` unless it is older than the route held (``supersedes``);
        writes sent on a route being left land first (no new write starts on it meanwhile: the
        wait releases the lock, ``current`` waits for it). The route held afterwards."""
        if not read.supersedes(self.route):
            return self.route
        changed = (read.rewrite, read.side) != (self.route.rewrite, self.route.side)
        if changed and self.inflight:
            self.draining = True
            try:
                self.condition.wait_for(lambda: self.inflight == 0, timeout=read.lease_s)
            finally:
                self.draining = False
                self.condition.notify_all()
        self.route = read
        self.expires = read.expires
        return read

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
        """``current`` for coroutines. Several may refresh at once (nothing serializes them):
        an answer older than the route held by the time it comes is dropped (``supersedes``)."""
        now = time.monotonic()
        if now < self.expires and not (holding and self.route.holding):
            return self.route
        deadline = now + REFRESH_WAIT_S
        while True:
            try:
                route = await self._ainstall(await arun(client, self._read_op()))
            except RoutingUnavailable:
                self.expires = 0.0
                raise
            except Exception as exc:
                if time.monotonic() >= deadline:
                    raise self._unavailable(exc) from exc
                await asyncio.sleep(RETRY_S)
                continue
            with contextlib.suppress(Exception):
                await arun(client, self._announce_op(route))
            if route.holding or route.valid():
                return route
            if time.monotonic() >= deadline:
                raise self._late(route)

    async def _ainstall(self, read: Route) -> Route:
        """``_install`` for coroutines: writes in flight on a route being left land first; a
        newer route another refresh installed meanwhile stays."""
        if not read.supersedes(self.route):
            return self.route
        changed = (read.rewrite, read.side) != (self.route.rewrite, self.route.side)
        wait_until = time.monotonic() + read.lease_s
        while changed and self.inflight and time.monotonic() < wait_until:
            await asyncio.sleep(POLL_S / 5)
            if not read.supersedes(self.route):
                return self.route
        self.route = read
        self.expires = read.expires
        return read

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

