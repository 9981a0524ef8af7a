"""Source and target tables for rewrite tests, filled through the official SDK."""

from __future__ import annotations

import time
from typing import Any

import tablestore as ts

from tsmigrate.keys import Concat, HashPrefix
from tsmigrate.rewrite.job import ConnectionSpec, RewriteJob
from tsmigrate.schema import AttributeColumn, PrimaryKeyColumn, Table, TableOptions
from tsmigrate.state import State

YEAR_S = 366 * 86400
# Readings keyed by a hashed device id, rewritten to (device, zero-padded seq) concatenated.
SOURCE = Table(
    "readings",
    [PrimaryKeyColumn("pk", "STRING", derivation=HashPrefix("device", 4, "|")),
     PrimaryKeyColumn("seq", "INTEGER")],
    options=TableOptions(max_versions=3, max_time_deviation=YEAR_S),
)
TARGET = Table(
    "readings_by_seq",
    [PrimaryKeyColumn("key", "STRING", derivation=Concat(["device", "seq"], pad={"seq": 8})),
     PrimaryKeyColumn("region", "STRING")],
    options=TableOptions(max_versions=3, max_time_deviation=YEAR_S),
    attributes=[AttributeColumn("seq", "INTEGER")],
)

# The same two tables as model modules, for the tests that run the CLI on a project.
MODELS_V1 = '''
from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.keys import HashPrefix


class Reading(Model, table="readings", max_versions=3, max_time_deviation="366d"):
    pk = PrimaryKey(str, derive=HashPrefix("device", length=4, sep="|"))
    seq = PrimaryKey(int)
    device = Column(str)
'''
MODELS_V2 = '''
from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.keys import Concat


class ReadingV2(Model, table="readings_by_seq", replaces="readings", max_versions=3,
                max_time_deviation="366d"):
    device_seq = PrimaryKey(str, derive=Concat(["device", "seq"], pad={"seq": 8}), name="key")
    region = PrimaryKey(str)
    seq = Column(int)
    device = Column(str)
'''


def create(client: ts.OTSClient, table: Table) -> None:
    meta = ts.TableMeta(table.name, [(c.name, c.type) for c in table.primary_key])
    options = ts.TableOptions(-1, table.options.max_versions, table.options.max_time_deviation)
    client.create_table(meta, options, ts.ReservedThroughput(ts.CapacityUnit(0, 0)))


def source_row(i: int, now_ms: int) -> tuple[list[tuple[str, Any]], list[tuple[str, Any, int]]]:
    """Row ``i``: two versions of ``temp`` (the older one a day back), a region, a payload."""
    device = f"dev-{i % 37:03d}"
    key = [("pk", HashPrefix("device", 4, "|").derive({"device": device})), ("seq", i)]
    cells = [
        ("note", f"reading {i} " + "x" * (i % 50), now_ms - 3_600_000),
        ("region", ["eu", "us", "ap"][i % 3], now_ms - 7_200_000),
        ("temp", i * 0.25, now_ms - 60_000),
        ("temp", i * 0.5, now_ms - 86_400_000),
    ]
    return key, cells


def fill(client: ts.OTSClient, rows: int, table: str = SOURCE.name) -> int:
    """Write ``rows`` source rows with explicit timestamps; returns the base time used."""
    now_ms = int(time.time() * 1000)
    for start in range(0, rows, 200):
        request = ts.BatchWriteRowRequest()
        items = []
        for i in range(start, min(rows, start + 200)):
            key, cells = source_row(i, now_ms)
            items.append(ts.PutRowItem(ts.Row(key, cells), ts.Condition("IGNORE")))
        request.add(ts.TableInBatchWriteRowItem(table, items))
        assert client.batch_write_row(request).is_all_succeed()
    return now_ms


def read_all(client: ts.OTSClient, table: Table) -> list[tuple[list, list]]:
    """Every row with every version: (primary key, [(name, value, ts)]), in key order."""
    start = [(c.name, ts.INF_MIN) for c in table.primary_key]
    end = [(c.name, ts.INF_MAX) for c in table.primary_key]
    rows = []
    while start:
        _, start, page, _ = client.get_range(table.name, "FORWARD", start, end, max_version=100)
        rows += [(list(r.primary_key), [tuple(c) for c in r.attribute_columns]) for r in page]
    return rows


def setup(ots_instance, rows: int, job_id: str = "job1") -> tuple[ConnectionSpec, RewriteJob, ts.OTSClient]:
    client = ots_instance.client()
    State(client).ensure_table()
    create(client, SOURCE)
    create(client, TARGET)
    fill(client, rows)
    spec = ConnectionSpec(ots_instance.endpoint, ots_instance.instance, local_defaults=True)
    return spec, RewriteJob(job_id, SOURCE, TARGET), client


def expected_target(client: ts.OTSClient, job: RewriteJob) -> list[tuple[list, list]]:
    """The target rows the source should become, from the transform's object path."""
    from tsmigrate.rewrite.transform import build

    transform = build(job)
    rows = []
    for key, cells in read_all(client, job.source):
        row = transform.apply(key, cells)
        rows.append((row.primary_key, [tuple(c) for c in row.columns]))
    return sorted(rows, key=lambda r: [v for _, v in r[0]])


def encoded_target_row(i: int) -> bytes:
    """Row ``i`` of the target table, encoded as BatchWriteRow takes it."""
    from tsmigrate.rewrite.transform import RowTransform, build

    key, cells = source_row(i, int(time.time() * 1000))
    return RowTransform.encode(build(RewriteJob("encode", SOURCE, TARGET)).apply(key, cells))[0]
