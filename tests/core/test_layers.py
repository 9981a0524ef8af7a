"""The layers of README's Layout: each imports only the layers below it, wherever the import is
written (at the top, inside a function, under TYPE_CHECKING), as tools/import_cycles.py reads
them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "import_cycles.py"


def _import_graph() -> dict[str, set[str]]:
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.import_graph()


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


SCHEMA_MAY_IMPORT = ("tsmigrate.schema", "tsmigrate.errors", "tsmigrate.keys")


def test_schema_imports_nothing_above_it():
    """tsmigrate.schema uses only itself, tsmigrate.errors and tsmigrate.keys (and the stdlib
    and third-party packages): no lint, planning, instance, service, commands..."""
    graph = _import_graph()
    schema = {m for m in graph if _within(m, ("tsmigrate.schema",))}
    assert {"tsmigrate.schema", "tsmigrate.schema.config", "tsmigrate.schema.families"} <= schema
    climbing = {m: sorted(d for d in graph[m] if not _within(d, SCHEMA_MAY_IMPORT))
                for m in sorted(schema)}
    assert {m: deps for m, deps in climbing.items() if deps} == {}
