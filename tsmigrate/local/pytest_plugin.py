"""pytest fixtures backed by the local Tablestore-compatible server (registered as `tsmigrate_local`).

- `local_ots` (session): one in-memory server for the whole run (`LocalTablestore`).
- `ots_instance` (function): a fresh, empty instance on that server, so tests never see each
  other's tables; `.client()`, `.endpoint`, `.instance`, credentials, `.server` knobs.
- `ots_client` (function): a ready `OTSClient` on `ots_instance`.

Runtime knobs are shared by the session server: a test that changes `ots_instance.server.options`
(latency, faults, rate limits, stream shards) should restore them; `ots_server_options` does that for you.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tablestore import OTSClient

    from tsmigrate.local.context import ServerOptions
    from tsmigrate.local.testing import LocalTablestore


@pytest.fixture(scope="session")
def local_ots() -> Iterator[LocalTablestore]:
    # Imported here so that merely loading the plugin (every pytest run) costs nothing.
    from tsmigrate.local.testing import local_tablestore

    with local_tablestore(memory=True) as ots:
        yield ots


@pytest.fixture
def ots_instance(local_ots: LocalTablestore) -> LocalTablestore:
    return local_ots.fresh_instance()


@pytest.fixture
def ots_client(ots_instance: LocalTablestore) -> OTSClient:
    return ots_instance.client()


@pytest.fixture
def ots_server_options(local_ots: LocalTablestore) -> Iterator[ServerOptions]:
    """The session server's knobs, restored after the test (its clock and clock offset included)."""
    server = local_ots.server
    saved = copy.copy(server.options)
    saved_clock, saved_offset = server.clock, server.clock_offset
    try:
        yield server.options
    finally:
        saved.instances = server.options.instances  # instances created meanwhile stay valid
        server.options = saved
        server.clock, server.clock_offset = saved_clock, saved_offset
