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
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import attrs
from tablestore import OTSServiceError
from tablestore import metadata as md

from tsmigrate.errors import TsmigrateError
from tsmigrate.service.calls import Call, Op, arun, run
from tsmigrate.service.errors import RowError, RowValueError

STATE_TABLE = "tsmigrate_state"  # tsmigrate.state.STATE_TABLE, without importing the engine
REWRITE_KIND = "rewrite"
CLIENT_KIND = "rewrite-client"
LEASE_S = 2.0  # how long a process trusts the state it read (a rewrite may set its own)
HOLD_S = 30.0  # the longest a write waits for a fence (switch, revert) to come down
REFRESH_WAIT_S = 10.0  # how long an expired lease is retried before writes stop with an error
POLL_S = 0.05  # how often a held write reads the state again
HEARTBEAT_S = 10.0  # a heartbeat row is rewritten at least this often while a rewrite runs
SOURCE, TARGET, HOLD = "source", "target", "hold"
ENDED = ("done", "aborted")


class RoutingError(RowError):
    """A write cannot be routed to a side of a rewrite now."""


class RoutingUnavailable(RoutingError):
    """The rewrite state could not be read: writes stop rather than guess a side."""


class WritesHeld(RoutingError):
    """A switch or revert kept its fence up longer than this process waits."""


def _side(phase: str, doc: dict[str, Any]) -> str:
    from tsmigrate.rewrite.machine import side

    return side(phase, doc.get("resume_to"), doc.get("finish_from"))


