"""The README's quick start: its two commands set everything up in a virtual environment (so a
system Python that refuses `pip install` outside one, PEP 668, runs them too), and CI runs
exactly the second one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV = "python3 -m venv .venv && . .venv/bin/activate && "


def _quick_start_commands() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def _checkout(root: Path) -> Path:
    """What a fresh clone holds for the quick start: the package, the example models and
    migrations, pyproject.toml and the README (its long description)."""
    root.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root)
    for name in ("tsmigrate", "models", "migrations"):
        shutil.copytree(REPO / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return root


def _installed_dependencies(root: Path) -> Path:
    """A directory that shows this environment's installed distributions but tsmigrate (links):
    on PYTHONPATH it stands in for the package index, so `pip install` needs no network and
    must install tsmigrate itself."""
    root.mkdir()

    def kept(name: str) -> bool:
        return not (name.startswith(("tsmigrate", "__editable__", "__pycache__", "pip-"))
                    or name == "pip" or name.endswith(".pth") or (root / name).exists())

    paths = sysconfig.get_paths()
    sites = [paths["purelib"], paths["platlib"],
             *(p for p in sys.path if Path(p).name in ("site-packages", "dist-packages"))]
    for site in dict.fromkeys(sites):
        if not Path(site).is_dir():
            continue
        for entry in Path(site).iterdir():
            if kept(entry.name):
                (root / entry.name).symlink_to(entry)
    return root


@pytest.mark.slow
def test_both_commands_create_and_use_a_virtual_environment(tmp_path: Path):
    setup, tests = _quick_start_commands()
    assert setup == VENV + "pip install -e . && tsmigrate plan"
    assert tests == VENV + "pip install -e '.[test]' && python -m pytest"
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert ".venv/" in ignored

    # The first command as written, in a copy of the checkout: `python3` is this interpreter;
    # the index is replaced by what this environment has installed.
    checkout = _checkout(tmp_path / "clone")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TSMIGRATE_", "ALIBABA_", "PIP_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(_installed_dependencies(tmp_path / "installed")),
               PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0", PIP_DISABLE_PIP_VERSION_CHECK="1")
    done = subprocess.run(["bash", "-c", setup], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    # pip installed tsmigrate into .venv (its console script runs .venv's Python) ...
    venv = checkout / ".venv"
    assert (venv / "pyvenv.cfg").is_file()
    script = (venv / "bin" / "tsmigrate").read_text().splitlines()[0]
    assert script == f"#!{venv / 'bin' / 'python3'}" or script == f"#!{venv / 'bin' / 'python'}", script
    assert "Successfully installed tsmigrate" in done.stdout
    # ... and `tsmigrate plan` planned the example models on the clone's embedded instance.
    assert "embedded local instance" in done.stdout
    assert "create table serp_snapshots" in done.stdout
    assert (checkout / ".tsmigrate" / "local").is_dir()


def test_ci_runs_exactly_the_readme_test_command():
    _setup, tests = _quick_start_commands()
    script = (REPO / ".ci" / "run").read_text()
    commands = [line for line in script.splitlines()
                if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert commands == [tests]
