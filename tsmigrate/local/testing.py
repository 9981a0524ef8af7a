"""Run the local server in-process (threads, free port) for tests and scripts.

    with local_tablestore() as ots:
        client = ots.client()
        client.create_table(...)

`ots.server` exposes runtime knobs (`server.options.latency_ms`, `.faults`, `.table_ops_per_s`,
`.cu_adjust_interval_s`, `.global_index_lag_ms`, `.stream_shards`, `server.clock_offset`);
`ots.fresh_instance()` gives an empty instance on the same server, which isolates tests far more
cheaply than deleting tables. ``HeldRequest`` holds one request of an SDK client before it is
sent: a request slow in the network, as late-write tests and benchmarks need.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tablestore import AsyncOTSClient, OTSClient

from tsmigrate.local.auth import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, Credentials
from tsmigrate.local.context import ServerOptions
from tsmigrate.local.faults import FaultPlan
from tsmigrate.local.server import LocalServer

__all__ = ["HeldRequest", "LocalTablestore", "local_tablestore"]  # public (README "Public API")

_instance_ids = itertools.count(1)


@dataclass
class LocalTablestore:
    """A running local server seen from one instance, with the credentials to reach it."""

    server: LocalServer
    instance: str
    access_key_id: str
    access_key_secret: str

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def client(self, **kwargs: Any) -> OTSClient:
        """An `OTSClient` for this instance (default retry policy unless overridden)."""
        return OTSClient(
            self.endpoint, self.access_key_id, self.access_key_secret, self.instance, **kwargs
        )

    def async_client(self, **kwargs: Any) -> AsyncOTSClient:
        return AsyncOTSClient(
            self.endpoint, self.access_key_id, self.access_key_secret, self.instance, **kwargs
        )

    def fresh_instance(self, prefix: str = "test") -> LocalTablestore:
        """A new, empty instance on the same server."""
        name = f"{prefix}{next(_instance_ids)}"
        self.server.add_instance(name)
        return LocalTablestore(self.server, name, self.access_key_id, self.access_key_secret)


@contextmanager
def local_tablestore(
    *,
    memory: bool = True,
    data_dir: str | None = None,
    instance: str = "local",
    access_key_id: str = DEFAULT_ACCESS_KEY_ID,
    access_key_secret: str = DEFAULT_ACCESS_KEY_SECRET,
    sts_tokens: dict[str, str] | None = None,
    latency_ms: float = 0.0,
    table_ops_per_s: int = 0,
    faults: str | FaultPlan | None = None,
    cu_adjust_interval_s: float = 120.0,
    stream_shards: int = 1,
    host: str = "127.0.0.1",
    port: int = 0,
    role: str = "local server",
) -> Iterator[LocalTablestore]:
    """Start a server in this process (in memory unless `data_dir` is given); stop it on exit.

    A data directory has one owner: `ownership.DataDirInUse` when a live server holds it."""
    if data_dir is None and not memory:
        raise ValueError("pass data_dir=... for a durable server, or memory=True")
    options = ServerOptions(
        latency_ms=latency_ms,
        table_ops_per_s=table_ops_per_s,
        cu_adjust_interval_s=cu_adjust_interval_s,
        faults=FaultPlan.parse(faults) if isinstance(faults, str) else faults,
        instances={instance},
        stream_shards=stream_shards,
    )
    credentials = Credentials({access_key_id: access_key_secret}, dict(sts_tokens or {}))
    server = LocalServer(
        credentials, data_dir=data_dir, options=options, host=host, port=port, role=role
    )
    server.start()
    try:
        yield LocalTablestore(server, instance, access_key_id, access_key_secret)
    finally:
        server.close()


class HeldRequest:
    """An SDK client's connection with the first request of ``api`` (whose body contains
    ``marker``, when given) held before it is sent until ``release`` is set (``hold_s`` at
    most): a request slow in the network. ``held`` is set once it waits. Installs itself on
    ``client`` (``OTSClient``: its ``connection``)."""

    def __init__(self, client: OTSClient, api: str, marker: bytes = b"", hold_s: float = 60.0):
        self.inner = client.connection
        self.api = api
        self.marker = marker
        self.hold_s = hold_s
        self.held = threading.Event()
        self.release = threading.Event()
        self._taken = False
        self._lock = threading.Lock()
        client.connection = self

    def send_receive(self, url: str, headers: Any, body: bytes) -> Any:
        with self._lock:
            hold = not self._taken and url.endswith("/" + self.api) and self.marker in body
            self._taken = self._taken or hold
        if hold:
            self.held.set()
            self.release.wait(self.hold_s)
        return self.inner.send_receive(url, headers, body)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