class Translator:
    """Rows of one side of a rewrite as the other side stores them: the rewrite's key transform
    one way, its inverse (the transform of the target's key back to the source's) the other."""

    def __init__(self, job: Any, own_is_source: bool):
        from tsmigrate.rewrite import transform

        forward = transform.build(job)
        backward = transform.RowTransform.build(job.target, job.source)
        self.out, self.back = (forward, backward) if own_is_source else (backward, forward)
        self.own_table, self.other_table = (
            (job.source.name, job.target.name) if own_is_source else (job.target.name, job.source.name)
        )

    def _values(self, pk: Sequence[tuple[str, Any]], cells: Sequence[Sequence[Any]], what: str) -> dict:
        try:
            return self.out.natural(list(pk), [(c[0], c[1]) for c in cells])
        except TsmigrateError as exc:
            raise self._refused(pk, what, exc) from None

    def _refused(self, pk: Sequence[tuple[str, Any]], what: str, exc: Exception) -> RowValueError:
        return RowValueError(
            f"{self.own_table} is being rewritten and {self.other_table} takes the writes now: "
            f"the {what} of {list(pk)} cannot be located there ({exc}); give the whole row "
            "(or its fields) rather than its key alone"
        )

    def key(self, pk: Sequence[tuple[str, Any]], cells: Sequence[Sequence[Any]] = (),
            what: str = "row") -> list[tuple[str, Any]]:
        values = self._values(pk, cells, what)
        try:
            return list(self.out.target_key(values, list(pk)))
        except TsmigrateError as exc:
            raise self._refused(pk, what, exc) from None

    def cells(self, pk: Sequence[tuple[str, Any]], cells: Sequence[Sequence[Any]]) -> list:
        """Attribute cells of the other side: columns that enter its key leave, fields of this
        key that its key does not hold come in (so its rows tell the key they came from)."""
        values = self._values(pk, cells, "row")
        present = {c[0] for c in cells}
        kept = [tuple(c) for c in cells if c[0] not in self.out.dropped]
        return kept + [(f, values[f]) for f in self.out.added if f not in present and f in values]

    def check_columns(self, names: Sequence[str], pk: Sequence[tuple[str, Any]]) -> None:
        moving = [n for n in names if n in self.out.dropped or n in self.out.key_sources]
        if moving:
            raise RowValueError(
                f"{self.own_table} is being rewritten and {self.other_table} takes the writes now; "
                f"{', '.join(moving)} of {list(pk)} is part of {self.other_table}'s key there, so "
                "changing it moves the row: put the whole row instead of updating it"
            )

    def row_back(self, row: Any) -> tuple[list, list]:
        """A row read from the other side, as this side stores it (key, cells)."""
        if row is None or not (row.primary_key or row.attribute_columns):
            return [], []
        cells = [tuple(c) if len(c) >= 3 else (c[0], c[1], 0) for c in row.attribute_columns]
        translated = self.back.apply(row.primary_key, cells)
        return list(translated.primary_key), [tuple(c) for c in translated.columns]


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
        self.condition = threading.Condition()
        self.inflight = 0  # writes sent on the current route and not yet answered
        self.draining = False  # a refresh waits for those writes before it moves the route
        self.beat_at = 0.0
        self.beat_version: tuple[str | None, str] = (None, "")
        self._translators: dict[tuple[str, bool], Translator] = {}
        self.held_s: list[float] = []  # how long writes waited for fences (bench, tests)

    # -- deciding from the state -----------------------------------------------------------------

    def decide(self, rows: list[tuple[str, dict[str, Any]]]) -> Route:
        mine = []
        for target, columns in rows:
            if self.table not in (target, columns.get("source")) or columns.get("phase") == "aborted":
                continue
            doc = json.loads(columns.get("doc") or "{}")
            mine.append((int(doc.get("created_ms", 0)), target, columns, doc))
        if not mine:
            return _NO_REWRITE
        _, target, columns, doc = max(mine, key=lambda m: m[0])
        phase = str(columns["phase"])
        own_is_source = self.table == columns["source"]
        side = _side(phase, doc)
        translator = None
        if "job" in doc and side != (SOURCE if own_is_source else TARGET):
            translator = self._translator(doc, own_is_source)
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

    def beat_due(self, route: Route) -> bool:
        """A heartbeat when this process first routes the rewrite, when it sees another phase
        (that is how it acknowledges a fence), and every ``HEARTBEAT_S``."""
        return route.active and (
            self.beat_version != (route.rewrite, route.phase)
            or time.monotonic() - self.beat_at > HEARTBEAT_S
        )

    def beaten(self, route: Route) -> None:
        self.beat_at = time.monotonic()
        self.beat_version = (route.rewrite, route.phase)

    # -- the synchronous client ------------------------------------------------------------------

    def current(self, client: Any, *, holding: bool = False) -> Route:
        """The route, read again once its lease ran out (every ``POLL_S`` while a write is held)."""
        with self.condition:
            now = time.monotonic()
            if now < self.expires and not (holding and self.route.holding):
                return self.route
            return self._refresh(client)

    def _refresh(self, client: Any) -> Route:
        deadline = time.monotonic() + REFRESH_WAIT_S
        while True:
            try:
                route = self.decide(run(client, _rewrites_op()))
                if route.active and self.beat_version[0] != route.rewrite:
                    # Known to switch before the first write: a process it cannot see could
                    # still write the old side after the fence.
                    run(client, self.heartbeat_op(route))
                    self.beaten(route)
                break
            except Exception as exc:
                if time.monotonic() >= deadline:
                    self.expires = 0.0
                    raise RoutingUnavailable(
                        f"{self.table}: cannot read {STATE_TABLE} to learn which table takes writes "
                        f"({type(exc).__name__}: {exc}); writes stop rather than guess a side"
                    ) from exc
                time.sleep(min(0.5, POLL_S * 4))
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
        started = None
        while True:
            route = self.current(client, holding=started is not None)
            if not route.holding:
                with self.condition:
                    # Not replaced by another thread's refresh meanwhile, nor being left.
                    if self.route is route and not self.draining:
                        self.inflight += 1
                        if started is not None:
                            self.held_s.append(time.monotonic() - started)
                        return route
                continue
            if started is None:
                started = time.monotonic()
            elif time.monotonic() - started > HOLD_S:
                raise WritesHeld(
                    f"{self.table}: writes held {HOLD_S:.0f}s while the rewrite into "
                    f"{route.rewrite} is {route.phase}; `tsmigrate rewrite status {route.rewrite}` "
                    "says what it waits for (a killed switch or revert: run it again)"
                )
            time.sleep(POLL_S)

    def end_write(self) -> None:
        with self.condition:
            self.inflight -= 1
            self.condition.notify_all()

    # -- the asyncio client ----------------------------------------------------------------------

    async def acurrent(self, client: Any, *, holding: bool = False) -> Route:
        now = time.monotonic()
        if now < self.expires and not (holding and self.route.holding):
            return self.route
        deadline = now + REFRESH_WAIT_S
        while True:
            try:
                route = self.decide(await arun(client, _rewrites_op()))
                if route.active and self.beat_version[0] != route.rewrite:
                    await arun(client, self.heartbeat_op(route))
                    self.beaten(route)
                break
            except Exception as exc:
                if time.monotonic() >= deadline:
                    self.expires = 0.0
                    raise RoutingUnavailable(
                        f"{self.table}: cannot read {STATE_TABLE} to learn which table takes writes "
                        f"({type(exc).__name__}: {exc}); writes stop rather than guess a side"
                    ) from exc
                await asyncio.sleep(min(0.5, POLL_S * 4))
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
                self.inflight += 1
                if started is not None:
                    self.held_s.append(time.monotonic() - started)
                return route
            if started is None:
                started = time.monotonic()
            elif time.monotonic() - started > HOLD_S:
                raise WritesHeld(
                    f"{self.table}: writes held {HOLD_S:.0f}s while the rewrite into "
                    f"{route.rewrite} is {route.phase}; `tsmigrate rewrite status {route.rewrite}` "
                    "says what it waits for (a killed switch or revert: run it again)"
                )
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


