"""The fixtures services test their code with: a fresh local instance with the models' tables."""

import pytest
from service_models import Account, Reading

from tsmigrate.service import Attr


def test_ots_models_defaults_to_the_projects_models(ots_models):
    from tsmigrate.schema.config import load_project
    from tsmigrate.schema.discover import import_models

    project = load_project()
    expected = {m.table_name() for m in import_models(project.models, project.root)}
    assert expected and {m.table_name() for m in ots_models.models} == expected
    assert expected <= set(ots_models.client.list_table())


class TestChosenModels:
    @pytest.fixture
    def tsmigrate_models(self):
        return [Account, Reading]

    def test_tables_are_created_fresh_for_each_test(self, ots_models):
        assert {"svc_accounts", "svc_readings"} <= set(ots_models.client.list_table())
        readings = ots_models.rows(Reading)
        readings.put(Reading(device_id="d", ts=1, battery=5, serial="S"))
        assert [r.ts for r in readings.query(index="by_serial", serial="S")] == [1]
        assert readings.count("finder", battery=5) == 1

    def test_a_second_test_starts_empty(self, ots_models):
        accounts = ots_models.rows(Account)
        assert list(accounts.query()) == []
        accounts.create(Account(user_id="ann", visits=1), request_id="r")
        accounts.put(accounts.get(user_id="ann"), condition=Attr("visits") == 1)


class TestReadmeExample:
    """The example of the README's "Testing a service", as written there."""

    @pytest.fixture
    def tsmigrate_models(self):
        return [Account]

    @pytest.fixture(autouse=True)
    def no_waiting(self, retry_waits):
        """The example's client backs off as in production (a busy server: 0.3 s, doubling): it
        took seconds when the random faults came in a row. Its waits are recorded, not slept."""

    def test_signup_is_idempotent(self, ots_models, ots_server_options):
        from tsmigrate.local.faults import FaultPlan
        from tsmigrate.service import AlreadyExists

        accounts = ots_models.rows(Account)
        ots_server_options.faults = FaultPlan.parse(
            "server_busy@PutRow=0.3,done_timeout@PutRow=0.3")
        accounts.create(Account(user_id="ann"), request_id="r1")
        accounts.create(Account(user_id="ann"), request_id="r1")
        with pytest.raises(AlreadyExists):
            accounts.create(Account(user_id="ann"), request_id="r2")
