"""Archives of a family's expired month tables: every row and every cell version with its
timestamp, as JSON Lines, to a local path or an fsspec URL (``oss://`` with ``ossfs``,
``s3://`` with ``s3fs``; install ``tsmigrate[archive]``); and their restore.

An archive is one file per table (``<archive>/<table>.jsonl.gz``): a header line (format, table
name, the table's schema in tsmigrate's IR), one line per row (``{"pk": [[name, value], ...],
"cells": [[name, value, timestamp_ms], ...]}``), a trailer with the row count. Values keep
their Tablestore types (bytes as ``{"b64": ...}``, floats and booleans as JSON's).

Both directions are idempotent: archiving rewrites the file; restoring writes the same cells
with the same timestamps (a rerun after a crash completes the restore).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from tablestore import metadata as md

from tsmigrate.errors import TsmigrateError
from tsmigrate.schema import Table, table_from_dict, table_to_dict

ARCHIVE_FORMAT = 1
Progress = Callable[[int, int | None], None]  # (rows so far, total if known)


class ArchiveError(TsmigrateError):
    """An archive cannot be written, read or restored; the message says which and why."""


def archive_location(archive: str, table: str) -> str:
    return f"{archive.rstrip('/')}/{table}.jsonl.gz"


@contextmanager
def open_archive(location: str, mode: str) -> Iterator[IO[str]]:
    """A text stream on a local path or an fsspec URL (gzip when the name ends in .gz)."""
    compressed = location.endswith(".gz")
    if "://" in location and not location.startswith("file://"):
        try:
            import fsspec
        except ImportError:
            raise ArchiveError(
                f"{location}: archives at URLs need fsspec; install tsmigrate[archive] (and the "
                "filesystem's package, such as ossfs for oss://)"
            ) from None
        with fsspec.open(location, mode + "t", compression="gzip" if compressed else None,
                         encoding="utf-8") as stream:
            yield stream
        return
    path = location.removeprefix("file://")
    if "w" in mode:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        opener = gzip.open if compressed else open
        with opener(path, mode + "t", encoding="utf-8") as stream:
            yield stream
    except FileNotFoundError:
        raise ArchiveError(f"{location}: no such archive") from None


def _encode(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {"b64": base64.b64encode(bytes(value)).decode()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        return bytearray(base64.b64decode(value["b64"]))
    return value


def _rows(client: Any, table: Table, max_versions: int) -> Iterator[Any]:
    """Every row of ``table`` with all its versions, following the continuation key to the end."""
    names = [c.name for c in table.primary_key]
    start = [(n, md.INF_MIN) for n in names]
    end = [(n, md.INF_MAX) for n in names]
    while start is not None:
        _, start, rows, _ = client.get_range(
            table.name, md.Direction.FORWARD, start, end, None, None, None, max_versions)
        yield from rows


def archive_table(client: Any, table: Table, location: str, progress: Progress | None = None) -> int:
    """Write every row of ``table`` (all versions, cell timestamps included) to ``location``;
    the number of rows."""
    described = client.describe_table(table.name)
    max_versions = described.table_options.max_version
    count = 0
    with open_archive(location, "w") as stream:
        header = {"format": ARCHIVE_FORMAT, "table": table.name, "schema": table_to_dict(table)}
        stream.write(json.dumps(header, sort_keys=True) + "\n")
        for row in _rows(client, table, max_versions):
            line = {
                "pk": [[name, _encode(value)] for name, value in row.primary_key],
                "cells": [[c[0], _encode(c[1]), c[2]] for c in row.attribute_columns],
            }
            stream.write(json.dumps(line, separators=(",", ":")) + "\n")
            count += 1
            if progress is not None and count % 1000 == 0:
                progress(count, None)
        stream.write(json.dumps({"end": True, "rows": count}) + "\n")
    if progress is not None:
        progress(count, count)
    return count


def _lines(location: str) -> Iterator[Any]:
    try:
        with open_archive(location, "r") as stream:
            for number, line in enumerate(stream, 1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    raise ArchiveError(f"{location}, line {number}: not JSON") from None
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        # A directory, a file that is not gzip, one cut short: the file is at fault, not the target.
        raise ArchiveError(f"{location} cannot be read as an archive: {exc}") from None


def read_archive(location: str) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """The header and an iterator of the rows; a file cut short (no trailer) is an error."""
    lines = _lines(location)
    header = next(lines, None)
    if not isinstance(header, dict) or header.get("format") != ARCHIVE_FORMAT:
        lines.close()
        raise ArchiveError(f"{location} is not a tsmigrate archive of format {ARCHIVE_FORMAT}")

    def rows() -> Iterator[dict[str, Any]]:
        count = 0
        for data in lines:
            if data.get("end"):
                if data.get("rows") != count:
                    raise ArchiveError(f"{location}: {count} rows, the trailer says {data.get('rows')}")
                return
            count += 1
            yield data
        raise ArchiveError(f"{location} is cut short: no trailer after {count} rows")

    return header, rows()


def archived_table(header: dict[str, Any], name: str | None = None) -> Table:
    table = table_from_dict(header["schema"])
    if name is not None and name != table.name:
        import attrs

        table = attrs.evolve(table, name=name)
    return table


def verify_archive(location: str) -> int:
    """The number of rows of a complete archive (reads it through; raises if it is not)."""
    _, rows = read_archive(location)
    return sum(1 for _ in rows)


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
    import math
    import time

    import attrs

    from tsmigrate import adapter
    from tsmigrate.plan import make_plan
    from tsmigrate.schema import Catalog
    from tsmigrate.service.batch import raw_put, write_items_op
    from tsmigrate.service.calls import run

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
            pk = [(name, _decode(value)) for name, value in row["pk"]]
            cells = []
            for name, value, ts in row["cells"]:
                if ttl_cutoff is not None and ts < ttl_cutoff:
                    expired += 1
                    continue
                cells.append((name, _decode(value), ts))
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
