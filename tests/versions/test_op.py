"""The `op` API: every call becomes the engine's own Step (or a data record), built against the
schema at that point, and replaying a chain offline gives the models' catalog."""

from __future__ import annotations

import pytest
from scriptdir import write_script

from tsmigrate import Column, GlobalIndex, Model, PrimaryKey, SearchField, SearchIndex
from tsmigrate.keys import HashPrefix
from tsmigrate.planning import ops
from tsmigrate.planning.plan import make_plan
from tsmigrate.schema import (
    Catalog,
    DefinedColumn,
    ReservedThroughput,
    SecondaryIndex,
    StreamSpec,
    TableOptions,
)
from tsmigrate.schema import SearchField as IRField
from tsmigrate.schema import SearchIndex as IRSearchIndex
from tsmigrate.schema.model import compile_models
from tsmigrate.versions.errors import IrreversibleError, OperationError, ReplayError
from tsmigrate.versions.op import Backfill, Operations, TransformedRewrite
from tsmigrate.versions.replay import apply_operations, collect, replay
from tsmigrate.versions.scripts import ScriptDirectory


class OpOrders(Model, table="op_orders", max_versions=1, allow_update=False):
    pk = PrimaryKey(str, derive=HashPrefix("customer", length=4))
    seq = PrimaryKey(int)
    customer = Column(str, defined=True)
    status = Column(str, defined=True)
    by_status = GlobalIndex(keys=["status"], name="op_orders_by_status")
    finder = SearchIndex(fields=[SearchField("status", "keyword")])


def test_create_table_from_a_model_is_the_plans_steps():
    op = Operations()
    op.create_table(OpOrders)
    declared = compile_models([OpOrders])
    assert tuple(op.operations) == make_plan(Catalog(), declared).steps
    assert [type(s) for s in op.operations] == [ops.CreateTable, ops.CreateSearchIndex]
    # The predicted schema keeps the key derivation (as apply's recorded catalog does).
    assert op.catalog.table("op_orders").primary_key[0].derivation == HashPrefix("customer", length=4)
    assert make_plan(op.catalog, declared).steps == ()


def test_each_call_carries_its_before_state():
    op = Operations()
    op.create_table(OpOrders)
    op.update_options("op_orders", time_to_live="30d", max_versions=1)
    op.update_throughput("op_orders", read=5)
    op.add_defined_columns("op_orders", ("region", str), DefinedColumn("amount", "INTEGER"))
    op.delete_defined_columns("op_orders", "amount")
    op.create_index("op_orders", "op_orders_by_region", keys=["region"], include=["status"])
    op.drop_index("op_orders", "op_orders_by_status")
    op.create_search_index("op_orders", IRSearchIndex("f2", fields=[IRField("region", "KEYWORD")]))
    op.update_search_index_ttl("op_orders", "f2", "30d")
    op.drop_search_index("op_orders", "finder")
    op.update_stream("op_orders", enabled=True, expiration_hours=48)
    steps = op.operations[2:]
    assert steps[0] == ops.UpdateOptions("op_orders", TableOptions(allow_update=False),
                                         TableOptions(time_to_live=30 * 86400, allow_update=False))
    assert steps[1] == ops.UpdateThroughput("op_orders", ReservedThroughput(), ReservedThroughput(5, 0))
    assert steps[2] == ops.AddDefinedColumns("op_orders", [DefinedColumn("region", "STRING"),
                                                           DefinedColumn("amount", "INTEGER")])
    assert steps[3] == ops.DeleteDefinedColumns("op_orders", [DefinedColumn("amount", "INTEGER")])
    assert steps[4] == ops.CreateIndex("op_orders", SecondaryIndex("op_orders_by_region", ["region"],
                                                                   ["status"]))
    assert steps[5] == ops.DropIndex("op_orders", SecondaryIndex("op_orders_by_status", ["status"]))
    assert isinstance(steps[6], ops.CreateSearchIndex)
    assert steps[7] == ops.UpdateSearchIndexTTL("op_orders", "f2", -1, 30 * 86400)
    assert steps[8].kind == "drop_search_index" and steps[8].index.name == "finder"
    assert steps[9] == ops.UpdateStream("op_orders", StreamSpec(), StreamSpec(True, 48))
    # The predicted catalog is the one the engine's own prediction gives, step by step.
    assert apply_operations(Catalog(), op.operations) == op.catalog
    table = op.catalog.table("op_orders")
    assert [i.name for i in table.secondary_indexes] == ["op_orders_by_region"]
    assert [i.name for i in table.search_indexes] == ["f2"]
    assert table.stream == StreamSpec(True, 48) and table.options.time_to_live == 30 * 86400


