"""The local server's modules form layers: handlers get what they share from `context` (below them
all), never from `server` (above them), and no module reaches into another's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import tsmigrate.local

LOCAL = Path(tsmigrate.local.__file__).parent
PREFIX = "tsmigrate.local."
# Modules that start a server (or are the server): everything else sits below them.
ENTRY_POINTS = {"server", "cli", "testing", "embedded", "pytest_plugin"}


def _imports(module: str) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) for every import of a local module, type-only
    imports included: a cycle through annotations is still a cycle for the reader."""
    tree = ast.parse((LOCAL / f"{module}.py").read_text())
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "tsmigrate.local":
                found += [(alias.name, None) for alias in node.names]
            elif node.module.startswith(PREFIX):
                found += [(node.module.removeprefix(PREFIX), alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name.removeprefix(PREFIX), None) for a in node.names if a.name.startswith(PREFIX)]
    return found


def _modules() -> list[str]:
    return sorted(p.stem for p in LOCAL.glob("*.py") if p.stem != "__init__")


def test_no_module_below_the_server_imports_it():
    offenders = [m for m in _modules() if m not in ENTRY_POINTS
                 and any(target == "server" for target, _ in _imports(m))]
    assert offenders == []


def test_no_module_imports_another_modules_private_names():
    offenders = [(m, target, name) for m in _modules() for target, name in _imports(m)
                 if name is not None and name.startswith("_")]
    assert offenders == []


def test_the_local_modules_import_each_other_without_a_cycle():
    graph = {m: {target for target, _ in _imports(m)} for m in _modules()}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return [*path, module, target]
            if target not in state and (cycle := visit(target, [*path, module])):
                return cycle
        state[module] = "done"
        return None

    cycles = [c for m in _modules() if m not in state and (c := visit(m, []))]
    assert cycles == []
