"""The SDK client ``Rows``/``AsyncRows`` call through: row calls on a rewritten table go to the
side its rewrite's phase names (``tsmigrate.service.routing``), through the key transform or its
inverse; everything else passes through unchanged.

A write is sent only within the lease of the route it took (``_within``): checked once the
request is built, and by the client's connection before each attempt (``retry.guard``); one whose
route ran out first is routed again and sent on the route read anew (``_again`` says when).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tablestore import metadata as md

from tsmigrate.instance import retry
from tsmigrate.service.calls import Raw, asend_raw, send_raw
from tsmigrate.service.errors import UpdateNotAllowed
from tsmigrate.service.routing import Route, Router, RoutingError, WriteUnconfirmed, router_for

T = TypeVar("T")
# The most times one write is routed again because the lease of its route ran out before it was
# sent (each time the state is read anew and the lease starts again: only a client stalled for
# a lease at every attempt gets there).
REROUTES = 10
_APIS = {"put_row": "PutRow", "update_row": "UpdateRow", "delete_row": "DeleteRow"}


def _within(route: Route, call: Callable[[], T]) -> T:
    """``call()``, an SDK call sending a write routed on ``route``, whose attempts are sent only
    while the route's lease holds: checked now (after the request was built, waits and
    heartbeats) and by the client's connection before each attempt (``retry.SEND_WINDOW``)."""
    if not route.valid():
        raise retry.WindowClosed(0, None)
    token = retry.SEND_WINDOW.set(retry.SendWindow(route.expires))
    try:
        return _acknowledged(route, call())
    finally:
        retry.SEND_WINDOW.reset(token)


async def _awithin(route: Route, call: Callable[[], Awaitable[T]]) -> T:
    """``_within`` for an ``AsyncOTSClient``."""
    if not route.valid():
        raise retry.WindowClosed(0, None)
    token = retry.SEND_WINDOW.set(retry.SendWindow(route.expires))
    try:
        return _acknowledged(route, await call())
    finally:
        retry.SEND_WINDOW.reset(token)


def _acknowledged(route: Route, answer: T) -> T:
    """``answer``, unless it came later than ``ack_s`` past the route's lease while a rewrite is
    unfinished: then the write may have landed on a side the cut-over has since left, after the
    time ``finish`` waits for late writes (lease + ack), so it is not acknowledged."""
    late_s = time.monotonic() - route.expires
    if route.active and late_s > route.ack_s:
        raise WriteUnconfirmed(
            f"a write on {route.rewrite}'s route was answered {late_s:.1f}s after the route's lease "
            f"ran out, later than the rewrite's acknowledgement bound ({route.ack_s:g}s): it may "
            "have landed on the table the cut-over left. Until `tsmigrate rewrite finish` the "
            "late-write net carries it over or names it as a conflict; read the row to know"
        )
    return answer


def _again(exc: BaseException, route: Route, api: str, tries: int) -> BaseException | None:
    """After a routed write failed with ``exc``: None to route it again and resend it, else
    the error its caller gets. Routed again: a write that never left (its route ran out before
    it was sent), and one whose sent attempt failed while its route ran out (the policy stopped
    there) when ``retry.retryable`` allows sending it again: rejected always, ambiguous only on
    an idempotent API. Never after a sent attempt under ``retry.SINGLE_ATTEMPT``: the operation
    repeats it, knowing whether a repeat followed a lost answer."""
    if isinstance(exc, retry.WindowClosed):
        failure = exc.failure
        if exc.sent and (retry.SINGLE_ATTEMPT.get() or failure is None
                         or not retry.retryable(failure, api)):
            return failure or RoutingError(
                f"{route.rewrite}: a write to {api} was not sent again: the lease of its route "
                "ran out during the client's retries")
    elif route.valid() or retry.SINGLE_ATTEMPT.get() or not retry.retryable(exc, api):
        return exc
    if tries >= REROUTES:
        return RoutingError(
            f"a write was routed {tries + 1} times and each time the lease of its route "
            f"({route.lease_s:g}s) ran out before it could be sent; it was not sent"
        )
    return None


