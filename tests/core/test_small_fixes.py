"""Issue 24 items 8 and 15: what plan, show, validate, lint and the local server tell a user, run
as the user runs them (the CLI in process, ``clirun.run``)."""

from __future__ import annotations

from pathlib import Path

import clirun
import pytest

from tsmigrate.local.auth import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET

MODEL = """
from tsmigrate import Column, Model, PrimaryKey


class Event(Model, table="events"):
    id = PrimaryKey(str)
    payload = Column(str, defined=True)
{extra}
"""


_env = clirun.instance_env


def _run(project: Path, *args: str, ots=None):
    result = clirun.run(project, *args, extra_env=_env(ots) if ots is not None else None)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_versioned_plan_reports_model_changes_no_revision_captures(tmp_path, ots_instance) -> None:
    """Item 8: a model changed without a revision is a change for plan, as it is for check."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tsmigrate]\nmodels = ["app_models"]\nmigrations = "migrations"\n'
        'workflow = "versioned"\n')
    (tmp_path / "app_models.py").write_text(MODEL.format(extra=""))
    written = _run(tmp_path, "revision", "-m", "events", "--autogenerate")
    assert written.returncode == 0, written.stderr
    upgraded = _run(tmp_path, "upgrade", "head", ots=ots_instance)
    assert upgraded.returncode == 0, upgraded.stderr
    quiet = _run(tmp_path, "plan", "--detailed-exitcode", ots=ots_instance)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert "no revision captures" not in quiet.stdout

    (tmp_path / "app_models.py").write_text(MODEL.format(extra="    region = Column(str, defined=True)"))
    changed = _run(tmp_path, "plan", "--detailed-exitcode", ots=ots_instance)
    assert changed.returncode == 2, changed.stdout + changed.stderr
    assert "the models have 1 change(s) no revision captures" in changed.stdout
    assert "add defined columns to events: region STRING" in changed.stdout
    assert "tsmigrate revision --autogenerate" in changed.stdout
    as_json = _run(tmp_path, "plan", "--format", "json", ots=ots_instance)
    assert as_json.returncode == 0, as_json.stderr
    import json
    assert json.loads(as_json.stdout)["uncaptured"] == ["add defined columns to events: region STRING"]


def test_a_script_finds_the_projects_running_local_server(tmp_path) -> None:
    """Item 15: `tsmigrate local endpoint` (and ``ownership.project_server``) name the endpoint
    and instance of the `local serve` on the project's .tsmigrate/local, no owner.json read."""
    import json

    import tablestore as ts

    from tsmigrate.local.ownership import project_server
    from tsmigrate.local.testing import local_tablestore

    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "sub").mkdir()
    none = _run(tmp_path / "sub", "local", "endpoint")
    assert none.returncode == 1 and "no tsmigrate local serve runs on" in none.stderr
    assert project_server(tmp_path) is None
    data = tmp_path / ".tsmigrate" / "local"
    with local_tablestore(memory=False, data_dir=str(data), instance="dev") as server:
        shown = _run(tmp_path / "sub", "local", "endpoint")  # found from a subdirectory
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == f"TSMIGRATE_ENDPOINT={server.endpoint}\nTSMIGRATE_INSTANCE=dev\n"
        as_json = json.loads(_run(tmp_path, "local", "endpoint", "--format", "json").stdout)
        assert as_json["endpoint"] == server.endpoint and as_json["instance"] == "dev"
        found = project_server(tmp_path)
        assert found is not None and found.endpoint == server.endpoint
        client = ts.OTSClient(found.endpoint, DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, "dev")
        assert list(client.list_table()) == []


def _quiet_env() -> dict[str, str]:
    import os
    return {k: v for k, v in os.environ.items() if not k.startswith(("TSMIGRATE_", "ALIBABA_"))}


@pytest.mark.slow
def test_importing_the_service_models_prints_no_sdk_notice() -> None:
    """Item 15: a service script (a process of its own: the notice is printed at import)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import tsmigrate.service\nimport tablestore\n"],
                          capture_output=True, text=True, env=_quiet_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Native C++" not in done.stderr and done.stderr == ""


@pytest.mark.slow  # a pytest process
def test_a_pytest_run_with_the_plugin_prints_no_sdk_notice(tmp_path) -> None:
    """Item 15: a user's test run (pytest loads the tsmigrate plugins) is free of the notice."""
    import subprocess
    import sys

    (tmp_path / "test_it.py").write_text(
        "def test_it(ots_client):\n    assert list(ots_client.list_table()) == []\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s",
                           "test_it.py"], capture_output=True, text=True, cwd=tmp_path,
                          env=_quiet_env(), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Native C++" not in done.stdout + done.stderr


