"""The CLI: ``tsmigrate --version``, ``validate`` and ``show``: through CliRunner, as a command run
in process (``clirun``: its own working directory and environment), and twice as the installed
console script in a process of its own, for its exit status."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import clirun
import pytest
from click.testing import CliRunner, Result

from tsmigrate import __version__
from tsmigrate.cli import main
from tsmigrate.schema.discover import import_models
from tsmigrate.schema.model import compile_models

REPO = Path(__file__).resolve().parents[2]

BROKEN_MODELS = """
from tsmigrate import Column, GlobalIndex, Model, PrimaryKey


class Prices(Model, table="prices", ttl="1h"):
    item = PrimaryKey(str)
    price = PrimaryKey(float)
    label = Column(str, defined=True)
    by_lable = GlobalIndex(keys=["lable"])
"""

ONE_TABLE = """
from tsmigrate import Model, PrimaryKey


class T(Model, table={table!r}):
    pk = PrimaryKey(str)
"""


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    # Discovery puts project roots on sys.path; keep that from leaking into other tests.
    monkeypatch.setattr(sys, "path", list(sys.path))
    return CliRunner()


def make_project(root: Path, source: str, *, extra: dict[str, str] | None = None) -> str:
    """A project whose pyproject names one models module (uniquely named: modules are cached
    in-process); returns the module name."""
    module = f"models_{uuid.uuid4().hex[:10]}"
    (root / "pyproject.toml").write_text(f'[tool.tsmigrate]\nmodels = ["{module}"]\n', encoding="utf-8")
    (root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    for name, text in (extra or {}).items():
        (root / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return module


def invoke(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(main, list(args), catch_exceptions=True)


def assert_clean_failure(result: Result) -> None:
    """Exit 1, with a message and no traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error:")


# --- in-process (CliRunner) ----------------------------------------------------------------------


def test_version(runner: CliRunner) -> None:
    result = invoke(runner, "--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"tsmigrate, version {__version__}"


def test_validate_the_example_models(runner: CliRunner) -> None:
    result = invoke(runner, "validate", "--project", str(REPO))
    assert result.exit_code == 0, result.output
    fingerprint = compile_models(import_models(["models"], REPO)).fingerprint()
    assert result.stdout.startswith("ok: 4 tables, 5 indexes, no problems")
    assert fingerprint[:19] in result.stdout


def test_show_json_is_the_catalog(runner: CliRunner) -> None:
    result = invoke(runner, "show", "--format", "json", "--project", str(REPO))
    assert result.exit_code == 0, result.output
    catalog = compile_models(import_models(["models"], REPO))
    assert json.loads(result.stdout) == catalog.to_dict()


def test_show_text(runner: CliRunner) -> None:
    result = invoke(runner, "show", "--project", str(REPO))
    assert result.exit_code == 0, result.output
    catalog = compile_models(import_models(["models"], REPO))
    for name in ("telemetry", "serp_snapshots", "card_consumption", "card_consumption_by_device"):
        assert f"table {name}  (from models." in result.stdout
    assert "pk STRING = HashPrefix(source='device_id', length=4, sep='|') | ts INTEGER" in result.stdout
    assert "global index  by_serial on (serial) include (battery)" in result.stdout
    assert result.stdout.rstrip().endswith(f"fingerprint {catalog.fingerprint()}")


def test_show_rejects_an_unknown_format(runner: CliRunner) -> None:
    result = invoke(runner, "show", "--format", "yaml", "--project", str(REPO))
    assert result.exit_code == 2
    assert "yaml" in result.stderr


def test_broken_models_list_every_problem(runner: CliRunner, tmp_path: Path) -> None:
    module = make_project(tmp_path, BROKEN_MODELS)
    result = invoke(runner, "validate", "--project", str(tmp_path))
    assert_clean_failure(result)
    assert result.stdout == ""
    err = result.stderr
    assert "error: 4 schema problem(s)" in err
    assert "[secondary-index.ttl-allow-update]" in err  # a TTL, an index and updates allowed
    where = f"{module}.Prices (table 'prices')"
    assert f"{where}, price: DOUBLE is an invalid type for the primary key [primary-key.type]" in err
    assert f"{where}, ttl: time to live 1h is invalid; it must be forever or at least 1d" in err
    assert "[options.ttl]" in err
    assert f"{where}, index by_lable: index key 'lable'" in err and "[secondary-index.unknown-column]" in err
    assert "fix: use str (STRING), int (INTEGER) or bytes (BINARY)" in err


def test_show_of_broken_models_fails_the_same_way(runner: CliRunner, tmp_path: Path) -> None:
    make_project(tmp_path, BROKEN_MODELS)
    result = invoke(runner, "show", "--format", "json", "--project", str(tmp_path))
    assert_clean_failure(result)
    assert "[primary-key.type]" in result.stderr


def test_models_option_overrides_the_configuration(runner: CliRunner, tmp_path: Path) -> None:
    make_project(tmp_path, BROKEN_MODELS)
    good = f"good_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{good}.py").write_text(
        ONE_TABLE.format(table="fine"),
        encoding="utf-8",
    )
    result = invoke(runner, "validate", "--project", str(tmp_path), "--models", good)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: 1 tables, 0 indexes")


