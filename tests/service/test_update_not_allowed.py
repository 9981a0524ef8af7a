"""Updates of a table with allow_update=False (Tablestore refuses UpdateRow there): refused by
the model API with a typed error before any request, naming the table, the option and what
to do instead; during a rewrite, by the table the write would go to."""

import asyncio

import pytest
from service_models import FAST
from tablestore import OTSServiceError

from tsmigrate import Column, GlobalIndex, Model, PrimaryKey
from tsmigrate.local.faults import FaultPlan
from tsmigrate.service import (
    AsyncRows,
    RowError,
    Rows,
    Update,
    UpdateNotAllowed,
    create_tables,
    routing,
)


class Sensor(Model, table="svc_sensors", ttl="30d", allow_update=False):
    """The shape that needs the option: a TTL and a global index."""

    device = PrimaryKey(str)
    ts = PrimaryKey(int)
    serial = Column(str, defined=True)
    battery = Column(int, defined=True)
    note = Column(str)

    by_serial = GlobalIndex(keys=["serial"], include=["battery"])


KEY = {"device": "d1", "ts": 1}
# Any UpdateRow or BatchWriteRow that reached the server would fail with a service error, so
# an UpdateNotAllowed (and no OTSServiceError) shows that none was sent.
NOTHING_SENT = "internal@UpdateRow|BatchWriteRow=1"


def _refused(raised: pytest.ExceptionInfo, table: str, model: str = "Sensor") -> None:
    error = raised.value
    assert isinstance(error, RowError) and not isinstance(error, OTSServiceError)
    assert (error.model, error.table) == (model, table)
    message = str(error)
    assert f"{model}: cannot update a row of {table}" in message
    assert f"{table} has allow_update=False" in message
    assert "Tablestore refuses UpdateRow" in message
    assert "TTL and a secondary or search index" in message
    assert "put the whole row with Rows.put" in message


@pytest.fixture
def sensors(ots_instance):
    client = ots_instance.client()
    create_tables(client, [Sensor])
    rows = Rows(Sensor, client, retry=FAST)
    rows.put(Sensor(**KEY, serial="S1", battery=80, note="start"))
    return rows


def _stored(sensors: Rows) -> dict:
    row = sensors.get(**KEY)
    return {"serial": row.serial, "battery": row.battery, "note": row.note}


START = {"serial": "S1", "battery": 80, "note": "start"}


@pytest.mark.parametrize("changes", [
    {"set": {"note": "changed"}},
    {"set": {"note": None}},  # set to None: a column delete
    {"delete": ["note"]},
    {"increment": {"battery": 1}},
    {"set": {"note": "x"}, "increment": {"battery": -1}, "expect": "exist"},
], ids=["set", "set-none", "delete", "increment", "mixed"])
def test_update_of_a_table_without_updates_is_refused_before_any_request(
        sensors, ots_server_options, changes):
    ots_server_options.faults = FaultPlan.parse(NOTHING_SENT)
    with pytest.raises(UpdateNotAllowed) as raised:
        sensors.update(KEY, **changes)
    _refused(raised, "svc_sensors")
    row = Sensor(**KEY, serial="S1", battery=80, note="start")
    with pytest.raises(UpdateNotAllowed):  # a row, a key: refused alike
        sensors.update(row, **changes)
    with pytest.raises(UpdateNotAllowed):
        sensors.update(Sensor.key(**KEY), **changes)
    ots_server_options.faults = None
    assert _stored(sensors) == START


def test_update_is_refused_without_routing_too_and_puts_still_work(ots_instance, sensors):
    plain = Rows(Sensor, ots_instance.client(), routing=False)
    with pytest.raises(UpdateNotAllowed) as raised:
        plain.update(KEY, increment={"battery": 5})
    _refused(raised, "svc_sensors")
    # The alternative the error names: read, change, put the whole row.
    row = plain.get(**KEY)
    row.battery += 5
    plain.put(row)
    assert _stored(sensors) == {**START, "battery": 85}


def test_a_batch_with_an_update_is_refused_before_any_row_is_sent(sensors, ots_server_options):
    ots_server_options.faults = FaultPlan.parse(NOTHING_SENT)

    def updates():
        yield Update(KEY, set={"note": "batched"})

    # The puts come first in a batch: they are not sent either.
    with pytest.raises(UpdateNotAllowed) as raised:
        sensors.batch_write(put=[Sensor(device="d2", ts=1, battery=1)], update=updates(),
                            delete=[KEY])
    _refused(raised, "svc_sensors")
    with pytest.raises(UpdateNotAllowed):
        sensors.batch_write(update=[Update(KEY, increment={"battery": 1})])
    ots_server_options.faults = None
    assert sensors.get(device="d2", ts=1) is None
    assert _stored(sensors) == START
    # A batch without updates is not affected.
    assert sensors.batch_write(put=[Sensor(device="d2", ts=1, battery=1)], delete=[KEY]).ok
    assert sensors.get(**KEY) is None and sensors.get(device="d2", ts=1).battery == 1


