"""The package's shape: no import cycles among tsmigrate's modules (tools/import_cycles.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "import_cycles.py"


def _cycles_module():
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_finds_no_import_cycle_in_tsmigrate():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "")


def test_the_script_sees_lazy_imports_and_reports_each_cycle(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def later():\n    from pkg import a\n")
    (package / "c.py").write_text("from . import a\n")
    found = subprocess.run([sys.executable, str(SCRIPT), str(package)], capture_output=True,
                           text=True, timeout=60)
    assert found.returncode == 1
    assert found.stdout.splitlines() == ["cycle: pkg.a, pkg.sub.b", "  pkg.a -> pkg.sub.b",
                                         "  pkg.sub.b -> pkg.a"]


def test_relative_imports_resolve_from_modules_and_packages(tmp_path):
    cycles = _cycles_module()
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .sub import b\n")
    (package / "sub" / "__init__.py").write_text("from . import b\n")
    (package / "sub" / "b.py").write_text("from .. import c\nfrom ..sub import b\n")
    (package / "c.py").write_text("")
    assert cycles.import_graph(package) == {
        "pkg": {"pkg.sub.b"}, "pkg.sub": {"pkg.sub.b"}, "pkg.sub.b": {"pkg.c"}, "pkg.c": set(),
    }


def _top_level() -> set[str]:
    package = REPO / "tsmigrate"
    return {p.name for p in package.iterdir() if p.name != "__pycache__" and not p.name.endswith(".pyc")}


def _readme_layout() -> list[str]:
    """The entries the README's Layout section lists under ``tsmigrate/``, in order."""
    text = (REPO / "README.md").read_text()
    block = text[text.index("## Layout"):]
    block = block[block.index("```\ntsmigrate/\n") + len("```\ntsmigrate/\n"):]
    entries = []
    for line in block.splitlines():
        if not line.startswith("  "):
            break
        if not line.startswith("   "):
            entries.append(line.split()[0].rstrip("/"))
    return entries


# The package's own files, not layers or entry points: counted as issue #40 counts the top level.
PACKAGE_FILES = {"__init__.py", "py.typed"}


def test_the_top_level_shows_at_most_fifteen_layers_and_entry_points_each_in_the_readme():
    layers = _top_level() - PACKAGE_FILES
    assert len(layers) <= 15, sorted(layers)
    listed = _readme_layout()
    assert len(listed) == len(set(listed))
    assert set(listed) == _top_level()
