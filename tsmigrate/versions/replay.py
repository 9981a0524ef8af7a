"""Collect a script's operations, and replay a chain of revisions offline onto a Catalog.

Replaying needs no instance: each revision's ``upgrade(op)`` runs against the catalog its
ancestors produced, and the Steps it collects predict the next catalog (``ops.transform``, the
same prediction plan and apply rely on). Replaying from an empty Catalog to the head gives the
schema the chain declares, which autogenerate compares with the models.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable
from typing import Literal

import attrs

from tsmigrate.errors import Problem, TsmigrateError
from tsmigrate.schema import Catalog
from tsmigrate.schema.validate import validate_catalog
from tsmigrate.versions.errors import MigrationError, ReplayError
from tsmigrate.versions.op import Operation, Operations, next_catalog
from tsmigrate.versions.scripts import Script, ScriptDirectory

Direction = Literal["upgrade", "downgrade"]


@attrs.frozen
class Collected:
    """What one revision's upgrade or downgrade does, and the schema before and after."""

    revision: str
    direction: str
    operations: tuple[Operation, ...] = attrs.field(converter=tuple)
    catalog_before: Catalog
    catalog_after: Catalog


def collect(script: Script, direction: Direction, catalog: Catalog) -> Collected:
    """Run ``script.upgrade(op)`` or ``script.downgrade(op)`` against ``catalog``, collecting.

    Raises IrreversibleError (a downgrade that cannot be undone), OperationError (an op that does
    not apply to ``catalog``) or ReplayError (the function itself fails), naming the revision."""
    op = Operations(catalog, script)
    try:
        getattr(script, direction)(op)
    except MigrationError:
        raise
    except TsmigrateError as exc:  # e.g. a Model passed to op.create_table fails to compile
        raise ReplayError(f"revision {script.revision} ({script.path}) {direction}(): {exc}") from None
    except Exception as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == script.path]
        line = f" at line {frames[-1].lineno}" if frames else ""
        raise ReplayError(
            f"revision {script.revision} ({script.path}) {direction}() fails{line}: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    return Collected(script.revision, direction, op.operations, catalog, op.catalog)


def apply_operations(catalog: Catalog, operations: Iterable[Operation]) -> Catalog:
    """The schema after ``operations`` (data operations leave it unchanged)."""
    for operation in operations:
        catalog = next_catalog(catalog, operation)
    return catalog


def _undeclared_column(problem: Problem) -> bool:
    # A script's table need not declare the attribute columns a search index or a derivation
    # reads (the service keeps no list of them); every other rule holds as for models.
    return problem.rule == "search-index.unknown-column" or (
        problem.rule == "key-derivation.source" and "does not declare" in problem.message)


def check_valid(collected: Collected) -> None:
    """ReplayError when the schema a revision leaves breaks Tablestore's rules."""
    problems = [p for p in validate_catalog(collected.catalog_after) if not _undeclared_column(p)]
    if problems:
        listed = "; ".join(str(p).replace("\n", " ") for p in problems)
        raise ReplayError(
            f"revision {collected.revision} {collected.direction}() leaves a schema the service "
            f"refuses: {listed}"
        )


def replay(directory: ScriptDirectory, target: str | None = None,
           catalog: Catalog | None = None, validate: bool = True) -> Catalog:
    """The schema after upgrading from ``catalog`` (default: empty) to ``target`` (default: the
    single head), offline."""
    graph = directory.graph
    if target is None:
        target = graph.single_head(" and the schema of the chain is that of one head")
    catalog = catalog if catalog is not None else Catalog()
    if target is None:
        return catalog
    for rev in graph.upgrade_path((), target):
        collected = collect(directory.scripts[rev], "upgrade", catalog)
        if validate:
            check_valid(collected)
        catalog = collected.catalog_after
    return catalog
