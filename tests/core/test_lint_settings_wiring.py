"""[tool.tsmigrate.lint] is checked by lint's own check (the codes are known once lint's rules
load), which config, in schema, cannot import: the layers above both that load a project (the
commands, the pytest plugin) register it. Each runs in a fresh interpreter here, so nothing has
imported lint before: a typo'd lint code is reported wherever a project is loaded, and config
used without the registration fails loudly instead of letting every code pass."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tsmigrate.schema import config

TYPO = 'models = ["wiring_models"]\n[tool.tsmigrate.lint]\nseverity = {"TS-PK33" = "error"}\n'
MODELS = """
from tsmigrate import Model, PrimaryKey


class Events(Model, table="events"):
    ts = PrimaryKey(int)
"""
REPORTED = ["1 configuration problem:",
            "tool.tsmigrate.lint.severity: unknown lint code 'TS-PK33'; did you mean 'TS-PK303'?"]


def _project(root: Path, settings: str) -> Path:
    (root / "pyproject.toml").write_text("[tool.tsmigrate]\n" + settings)
    (root / "wiring_models.py").write_text(textwrap.dedent(MODELS))
    return root


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


# Commands that load the project but never use its lint settings (lint loads for none of them).
@pytest.mark.parametrize("command", [["status"], ["history"], ["unlock"], ["heads"]])
def test_a_command_that_never_lints_still_reports_a_typod_lint_code(tmp_path, command):
    done = _run(["-m", "tsmigrate.cli", *command], _project(tmp_path, TYPO))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    for text in [str(tmp_path / "pyproject.toml"), *REPORTED]:
        assert text in done.stdout + done.stderr


def test_the_pytest_plugin_reports_a_typod_lint_code(tmp_path):
    _project(tmp_path, TYPO)
    (tmp_path / "test_uses_models.py").write_text(
        "def test_models(tsmigrate_models):\n    assert tsmigrate_models\n")
    done = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_uses_models.py"], tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ConfigError" in done.stdout
    for text in REPORTED:
        assert text in done.stdout


def test_config_alone_refuses_to_pass_lint_settings_it_cannot_check(tmp_path):
    code = ("import sys\nfrom pathlib import Path\n"
            "from tsmigrate.schema.config import load_project\n"
            "print(load_project(Path(sys.argv[1])).models)\n"
            "assert 'tsmigrate.lint' not in sys.modules\n")
    (tmp_path / "clean").mkdir()
    clean = _run(["-c", code, str(_project(tmp_path / "clean", 'models = ["m"]\n'))], tmp_path)
    assert (clean.returncode, clean.stdout) == (0, "('m',)\n"), clean.stderr
    (tmp_path / "typo").mkdir()
    typo = _run(["-c", code, str(_project(tmp_path / "typo", TYPO))], tmp_path)
    assert typo.returncode == 1
    assert "RuntimeError: tool.tsmigrate.lint cannot be checked" in typo.stderr
    assert "register_check('lint', check)" in typo.stderr


def test_registering_the_lint_check_makes_config_report_the_codes(monkeypatch):
    from tsmigrate.errors import ConfigError
    from tsmigrate.lint import settings_problems

    monkeypatch.setitem(config.SECTIONS, "lint", config.SECTIONS["lint"])  # restored after
    config.register_check("lint", settings_problems)
    with pytest.raises(ConfigError) as caught:
        config.validate_settings({"lint": {"disable": ["TS-PK35"]}}, "pyproject.toml")
    assert "tool.tsmigrate.lint.disable: unknown lint code 'TS-PK35'" in str(caught.value)
    assert list(config.SECTIONS) == ["models", "migrations", "workflow", "lint", "targets"]


def test_only_a_known_section_takes_a_check():
    with pytest.raises(ValueError, match=r"no section 'lnit'.*known: models, migrations"):
        config.register_check("lnit", lambda key, value: [])
