"""One event loop per process for the requests a caller sends together (``RawClient.call_together``).

Change capture sends a page's reads (up to five BatchGetRows of 100 keys) and writes at once.
Sent from a pool of threads, each request's Python work (urllib3, http.client's header parsing,
the SDK's signing and checks) contends for the GIL with the others' and the caller's: on
bench/capture.py, 15-20% of capture's CPU went to that contention. Here they go out together on
one asyncio loop (a daemon thread, started when first needed, again in a forked child), through
an aiohttp pool as the SDK's ``AsyncConnectionPool`` makes it (``HTTPPool``: one per endpoint and
client settings, kept for the process), and the caller waits once for all of them.

The loop is closed (its pools too) when the interpreter exits, so aiohttp reports no unclosed
session.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import ssl
import threading
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any, TypeVar

import aiohttp
import certifi

T = TypeVar("T")
CLOSE_TIMEOUT_S = 5.0
KEEPALIVE_S = 12.0  # idle connections kept, as the SDK's AsyncConnectionPool keeps them


class HTTPPool:
    """The SDK's ``AsyncConnectionPool`` (aiohttp, the client's socket timeout and pool size),
    but HTTPS is verified with the certificate bundle the SDK's sync pool uses (certifi, which the
    SDK brings), not the system's: a machine that reaches the service through ``OTSClient``
    reaches it here too."""

    def __init__(self, host: str, path: str, timeout: Any, maxsize: int, ssl_version: Any = None) -> None:
        self.url = host + path
        self.ssl_context = ssl.create_default_context(cafile=certifi.where())
        if ssl_version is not None:
            self.ssl_context.minimum_version = ssl_version
        connect_s, read_s = timeout if isinstance(timeout, (list, tuple)) else (timeout, timeout)
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(sock_connect=connect_s, sock_read=read_s),
            connector=aiohttp.TCPConnector(limit=maxsize, ssl=self.ssl_context,
                                           keepalive_timeout=KEEPALIVE_S))

    async def send_receive(self, url: str, headers: dict[str, str], body: bytes
                           ) -> tuple[int, str, dict[str, str], bytes]:
        """(status, reason, headers, body), as the SDK's pools answer."""
        async with self.session.post(self.url + url, data=body, headers=headers,
                                     allow_redirects=False) as response:
            return response.status, response.reason or "", dict(response.headers), await response.read()

    async def close(self) -> None:
        await self.session.close()


class IOLoop:
    """An event loop running in its own daemon thread, and the connection pools made on it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._pools: dict[tuple[Any, ...], HTTPPool] = {}
        self._thread = threading.Thread(target=self.loop.run_forever, name="tsmigrate-io", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def run_together(self, calls: Sequence[Awaitable[T]]) -> list[T]:
        """Run ``calls`` at once on the loop and wait for every one; the first failure raises
        (after the others ended: none is left running). Never from the loop's own thread, which
        would wait for itself."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("run_together was called from the event loop's own thread")

        async def together() -> list[T]:
            answers = await asyncio.gather(*calls, return_exceptions=True)
            for answer in answers:
                if isinstance(answer, BaseException):
                    raise answer
            return answers  # type: ignore[return-value]

        return asyncio.run_coroutine_threadsafe(together(), self.loop).result()

    def start(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``call`` on the loop; its future (``result()`` waits for it)."""
        return asyncio.run_coroutine_threadsafe(call, self.loop)

    def pool(self, client: Any) -> HTTPPool:
        """The pool for ``client``'s endpoint and settings (socket timeout, pool size, TLS
        version). Called on the loop."""
        key = (client.host, client.path, client.socket_timeout, client.max_connection, client.ssl_version)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = HTTPPool(client.host, client.path, client.socket_timeout,
                                               client.max_connection, client.ssl_version)
        return pool

    def close(self) -> None:
        if not self.running:
            return

        async def close_pools() -> None:
            for pool in self._pools.values():
                await pool.close()
            self._pools.clear()

        try:  # at exit: pools that take longer to close are left to the process's end, unreported
            with contextlib.suppress(concurrent.futures.TimeoutError):
                asyncio.run_coroutine_threadsafe(close_pools(), self.loop).result(CLOSE_TIMEOUT_S)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(CLOSE_TIMEOUT_S)
            if not self._thread.is_alive():
                self.loop.close()


_lock = threading.Lock()
_current: IOLoop | None = None


def io_loop() -> IOLoop:
    """This process's loop (a forked child starts its own: the parent's thread is not there; so
    does a call after the loop was closed at exit)."""
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid() or not _current.running:
            if _current is None:
                atexit.register(_close)
            _current = IOLoop()
        return _current


def _close() -> None:
    with _lock:
        if _current is not None and _current.pid == os.getpid():
            _current.close()
