"""One definition of every operation, two ways to run it (sync and asyncio).

Operations are generators that *yield* what they need done (``Call``: a method of the SDK
client; ``Sleep``: a backoff pause; ``Emit``: rows for the caller) and receive the result (or
the exception) back. ``run`` / ``stream`` drive them on an ``OTSClient``; ``arun`` / ``astream``
on an ``AsyncOTSClient``. So paging, retries and conditions are written once, and the sync and
asyncio APIs cannot drift apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Generator, Iterable, Iterator
from itertools import chain
from typing import Any, TypeVar

from tsmigrate.retry import SINGLE_ATTEMPT

T = TypeVar("T")


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
        elif type(step) is Emit:
            for item in step.items:
                yield item
        else:
            await asyncio.sleep(step.seconds)
