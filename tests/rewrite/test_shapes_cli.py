"""A rewrite's two tables checked before anything moves, as a user meets it: `tsmigrate plan`
says on the step when rows written after the switch cannot go back (text, Markdown, JSON);
`plan` and `apply` refuse tables the rewrite cannot work with, naming the rule and the fix; and
prepare checks the tables' live options again (a table changed by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import clirun
import pytest
import tablestore as ts

from tsmigrate.contract import shapes
from tsmigrate.instance import adapter
from tsmigrate.instance.state import State
from tsmigrate.planning import ops
from tsmigrate.rewrite import driver, machine, planned
from tsmigrate.rewrite.planned import RewriteSettings
from tsmigrate.schema import INTEGER, STRING, Catalog, PrimaryKeyColumn, Table, TableOptions

OLD = '''
from tsmigrate import Column, Model, PrimaryKey


class Reading(Model, table="readings"{options}):
    device = PrimaryKey(str)
    ts = PrimaryKey(int)
    seq = Column(int)
    temp = Column(float)
'''
NEW = '''
from tsmigrate import Column, Model, PrimaryKey


class ReadingV2(Model, table="readings_by_seq", replaces="readings"{options}):
    device = PrimaryKey(str)
    seq = PrimaryKey(int)
    temp = Column(float)
{extra}'''
NO_REVERT = ("revert after switch is not possible: the new model's rows have no 'ts', a field of "
             "the old key (the key of readings is built from device, ts): declare ts = "
             "Column(int) on ReadingV2 to keep revert possible")

_run = clirun.run_on


def _project(root: Path, ots, old_options: str = "", new_options: str = "", extra: str = "") -> Path:
    """The old model applied with a few readings, then the model file changed to the new one."""
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(OLD.format(options=old_options))
    assert _run(root, ots, "apply", "--yes").returncode == 0
    client = ots.client()
    for i in range(3):
        client.put_row("readings", ts.Row([("device", f"d{i}"), ("ts", 1000 + i)],
                                          [("seq", i), ("temp", 20.5)]))
    (root / "app_models.py").write_text(NEW.format(options=new_options, extra=extra))
    return root


@pytest.mark.slow
def test_plan_says_on_the_step_that_revert_is_not_possible_in_every_format(tmp_path, ots_instance):
    project = _project(tmp_path, ots_instance)
    text = _run(project, ots_instance, "plan").stdout
    assert "rewrite readings into readings_by_seq" in text and f"! {NO_REVERT}" in text
    markdown = _run(project, ots_instance, "plan", "--format", "markdown").stdout
    assert f"**{NO_REVERT}**" in markdown
    data = json.loads(_run(project, ots_instance, "plan", "--format", "json").stdout)
    [step] = [s for s in data["steps"] if s["kind"] == "rewrite_table"]
    assert step["args"]["revert"] == {"possible": False,
                                      "reason": NO_REVERT.split("possible: ", 1)[1]}

    # Declared, the old key's field makes revert possible again, and plan says nothing of it.
    (project / "app_models.py").write_text(NEW.format(options="", extra="    ts = Column(int)\n"))
    assert "revert after switch" not in _run(project, ots_instance, "plan").stdout
    data = json.loads(_run(project, ots_instance, "plan", "--format", "json").stdout)
    [step] = [s for s in data["steps"] if s["kind"] == "rewrite_table"]
    assert step["args"]["revert"] == {"possible": True, "reason": None}


def test_plan_and_apply_refuse_tables_the_rewrite_cannot_work_with_naming_rule_and_fix(
        tmp_path, ots_instance):
    project = _project(tmp_path, ots_instance, old_options=', ttl="30d"', new_options=', ttl="1d"',
                       extra="    ts = Column(int)\n")
    for command in ("plan", "apply"):
        refused = _run(project, ots_instance, command, *(["--yes"] if command == "apply" else []))
        assert refused.returncode == 1
        assert "rewrite.ttl-shorter" in refused.stderr
        assert ("readings_by_seq keeps cells 1d but readings, which it replaces, keeps them 30d"
                in refused.stderr)
        assert 'fix: declare ttl="30d" on ReadingV2 for the rewrite' in refused.stderr
    as_json = json.loads(_run(project, ots_instance, "apply", "--yes", "--format", "json").stdout)
    assert as_json["outcome"] == "refused" and "rewrite.ttl-shorter" in as_json["errors"][0]
    client = ots_instance.client()
    assert "readings_by_seq" not in client.list_table()  # nothing moved
    assert machine.load(client, "readings_by_seq") is None

    # A new table created beforehand (apply would start the rewrite without a plan step): the
    # declared options are checked the same way.
    client.create_table(ts.TableMeta("readings_by_seq", [("device", "STRING"), ("seq", "INTEGER")]),
                        ts.TableOptions(86400, 1, 86400), ts.ReservedThroughput(ts.CapacityUnit(0, 0)))
    refused = _run(project, ots_instance, "plan")
    assert refused.returncode == 1 and "rewrite.ttl-shorter" in refused.stderr
    assert machine.load(client, "readings_by_seq") is None


def test_prepare_checks_the_live_options_and_refuses_before_writing_anything(ots_instance):
    """The tables as the service has them now: the new one's TTL lowered by hand after plan."""
    client = ots_instance.client()
    State(client).ensure_table()
    source = Table("readings", [PrimaryKeyColumn("device", STRING), PrimaryKeyColumn("ts", INTEGER)],
                   options=TableOptions(time_to_live=30 * 86400))
    target = Table("readings_by_seq", [PrimaryKeyColumn("ts", INTEGER), PrimaryKeyColumn("device", STRING)],
                   options=TableOptions(time_to_live=30 * 86400), replaces="readings")
    for table in (source, target):
        adapter.execute(client, ops.CreateTable(table.name, table))
    client.put_row("readings", ts.Row([("device", "d1"), ("ts", 1)], [("temp", 20.5)]))
    client.update_table("readings_by_seq", ts.TableOptions(86400, 1, 86400))  # by hand
    planned.start(client, Catalog([source]), Catalog([target]),
                  ops.RewriteTable(target.name, source.name, "ts first"))
    with pytest.raises(shapes.RewriteShapeError, match=r"rewrite\.ttl-shorter"):
        planned.run(client, target.name, RewriteSettings(options=driver.RunOptions(workers=1)))
    rewrite = machine.load(client, target.name)
    assert rewrite.phase == machine.FAILED and "rewrite.ttl-shorter" in rewrite.error
    # Refused before anything was written: no stream turned on, no deviation widened, no row.
    assert "stream_was" not in rewrite.doc and "declared_deviation" not in rewrite.doc
    assert client.describe_table("readings_by_seq").table_options.max_time_deviation == 86400
    _, _, rows, _ = client.get_range("readings_by_seq", ts.Direction.FORWARD,
                                     [("ts", ts.INF_MIN), ("device", ts.INF_MIN)],
                                     [("ts", ts.INF_MAX), ("device", ts.INF_MAX)], limit=1)
    assert rows == []

    # Put back as declared, the same rewrite goes on from prepare.
    client.update_table("readings_by_seq", ts.TableOptions(30 * 86400, 1, 86400))
    done = planned.run(client, target.name, RewriteSettings(options=driver.RunOptions(workers=1)))
    assert done.phase == machine.READY
