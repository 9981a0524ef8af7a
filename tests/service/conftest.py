import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # service_models

from service_models import FAST, Account, Event, Reading, Tick

from tsmigrate.service import Rows, create_tables


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
