"""Restoring an archive (``tsmigrate.instance.archive``) into a table: created from the archived schema if
it is missing, every cell version written with its timestamp through the model layer's batch
writer (only failed rows retried; a rerun completes a restore a crash cut short).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import attrs
from tablestore import metadata as md

from tsmigrate.instance import adapter
from tsmigrate.instance.archive import ArchiveError, Progress, archived_table, decode_value, read_archive
from tsmigrate.planning.plan import make_plan
from tsmigrate.schema import Catalog
from tsmigrate.service.batch import raw_put, write_items_op
from tsmigrate.service.calls import run


class RestoreResult:
    def __init__(self, table: str, rows: int, expired_cells: int, created: bool, widened_s: int):
        self.table = table
        self.rows = rows
        self.expired_cells = expired_cells  # past the table's TTL: the service would drop them
        self.created = created
        self.widened_s = widened_s  # max_time_deviation used while restoring (0: unchanged)


def restore_archive(
    client: Any, location: str, table_name: str | None = None, progress: Progress | None = None,
) -> RestoreResult:
    """Load an archive back: create the table if it is missing (from the archived schema), write
    every cell version with its timestamp. Old timestamps need the table's max_time_deviation to
    reach them: it is widened while restoring and set back after."""
    header, rows = read_archive(location)
    total, oldest = 0, None
    for row in rows:  # a first pass: the size (for progress) and the oldest timestamp
        total += 1
        for cell in row["cells"]:
            oldest = cell[2] if oldest is None else min(oldest, cell[2])
    table = archived_table(header, table_name)
    created = table.name not in set(client.list_table())
    if created:
        for step in make_plan(Catalog(), Catalog(tables=[table])).steps:
            adapter.execute(client, step)
        adapter.settle(client, table.name, attrs.evolve(table))
    described = client.describe_table(table.name)
    live_key = [(name, kind) for name, kind, *_ in described.table_meta.schema_of_primary_key]
    archived_key = [(c.name, c.type) for c in table.primary_key]
    if live_key != archived_key:
        def shown(key: list[tuple[str, str]]) -> str:
            return ", ".join(f"{name} {kind}" for name, kind in key)

        raise ArchiveError(
            f"{location}: table {table.name} exists with primary key ({shown(live_key)}), the "
            f"archive's rows have ({shown(archived_key)}); restore into a new table with --table"
        )
    options = described.table_options
    now_ms = int(time.time() * 1000)
    ttl_cutoff = None if options.time_to_live == -1 else now_ms - options.time_to_live * 1000
    widened = 0
    if oldest is not None and now_ms - oldest > options.max_time_deviation * 1000:
        widened = math.ceil((now_ms - oldest) / 1000) + 3600
        client.update_table(table.name, md.TableOptions(
            options.time_to_live, options.max_version, widened, options.allow_update))
    expired = 0

    def items() -> Iterator[Any]:
        nonlocal expired
        _, again = read_archive(location)
        for number, row in enumerate(again, 1):
            pk = [(name, decode_value(value)) for name, value in row["pk"]]
            cells = []
            for name, value, ts in row["cells"]:
                if ttl_cutoff is not None and ts < ttl_cutoff:
                    expired += 1
                    continue
                cells.append((name, decode_value(value), ts))
            if progress is not None and number % 1000 == 0:
                progress(number, total)
            yield raw_put(table.name, pk, cells, source=row)

    try:
        result = run(client, write_items_op(None, items()))
    finally:
        if widened:
            client.update_table(table.name, md.TableOptions(
                options.time_to_live, options.max_version, options.max_time_deviation,
                options.allow_update))
    if result.failures:
        first = result.failures[0]
        raise ArchiveError(
            f"restoring {location} into {table.name}: {len(result.failures)} row(s) failed "
            f"(first: {first.error_code} {first.error_message} at {first.key}); running the "
            "restore again retries them (it is idempotent)"
        )
    if progress is not None:
        progress(total, total)
    return RestoreResult(table.name, result.written, expired, created, widened)
