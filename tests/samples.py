"""Small IR values shared by the plan and apply tests."""

from __future__ import annotations

from typing import Any

import attrs

from tsmigrate.schema import (
    DefinedColumn,
    PrimaryKeyColumn,
    SearchField,
    SearchIndex,
    SecondaryIndex,
    Table,
    TableOptions,
)

DAY = 86400


def events(**changes: Any) -> Table:
    """A table with a TTL, a global index and a search index: every prerequisite in play."""
    base = Table(
        name="events",
        primary_key=[PrimaryKeyColumn("pk", "STRING"), PrimaryKeyColumn("ts", "INTEGER")],
        defined_columns=[DefinedColumn("user", "STRING"), DefinedColumn("score", "INTEGER")],
        options=TableOptions(time_to_live=30 * DAY, allow_update=False),
        secondary_indexes=[SecondaryIndex("events_by_user", ["user"], include=["score"])],
        search_indexes=[
            SearchIndex("events_search", [SearchField("score", "LONG", sort_and_agg=True)],
                        time_to_live=30 * DAY)
        ],
    )
    return attrs.evolve(base, **changes)
