"""`[tool.tsmigrate]` is validated as a whole: every mistake fails loudly, naming the key and
showing an example, through the commands a user runs (no traceback)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from tsmigrate.cli import main
from tsmigrate.errors import ConfigError
from tsmigrate.schema.config import load_project

MODELS = """
from tsmigrate import Model, PrimaryKey


class Events(Model, table="events"):
    ts = PrimaryKey(int)
    device_id = PrimaryKey(str)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg_models.py").write_text(textwrap.dedent(MODELS))
    return tmp_path


def _configure(root: Path, body: str) -> None:
    (root / "pyproject.toml").write_text("[tool.tsmigrate]\n" + textwrap.dedent(body))


CASES = [
    # (configuration, what the message must say)
    ('modles = ["cfg_models"]', ["unknown key 'modles'", "did you mean 'models'"]),
    ("models = []", ["tool.tsmigrate.models is empty", 'example: models = ["models"]']),
    ("models = 3", ["tool.tsmigrate.models must be a list", 'example: models = ["models"]']),
    ('models = ["cfg_models"]\nmigrations = 1', ["tool.tsmigrate.migrations must be a directory path"]),
    ('models = ["cfg_models"]\n[tool.tsmigrate.lint]\ndisable = "TS-PK303"',
     ["tool.tsmigrate.lint.disable must be a list of lint codes", 'disable = ["TS-PK303"]']),
    ('models = ["cfg_models"]\n[tool.tsmigrate.lint]\nseverity = "TS-PK303"',
     ["tool.tsmigrate.lint.severity must be a table", 'severity = {"TS-PK303" = "error"}']),
    ('models = ["cfg_models"]\n[tool.tsmigrate.lint]\nseverity = {"TS-PK33" = "error"}',
     ["unknown lint code 'TS-PK33'", "did you mean 'TS-PK303'"]),
    ('models = ["cfg_models"]\n[tool.tsmigrate.lint]\nseverity = {"TS-PK303" = "fatal"}',
     ["TS-PK303 = 'fatal' is not one of error, warning, info"]),
    ('models = ["cfg_models"]\n[tool.tsmigrate.lint]\ndisbale = ["TS-PK303"]',
     ["tool.tsmigrate.lint: unknown key 'disbale'", "did you mean 'disable'"]),
    ('models = ["cfg_models"]\n[tool.tsmigrate.targets.prod]\nendpoint = "https://x"\ninstnace = "y"',
     ["tool.tsmigrate.targets.prod: unknown key 'instnace'", "did you mean 'instance'"]),
    ('models = ["cfg_models"]\n[tool.tsmigrate.targets.prod]\nendpoint = "https://x"\n'
     'instance = "y"\ntable_ops_per_s = "10"',
     ["targets.prod.table_ops_per_s must be a whole number", "example: table_ops_per_s = 10"]),
    ('models = ["cfg_models"]\ntargets = "prod"',
     ["[tool.tsmigrate.targets] must hold one table per target"]),
    ('models = ["cfg_models"]\nworkflow = "alembic"',
     ["tool.tsmigrate.workflow must be one of 'declarative', 'versioned', got 'alembic'",
      'example: workflow = "versioned"']),
    ('models = ["cfg_models"]\nwrokflow = "versioned"',
     ["unknown key 'wrokflow'", "did you mean 'workflow'"]),
]


@pytest.mark.parametrize(("body", "expected"), CASES, ids=[c[0].split("\n")[-1] for c in CASES])
@pytest.mark.parametrize("command", ["lint", "validate"])
def test_bad_configuration_fails_loudly(project: Path, body: str, expected: list[str], command: str):
    _configure(project, body)
    result = CliRunner().invoke(main, [command])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # printed, not a traceback
    for text in expected:
        assert text in result.output
    assert "pyproject.toml" in result.output


def test_every_problem_is_reported_at_once(project: Path):
    _configure(project, 'modles = ["x"]\nmigrations = 1\n[tool.tsmigrate.lint]\ndisable = "TS-PK303"\n')
    with pytest.raises(ConfigError) as caught:
        load_project(project)
    message = str(caught.value)
    assert "3 configuration problems" in message
    assert "'modles'" in message and "migrations" in message and "disable" in message


def test_valid_configuration_is_accepted(project: Path):
    _configure(project, """\
        models = ["cfg_models"]
        migrations = "migrations"
        [tool.tsmigrate.lint]
        severity = {"TS-PK303" = "error"}
        disable = ["TS-PK305"]
        [tool.tsmigrate.targets.prod]
        endpoint = "https://myinstance.cn-hangzhou.ots.aliyuncs.com"
        instance = "myinstance"
        table_ops_per_s = 0
    """)
    result = CliRunner().invoke(main, ["lint", "--format", "json"])
    # The configured severity is applied: the time-first key is now an error (exit 1).
    assert result.exit_code == 1, result.output
    assert '"code": "TS-PK303"' in result.output and '"severity": "error"' in result.output


@pytest.mark.parametrize(("body", "workflow"), [
    ("", "declarative"), ('workflow = "versioned"\n', "versioned"),
    ('workflow = "declarative"\n', "declarative"),
])
def test_the_workflow_defaults_to_declarative(project: Path, body: str, workflow: str):
    _configure(project, 'models = ["cfg_models"]\n' + body)
    loaded = load_project(project)
    assert loaded.workflow == workflow and loaded.versioned == (workflow == "versioned")
