"""Issue #38 (9), at plan's text and JSON output: with --prune, a table the plan drops is not
told to be dropped "with --prune"; search-index.ttl-allow-update is one finding an index; and
TS-PK301 on a rewrite says what the copy does (each cell with its original timestamp) and
what is left to check, instead of reading as a risk. Each project on its embedded instance."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import clirun
import rewrite_tables as rt

TWO_TABLES = """
from tsmigrate import Column, Model, PrimaryKey


class Orders(Model, table="orders"):
    order_id = PrimaryKey(str)
    status = Column(str)
{legacy}"""
LEGACY = """

class Legacy(Model, table="legacy"):
    id = PrimaryKey(str)
"""
SEARCHED = """
from tsmigrate import Column, Model, PrimaryKey, SearchField, SearchIndex


class Event(Model, table="events", ttl="30d", max_versions=1):
    id = PrimaryKey(str)
    kind = Column(str, defined=True)
    by_kind = SearchIndex(fields=[SearchField("kind", "keyword")])
    by_kind_too = SearchIndex(fields=[SearchField("kind", "keyword")])
"""


def _project(root: Path, models: str) -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(textwrap.dedent(models))
    return root


def test_prune_does_not_advise_prune_for_a_table_it_drops(tmp_path: Path) -> None:
    project = _project(tmp_path, TWO_TABLES.format(legacy=LEGACY))
    assert clirun.run(project, "apply", "--yes").returncode == 0
    (project / "app_models.py").write_text(TWO_TABLES.format(legacy=""))
    kept = json.loads(clirun.run(project, "plan", "--format", "json").stdout)
    assert kept["undeclared_tables"] == [{"name": "legacy", "note": "no model declares it"}]
    pruned = clirun.run(project, "plan", "--prune", "--format", "json")
    plan = json.loads(pruned.stdout)
    assert [s["summary"] for s in plan["steps"]] == ["drop table legacy"]
    assert plan["undeclared_tables"] == [
        {"name": "legacy", "note": "no model declares it; dropped by this plan (--prune)"}]
    text = clirun.run(project, "plan", "--prune").stdout
    assert "table legacy is not declared: no model declares it; dropped by this plan" in text
    assert "with --prune" not in text


def test_ttl_allow_update_is_one_finding_an_index(tmp_path: Path) -> None:
    """A table with a TTL that allows updates, and two search indexes that keep the table's TTL:
    the table's rule named the first index and the index's own rule named it again."""
    project = _project(tmp_path, SEARCHED)
    planned = clirun.run(project, "plan")
    assert planned.returncode == 1
    lines = [line for line in planned.stderr.splitlines() if "[search-index.ttl-allow-update]" in line]
    assert len(lines) == 2, planned.stderr
    assert "search index by_kind:" in lines[0] and "search index by_kind_too:" in lines[1]
    assert "error: 2 schema problem(s)" in planned.stderr
    findings = json.loads(clirun.run(project, "lint", "--format", "json").stdout)
    fields = [f["field"] for f in findings if "search-index.ttl-allow-update" in f["message"]]
    assert fields == ["search index by_kind", "search index by_kind_too"], findings


def test_pk301_says_what_the_rewrite_does_and_what_is_left_to_check(tmp_path: Path) -> None:
    project = _project(tmp_path, rt.MODELS_V1)
    assert clirun.run(project, "apply", "--yes").returncode == 0
    # The new table keeps one version of the three the old one keeps.
    (project / "app_models.py").write_text(rt.MODELS_V2.replace("max_versions=3,", "max_versions=1,"))
    planned = clirun.run(project, "plan", "--format", "json")
    assert planned.returncode == 0, planned.stderr
    [finding] = [f for f in json.loads(planned.stdout)["lint"] if f["code"] == "TS-PK301"]
    message = finding["message"]
    assert "the newest version of each cell, each with its original timestamp, so TTL counts " \
           "from the original write" in message, message
    assert "max_time_deviation of readings_by_seq is widened for the copy" in message
    assert "set back to 366d by `rewrite finish`" in message
    assert "must" not in message  # what tsmigrate does, not a risk left to the user
    assert message.endswith("To check: readings keeps 3 versions and readings_by_seq 1: the older "
                            "versions are not copied"), message
    assert "quiet period" not in finding["fix"]
    text = " ".join(clirun.run(project, "plan").stdout.split())
    assert "TS-PK301" in text and "each with its original timestamp" in text
