"""A service routing a table under rewrite loads no module of the engine: what it shares with
the engine (the phases, the state row's format, the routing timing, the key transform and its
inverse) is ``tsmigrate.contract`` (#40).

The rewrite is set up here (``counters`` into ``counters_by_seq``, at ready: the source takes
the writes); a fresh interpreter then imports ``tsmigrate.service`` and reads and writes rows of
the new model, which routing sends to the source through the inverse key transform, and lists
the modules it loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import cutover_tables as ct
import pytest

from tsmigrate.contract import phases, routes, staterow
from tsmigrate.instance.state import STATE_TABLE
from tsmigrate.rewrite import machine
from tsmigrate.service import routing

ENGINE = ("tsmigrate.rewrite", "tsmigrate.reindex", "tsmigrate.versions", "tsmigrate.planning",
          "tsmigrate.commands")

CHILD = r'''
import json, os, sys

import tablestore as ts

import tsmigrate.service
from tsmigrate import Column, Model, PrimaryKey


class CounterV2(Model, table="counters_by_seq", replaces="counters", max_versions=1):
    seq = PrimaryKey(int)
    device = PrimaryKey(str)
    count = Column(int)
    note = Column(str)


env = os.environ
client = ts.OTSClient(env["TS_ENDPOINT"], env["TS_KEY_ID"], env["TS_KEY_SECRET"], env["TS_INSTANCE"])
rows = tsmigrate.service.Rows(CounterV2, client)
read = rows.get({"seq": 3, "device": "d3"})
rows.put(CounterV2(seq=100, device="d0", count=7, note="child"))
rows.update({"seq": 5, "device": "d1"}, increment={"count": 2})
again = rows.get({"seq": 100, "device": "d0"})
print(json.dumps({
    "read": None if read is None else [read.count, read.note],
    "again": None if again is None else [again.count, again.note],
    "modules": sorted(sys.modules),
}))
'''


@pytest.mark.slow
def test_a_service_routing_a_rewrite_loads_no_module_of_the_engine(ots_instance):
    client = ct.ready(ots_instance)
    rewrite = machine.load(client, ct.TARGET)
    assert rewrite.side == machine.SOURCE  # the new model's rows go to the source: translated
    env = {**os.environ, "TS_ENDPOINT": ots_instance.endpoint, "TS_INSTANCE": ots_instance.instance,
           "TS_KEY_ID": ots_instance.access_key_id, "TS_KEY_SECRET": ots_instance.access_key_secret}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])

    # The rows went where routing says, through the rewrite's inverse key transform.
    assert out["read"] == [0, "start"]
    assert out["again"] == [7, "child"]
    _, row, _ = client.get_row("counters", [("device", "d0"), ("seq", 100)], max_version=1)
    assert row is not None and {c[0]: c[1] for c in row.attribute_columns} == {"count": 7, "note": "child"}
    _, row, _ = client.get_row("counters", [("device", "d1"), ("seq", 5)], max_version=1)
    assert {c[0]: c[1] for c in row.attribute_columns}["count"] == 2
    _, row, _ = client.get_row(ct.TARGET, [("seq", 100), ("device", "d0")], max_version=1)
    assert row is None  # not written on the target: capture has not run since

    modules = out["modules"]
    assert "tsmigrate.contract.transform" in modules  # routing did translate
    assert "tsmigrate.service.routing" in modules
    loaded = [m for m in modules if any(m == p or m.startswith(p + ".") for p in ENGINE)]
    assert loaded == []


def test_the_contract_names_what_services_and_the_engine_each_name_too():
    assert staterow.STATE_TABLE == STATE_TABLE  # tsmigrate.instance.state's, not imported by services
    assert routing.WritesHeld.__name__ == routes.HELD_ERROR
    assert (routing.STATE_TABLE, routing.CLIENT_KIND, routing.LEASE_S) == (
        staterow.STATE_TABLE, staterow.CLIENT_KIND, routes.LEASE_S)
    assert (machine.KIND, machine.row_problems, machine.RewriteJob) == (
        staterow.KIND, staterow.row_problems, staterow.RewriteJob)
    assert machine.side is phases.side and machine.ENDED == phases.ENDED
