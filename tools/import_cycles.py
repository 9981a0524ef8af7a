"""List the import cycles among tsmigrate's modules, and every import that climbs a layer;
prints nothing and exits 0 when there are none.

Every import counts, wherever it is written: at the top, inside a function (a lazy import is
still a dependency), or under ``TYPE_CHECKING``. ``from package import name`` depends on the
module ``package.name`` when there is one, else on the package itself. A package's
``__init__`` is a module like any other: importing ``a.b`` is counted as depending on ``a.b``
only, since every module depends on its parents and counting that would make each package's
re-exports a cycle.

The layers, from the bottom, are ``LAYERS`` (README's Layout section shows the same order): a
module may import modules of its own layer and of the layers below it. A module is in the layer
whose package prefix is the longest that names it. Outside ``local/`` only ``LOCAL_ENTRY_POINTS``
import ``local/``: they start a local server, which nothing else needs.

    python tools/import_cycles.py [PACKAGE_DIR]

With a PACKAGE_DIR other than tsmigrate's, only cycles are listed (its layers are not these).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "tsmigrate"

# tsmigrate's layers, from the bottom; each a name and the packages or modules in it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("errors and keys", ("tsmigrate.errors", "tsmigrate.keys")),
    ("wire protocol", ("tsmigrate.wire",)),
    ("schema and models", ("tsmigrate.schema", "tsmigrate")),  # the package re-exports the declarations
    ("rewrite contract", ("tsmigrate.contract",)),
    ("lint and planning", ("tsmigrate.lint", "tsmigrate.planning")),
    ("local server", ("tsmigrate.local",)),
    ("instance", ("tsmigrate.instance",)),
    ("engines", ("tsmigrate.rewrite", "tsmigrate.reindex")),
    ("apply and status", ("tsmigrate.instance.apply", "tsmigrate.instance.status")),
    ("versioned migrations", ("tsmigrate.versions",)),
    ("service", ("tsmigrate.service",)),
    ("commands", ("tsmigrate.commands", "tsmigrate.cli")),
)
LOCAL = "tsmigrate.local"
# Outside local/, what starts a local server: the embedded instance and the `local` commands.
LOCAL_ENTRY_POINTS = frozenset({"tsmigrate.instance.target", "tsmigrate.cli"})


def module_names(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``package_dir``."""
    top = package_dir.name
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [top, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    # A package's own module is its __init__: level 1 means the package itself.
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The tsmigrate modules ``module`` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node, path.name == "__init__.py")
            for alias in node.names:
                child = f"{source}.{alias.name}"
                if child in known:
                    found.add(child)
                elif source in known:
                    found.add(source)
    found.discard(module)
    return found


def import_graph(package_dir: Path = ROOT) -> dict[str, set[str]]:
    known = module_names(package_dir)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep chain of imports cannot hit the recursion limit.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = [f"  {a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return "cycle: " + ", ".join(component) + "\n" + "\n".join(edges)


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int | None:
    """The index in ``layers`` of the layer whose prefix is the longest naming ``module`` (the
    package itself only by its exact name); None when no layer names it."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, (_name, prefixes) in enumerate(layers):
        for prefix in prefixes:
            exact_only = "." not in prefix
            names = module == prefix or (not exact_only and module.startswith(prefix + "."))
            if names and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def layer_problems(graph: dict[str, set[str]],
                   layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[str]:
    """Each module in no layer, each import that climbs a layer, and each import of local/ from
    outside it but by ``LOCAL_ENTRY_POINTS``: one line each."""
    problems = [f"layer: {module} is in no layer (add it to LAYERS)"
                for module in sorted(graph) if layer_of(module, layers) is None]
    for module in sorted(graph):
        mine = layer_of(module, layers)
        for imported in sorted(graph[module]):
            theirs = layer_of(imported, layers)
            if mine is not None and theirs is not None and theirs > mine:
                problems.append(f"layer: {module} ({layers[mine][0]}) imports {imported} "
                                f"({layers[theirs][0]}, above it)")
            if (imported == LOCAL or imported.startswith(LOCAL + ".")) and not (
                    module == LOCAL or module.startswith(LOCAL + ".") or module in LOCAL_ENTRY_POINTS):
                problems.append(f"layer: {module} imports {imported}: only what starts a local "
                                f"server imports local/ ({', '.join(sorted(LOCAL_ENTRY_POINTS))})")
    return problems


def main(argv: list[str]) -> int:
    package = Path(argv[0]).resolve() if argv else ROOT
    graph = import_graph(package)
    found = cycles(graph)
    for component in found:
        print(describe(component, graph))
    problems = layer_problems(graph) if package == ROOT else []
    for problem in problems:
        print(problem)
    return 1 if found or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
