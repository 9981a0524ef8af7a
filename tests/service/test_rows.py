"""Single-row operations through the local server and the official SDK."""

from datetime import datetime, timezone
from decimal import Decimal

import pytest
from service_models import FAST, Account, Reading
from tablestore import OTSClient

from tsmigrate.instance.retry import RETRY_POLICY
from tsmigrate.local.faults import FaultPlan
from tsmigrate.service import (
    AlreadyExists,
    Attr,
    ConditionFailed,
    Rows,
    RowValueError,
    Update,
    VersionConflict,
)
from tsmigrate.service.codec import codec

OPENED = datetime(2026, 9, 1, 12, 30, tzinfo=timezone.utc)


def test_put_get_round_trip_keeps_types_and_none(accounts, client):
    row = Account(user_id="ann", balance=Decimal("12.34"), opened=OPENED, visits=0, ratio=2)
    accounts.put(row)
    got = accounts.get(user_id="ann")
    assert got.balance == Decimal("12.34") and got.opened == OPENED
    assert got.visits == 0 and got.ratio == 2.0 and isinstance(got.ratio, float)
    assert got.nickname is None  # never stored, never cast to ""
    _, raw, _ = client.get_row("svc_accounts", [("user_id", "ann")], None, None, 1)
    cells = {c[0]: c[1] for c in raw.attribute_columns}
    assert cells["balance"] == 1234  # money in minor units
    assert cells["opened"] == int(OPENED.timestamp() * 1000)  # epoch milliseconds
    assert "nickname" not in cells
    assert accounts.get(user_id="nobody") is None


def test_values_that_do_not_fit_are_refused_not_cast(accounts):
    with pytest.raises(RowValueError, match=r"Account\.visits is INTEGER, got float"):
        accounts.put(Account(user_id="x", visits=1.5))
    with pytest.raises(RowValueError, match="more than 2 decimal places"):
        accounts.put(Account(user_id="x", balance=Decimal("0.001")))
    with pytest.raises(RowValueError, match="naive datetime"):
        accounts.put(Account(user_id="x", opened=datetime(2026, 1, 1)))


def test_derived_key_is_computed_on_write_and_read(readings, client):
    readings.put(Reading(device_id="dev-1", ts=5, battery=80))
    key = Reading.key(device_id="dev-1", ts=5)
    _, raw, _ = client.get_row("svc_readings", key, None, None, 1)
    assert raw.primary_key[0][1].endswith("|dev-1")
    assert readings.get(device_id="dev-1", ts=5).battery == 80


def test_put_with_conditions(readings):
    readings.put(Reading(device_id="d", ts=1, battery=50))
    with pytest.raises(ConditionFailed):
        readings.put(Reading(device_id="d", ts=1, battery=10), expect="not_exist")
    with pytest.raises(ConditionFailed):
        readings.put(Reading(device_id="d", ts=1, battery=10), condition=Attr("battery") > 60)
    readings.put(Reading(device_id="d", ts=1, battery=10), condition=Attr("battery") >= 50)
    assert readings.get(device_id="d", ts=1).battery == 10
    # A row without the column fails a comparison unless if_missing=True.
    readings.put(Reading(device_id="d", ts=2))
    with pytest.raises(ConditionFailed):
        readings.put(Reading(device_id="d", ts=2, battery=1), condition=Attr("battery") < 100)
    readings.put(Reading(device_id="d", ts=2, battery=1),
                 condition=Attr("battery").lt(100, if_missing=True))


def test_update_puts_deletes_and_increments_with_conditions(readings):
    readings.put(Reading(device_id="d", ts=1, battery=50, temp_c=20.5, serial="S"))
    readings.update({"device_id": "d", "ts": 1}, set={"serial": "T", "temp_c": None},
                    increment={"battery": -5}, condition=Attr("serial") == "S", expect="exist")
    row = readings.get(device_id="d", ts=1)
    assert (row.serial, row.temp_c, row.battery) == ("T", None, 45)
    with pytest.raises(ConditionFailed):
        readings.update({"device_id": "d", "ts": 1}, increment={"battery": 1},
                        condition=Attr("serial") == "S")
    with pytest.raises(ConditionFailed):
        readings.update({"device_id": "d", "ts": 99}, set={"serial": "x"}, expect="exist")
    with pytest.raises(RowValueError, match="part of the primary key"):
        readings.update({"device_id": "d", "ts": 1}, set={"ts": 3})


