"""`replaces=` and the table it names: models that still declare the replaced table (or replace
each other in a cycle) do not validate, and `rewrite finish --allow-destructive` never drops a
table the models declare, nor one it cannot tell about (models that do not load)."""

from __future__ import annotations

from pathlib import Path

import pytest
import rewrite_tables as rt
from cliproject import CREDENTIALS, run

from tsmigrate.rewrite import machine

FORCE = ("--force", "--accept-target-writes")
# The old model beside the new one that replaces it: the models still declare `readings`.
BOTH = rt.MODELS_V1 + rt.MODELS_V2.replace("from tsmigrate import Column, Model, PrimaryKey\n", "")
CYCLE = '''
from tsmigrate import Column, Model, PrimaryKey


class A(Model, table="a", replaces="b"):
    pk = PrimaryKey(str)


class B(Model, table="b", replaces="a"):
    pk = PrimaryKey(str)
    note = Column(str)
'''


def _cli(proj: Path, ots_instance, *args: str):
    result = run(proj, *args, "--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance,
                 extra_env=CREDENTIALS)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _project(root: Path, models: str) -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(models)
    return root


@pytest.mark.parametrize(("models", "expected"), [
    (BOTH, "replaces 'readings', which model app_models.Reading still declares"),
    (CYCLE, "the tables replace each other in a cycle: a replaces b, which replaces a"),
])
def test_validate_refuses_replacing_a_declared_table(tmp_path: Path, models: str, expected: str):
    result = run(_project(tmp_path, models), "validate")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert expected in result.stderr


@pytest.mark.slow
def test_finish_allow_destructive_never_drops_a_declared_table(tmp_path: Path, ots_instance):
    proj = _project(tmp_path, rt.MODELS_V1)
    assert _cli(proj, ots_instance, "apply", "--yes").returncode == 0
    rt.fill(ots_instance.client(), 20)
    (proj / "app_models.py").write_text(rt.MODELS_V2)
    applied = _cli(proj, ots_instance, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    client = ots_instance.client()

    # The old model put back beside the new one: the drop is refused, and nothing moved.
    (proj / "app_models.py").write_text(BOTH)
    refused = _cli(proj, ots_instance, "rewrite", "finish", "readings_by_seq", *FORCE, "--allow-destructive")
    assert refused.returncode == 1
    assert "not dropping readings: the models still declare it" in refused.stderr
    assert machine.load(client, "readings_by_seq").phase == machine.READY
    # Models that do not load cannot say: the drop is refused too.
    (proj / "app_models.py").write_text("raise RuntimeError('half-edited')\n")
    unknown = _cli(proj, ots_instance, "rewrite", "finish", "readings_by_seq", *FORCE, "--allow-destructive")
    assert unknown.returncode == 1
    assert "--allow-destructive needs the models" in unknown.stderr and "half-edited" in unknown.stderr
    assert machine.load(client, "readings_by_seq").phase == machine.READY
    assert "readings" in client.list_table()

    # The new model alone: finish drops the old table.
    (proj / "app_models.py").write_text(rt.MODELS_V2)
    dropped = _cli(proj, ots_instance, "rewrite", "finish", "readings_by_seq", *FORCE, "--allow-destructive")
    assert dropped.returncode == 0, dropped.stderr
    assert "readings" not in client.list_table() and "readings_by_seq" in client.list_table()