def test_no_op_calls_collect_nothing():
    op = Operations()
    op.create_table(OpOrders)
    count = len(op.operations)
    op.update_options("op_orders", max_versions=1)
    op.update_stream("op_orders", enabled=False)
    op.update_throughput("op_orders")
    assert len(op.operations) == count


def test_calls_that_cannot_apply_are_operation_errors():
    op = Operations()
    with pytest.raises(OperationError, match=r"table 'nope' does not exist at this point"):
        op.add_defined_columns("nope", ("x", str))
    op.create_table(OpOrders)
    with pytest.raises(OperationError, match=r"'op_orders' already exists"):
        op.create_table(OpOrders)
    with pytest.raises(OperationError, match=r"no secondary index 'zz'"):
        op.drop_index("op_orders", "zz")
    with pytest.raises(OperationError, match=r"already has defined column"):
        op.add_defined_columns("op_orders", ("status", str))
    with pytest.raises(OperationError, match=r"no defined column"):
        op.delete_defined_columns("op_orders", "nothing")
    with pytest.raises(OperationError, match=r"'90x' is not a duration"):
        op.update_options("op_orders", time_to_live="90x")
    with pytest.raises(OperationError, match=r"defined at the top level of the script"):
        op.backfill("op_orders", lambda row: row)
    with pytest.raises(IrreversibleError, match=r"op cannot be downgraded: data is gone"):
        op.irreversible("data is gone")


def test_drop_table_drops_its_search_indexes_first():
    op = Operations()
    op.create_table(OpOrders)
    before = len(op.operations)
    op.drop_table("op_orders")
    assert [s.kind for s in op.operations[before:]] == ["drop_search_index", "drop_table"]
    assert op.catalog == Catalog()


CHAIN_HEADER = """
from tsmigrate.schema import DefinedColumn, PrimaryKeyColumn, SecondaryIndex, Table


def fill_region(row):
    return {"region": "eu"}


def reverse_id(values):
    return {**values, "id": values["id"][::-1]}

ACCOUNTS = Table("op_accounts", [PrimaryKeyColumn("id", "STRING")],
                 defined_columns=[DefinedColumn("region", "STRING")])
ACCOUNTS_V2 = Table("op_accounts_v2", [PrimaryKeyColumn("id", "STRING")],
                    defined_columns=[DefinedColumn("region", "STRING")])
"""


def _chain(tmp_path):
    migrations = tmp_path / "migrations"
    write_script(migrations, "a1", None, header=CHAIN_HEADER, message="accounts",
                 upgrade="op.create_table(ACCOUNTS)", downgrade="op.drop_table('op_accounts')")
    write_script(migrations, "b2", "a1", header=CHAIN_HEADER, message="index and backfill",
                 upgrade="""
                     op.create_index('op_accounts', 'op_accounts_by_region', keys=['region'])
                     op.backfill('op_accounts', fill_region, columns=['region'])
                 """,
                 downgrade="op.drop_index('op_accounts', 'op_accounts_by_region')")
    write_script(migrations, "c3", "b2", header=CHAIN_HEADER, message="rewrite",
                 upgrade="op.rewrite_table('op_accounts', ACCOUNTS_V2, transform=reverse_id)",
                 downgrade="op.irreversible('rows were copied with reversed ids')")
    return ScriptDirectory.load("migrations", tmp_path)


