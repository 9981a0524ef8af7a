"""`tsmigrate inspect` as a user runs it, on the project's embedded instance: after an apply it
prints the plan's target_fingerprint, key derivations included; `inspect --write-models` writes
models that a plan finds equal to the instance, all files or none."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cliproject import run

from tsmigrate.schema import Catalog

# Attributes, a global and a local index, a search index over attribute columns, and every key
# derivation: hash prefix, concatenation with padding, time bucket, descending.
MODELS = '''
from tsmigrate import Column, GlobalIndex, LocalIndex, Model, PrimaryKey, SearchField, SearchIndex
from tsmigrate.keys import Concat, Descending, HashPrefix, TimeBucket


class Telemetry(Model, table="telemetry", ttl="90d", allow_update=False):
    pk = PrimaryKey(str, derive=HashPrefix("device_id", length=6, sep="#"))
    ts = PrimaryKey(int, derive=Descending("at"))

    device_id = Column(str, defined=True)
    serial = Column(str, defined=True)
    battery = Column(int, defined=True)
    at = Column(int)
    note = Column(str)
    temp_c = Column(float)
    tags = Column(str)
    firmware = Column(str)     # an attribute nothing indexes: not part of the schema

    by_serial = GlobalIndex(keys=["serial"], include=["battery"])
    finder = SearchIndex(fields=[SearchField("battery", "long", sort=True),
                                 SearchField("note", "text", analyzer="split"),
                                 SearchField("temp_c", "double"),
                                 SearchField("tags", "keyword", array=True),
                                 SearchField("ts", "long", sort=True)],
                         presort=["-ts"])


class Order(Model, table="orders"):
    bucket = PrimaryKey(int, derive=TimeBucket("created", buckets=32))
    order_key = PrimaryKey(str, derive=Concat(["user", "seq"], pad={"seq": 10}), name="key")
    user = Column(str)
    seq = Column(int)
    created = Column(int)
    status = Column(str, defined=True)
    by_status = LocalIndex(keys=["bucket", "status"])
'''


def _project(root: Path, models: str = MODELS) -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(models)
    return root


def _ok(cwd: Path, *args: str) -> str:
    result = run(cwd, *args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def _printed_fingerprint(cwd: Path) -> str:
    shown = _ok(cwd, "inspect")
    (fingerprint,) = re.findall(r"^fingerprint (sha256:[0-9a-f]{64})$", shown, re.MULTILINE)
    return fingerprint


def _planned(cwd: Path, *args: str) -> dict:
    return json.loads(_ok(cwd, "plan", "--format", "json", *args))


@pytest.mark.slow
def test_inspect_after_apply_prints_the_plans_target_fingerprint_derivations_included(tmp_path):
    project = _project(tmp_path)
    planned = _planned(project)
    assert planned["has_changes"]
    _ok(project, "apply", "--yes")
    shown = _ok(project, "inspect")
    # Nothing stripped: what inspect prints carries the recorded derivations.
    assert "HashPrefix(source='device_id', length=6, sep='#')" in shown
    assert "Concat(fields=['user', 'seq'], sep=',', pad={'seq': 10}" in shown
    assert "TimeBucket(" in shown and "Descending(" in shown
    assert _printed_fingerprint(project) == planned["target_fingerprint"]
    as_json = Catalog.from_dict(json.loads(_ok(project, "inspect", "--format", "json")))
    assert as_json.fingerprint() == planned["target_fingerprint"]

    # A second change on tables with recorded derivations: an added defined column and index.
    changed = MODELS.replace('    note = Column(str)\n', '    note = Column(str, defined=True)\n').replace(
        '    by_serial = GlobalIndex(keys=["serial"], include=["battery"])\n',
        '    by_serial = GlobalIndex(keys=["serial"], include=["battery"])\n'
        '    by_note = GlobalIndex(keys=["note"])\n')
    _project(project, changed)
    again = _planned(project)
    assert again["source_fingerprint"] == planned["target_fingerprint"]
    assert [s["kind"] for s in again["steps"]] == ["add_defined_columns", "create_index"]
    _ok(project, "apply", "--yes")
    assert _printed_fingerprint(project) == again["target_fingerprint"]
    assert not _planned(project)["has_changes"]


@pytest.mark.slow
def test_write_models_round_trips_to_a_plan_without_changes(tmp_path):
    project = _project(tmp_path)
    _ok(project, "apply", "--yes")
    wrote = _ok(project, "inspect", "--write-models", "adopted")
    assert wrote.split() == ["wrote", "adopted/orders.py", "wrote", "adopted/telemetry.py"]
    telemetry = (project / "adopted" / "telemetry.py").read_text()
    assert "derive=HashPrefix('device_id', length=6, sep='#')" in telemetry
    assert "temp_c = Column(float)" in telemetry and "firmware" not in telemetry

    # The adopted package alone describes the instance: no changes, exit 0 under
    # --detailed-exitcode, and the same fingerprints inspect prints.
    adopted = _planned(project, "--models", "adopted")
    assert adopted["has_changes"] is False and adopted["steps"] == []
    assert adopted["target_fingerprint"] == _printed_fingerprint(project)
    assert run(project, "plan", "--models", "adopted", "--detailed-exitcode").returncode == 0
    assert "No changes" in _ok(project, "apply", "--yes", "--models", "adopted")
    assert _printed_fingerprint(project) == adopted["target_fingerprint"]


def test_write_models_writes_nothing_when_a_file_is_in_the_way(tmp_path):
    project = _project(tmp_path)
    _ok(project, "apply", "--yes")
    package = project / "adopted"
    package.mkdir()
    (package / "telemetry.py").write_text("# my own notes\n")
    refused = run(project, "inspect", "--write-models", "adopted")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "adopted/telemetry.py; nothing was written" in refused.stderr
    assert "--overwrite" in refused.stderr
    assert sorted(p.name for p in package.iterdir()) == ["telemetry.py"]  # no orders.py either
    assert (package / "telemetry.py").read_text() == "# my own notes\n"

    _ok(project, "inspect", "--write-models", "adopted", "--overwrite")
    assert sorted(p.name for p in package.iterdir()) == ["__init__.py", "orders.py", "telemetry.py"]
    assert not _planned(project, "--models", "adopted")["has_changes"]
