"""`tsmigrate init` as a user runs it: a new project plans and applies on the embedded local
instance; a second init, or any file in the way, is refused and changes nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cliproject import run

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under root (but the embedded instance's data) and its bytes."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*")) if ".tsmigrate" not in p.parts}


@pytest.mark.slow
def test_init_in_an_empty_directory_then_plan_and_apply(tmp_path: Path):
    created = run(tmp_path, "init")
    assert created.returncode == 0, created.stderr
    for path in ("pyproject.toml", "models/__init__.py", "models/orders.py", "migrations/README.md",
                 "migrations/versions/.gitkeep", ".gitignore"):
        assert f"created {path}" in created.stdout
        assert (tmp_path / path).is_file()
    assert "Next:" in created.stdout and "tsmigrate plan" in created.stdout
    settings = tomllib.loads((tmp_path / "pyproject.toml").read_text())["tool"]["tsmigrate"]
    assert settings == {"models": ["models"], "migrations": "migrations"}
    assert (tmp_path / ".gitignore").read_text() == ".tsmigrate/\n"

    assert run(tmp_path, "validate").returncode == 0
    plan = run(tmp_path, "plan", "--detailed-exitcode")
    assert plan.returncode == 2, plan.stdout + plan.stderr  # changes, and no lint error (3)
    assert "embedded local instance" in plan.stdout
    assert "create table orders (shard STRING, order_id STRING) with 1 secondary index" in plan.stdout
    assert "Lint: no findings." in plan.stdout
    assert run(tmp_path, "apply", "--yes").returncode == 0
    again = run(tmp_path, "plan", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout + again.stderr


def test_init_twice_refuses_and_changes_nothing(tmp_path: Path):
    assert run(tmp_path, "init").returncode == 0
    (tmp_path / "models" / "orders.py").write_text("# my edits\n")
    before = _snapshot(tmp_path)
    second = run(tmp_path, "init")
    assert second.returncode == 1
    assert "Traceback" not in second.stderr
    assert "changed nothing" in second.stderr
    for what in ("models/ exists already", "migrations/ exists already",
                 "already has a [tool.tsmigrate] table"):
        assert what in second.stderr
    assert _snapshot(tmp_path) == before


def test_init_adds_the_table_to_an_existing_pyproject_and_keeps_the_rest(tmp_path: Path):
    original = ('[project]\r\nname = "billing"\r\nversion = "1.0"\r\n\r\n'
                '[tool.black]\r\nline-length = 100\r\n')
    (tmp_path / "pyproject.toml").write_bytes(original.encode())
    (tmp_path / ".gitignore").write_text("build/")
    created = run(tmp_path, "init")
    assert created.returncode == 0, created.stderr
    assert "added [tool.tsmigrate] to pyproject.toml" in created.stdout
    assert "added .tsmigrate/ to .gitignore" in created.stdout
    text = (tmp_path / "pyproject.toml").read_bytes().decode()
    assert text.startswith(original)
    parsed = tomllib.loads(text)
    assert parsed["project"] == {"name": "billing", "version": "1.0"}
    assert parsed["tool"]["black"] == {"line-length": 100}
    assert parsed["tool"]["tsmigrate"]["models"] == ["models"]
    assert (tmp_path / ".gitignore").read_text() == "build/\n.tsmigrate/\n"
    plan = run(tmp_path, "plan")
    assert plan.returncode == 0, plan.stderr
    assert "create table orders" in plan.stdout


def test_any_file_in_the_way_refuses_before_writing_anything(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app"]\n')
    (tmp_path / "models.py").write_text("# a module of the project\n")
    before = _snapshot(tmp_path)
    refused = run(tmp_path, "init")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "models.py exists already" in refused.stderr
    assert "already has a [tool.tsmigrate] table" in refused.stderr
    assert _snapshot(tmp_path) == before


def test_init_into_a_new_directory_and_a_path_that_is_a_file(tmp_path: Path):
    created = run(tmp_path, "init", "svc")
    assert created.returncode == 0, created.stderr
    assert "Next, in svc:" in created.stdout
    assert (tmp_path / "svc" / "models" / "orders.py").is_file()
    (tmp_path / "file").write_text("")
    refused = run(tmp_path, "init", "file")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "file" in refused.stderr