def test_delete_with_condition(readings):
    readings.put(Reading(device_id="d", ts=1, battery=50))
    with pytest.raises(ConditionFailed):
        readings.delete({"device_id": "d", "ts": 1}, condition=Attr("battery") == 49)
    readings.delete({"device_id": "d", "ts": 1}, condition=Attr("battery") == 50)
    assert readings.get(device_id="d", ts=1) is None


def test_optimistic_lock_detects_a_concurrent_writer(accounts):
    created = accounts.put(Account(user_id="ann", visits=1))
    assert created.version == 1
    mine = accounts.get(user_id="ann")
    theirs = accounts.get(user_id="ann")
    theirs.visits = 7
    accounts.put(theirs)
    assert theirs.version == 2
    mine.visits = 2
    with pytest.raises(VersionConflict) as conflict:
        accounts.put(mine)
    assert conflict.value.expected == 1
    assert conflict.value.current.version == 2 and conflict.value.current.visits == 7
    with pytest.raises(VersionConflict):
        accounts.update(mine, set={"nickname": "x"})
    with pytest.raises(VersionConflict):
        accounts.delete(mine)
    # Reload, re-apply, retry: goes through.
    fresh = accounts.get(user_id="ann")
    accounts.update(fresh, increment={"visits": 1})
    assert fresh.version == 3 and accounts.get(user_id="ann").visits == 8
    # A new row (no version) must not overwrite an existing one.
    with pytest.raises(VersionConflict):
        accounts.put(Account(user_id="ann", visits=0))
    accounts.delete(fresh)
    assert accounts.get(user_id="ann") is None


class LostAnswers(OTSClient):
    """A client whose first N PutRow answers are lost on the way back (the server did write)."""

    def __init__(self, *args, lose=1, **kwargs):
        super().__init__(*args, **kwargs)
        self.lose = lose
        self.calls = 0

    def put_row(self, *args, **kwargs):
        self.calls += 1
        result = super().put_row(*args, **kwargs)
        if self.lose:
            self.lose -= 1
            raise TimeoutError("read timed out (the answer was lost)")
        return result


def test_idempotent_create_succeeds_when_its_own_write_landed(ots_instance, client, accounts):
    lossy = LostAnswers(ots_instance.endpoint, ots_instance.access_key_id,
                        ots_instance.access_key_secret, ots_instance.instance, lose=1)
    rows = Rows(Account, lossy, retry=accounts.retry)
    row = rows.create(Account(user_id="bob", visits=1), request_id="req-1")
    assert lossy.calls == 2  # written by the first; the retry found its own request id
    assert row.version == 1
    stored = accounts.get(user_id="bob")
    assert stored.visits == 1 and stored.version == 1
    # The same request again (a client retry after a crash) is still a success ...
    accounts.create(Account(user_id="bob", visits=1), request_id="req-1")
    # ... another request for the same row is not, and sees the row that exists.
    with pytest.raises(AlreadyExists) as exists:
        accounts.create(Account(user_id="bob", visits=5), request_id="req-2")
    assert exists.value.current.visits == 1


def test_idempotent_create_under_injected_faults(ots_instance, client, accounts,
                                                ots_server_options):
    from tablestore.retry import NoRetryPolicy

    from tsmigrate.local.faults import FaultPlan

    # The SDK does not retry here: every failure reaches the create, which retries it.
    plain = ots_instance.client(retry_policy=NoRetryPolicy())
    accounts = Rows(Account, plain, retry=accounts.retry)
    # done_timeout: the write is carried out, then answered OTSTimeout (the answer is lost).
    ots_server_options.faults = FaultPlan.parse(
        "server_busy@PutRow=0.3,timeout@PutRow=0.2,done_timeout@PutRow=0.3,seed=3")
    for i in range(20):
        accounts.create(Account(user_id=f"u{i}", visits=i), request_id=f"r{i}")
    ots_server_options.faults = None
    assert [accounts.get(user_id=f"u{i}").visits for i in range(20)] == list(range(20))


