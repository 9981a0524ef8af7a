"""`tsmigrate plan` / `inspect` end to end: the command run in process (``clirun``), the embedded
local instance."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import clirun
import pytest


def _run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return clirun.run(cwd, *args, extra_env=env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(textwrap.dedent("""
        from tsmigrate import Column, GlobalIndex, Model, PrimaryKey

        class Order(Model, table="orders"):
            user_id = PrimaryKey(str)
            order_id = PrimaryKey(int)
            status = Column(str, defined=True)
            by_status = GlobalIndex(keys=["status"])
    """))
    return tmp_path


def test_plan_on_fresh_project_uses_embedded_instance(project: Path):
    result = _run(project, "plan")
    assert result.returncode == 0, result.stderr
    assert "embedded local instance" in result.stdout
    assert "create table orders (user_id STRING, order_id INTEGER) with 1 secondary index" in result.stdout
    assert (project / ".tsmigrate" / "local").is_dir()
    assert "Traceback" not in result.stderr


def test_plan_formats_and_detailed_exitcode(project: Path):
    changed = _run(project, "plan", "--format", "json", "--detailed-exitcode", "--out", "plan.json")
    assert changed.returncode == 2, changed.stderr
    data = json.loads(changed.stdout)
    assert data["has_changes"] is True
    assert [s["kind"] for s in data["steps"]] == ["create_table"]
    document = json.loads((project / "plan.json").read_text())
    assert document["steps"] == data["steps"]
    here = project.resolve() / ".tsmigrate" / "local"
    assert document["target"] == f"local:{here}#local" and document["checksum"].startswith("sha256:")
    markdown = _run(project, "plan", "--format", "markdown")
    assert markdown.returncode == 0
    assert "| 1 | `+` | create table orders" in markdown.stdout


def test_inspect_empty_instance(project: Path):
    result = _run(project, "inspect", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tables"] == []


def test_unreachable_endpoint_and_missing_credentials(project: Path):
    no_creds = _run(project, "plan", "--endpoint", "http://127.0.0.1:9", "--instance", "x")
    assert no_creds.returncode == 1
    assert "ALIBABA_CLOUD_ACCESS_KEY_ID" in no_creds.stderr
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "id", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s3cr3t-value"}
    down = _run(project, "plan", "--endpoint", "http://127.0.0.1:9", "--instance", "x", env=env)
    assert down.returncode == 1
    assert "cannot reach" in down.stderr
    assert "s3cr3t-value" not in down.stderr + down.stdout
    assert "Traceback" not in down.stderr


def test_wrong_credentials_against_a_local_server(project: Path, local_ots):
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": local_ots.access_key_id,
           "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "wrong-secret"}
    result = _run(project, "plan", "--endpoint", local_ots.endpoint, "--instance", local_ots.instance,
                  env=env)
    assert result.returncode == 1
    assert "OTSAuthFailed" in result.stderr
    assert "wrong-secret" not in result.stderr


def test_unknown_target_and_broken_models(project: Path):
    unknown = _run(project, "plan", "--target", "prod")
    assert unknown.returncode == 1
    assert "unknown target 'prod'" in unknown.stderr
    (project / "app_models.py").write_text("import does_not_exist\n")
    broken = _run(project, "plan")
    assert broken.returncode == 1
    assert "cannot import models module 'app_models'" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_a_plan_file_of_one_projects_embedded_instance_is_refused_in_another(project: Path,
                                                                             tmp_path_factory):
    """Every project has its own embedded instance: a plan file names it, not just 'local'."""
    assert _run(project, "plan", "--out", "plan.json").returncode == 0
    other = tmp_path_factory.mktemp("other")
    for name in ("pyproject.toml", "app_models.py"):
        (other / name).write_text((project / name).read_text())
    refused = _run(other, "apply", "--yes", "--plan", str(project / "plan.json"))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"was made for local:{project.resolve()}/.tsmigrate/local#local, not for " \
        f"local:{other.resolve()}/.tsmigrate/local#local" in refused.stderr
    assert _run(project, "apply", "--yes", "--plan", "plan.json").returncode == 0


def test_every_step_has_a_reason_and_durations_read_as_models_declare_them(project: Path):
    """Safe steps too carry a reason (text, Markdown, JSON); a TTL or deviation prints as 90d or
    2h in summaries and reasons alike, never as seconds."""
    assert _run(project, "apply", "--yes").returncode == 0
    models = project / "app_models.py"
    models.write_text(models.read_text().replace(
        'class Order(Model, table="orders"):',
        'class Order(Model, table="orders", ttl="90d", max_time_deviation="2h", stream="12h", '
        'allow_update=False):'
    ).replace("    by_status", "    note = Column(str, defined=True)\n    by_status"))
    data = json.loads(_run(project, "plan", "--format", "json").stdout)
    kinds = [s["kind"] for s in data["steps"]]
    assert kinds == ["update_options", "update_options", "add_defined_columns", "update_stream"]
    assert all(s["reason"] for s in data["steps"])
    assert [s["risk"] for s in data["steps"]] == ["safe", "destructive", "safe", "safe"]
    first, ttl = data["steps"][:2]
    assert first["summary"] == ("update options of orders: max_time_deviation 1d -> 2h, "
                                "allow_update True -> False")
    assert "max time deviation 1d -> 2h" in first["reason"]
    assert ttl["summary"] == "update options of orders: time_to_live forever -> 90d"
    assert ttl["reason"] == "lowering TTL from forever to 90d deletes cells older than 90d"
    assert ttl["args"]["after"]["time_to_live"] == 90 * 86400  # data stays in seconds
    for fmt in ("text", "markdown"):
        shown = _run(project, "plan", "--format", fmt).stdout
        assert "time_to_live forever -> 90d" in shown and "7776000" not in shown
        assert "only the declaration is added" in shown  # add_defined_columns' reason
        assert "(records kept 12h)" in shown
