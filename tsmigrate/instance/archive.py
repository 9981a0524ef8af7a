"""Archives of a family's expired month tables: every row and every cell version with its
timestamp, as JSON Lines, to a local path or an fsspec URL (``oss://`` with ``ossfs``,
``s3://`` with ``s3fs``; install ``tsmigrate[archive]``); and their restore.

An archive is one file per table (``<archive>/<table>.jsonl.gz``): a header line (format, table
name, the table's schema in tsmigrate's IR), one line per row (``{"pk": [[name, value], ...],
"cells": [[name, value, timestamp_ms], ...]}``), a trailer with the row count. Values keep
their Tablestore types (bytes as ``{"b64": ...}``, floats and booleans as JSON's).

Both directions are idempotent: archiving rewrites the file; restoring writes the same cells
with the same timestamps (a rerun after a crash completes the restore). Restoring writes through
the model layer's batch writer, so it lives above this module, in ``service/restore.py``; the
adapter retires a table through this one.
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


def decode_value(value: Any) -> Any:
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