# --- translating the calls of the model API --------------------------------------------------------


class _Calls:
    """How each SDK call of ``Rows`` is sent to the other side, and its answer read back."""

    def __init__(self, table: str):
        self.table = table

    @staticmethod
    def row_for(route: Route, row: md.Row, update: bool) -> md.Row:
        t = route.translator
        assert t is not None
        pk = row.primary_key
        if not update:
            cells = list(row.attribute_columns or ())
            return md.Row(t.key(pk, cells), t.cells(pk, cells))
        changes = dict(row.attribute_columns or {})
        puts = list(changes.get(md.UpdateType.PUT, ()))
        t.check_columns([c[0] for kind in changes.values() for c in kind], pk)
        key = t.key(pk, puts, what="update")
        values = t.out.natural(list(pk), [(c[0], c[1]) for c in puts])
        named = {c[0] for c in puts}
        puts += [(f, values[f]) for f in t.out.added if f not in named and f in values]
        if puts:
            changes[md.UpdateType.PUT] = puts
        return md.Row(key, changes)

    @staticmethod
    def row_back(route: Route, answer: tuple, columns: Sequence[str] | None) -> tuple:
        consumed, row, token = answer
        if row is None:
            return answer
        t = route.translator
        assert t is not None
        pk, cells = t.row_back(row)
        if columns is not None:
            cells = [c for c in cells if c[0] in set(columns)]
        return consumed, md.Row(pk, cells), token

    def batch_write_for(self, route: Route, request: md.BatchWriteRowRequest) -> md.BatchWriteRowRequest:
        item = request.items.get(self.table)
        if item is None:
            return request
        moved = md.BatchWriteRowRequest()
        for name, other in request.items.items():
            if name != self.table:
                moved.add(other)
        rows = []
        for row_item in item.row_items:
            update = isinstance(row_item, md.UpdateRowItem)
            if isinstance(row_item, md.DeleteRowItem):
                row = md.Row(route.translator.key(row_item.row.primary_key, what="delete"))
            else:
                row = self.row_for(route, row_item.row, update)
            rows.append(type(row_item)(row, row_item.condition, getattr(row_item, "return_type", None)))
        moved.add(md.TableInBatchWriteRowItem(route.translator.other_table, rows))
        moved.transaction_id = request.transaction_id
        return moved

    def batch_write_back(self, route: Route, response: Any) -> Any:
        other = route.translator.other_table
        for results in (response.table_of_put, response.table_of_update, response.table_of_delete):
            if other in results:
                results[self.table] = results.pop(other)
        return response

    def batch_get_for(self, route: Route, request: md.BatchGetRowRequest) -> md.BatchGetRowRequest:
        item = request.items.get(self.table)
        if item is None:
            return request
        moved = md.BatchGetRowRequest()
        for name, other in request.items.items():
            if name != self.table:
                moved.add(other)
        keys = [route.translator.key(pk, what="get") for pk in item.primary_keys]
        moved.add(md.TableInBatchGetRowItem(route.translator.other_table, keys, None,
                                            item.column_filter, item.max_version))
        return moved

    def batch_get_back(self, route: Route, request: md.BatchGetRowRequest, response: Any) -> Any:
        item = request.items.get(self.table)
        other = route.translator.other_table
        if item is None or other not in response.items:
            return response
        wanted = set(item.columns_to_get) if item.columns_to_get else None
        for answer in response.items.pop(other):
            if answer.is_ok and answer.row is not None:
                pk, cells = route.translator.row_back(answer.row)
                if wanted is not None:
                    cells = [c for c in cells if c[0] in wanted]
                answer.row = md.Row(pk, cells) if pk else None
            response.items.setdefault(self.table, []).append(answer)
        return response




