import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # service_models

from service_models import Account, Event, Reading, Tick

from tsmigrate.service import Backoff, Rows, create_tables

FAST = Backoff(base=0.001, cap=0.02, attempts=30)


@pytest.fixture
def client(ots_instance):
    client = ots_instance.client()
    create_tables(client, [Account, Reading, Tick, Event])
    return client


@pytest.fixture
def accounts(client):
    return Rows(Account, client, backoff=FAST)


@pytest.fixture
def readings(client):
    return Rows(Reading, client, backoff=FAST)
