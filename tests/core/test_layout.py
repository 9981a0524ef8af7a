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


def test_an_import_that_climbs_a_layer_is_named_with_both_layers():
    tool = _cycles_module()
    graph = {
        "tsmigrate.schema.model": {"tsmigrate.errors"},
        "tsmigrate.errors": set(),
        "tsmigrate.rewrite.capture": {"tsmigrate.wire.plainbuffer", "tsmigrate.service.routing"},
        "tsmigrate.wire.plainbuffer": set(),
        "tsmigrate.service.routing": {"tsmigrate.contract.phases"},
        "tsmigrate.contract.phases": set(),
        # apply and status sit above the engines they drive, though in instance/
        "tsmigrate.instance.apply": {"tsmigrate.rewrite.capture", "tsmigrate.instance.adapter"},
        "tsmigrate.instance.adapter": set(),
        "tsmigrate.instance.retry": {"tsmigrate.rewrite.capture"},
    }
    assert tool.layer_problems(graph) == [
        "layer: tsmigrate.instance.retry (instance) imports tsmigrate.rewrite.capture (engines, above it)",
        "layer: tsmigrate.rewrite.capture (engines) imports tsmigrate.service.routing (service, above it)",
    ]


def test_only_what_starts_a_local_server_imports_local_and_every_module_has_a_layer():
    tool = _cycles_module()
    graph = {
        "tsmigrate.instance.target": {"tsmigrate.local.embedded"},
        "tsmigrate.cli": {"tsmigrate.local.cli"},
        "tsmigrate.local.embedded": {"tsmigrate.wire.signing"},
        "tsmigrate.local.cli": set(),
        "tsmigrate.wire.signing": set(),
        "tsmigrate.rewrite.job": {"tsmigrate.local.auth"},
        "tsmigrate.local.auth": set(),
        "tsmigrate.newthing": set(),
    }
    assert tool.layer_problems(graph) == [
        "layer: tsmigrate.newthing is in no layer (add it to LAYERS)",
        "layer: tsmigrate.rewrite.job imports tsmigrate.local.auth: only what starts a local server "
        "imports local/ (tsmigrate.cli, tsmigrate.instance.target)",
    ]


def test_the_readme_lists_the_top_level_in_the_tools_layer_order():
    tool = _cycles_module()
    modules = [f"tsmigrate.{entry.removesuffix('.py')}" for entry in _readme_layout()
               if entry not in PACKAGE_FILES]
    layers = [tool.layer_of(module) for module in modules]
    assert None not in layers, modules
    assert layers == sorted(layers), list(zip(modules, layers, strict=True))
    named = [name for name, _ in tool.LAYERS]
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Layout"):text.index("```\ntsmigrate/\n")]
    # the numbered list names each layer's packages in the same order
    tokens = [f"`{entry}`" if entry.endswith(".py") else f"`{entry}/`"
              for entry in _readme_layout() if entry not in PACKAGE_FILES]
    first_seen = [section.index(token) for token in tokens]
    assert first_seen == sorted(first_seen), named
