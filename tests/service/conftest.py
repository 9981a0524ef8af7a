import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # service_models

from service_models import FAST, Account, Event, Reading, Tick

from tsmigrate.service import Rows, create_tables

# The service plugin's fixtures (also registered as the `tsmigrate_service` pytest plugin); imported
# here too, so that a virtualenv installed before the entry point existed still has them.
from tsmigrate.service.pytest_plugin import ots_models, tsmigrate_models  # noqa: F401


@pytest.fixture
def client(ots_instance):
    client = ots_instance.client()
    create_tables(client, [Account, Reading, Tick, Event])
    return client


@pytest.fixture
def accounts(client):
    return Rows(Account, client, retry=FAST)


@pytest.fixture
def readings(client):
    return Rows(Reading, client, retry=FAST)


class SkippedWaits:
    """A stand-in for the `time` module whose sleep records the wait instead of waiting."""

    def __init__(self):
        self.waits = []

    def sleep(self, seconds):
        self.waits.append(seconds)

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture
def retry_waits(monkeypatch):
    """Retry back-off recorded, not slept: the SDK client's and the requests the Rows encode
    themselves (which RETRY_POLICY times as in production: 0.05 s doubling, 0.3 s for a busy
    server), the Rows' own and tsmigrate's for socket errors. What is retried, and how often, is
    unchanged; only the waiting goes (a second or more per test when the injected faults come
    in a row)."""
    import tablestore.client

    import tsmigrate.instance.retry
    from tsmigrate.instance import rawclient
    from tsmigrate.service import calls

    skipped = SkippedWaits()
    for module in (tablestore.client, rawclient, calls, tsmigrate.instance.retry):
        monkeypatch.setattr(module, "time", skipped)
    return skipped.waits
