"""`upgrade --dry-run` prints the service calls of every step kind the adapter executes."""

from __future__ import annotations

from tsmigrate.instance import adapter
from tsmigrate.planning import ops
from tsmigrate.schema import (
    DefinedColumn,
    PrimaryKeyColumn,
    ReservedThroughput,
    SearchField,
    SearchIndex,
    SecondaryIndex,
    StreamSpec,
    Table,
    TableOptions,
)

TABLE = Table("t", [PrimaryKeyColumn("id", "STRING")], defined_columns=[DefinedColumn("s", "STRING")],
              secondary_indexes=[SecondaryIndex("by_s", ["s"])], stream=StreamSpec(True, 48))
SEARCH = SearchIndex("find", [SearchField("s", "KEYWORD")])
STEPS = [
    ops.CreateTable("t", TABLE),
    ops.DropTable("t"),
    ops.RetireTable("t_202401", "oss://b/archive/"),
    ops.UpdateOptions("t", TableOptions(), TableOptions(time_to_live=86400)),
    ops.UpdateThroughput("t", ReservedThroughput(), ReservedThroughput(1, 2)),
    ops.CreateIndex("t", SecondaryIndex("by_s", ["s"], include=["x"])),
    ops.DropIndex("t", SecondaryIndex("by_s", ["s"])),
    ops.CreateSearchIndex("t", SEARCH),
    ops.DropSearchIndex("t", SEARCH),
    ops.UpdateSearchIndexTTL("t", "find", -1, 86400),
    ops.UpdateStream("t", StreamSpec(), StreamSpec(True, 24)),
    ops.AddDefinedColumns("t", [DefinedColumn("s", "STRING")]),
    ops.DeleteDefinedColumns("t", [DefinedColumn("s", "STRING")]),
]


def test_every_executed_step_kind_has_its_calls_described() -> None:
    assert set(adapter.CALLS) == set(adapter.EXECUTORS)
    assert {type(step) for step in STEPS} == set(adapter.EXECUTORS)
    text = {type(step): adapter.calls(step) for step in STEPS}
    assert text[ops.CreateTable] == [
        "CreateTable t: primary key (id STRING); defined columns (s STRING); time_to_live=-1, "
        "max_versions=1, max_time_deviation=86400, allow_update=True; reserved read=0 write=0; "
        "global index by_s on (s)",
        "UpdateTable t: stream on, records kept 48 h",
    ]
    assert text[ops.CreateIndex] == ["CreateIndex t: global index by_s on (s) including (x)"]
    assert text[ops.RetireTable][-1] == "DeleteTable t_202401"
    assert text[ops.UpdateStream] == ["UpdateTable t: stream on, records kept 24 h"]
    assert text[ops.DeleteDefinedColumns] == ["DeleteDefinedColumn t: s"]