def test_codec_matches_model_key_building():
    # One definition: the service codec builds the same keys and cells as Model.key().
    row = Reading(device_id="dev-9", ts=42, battery=3, temp_c=1.5)
    assert codec(Reading).row_key(row) == row.primary_key()
    assert sorted(codec(Reading).row_attributes(row)) == sorted(row.attribute_columns())
    account = Account(user_id="z", balance=Decimal("1.05"), opened=OPENED)
    assert sorted(codec(Account).row_attributes(account)) == sorted(account.attribute_columns())


def test_model_key_is_accepted_wherever_a_key_is_taken(readings):
    """``Model.key(...)`` (derived columns computed) works for get, update, delete and batches."""
    readings.put(Reading(device_id="dev-1", ts=1, battery=50))
    readings.put(Reading(device_id="dev-1", ts=2, battery=60))
    key = Reading.key(device_id="dev-1", ts=1)
    assert readings.get(key).battery == 50
    readings.update(key, set={"battery": 40})
    assert readings.get(device_id="dev-1", ts=1).battery == 40
    assert [r.battery for r in readings.batch_get([key, Reading.key(device_id="dev-1", ts=2)]).rows] \
        == [40, 60]
    readings.batch_write(update=[Update(key, increment={"battery": 1})]).raise_for_failures()
    assert readings.get(key).battery == 41
    readings.delete(key)
    readings.batch_write(delete=[Reading.key(device_id="dev-1", ts=2)]).raise_for_failures()
    assert readings.get(key) is None and readings.get(device_id="dev-1", ts=2) is None


def test_a_key_that_is_not_the_models_says_what_to_pass(readings):
    with pytest.raises(RowValueError, match=r"columns \['pk', 'ts'\], in that order "
                                            r"\(build it with Reading\.key\(\.\.\.\)\)"):
        readings.delete([("ts", 1)])
    with pytest.raises(RowValueError, match=r"a mapping of its key fields or Reading\.key"):
        readings.delete(5)
    with pytest.raises(RowValueError, match="not both"):
        readings.get(Reading.key(device_id="d", ts=1), ts=1)


@pytest.mark.parametrize("policy", ["sdk default", "tsmigrate"])
@pytest.mark.usefixtures("retry_waits")  # back-off recorded, not slept (see conftest)
@pytest.mark.slow
def test_versioned_writes_whose_answers_are_lost_are_not_conflicts(ots_instance, client, accounts,
                                                                   ots_server_options, policy):
    # The server writes, then answers OTSTimeout: the write is repeated (by the client's retry
    # policy or by Rows), finds its own version in place and succeeds instead of a conflict.
    kwargs = {} if policy == "sdk default" else {"retry_policy": RETRY_POLICY}
    rows = Rows(Account, ots_instance.client(**kwargs), retry=FAST)
    ots_server_options.faults = FaultPlan.parse(
        "done_timeout@PutRow|UpdateRow|DeleteRow=0.4,seed=11")
    for i in range(25):
        row = rows.put(Account(user_id=f"u{i}", visits=1))
        assert row.version == 1
        row.visits = 2
        rows.put(row)
        rows.update(row, increment={"visits": 1}, set={"nickname": "n"})
        assert row.version == 3
        rows.delete(row)
    ots_server_options.faults = None
    assert accounts.batch_get([{"user_id": f"u{i}"} for i in range(25)]).rows == [None] * 25
    # A real conflict is still one; a condition of the caller's that fails is ConditionFailed.
    mine = rows.put(Account(user_id="ann", visits=1))
    theirs = accounts.get(user_id="ann")
    accounts.update(theirs, set={"visits": 5})
    with pytest.raises(VersionConflict) as conflict:
        rows.update(mine, set={"visits": 2})
    assert conflict.value.current.visits == 5
    with pytest.raises(ConditionFailed) as failed:
        rows.put(theirs, condition=Attr("visits") == 4)
    assert not isinstance(failed.value, VersionConflict)


