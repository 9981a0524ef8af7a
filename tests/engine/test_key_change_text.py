"""The plan says how a key derivation changed in the terms the model declares it."""

from __future__ import annotations

from pathlib import Path

from clirun import run as _run

MODEL = """
from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.keys import HashPrefix

class Reading(Model, table="{table}"{replaces}):
    pk = PrimaryKey(str, derive=HashPrefix("device", length={length}))
    ts = PrimaryKey(int)
    device = Column(str)
"""


def _models(root: Path, table: str, length: int, replaces: str = "") -> None:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(MODEL.format(
        table=table, length=length, replaces=f", replaces={replaces!r}" if replaces else ""))


def test_a_changed_derivation_is_shown_as_declared(tmp_path):
    _models(tmp_path, "readings", 4)
    assert _run(tmp_path, "apply", "--yes").returncode == 0
    _models(tmp_path, "readings", 8)
    in_place = _run(tmp_path, "plan")
    assert in_place.returncode == 1 and "Traceback" not in in_place.stderr
    said = ("key column pk is derived differently (HashPrefix(source='device', length=4, sep='|') "
            "-> HashPrefix(source='device', length=8, sep='|'))")
    assert said in " ".join(in_place.stderr.split()), in_place.stderr
    assert "'kind'" not in in_place.stderr
    _models(tmp_path, "readings_v2", 8, replaces="readings")
    planned = _run(tmp_path, "plan")
    assert planned.returncode == 0, planned.stderr
    assert said in " ".join(planned.stdout.split()), planned.stdout