def _models(root: Path, body: str) -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(
        "from tsmigrate import Column, GlobalIndex, Model, PrimaryKey\n\n" + body)
    return root


def _problem_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.rstrip().endswith("]")]


def test_a_column_declared_twice_names_both_fields(tmp_path) -> None:
    project = _models(tmp_path, (
        "class Event(Model, table='events'):\n"
        "    id = PrimaryKey(str)\n"
        "    name = Column(str)\n"
        "    label = Column(str, name='name')\n"))
    failed = _run(project, "validate")
    assert failed.returncode != 0
    lines = _problem_lines(failed.stderr)
    assert len(lines) == 1, failed.stderr  # one fault, one problem
    assert "column 'name' is declared twice: by fields 'name' and 'label'" in lines[0]
    assert "name= sets a field's column name" in failed.stderr


def test_a_model_with_no_key_gets_one_error(tmp_path) -> None:
    project = _models(tmp_path, "class Event(Model, table='events'):\n    payload = Column(str)\n")
    failed = _run(project, "validate")
    assert "1 schema problem(s)" in failed.stderr, failed.stderr
    assert "the model declares no PrimaryKey column" in failed.stderr
    assert "it must have 1 to 4" not in failed.stderr


def test_lint_stopped_by_a_schema_problem_names_as_many_as_validate(tmp_path) -> None:
    """A problem lint reports itself (an index on a table keeping 2 versions) besides one that
    stops it (a float key on another model): both commands list both."""
    project = _models(tmp_path, (
        "class Event(Model, table='events', max_versions=2):\n"
        "    id = PrimaryKey(str)\n"
        "    status = Column(str, defined=True)\n"
        "    by_status = GlobalIndex(keys=['status'])\n\n"
        "class Other(Model, table='other'):\n"
        "    id = PrimaryKey(float)\n"))
    validated, linted = _run(project, "validate"), _run(project, "lint")
    assert "2 schema problem(s)" in validated.stderr, validated.stderr
    assert linted.returncode != 0
    assert _problem_lines(linted.stderr) == _problem_lines(validated.stderr)
    assert "secondary-index.max-versions" in linted.stderr


def test_a_parity_check_of_every_row_says_so_once() -> None:
    """Item 15: reindex's verification printed "every row: every row: 0 rows"."""
    from tsmigrate.reindex.parity import Check

    assert Check("every row", "every row", 0, 0).text() == "every row: 0 rows on both"
    assert Check("every row", "every row", None, 3).text() == (
        "every row: 3 rows (new index only: the old cannot run it)")
    assert Check("every row", "every row", 2, 3).text() == (
        "every row: 2 rows on the old index, 3 on the new")
    assert Check("by_tag", "tag = 't0'", 1, 1).text() == "by_tag: tag = 't0': 1 rows on both"


FAMILY = """
from datetime import datetime

from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.schema.families import Monthly


class SerpSnapshot(Model, table="serp_snapshots",
                   family=Monthly("captured_at", ahead=2, retain=12, archive={archive!r})):
    keyword = PrimaryKey(str)
    captured_at = PrimaryKey(datetime)
    rank = Column(int)
"""


def test_show_lists_a_familys_month_tables(tmp_path) -> None:
    from datetime import datetime, timezone

    from tsmigrate.schema.families import Monthly, add_months

    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(FAMILY.format(archive=str(tmp_path / "archive")))
    shown = _run(tmp_path, "show")
    assert shown.returncode == 0, shown.stderr
    now = datetime.now(timezone.utc)
    months = [add_months((now.year, now.month), n) for n in range(3)]
    names = [Monthly.table_name("serp_snapshots", m) for m in months]
    assert f"plan creates {', '.join(names)} (this month and 2 ahead)" in shown.stdout, shown.stdout
    assert f"months past 12 are archived to {tmp_path / 'archive'} and dropped" in shown.stdout


def test_an_archive_url_this_machine_cannot_write_fails_validate_and_plan(tmp_path) -> None:
    pytest.importorskip("fsspec")
    try:
        import ossfs  # noqa: F401
        pytest.skip("ossfs is installed: oss:// archives can be written")
    except ImportError:
        pass
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(FAMILY.format(archive="oss://my-bucket/serp-archive/"))
    for command in ("validate", "plan"):
        failed = _run(tmp_path, command)
        assert failed.returncode != 0, failed.stdout
        message = " ".join(failed.stderr.split())
        assert "archive='oss://my-bucket/serp-archive/' cannot be written from here" in message
        assert "pip install ossfs" in message
    (tmp_path / "app_models.py").write_text(FAMILY.format(archive=str(tmp_path / "archive")))
    assert _run(tmp_path, "validate").returncode == 0
