"""Lint findings reach every plan output (text, Markdown, JSON, the --out file) and gate apply;
plan checks names and the table quota against the live instance. The command run in process
(``clirun``) on each project's embedded local instance."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import clirun
import pytest
import tablestore as ts

from tsmigrate.local.testing import local_tablestore

SIMPLE = """
from tsmigrate import Column, GlobalIndex, Model, PrimaryKey


class Orders(Model, table="orders", max_versions={versions}):
    user_id = PrimaryKey(str)
    order_id = PrimaryKey(int)
    status = Column(str, defined=True)
{index}
"""

TIME_FIRST = """
from tsmigrate import AccessPattern, Model, PrimaryKey


class Events(Model, table="events"):
    ts = PrimaryKey(int)
    device_id = PrimaryKey(str)
    by_device = AccessPattern(eq=["device_id"])
"""


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return clirun.run(cwd, *args)


def _project(root: Path, source: str, lint: str = "") -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n' + lint)
    (root / "app_models.py").write_text(textwrap.dedent(source))
    return root


def _simple(versions: int = 1, index: bool = True) -> str:
    line = '    by_status = GlobalIndex(keys=["status"])' if index else ""
    return SIMPLE.format(versions=versions, index=line)


@pytest.fixture
def changed(tmp_path: Path) -> Path:
    """A project applied once, then changed so that the plan drops an index (TS-DS102) and
    raises max versions (TS-VT201): rules that only judge plans."""
    project = _project(tmp_path, _simple())
    assert _run(project, "apply", "--yes").returncode == 0
    _project(project, _simple(versions=3, index=False))
    return project


PLAN_CODES = {"TS-DS102", "TS-VT201"}


def test_plan_rules_in_text(changed: Path):
    result = _run(changed, "plan")
    assert result.returncode == 0, result.stderr  # warnings only
    for code in PLAN_CODES:
        assert code in result.stdout
    assert "Lint: 2 warnings" in result.stdout
    assert "step 1: Orders" in result.stdout or "step 1: app_models.Orders" in result.stdout


def test_plan_rules_in_markdown(changed: Path):
    result = _run(changed, "plan", "--format", "markdown")
    assert result.returncode == 0, result.stderr
    for code in PLAN_CODES:
        assert f"| warning | `{code}` |" in result.stdout
    assert "**Lint:** no findings." not in result.stdout


def test_plan_rules_in_json_and_the_plan_file(changed: Path):
    result = _run(changed, "plan", "--format", "json", "--out", "plan.json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)["lint"]
    assert {f["code"] for f in shown} == PLAN_CODES
    assert all(f["step"] for f in shown)  # each names its step
    assert json.loads((changed / "plan.json").read_text())["lint"] == shown


@pytest.mark.slow
def test_configured_severity_makes_plan_and_apply_fail_with_exit_3(tmp_path: Path):
    no_pattern = TIME_FIRST.replace('    by_device = AccessPattern(eq=["device_id"])\n', "")
    project = _project(tmp_path, no_pattern,
                       lint='[tool.tsmigrate.lint]\nseverity = {"TS-PK303" = "error"}\n')
    for fmt in ("text", "markdown", "json"):
        result = _run(project, "plan", "--format", fmt, "--detailed-exitcode")
        assert result.returncode == 3, (fmt, result.stdout, result.stderr)
        assert "TS-PK303" in result.stdout
    refused = _run(project, "apply", "--yes")
    assert refused.returncode == 3
    assert "lint found 1 error" in refused.stderr and "TS-PK303" in refused.stderr
    assert "Traceback" not in refused.stderr
    # Nothing was created: the plan is unchanged.
    assert "create table events" in _run(project, "plan").stdout


def test_model_rules_reach_every_format(tmp_path: Path):
    project = _project(tmp_path, TIME_FIRST)
    text = _run(project, "plan")
    assert text.returncode == 3
    assert "TS-AP501" in text.stdout and "TS-PK303" in text.stdout
    markdown = _run(project, "plan", "--format", "markdown").stdout
    assert "| error | `TS-AP501` |" in markdown and "`TS-PK303`" in markdown
    codes = {f["code"] for f in json.loads(_run(project, "plan", "--format", "json").stdout)["lint"]}
    assert {"TS-AP501", "TS-PK303"} <= codes


def test_apply_json_result(changed: Path):
    refused = _run(changed, "apply", "--yes", "--format", "json")
    assert refused.returncode == 1  # the index drop is destructive
    result = json.loads(refused.stdout)
    assert result["outcome"] == "refused" and "--allow-destructive" in result["errors"][0]
    assert [s["status"] for s in result["steps"]] == ["not run"] * len(result["steps"])
    applied = _run(changed, "apply", "--yes", "--allow-destructive", "--format", "json")
    assert applied.returncode == 0, applied.stderr
    result = json.loads(applied.stdout)
    assert result["outcome"] == "applied" and result["executed"] == len(result["steps"]) == 2
    assert {f["code"] for f in result["lint"]} == PLAN_CODES
    assert all(s["status"] == "done" for s in result["steps"])
    again = json.loads(_run(changed, "apply", "--yes", "--format", "json").stdout)
    assert again["outcome"] == "no changes" and again["steps"] == []


def _live_tables(project: Path, names: list[str], index: str | None = None) -> None:
    """Tables created behind tsmigrate's back on the project's embedded instance."""
    data = project / ".tsmigrate" / "local"
    data.mkdir(parents=True, exist_ok=True)
    with local_tablestore(memory=False, data_dir=str(data), instance="local") as ots:
        client = ots.client()
        for name in names:
            meta = ts.TableMeta(name, [("k", "STRING")], [("v", "STRING")])
            indexes = [ts.SecondaryIndexMeta(index, ["v"], [])] if index and name == names[0] else []
            client.create_table(meta, ts.TableOptions(), ts.ReservedThroughput(ts.CapacityUnit(0, 0)),
                                secondary_indexes=indexes)


def test_a_name_taken_on_the_instance_is_refused_at_plan_time(tmp_path: Path):
    project = _project(tmp_path, _simple().replace('keys=["status"]', 'keys=["status"], name="legacy_idx"'))
    _live_tables(project, ["legacy"], index="legacy_idx")
    result = _run(project, "plan")
    assert result.returncode == 1
    # Refused at plan time, naming the index and who holds the name.
    assert "legacy_idx" in result.stderr and "legacy" in result.stderr
    assert ("step 1 creates index 'legacy_idx', but the instance already has index 'legacy_idx' "
            "of table 'legacy'") in result.stderr
    assert "[instance.name-taken]" in result.stderr and "name='orders_legacy_idx'" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_table_quota_counts_what_is_live(tmp_path: Path):
    source = ["from tsmigrate import Model, PrimaryKey", ""]
    for i in range(20):
        source += [f"class T{i:02d}(Model, table='t{i:02d}'):", "    pk = PrimaryKey(str)", ""]
    project = _project(tmp_path, "\n".join(source))
    _live_tables(project, [f"old{i:02d}" for i in range(44)])  # 44 + state table + 20 = 65
    result = _run(project, "plan")
    assert result.returncode == 1, result.stdout
    assert "step 20 (create table t19 (pk STRING)) would make 65 tables and index tables" in result.stderr
    assert "app_models.T19 (table 't19')" in result.stderr  # names the table
    assert "[instance.table-quota]" in result.stderr


@pytest.mark.slow
def test_ap501_fix_proposes_a_key_reorder_only_where_the_table_may_not_exist(tmp_path: Path):
    """A key cannot change in place: plan on an existing table proposes an index, plan before
    the table exists a reordered key, and lint (no instance) says which applies when."""
    served = TIME_FIRST.replace('    by_device = AccessPattern(eq=["device_id"])\n', "")
    project = _project(tmp_path, TIME_FIRST)
    before = json.loads(_run(project, "plan", "--format", "json").stdout)
    [finding] = [f for f in before["lint"] if f["code"] == "TS-AP501"]
    assert finding["fix"] == ("table events does not exist yet: declare its primary key in the "
                              "order (device_id, ts), which serves every declared pattern")
    linted = _run(project, "lint", "--format", "json")
    [finding] = [f for f in json.loads(linted.stdout) if f["code"] == "TS-AP501"]
    assert finding["fix"].startswith("if table events is not created yet, declare its primary key")
    assert "once it exists its key cannot change, so add GlobalIndex(keys=['device_id'])" in finding["fix"]

    _project(project, served)
    assert _run(project, "apply", "--yes").returncode == 0
    _project(project, TIME_FIRST)
    for fmt in ("text", "markdown"):
        shown = _run(project, "plan", "--format", fmt).stdout
        assert "TS-AP501" in shown and "does not exist yet" not in shown
    existing = json.loads(_run(project, "plan", "--format", "json").stdout)
    [finding] = [f for f in existing["lint"] if f["code"] == "TS-AP501"]
    assert finding["fix"] == "add GlobalIndex(keys=['device_id'])"
