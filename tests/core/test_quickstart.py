"""The README's quick start: its two commands set everything up in a virtual environment (so a
system Python that refuses `pip install` outside one, PEP 668, runs them too), and CI runs
exactly the second one."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _quick_start_commands() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_both_commands_create_and_use_a_virtual_environment():
    setup, tests = _quick_start_commands()
    venv = "python3 -m venv .venv && . .venv/bin/activate && "
    assert setup == venv + "pip install -e . && tsmigrate plan"
    assert tests == venv + "pip install -e '.[test]' && python -m pytest"
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert ".venv/" in ignored


def test_ci_runs_exactly_the_readme_test_command():
    _setup, tests = _quick_start_commands()
    script = (REPO / ".ci" / "run").read_text()
    commands = [line for line in script.splitlines()
                if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert commands == [tests]