def test_a_chain_replays_offline_and_collects_data_records(tmp_path):
    directory = _chain(tmp_path)
    catalog = replay(directory)
    assert [t.name for t in catalog.tables] == ["op_accounts", "op_accounts_v2"]
    assert [i.name for i in catalog.table("op_accounts").secondary_indexes] == ["op_accounts_by_region"]
    b2 = collect(directory.get("b2"), "upgrade", replay(directory, "a1"))
    backfill = b2.operations[1]
    assert isinstance(backfill, Backfill) and backfill.columns == ("region",)
    assert backfill.fn({"id": "x"}) == {"region": "eu"}
    assert backfill.reference == f"{directory.get('b2').path}:fill_region"
    c3 = collect(directory.get("c3"), "upgrade", b2.catalog_after)
    rewrite = c3.operations[-1]
    assert isinstance(rewrite, TransformedRewrite)
    assert rewrite.step == ops.RewriteTable("op_accounts_v2", "op_accounts", "the table gets a new name")
    assert rewrite.transform({"id": "abc"}) == {"id": "cba"}
    assert rewrite.to_dict()["args"]["transform"].endswith(":reverse_id")
    # Downgrades give back the parent's schema; an irreversible one says why.
    assert collect(directory.get("b2"), "downgrade", b2.catalog_after).catalog_after == b2.catalog_before
    with pytest.raises(IrreversibleError, match=r"revision c3 .* cannot be downgraded: rows were copied"):
        collect(directory.get("c3"), "downgrade", c3.catalog_after)


def test_a_failing_upgrade_and_an_invalid_result_are_replay_errors(tmp_path):
    migrations = tmp_path / "migrations"
    write_script(migrations, "a1", None, upgrade="op.create_table(None)")
    with pytest.raises(OperationError, match=r"revision a1 .*expected a schema Table or a Model"):
        replay(ScriptDirectory.load("migrations", tmp_path))
    write_script(migrations, "a1", None, upgrade="x = 1 / 0")
    with pytest.raises(ReplayError, match=r"revision a1 .* upgrade\(\) fails at line \d+: ZeroDivisionError"):
        replay(ScriptDirectory.load("migrations", tmp_path))
    write_script(migrations, "a1", None, header="from tsmigrate.schema import PrimaryKeyColumn, Table",
                 upgrade="op.create_table(Table('t', [PrimaryKeyColumn('a', 'DOUBLE')]))")
    with pytest.raises(ReplayError, match=r"a1 upgrade\(\) leaves a schema the service refuses"):
        replay(ScriptDirectory.load("migrations", tmp_path))


def test_reindex_search_index_gives_an_index_a_new_schema_under_its_name():
    op = Operations()
    op.create_table(OpOrders)
    op.create_search_index("op_orders", IRSearchIndex("f2", fields=[IRField("region", "KEYWORD")]))
    new = IRSearchIndex("f2", fields=[IRField("region", "TEXT"), IRField("status", "KEYWORD")])
    op.reindex_search_index("op_orders", new)
    step = op.operations[-1]
    assert isinstance(step, ops.ReindexSearchIndex) and step.risk == ops.DATA_COPY
    assert step.changes == ["field status added (keyword)", "field region: KEYWORD -> TEXT"]
    assert next(i for i in op.catalog.table("op_orders").search_indexes if i.name == "f2") == new
    count = len(op.operations)
    op.reindex_search_index("op_orders", new)  # already that schema: nothing to do
    assert len(op.operations) == count
    with pytest.raises(OperationError, match="has no search index 'nope'"):
        op.reindex_search_index("op_orders", IRSearchIndex("nope", fields=[IRField("region", "KEYWORD")]))
