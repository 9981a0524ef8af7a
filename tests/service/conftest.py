import pathlib
import sys

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