def test_a_models_package_brings_its_submodules(runner: CliRunner, tmp_path: Path) -> None:
    package = f"pkg_{uuid.uuid4().hex[:10]}"
    (tmp_path / "pyproject.toml").write_text(f'[tool.tsmigrate]\nmodels = ["{package}"]\n', encoding="utf-8")
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    for name in ("one", "two"):
        (tmp_path / package / f"{name}.py").write_text(
            ONE_TABLE.format(table=name),
            encoding="utf-8",
        )
    result = invoke(runner, "show", "--format", "json", "--project", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert [t["name"] for t in json.loads(result.stdout)["tables"]] == ["one", "two"]


def test_a_module_that_fails_to_import(runner: CliRunner, tmp_path: Path) -> None:
    module = make_project(tmp_path, "import json\nimport no_such_module_xyz\n")
    result = invoke(runner, "validate", "--project", str(tmp_path))
    assert_clean_failure(result)
    assert f"cannot import models module '{module}'" in result.stderr
    assert "ModuleNotFoundError: No module named 'no_such_module_xyz'" in result.stderr
    assert f"{module}.py:2" in result.stderr  # the line that failed


def test_a_module_that_raises_while_defining_models(runner: CliRunner, tmp_path: Path) -> None:
    module = make_project(
        tmp_path,
        """
        from tsmigrate import GlobalIndex, Model, PrimaryKey


        class T(Model, table="t"):
            pk = PrimaryKey(str)
            by_x = GlobalIndex(keys=5)
        """,
    )
    result = invoke(runner, "validate", "--project", str(tmp_path))
    assert_clean_failure(result)
    assert f"cannot import models module '{module}': TypeError" in result.stderr


def test_a_module_with_a_syntax_error(runner: CliRunner, tmp_path: Path) -> None:
    module = make_project(tmp_path, "x = (\n")
    result = invoke(runner, "validate", "--project", str(tmp_path))
    assert_clean_failure(result)
    assert f"cannot import models module '{module}': SyntaxError" in result.stderr
    assert f"{module}.py, line 1" in result.stderr
    assert "discover.py" not in result.stderr  # not tsmigrate's own code


def test_a_module_without_models(runner: CliRunner, tmp_path: Path) -> None:
    module = make_project(tmp_path, "x = 1\n")
    result = invoke(runner, "validate", "--project", str(tmp_path))
    assert_clean_failure(result)
    # Brackets in messages are printed as they are, not taken for markup.
    assert f"no models found in {module}; define Model subclasses there or point [tool.tsmigrate] models" in (
        result.stderr
    )


def test_a_bad_configuration(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.tsmigrate]\nmodels = 5\n", encoding="utf-8")
    result = invoke(runner, "validate", "--project", str(tmp_path))
    assert_clean_failure(result)
    assert "tool.tsmigrate.models must be a list of module or package paths, got 5" in result.stderr

    (tmp_path / "pyproject.toml").write_text("[tool.tsmigrate\n", encoding="utf-8")
    result = invoke(runner, "validate", "--project", str(tmp_path))
    assert_clean_failure(result)
    assert "cannot read it" in result.stderr


# --- the command in process (clirun), and the console script in a process of its own ------------


def command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`tsmigrate ARGS` in ``cwd``, in this process; help is 80 columns wide, as in a pipe."""
    return clirun.run(cwd, *args, extra_env={"COLUMNS": "80"})


def tsmigrate_command() -> list[str]:
    """The installed console script, next to this interpreter if possible."""
    script = Path(sys.executable).with_name("tsmigrate")
    if script.exists():
        return [str(script)]
    found = shutil.which("tsmigrate")
    if found:
        return [found]
    return [sys.executable, "-c", "from tsmigrate.cli import main; main()"]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The console script as a process: what only a process shows is its exit status."""
    # No bytecode written: the repository checkout is only read.
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [*tsmigrate_command(), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_command_validate_in_the_repository() -> None:
    done = command("validate", cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: 4 tables, 5 indexes, no problems")


def test_real_show_json_and_version() -> None:
    done = run("show", "--format", "json", cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == compile_models(import_models(["models"], REPO)).to_dict()
    version = run("--version", cwd=REPO)
    assert version.returncode == 0
    assert version.stdout.strip() == f"tsmigrate, version {__version__}"


def test_real_validate_of_broken_models(tmp_path: Path) -> None:
    module = make_project(tmp_path, BROKEN_MODELS)
    done = run("validate", cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert f"{module}.Prices (table 'prices'), price: DOUBLE is an invalid type" in done.stderr
    assert "[primary-key.type]" in done.stderr
    assert "index by_lable" in done.stderr and "[secondary-index.unknown-column]" in done.stderr


def test_command_validate_of_a_module_that_fails_to_import(tmp_path: Path) -> None:
    module = make_project(tmp_path, "raise RuntimeError('database unreachable')\n")
    done = command("validate", cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"cannot import models module '{module}': RuntimeError: database unreachable" in done.stderr


def test_command_validate_finds_the_project_from_a_subdirectory(tmp_path: Path) -> None:
    make_project(tmp_path, BROKEN_MODELS)
    (tmp_path / "deep" / "er").mkdir(parents=True)
    done = command("validate", cwd=tmp_path / "deep" / "er")
    assert done.returncode == 1
    assert "[primary-key.type]" in done.stderr


def _command_summaries(help_text: str) -> dict[str, str]:
    """The Commands section of a --help: name -> summary (wrapped lines joined)."""
    section = help_text.split("Commands:\n", 1)[1]
    summaries: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        if line.startswith("  ") and not line.startswith("    ") and line.strip():
            name, _, text = line.strip().partition(" ")
            summaries[name] = text.strip()
        elif line.strip() and name:
            summaries[name] += " " + line.strip()
    return summaries


@pytest.mark.parametrize("group", [(), ("rewrite",), ("local",)])
def test_help_summaries_are_whole_sentences(group: tuple[str, ...], tmp_path: Path) -> None:
    """Every command's summary in a group's --help is a whole sentence, never cut with '...'."""
    done = command(*group, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summaries = _command_summaries(done.stdout)
    assert len(summaries) >= (1 if group == ("local",) else 6)
    for name, summary in summaries.items():
        assert not summary.endswith("..."), f"{' '.join(group)} {name}: {summary!r} is cut"
        assert summary.endswith("."), f"{' '.join(group)} {name}: {summary!r} is not a sentence"