def _reroute_or_raise(exc: Exception, route: Route, api: str, tries: int) -> None:
    """Return to route a failed write again (``_again``); else raise what its caller gets."""
    failure = _again(exc, route, api, tries)
    if failure is exc:
        raise exc
    if failure is not None:
        raise failure from exc


class _Calls:
    """How each SDK call of ``Rows`` is sent to the other side, and its answer read back."""

    def __init__(self, table: str, model: str):
        self.table = table
        self.model = model  # the model of the Rows sending (named by a refused update)

    def refuse_update(self, route: Route) -> None:
        """An update going to the other table of the rewrite is refused before it is sent when
        that table has allow_update=False, even if the model's own table (which the operation
        checked) takes updates: the table written decides."""
        t = route.translator
        assert t is not None
        if not t.other_allows_update:
            raise UpdateNotAllowed(
                self.model, t.other_table,
                f" ({t.other_table} takes the writes of {self.model} while the rewrite into "
                f"{route.rewrite} is {route.phase})",
            )

    def moved_row(self, route: Route, method: str, row: md.Row) -> md.Row:
        """The row of a put_row, update_row or delete_row as the other side takes it."""
        if method == "delete_row":
            assert route.translator is not None
            return md.Row(route.translator.key(row.primary_key, what="delete"))
        if method == "update_row":
            self.refuse_update(route)
        return self.row_for(route, row, method == "update_row")

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
            if update:
                self.refuse_update(route)  # before any row of the request is sent
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

    def __init__(self, client: Any, router: Router, model: str = ""):
        self._client = client
        self._router = router
        self._calls = _Calls(router.table, model)

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

    def _routed(self, api: str, send: Callable[[Route], Any]) -> Any:
        """``send(route)`` on the route a write takes, again on a route read anew while
        ``_again`` says so."""
        tries = 0
        while True:
            route = self._router.begin_write(self._client)
            try:
                return send(route)
            except Exception as exc:
                _reroute_or_raise(exc, route, api, tries)
            finally:
                self._router.end_write()
            tries += 1

    def _write(self, method: str, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        if table != self._router.table:
            return getattr(self._client, method)(table, row, *args, **kwargs)
        call = getattr(self._client, method)

        def send(route: Route) -> Any:
            if not route.writes_other:
                return _within(route, lambda: call(table, row, *args, **kwargs))
            moved = self._calls.moved_row(route, method, row)
            return _within(route, lambda: call(route.translator.other_table, moved, *args, **kwargs))

        return self._routed(_APIS[method], send)

    def refuse_update(self, table: str) -> None:
        """Raise UpdateNotAllowed when updates of ``table``'s rows go, on the route as it
        stands, to the other table of a rewrite and that one refuses UpdateRow (asked by a
        batch before its first request; each request is checked again as it is sent)."""
        if table != self._router.table:
            return
        route = self._router.current(self._client)
        if route.writes_other:
            self._calls.refuse_update(route)

    def put_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return self._write("put_row", table, row, *args, **kwargs)

    def update_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return self._write("update_row", table, row, *args, **kwargs)

    def delete_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return self._write("delete_row", table, row, *args, **kwargs)

    def batch_write_row(self, request: md.BatchWriteRowRequest) -> Any:
        if self._router.table not in request.items:
            return self._client.batch_write_row(request)

        def send(route: Route) -> Any:
            if not route.writes_other:
                return _within(route, lambda: self._client.batch_write_row(request))
            moved = self._calls.batch_write_for(route, request)
            response = _within(route, lambda: self._client.batch_write_row(moved))
            return self._calls.batch_write_back(route, response)

        return self._routed("BatchWriteRow", send)

    def send_raw(self, step: Raw) -> Any:
        """A request the operation encoded (``calls.Raw``): a BatchWriteRow to the routed table
        goes as ``batch_write_row`` does, the encoded bytes while the writes stay on this side,
        the SDK's request translated once they go to the other; the rest (GetRange: reads are
        not routed) as it is."""
        if step.api != "BatchWriteRow" or self._router.table not in step.tables:
            return send_raw(self._client, step)

        def send(route: Route) -> Any:
            if not route.writes_other:
                return _within(route, lambda: send_raw(self._client, step))
            assert step.sdk_request is not None
            moved = self._calls.batch_write_for(route, step.sdk_request())
            response = _within(route, lambda: self._client.batch_write_row(moved))
            return self._calls.batch_write_back(route, response)

        return self._routed(step.api, send)

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

    def __init__(self, client: Any, router: Router, model: str = ""):
        self._client = client
        self._router = router
        self._calls = _Calls(router.table, model)

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

    async def _routed(self, api: str, send: Callable[[Route], Awaitable[Any]]) -> Any:
        """``RoutedClient._routed``, awaited."""
        tries = 0
        while True:
            route = await self._router.abegin_write(self._client)
            try:
                return await send(route)
            except Exception as exc:
                _reroute_or_raise(exc, route, api, tries)
            finally:
                self._router.inflight -= 1
            tries += 1

    async def _write(self, method: str, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        if table != self._router.table:
            return await getattr(self._client, method)(table, row, *args, **kwargs)
        call = getattr(self._client, method)

        async def send(route: Route) -> Any:
            if not route.writes_other:
                return await _awithin(route, lambda: call(table, row, *args, **kwargs))
            moved = self._calls.moved_row(route, method, row)
            return await _awithin(route, lambda: call(route.translator.other_table, moved,
                                                      *args, **kwargs))

        return await self._routed(_APIS[method], send)

    async def refuse_update(self, table: str) -> None:
        """``RoutedClient.refuse_update``, awaited."""
        if table != self._router.table:
            return
        route = await self._router.acurrent(self._client)
        if route.writes_other:
            self._calls.refuse_update(route)

    async def put_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return await self._write("put_row", table, row, *args, **kwargs)

    async def update_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return await self._write("update_row", table, row, *args, **kwargs)

    async def delete_row(self, table: str, row: md.Row, *args: Any, **kwargs: Any) -> Any:
        return await self._write("delete_row", table, row, *args, **kwargs)

    async def batch_write_row(self, request: md.BatchWriteRowRequest) -> Any:
        if self._router.table not in request.items:
            return await self._client.batch_write_row(request)

        async def send(route: Route) -> Any:
            if not route.writes_other:
                return await _awithin(route, lambda: self._client.batch_write_row(request))
            moved = self._calls.batch_write_for(route, request)
            response = await _awithin(route, lambda: self._client.batch_write_row(moved))
            return self._calls.batch_write_back(route, response)

        return await self._routed("BatchWriteRow", send)

    async def asend_raw(self, step: Raw) -> Any:
        """``RoutedClient.send_raw``, awaited."""
        if step.api != "BatchWriteRow" or self._router.table not in step.tables:
            return await asend_raw(self._client, step)

        async def send(route: Route) -> Any:
            if not route.writes_other:
                return await _awithin(route, lambda: asend_raw(self._client, step))
            assert step.sdk_request is not None
            moved = self._calls.batch_write_for(route, step.sdk_request())
            response = await _awithin(route, lambda: self._client.batch_write_row(moved))
            return self._calls.batch_write_back(route, response)

        return await self._routed(step.api, send)

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
    router.uses(client)  # its read timeout goes into the heartbeat
    retry.guard(client)  # each attempt of a routed write is sent within its route's lease
    if asynchronous:
        return AsyncRoutedClient(client, router, codec.name)
    return RoutedClient(client, router, codec.name)