def test_async_rows_refuse_updates_alike(ots_instance, sensors, ots_server_options):
    async def scenario():
        client = ots_instance.async_client()
        try:
            rows = AsyncRows(Sensor, client, retry=FAST)
            with pytest.raises(UpdateNotAllowed) as single:
                await rows.update(KEY, set={"note": "async"}, increment={"battery": 1})
            with pytest.raises(UpdateNotAllowed) as batched:
                await rows.batch_write(put=[Sensor(device="d3", ts=1)],
                                       update=[Update(KEY, delete=["note"])])
            return single, batched
        finally:
            await client.close()

    ots_server_options.faults = FaultPlan.parse(NOTHING_SENT)
    single, batched = asyncio.run(scenario())
    ots_server_options.faults = None
    _refused(single, "svc_sensors")
    _refused(batched, "svc_sensors")
    assert _stored(sensors) == START and sensors.get(device="d3", ts=1) is None


# --- during a rewrite: the table written decides -------------------------------------------------


class Tally(Model, table="svc_tallies", max_versions=1, allow_update=False):
    device = PrimaryKey(str)
    seq = PrimaryKey(int)
    count = Column(int)
    note = Column(str)


class TallyV2(Model, table="svc_tallies_by_seq", replaces="svc_tallies", max_versions=1):
    """The new key; its table takes updates, the old one (which has the writes until the
    switch) does not."""

    seq = PrimaryKey(int)
    device = PrimaryKey(str)
    count = Column(int)
    note = Column(str)


def _ready(ots_instance):
    """A rewrite of svc_tallies into svc_tallies_by_seq at ready (as cutover_tables.ready)."""
    from cutover_tables import IDENTITY, SETTINGS

    from tsmigrate.instance.apply import ApplyOptions, apply
    from tsmigrate.rewrite import machine
    from tsmigrate.schema.model import compile_models

    routing.clear()
    client = ots_instance.client()
    apply(client, compile_models([Tally]), target_identity=IDENTITY)
    Rows(Tally, client).batch_write(put=[Tally(device=f"d{i}", seq=i, count=0) for i in range(4)])
    outcome = apply(client, compile_models([TallyV2]), ApplyOptions(rewrite=SETTINGS),
                    target_identity=IDENTITY)
    assert [r.phase for r in outcome.rewrites] == [machine.READY]
    routing.clear()
    return client


def _old_row(client, device: str, seq: int) -> dict | None:
    _, row, _ = client.get_row("svc_tallies", [("device", device), ("seq", seq)], max_version=1)
    return None if row is None else {c[0]: c[1] for c in row.attribute_columns}


@pytest.mark.slow
def test_an_update_routed_to_the_old_table_is_refused_naming_it(ots_instance):
    client = _ready(ots_instance)
    new = Rows(TallyV2, client, retry=FAST)
    old = Rows(Tally, client, retry=FAST)
    # TallyV2's own table takes updates, but until the switch its writes go to svc_tallies.
    with pytest.raises(UpdateNotAllowed) as raised:
        new.update({"seq": 1, "device": "d1"}, increment={"count": 1})
    _refused(raised, "svc_tallies", "TallyV2")
    assert "svc_tallies takes the writes of TallyV2 while the rewrite into svc_tallies_by_seq " \
           "is ready" in str(raised.value)
    with pytest.raises(UpdateNotAllowed) as raised:
        new.batch_write(put=[TallyV2(seq=9, device="d9", count=9)],
                        update=[Update({"seq": 1, "device": "d1"}, set={"note": "x"})])
    _refused(raised, "svc_tallies", "TallyV2")
    assert _old_row(client, "d9", 9) is None  # the batch's put was not sent
    with pytest.raises(UpdateNotAllowed) as raised:  # the old model: its own table
        old.update({"device": "d1", "seq": 1}, delete=["note"])
    _refused(raised, "svc_tallies", "Tally")

    async def async_update():
        async_client = ots_instance.async_client()
        try:
            rows = AsyncRows(TallyV2, async_client, retry=FAST)
            with pytest.raises(UpdateNotAllowed) as single:
                await rows.update({"seq": 1, "device": "d1"}, set={"note": "async"})
            with pytest.raises(UpdateNotAllowed) as batched:
                await rows.batch_write(update=[Update({"seq": 2, "device": "d2"},
                                                      increment={"count": 1})])
            return single, batched
        finally:
            await async_client.close()

    single, batched = asyncio.run(async_update())
    _refused(single, "svc_tallies", "TallyV2")
    _refused(batched, "svc_tallies", "TallyV2")
    assert _old_row(client, "d1", 1) == {"count": 0}
    assert _old_row(client, "d2", 2) == {"count": 0}
    # Whole rows go through, to the old table.
    new.put(TallyV2(seq=1, device="d1", count=1, note="put"))
    assert _old_row(client, "d1", 1) == {"count": 1, "note": "put"}
    routing.clear()


def test_the_other_table_of_a_rewrite_tells_whether_it_takes_updates():
    from tsmigrate.rewrite.job import RewriteJob
    from tsmigrate.schema.model import compile_models
    from tsmigrate.service.translate import Translator

    source = compile_models([Tally]).tables[0]
    target = compile_models([TallyV2]).tables[0]
    job = RewriteJob("svc_tallies_by_seq", source, target)
    # The old model writes the new table after the switch: it takes updates.
    assert Translator(job, own_is_source=True).other_allows_update is True
    # The new model writes the old table before it: it does not.
    assert Translator(job, own_is_source=False).other_allows_update is False