class RoutedClient:
    """An ``OTSClient`` whose row calls on one table go to the side its rewrite names."""

    def __init__(self, client: Any, router: Router):
        self._client = client
        self._router = router
        self._calls = _Calls(router.table)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_row(self, table: str, key: Any, columns_to_get: Any = None, *args: Any, **kwargs: Any) -> Any:
        if table != self._router.table:
            return self._client.get_row(table, key, columns_to_get, *args, **kwargs)
        route = self._router.current(self._client)
        if not route.reads_other:
            return self._client.get_row(table, key, columns_to_get, *args, **kwargs)
        other = route.translator
        assert other is not None
        answer = self._client.get_row(other.other_table, other.key(key, what="get"), None, *args, **kwargs)
        return self._calls.row_back(route, answer, columns_to_get)

    def _write(self, method: str, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        if table != self._router.table:
            return getattr(self._client, method)(table, row, *args, **kwargs)
        route = self._router.begin_write(self._client)
        try:
            if not route.writes_other:
                return getattr(self._client, method)(table, row, *args, **kwargs)
            moved = (md.Row(route.translator.key(row.primary_key, what="delete"))
                     if method == "delete_row" else
                     self._calls.row_for(route, row, method == "update_row"))
            return getattr(self._client, method)(route.translator.other_table, moved, *args, **kwargs)
        finally:
            self._router.end_write()

    def put_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return self._write("put_row", table, row, *args, **kwargs)

    def update_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return self._write("update_row", table, row, *args, **kwargs)

    def delete_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return self._write("delete_row", table, row, *args, **kwargs)

    def batch_write_row(self, request: md.BatchWriteRowRequest) -> Any:
        if self._router.table not in request.items:
            return self._client.batch_write_row(request)
        route = self._router.begin_write(self._client)
        try:
            if not route.writes_other:
                return self._client.batch_write_row(request)
            response = self._client.batch_write_row(self._calls.batch_write_for(route, request))
            return self._calls.batch_write_back(route, response)
        finally:
            self._router.end_write()

    def batch_get_row(self, request: md.BatchGetRowRequest) -> Any:
        if self._router.table not in request.items:
            return self._client.batch_get_row(request)
        route = self._router.current(self._client)
        if not route.reads_other:
            return self._client.batch_get_row(request)
        response = self._client.batch_get_row(self._calls.batch_get_for(route, request))
        return self._calls.batch_get_back(route, request, response)


class AsyncRoutedClient:
    """``RoutedClient`` for an ``AsyncOTSClient``."""

    def __init__(self, client: Any, router: Router):
        self._client = client
        self._router = router
        self._calls = _Calls(router.table)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def get_row(self, table: str, key: Any, columns_to_get: Any = None, *args: Any,
                      **kwargs: Any) -> Any:
        if table != self._router.table:
            return await self._client.get_row(table, key, columns_to_get, *args, **kwargs)
        route = await self._router.acurrent(self._client)
        if not route.reads_other:
            return await self._client.get_row(table, key, columns_to_get, *args, **kwargs)
        other = route.translator
        assert other is not None
        answer = await self._client.get_row(other.other_table, other.key(key, what="get"), None,
                                            *args, **kwargs)
        return self._calls.row_back(route, answer, columns_to_get)

    async def _write(self, method: str, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        if table != self._router.table:
            return await getattr(self._client, method)(table, row, *args, **kwargs)
        route = await self._router.abegin_write(self._client)
        try:
            if not route.writes_other:
                return await getattr(self._client, method)(table, row, *args, **kwargs)
            moved = (md.Row(route.translator.key(row.primary_key, what="delete"))
                     if method == "delete_row" else
                     self._calls.row_for(route, row, method == "update_row"))
            return await getattr(self._client, method)(route.translator.other_table, moved,
                                                       *args, **kwargs)
        finally:
            self._router.inflight -= 1

    async def put_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return await self._write("put_row", table, row, *args, **kwargs)

    async def update_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return await self._write("update_row", table, row, *args, **kwargs)

    async def delete_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return await self._write("delete_row", table, row, *args, **kwargs)

    async def batch_write_row(self, request: md.BatchWriteRowRequest) -> Any:
        if self._router.table not in request.items:
            return await self._client.batch_write_row(request)
        route = await self._router.abegin_write(self._client)
        try:
            if not route.writes_other:
                return await self._client.batch_write_row(request)
            response = await self._client.batch_write_row(self._calls.batch_write_for(route, request))
            return self._calls.batch_write_back(route, response)
        finally:
            self._router.inflight -= 1

    async def batch_get_row(self, request: md.BatchGetRowRequest) -> Any:
        if self._router.table not in request.items:
            return await self._client.batch_get_row(request)
        route = await self._router.acurrent(self._client)
        if not route.reads_other:
            return await self._client.batch_get_row(request)
        response = await self._client.batch_get_row(self._calls.batch_get_for(route, request))
        return self._calls.batch_get_back(route, request, response)


def routed(codec: Any, client: Any, *, asynchronous: bool = False) -> Any:
    """``client``, routed for the model of ``codec`` (not for a table family's months, which
    are never rewritten, nor for a client already routed)."""
    if codec.family is not None or isinstance(client, (RoutedClient, AsyncRoutedClient)):
        return client
    router = router_for(client, codec.table)
    return AsyncRoutedClient(client, router) if asynchronous else RoutedClient(client, router)


def clear() -> None:
    """Forget every route (tests that start a new server on a port another one used)."""
    with _ROUTERS_LOCK:
        _ROUTERS.clear()