@pytest.mark.parametrize("policy", ["sdk default", "tsmigrate"])
@pytest.mark.usefixtures("retry_waits")  # back-off recorded, not slept (see conftest)
def test_conditional_writes_whose_answers_are_lost_are_not_condition_failures(
        ots_instance, readings, ots_server_options, policy):
    # Without a version column: the server writes, then answers OTSTimeout; the repeat fails
    # its condition because the first attempt landed, and is still a success (the row is as the
    # write leaves it). A condition that really fails stays ConditionFailed.
    kwargs = {} if policy == "sdk default" else {"retry_policy": RETRY_POLICY}
    rows = Rows(Reading, ots_instance.client(**kwargs), retry=FAST)
    ots_server_options.faults = FaultPlan.parse(
        "done_timeout@PutRow|UpdateRow|DeleteRow=0.5,seed=5")
    for i in range(20):
        rows.put(Reading(device_id="d", ts=i, battery=i), expect="not_exist")
        rows.update({"device_id": "d", "ts": i}, set={"serial": f"S{i}"},
                    condition=Attr("battery") == i, expect="exist")
        if i % 2:
            rows.delete({"device_id": "d", "ts": i}, expect="exist")
    ots_server_options.faults = None
    stored = {r.ts: (r.battery, r.serial) for r in readings.query(device_id="d")}
    assert stored == {i: (i, f"S{i}") for i in range(0, 20, 2)}
    with pytest.raises(ConditionFailed):
        rows.put(Reading(device_id="d", ts=0, battery=0), expect="not_exist")
    with pytest.raises(ConditionFailed):
        rows.update({"device_id": "d", "ts": 0}, set={"serial": "x"}, condition=Attr("battery") == 7)
    with pytest.raises(ConditionFailed):
        rows.delete({"device_id": "d", "ts": 1}, expect="exist")


def test_integers_beyond_64_bits_are_a_row_value_error_naming_the_field(accounts, readings):
    with pytest.raises(RowValueError, match=r"Account\.visits = 9223372036854775808 does not fit"):
        accounts.put(Account(user_id="ann", visits=2**63))
    with pytest.raises(RowValueError, match=r"Account\.balance = .* does not fit"):
        accounts.put(Account(user_id="ann", balance=Decimal("1e30")))
    with pytest.raises(RowValueError, match=r"Account\.visits = -9223372036854775809 does not fit"):
        accounts.batch_write(put=[Account(user_id="bob", visits=-(2**63) - 1)])
    with pytest.raises(RowValueError, match=r"Reading\.ts = 18446744073709551616 does not fit"):
        readings.get(device_id="d", ts=2**64)
    accounts.put(Account(user_id="cy", visits=2**63 - 1))
    assert accounts.get(user_id="cy").visits == 2**63 - 1
    with pytest.raises(RowValueError, match=r"Account\.visits = 9223372036854775808 does not fit"):
        accounts.update({"user_id": "cy"}, increment={"visits": 2**63})
    with pytest.raises(RowValueError, match="money must be a finite number"):
        accounts.put(Account(user_id="ann", balance=Decimal("NaN")))


def test_datetimes_are_stored_as_exact_milliseconds(accounts):
    # 04:29:04.615 is 2160880144.6149998 seconds as a float: timestamp() * 1000 gave ...614.
    moment = datetime(2038, 6, 23, 4, 29, 4, 615000, tzinfo=timezone.utc)
    accounts.put(Account(user_id="ann", opened=moment))
    assert accounts.get(user_id="ann").opened == moment
    _, row, _ = accounts.client.get_row("svc_accounts", [("user_id", "ann")], ["opened"], None, 1)
    assert row.attribute_columns[0][1] == 2160880144615
