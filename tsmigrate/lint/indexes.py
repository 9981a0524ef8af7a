"""Indexes: the service's prerequisites and limits, and search-index changes that rebuild.

TS-IX401 and TS-IX402 surface validation's index rules as lint findings, so ``tsmigrate lint``
lists them next to the design rules (compiling models raises them as well). The mapping from
validation rule names is explicit; rules about names, typos and unknown types stay with
validation alone.
"""

from __future__ import annotations

from collections.abc import Iterator

from tsmigrate.lint.core import ERROR, WARNING, Context, Finding, rule
from tsmigrate.planning import ops
from tsmigrate.schema.validate import validate_table

# What the table and its columns must provide for an index to exist.
PREREQUISITES = frozenset({
    "secondary-index.max-versions",
    "secondary-index.ttl-allow-update",
    "secondary-index.unknown-column",
    "search-index.max-versions",
    "search-index.ttl-allow-update",
    "search-index.ttl-above-table",
    "search-index.unknown-column",
    "search-index.field-column-type",
    "search-index.routing",
})
# What an index may be: counts, key shapes, field types it can sort, TTL range.
LIMITS = frozenset({
    "defined-column.count",
    "secondary-index.count",
    "secondary-index.key-count",
    "secondary-index.key-type",
    "secondary-index.include-count",
    "secondary-index.include-key",
    "secondary-index.local-partition-key",
    "secondary-index.auto-increment",
    "search-index.no-fields",
    "search-index.field-count",
    "search-index.nested",
    "search-index.vector",
    "search-index.text-sort",
    "search-index.sort",
    "search-index.ttl",
})


def _validation_findings(context: Context, rules: frozenset[str]) -> Iterator[Finding]:
    for table in context.target.tables:
        for problem in validate_table(table):
            if problem.rule in rules:
                yield context.finding(
                    table, problem.field, f"{problem.message} [{problem.rule}]", problem.fix
                )


@rule("TS-IX401", ERROR, "index prerequisite not met")
def index_prerequisites(context: Context) -> Iterator[Finding]:
    yield from _validation_findings(context, PREREQUISITES)


@rule("TS-IX402", ERROR, "index limit exceeded")
def index_limits(context: Context) -> Iterator[Finding]:
    yield from _validation_findings(context, LIMITS)


@rule("TS-IX403", WARNING, "search index dropped and recreated")
def search_index_recreated(context: Context) -> Iterator[Finding]:
    """A changed search index is reindexed (no downtime) unless the service cannot: then the
    plan drops and creates it, and this says why and how to get the reindex back."""
    if context.plan is None:
        return
    for number, step in enumerate(context.plan.steps, 1):
        if isinstance(step, ops.DropSearchIndex) and step.replaced:
            name = step.index.name
            yield context.finding(
                step.table,
                f"search index {name}",
                f"the changed search index {name} is dropped and created again "
                f"({step.why or 'it cannot be reindexed'}): searches on it fail from the drop "
                "until the new index has synced every row (phase FULL)",
                f"let it be reindexed instead (rebuilt as {name}_reindex, then switched in "
                f"under its name): free the name {name}_reindex and keep the index name within "
                "247 characters, or give the changed index a new name and drop the old one later",
                step=number,
            )
