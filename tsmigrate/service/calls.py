"""One definition of every operation, two ways to run it (sync and asyncio).

Operations are generators that *yield* what they need done (``Call``: a method of the SDK
client; ``Raw``: a request the operation encoded itself, answered by the response's bytes;
``Sleep``: a backoff pause; ``Emit``: rows for the caller) and receive the result (or
the exception) back. ``run`` / ``stream`` drive them on an ``OTSClient``; ``arun`` / ``astream``
on an ``AsyncOTSClient``. So paging, retries and conditions are written once, and the sync and
asyncio APIs cannot drift apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator
from itertools import chain
from typing import Any, TypeVar

from tsmigrate.instance import rawclient
from tsmigrate.instance.retry import SINGLE_ATTEMPT

T = TypeVar("T")
Progress = Callable[[int, "int | None"], None]  # (rows so far, total if known): batch_write's callback


class Call:
    """Call ``method`` of the SDK client with these arguments. ``once``: the client's retry
    policy does not repeat it (the operation does, knowing why; ``retry.SINGLE_ATTEMPT``)."""

    __slots__ = ("args", "kwargs", "method", "once")

    def __init__(self, method: str, *args: Any, once: bool = False, **kwargs: Any):
        self.method = method
        self.args = args
        self.kwargs = kwargs
        self.once = once


def _call(client: Any, step: Call) -> Any:
    if not step.once:
        return getattr(client, step.method)(*step.args, **step.kwargs)
    token = SINGLE_ATTEMPT.set(True)
    try:
        return getattr(client, step.method)(*step.args, **step.kwargs)
    finally:
        SINGLE_ATTEMPT.reset(token)


async def _acall(client: Any, step: Call) -> Any:
    if not step.once:
        return await getattr(client, step.method)(*step.args, **step.kwargs)
    token = SINGLE_ATTEMPT.set(True)
    try:
        return await getattr(client, step.method)(*step.args, **step.kwargs)
    finally:
        SINGLE_ATTEMPT.reset(token)


class Raw:
    """Send ``body``, a request of the SDK's API ``api`` encoded by the operation (its rows'
    PlainBuffer is the cost of the SDK's pure-Python codec), and hand back the answer's bytes.
    ``tables``: the tables it writes, for a routed client (``routed.RoutedClient.send_raw``),
    which may send ``sdk_request()`` instead, the same request as the SDK's objects (the answer
    is then the SDK's too)."""

    __slots__ = ("api", "body", "once", "sdk_request", "tables")

    def __init__(self, api: str, body: bytes, *, tables: Iterable[str] = (),
                 sdk_request: Callable[[], Any] | None = None, once: bool = False):
        self.api = api
        self.body = body
        self.tables = tables
        self.sdk_request = sdk_request
        self.once = once


def send_raw(client: Any, step: Raw) -> Any:
    """Send ``step`` through the client's own ``send_raw`` if it has one (a routed client, a
    wrapper), else as the SDK client sends its requests (``rawclient.send``)."""
    own = getattr(client, "send_raw", None)
    return own(step) if own is not None else rawclient.send(client, step.api, step.body)


async def asend_raw(client: Any, step: Raw) -> Any:
    """``send_raw`` on an ``AsyncOTSClient`` (its wrappers' own: ``asend_raw``)."""
    own = getattr(client, "asend_raw", None)
    if own is not None:
        return await own(step)
    return await rawclient.asend(client, step.api, step.body)


def _raw(client: Any, step: Raw) -> Any:
    if not step.once:
        return send_raw(client, step)
    token = SINGLE_ATTEMPT.set(True)
    try:
        return send_raw(client, step)
    finally:
        SINGLE_ATTEMPT.reset(token)


async def _araw(client: Any, step: Raw) -> Any:
    if not step.once:
        return await asend_raw(client, step)
    token = SINGLE_ATTEMPT.set(True)
    try:
        return await asend_raw(client, step)
    finally:
        SINGLE_ATTEMPT.reset(token)


class Sleep:
    """Pause (a backoff before a retry)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float):
        self.seconds = seconds


class Emit:
    """Hand these rows to the caller of a streaming operation (any iterable: a lazy one is
    consumed as the caller takes rows)."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[Any]):
        self.items = items


Op = Generator[Any, Any, T]


def run(client: Any, op: Op[T]) -> T:
    """Drive an operation to its result on a synchronous client."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = op.send(send) if error is None else op.throw(error)
        except StopIteration as stop:
            return stop.value
        send, error = None, None
        if type(step) is Call:
            try:
                send = _call(client, step)
            except Exception as exc:  # handed to the operation, which decides
                error = exc
        elif type(step) is Raw:
            try:
                send = _raw(client, step)
            except Exception as exc:
                error = exc
        elif type(step) is Sleep:
            time.sleep(step.seconds)
        else:
            raise TypeError(f"a non-streaming operation yielded {step!r}")


def stream(client: Any, op: Op[None]) -> Iterator[Any]:
    """Drive a streaming operation on a synchronous client, yielding its rows as they come.

    Rows are handed out page by page through ``chain``: the operation resumes once per page,
    and each row costs no Python frame (a query's per-row overhead is what users measure)."""
    return chain.from_iterable(_pages(client, op))


def _pages(client: Any, op: Op[None]) -> Iterator[list[Any]]:
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = op.send(send) if error is None else op.throw(error)
        except StopIteration:
            return
        send, error = None, None
        if type(step) is Call:
            try:
                send = _call(client, step)
            except Exception as exc:
                error = exc
        elif type(step) is Raw:
            try:
                send = _raw(client, step)
            except Exception as exc:
                error = exc
        elif type(step) is Emit:
            yield step.items
        else:
            time.sleep(step.seconds)


async def arun(client: Any, op: Op[T]) -> T:
    """Drive an operation to its result on an ``AsyncOTSClient``."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = op.send(send) if error is None else op.throw(error)
        except StopIteration as stop:
            return stop.value
        send, error = None, None
        if type(step) is Call:
            try:
                send = await _acall(client, step)
            except Exception as exc:
                error = exc
        elif type(step) is Raw:
            try:
                send = await _araw(client, step)
            except Exception as exc:
                error = exc
        elif type(step) is Sleep:
            await asyncio.sleep(step.seconds)
        else:
            raise TypeError(f"a non-streaming operation yielded {step!r}")


async def astream(client: Any, op: Op[None]) -> AsyncIterator[Any]:
    """Drive a streaming operation on an ``AsyncOTSClient``."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = op.send(send) if error is None else op.throw(error)
        except StopIteration:
            return
        send, error = None, None
        if type(step) is Call:
            try:
                send = await _acall(client, step)
            except Exception as exc:
                error = exc
        elif type(step) is Raw:
            try:
                send = await _araw(client, step)
            except Exception as exc:
                error = exc
        elif type(step) is Emit:
            for item in step.items:
                yield item
        else:
            await asyncio.sleep(step.seconds)
