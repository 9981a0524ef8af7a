"""A table of rows for backfill tests, written through the official SDK."""

from __future__ import annotations

import tablestore as ts

from tsmigrate.schema import PrimaryKeyColumn, Table

TABLE = Table("events", [PrimaryKeyColumn("id", "STRING"), PrimaryKeyColumn("n", "INTEGER")])
REGIONS = ("eu", "us", "ap")


def key(i: int) -> list:
    return [("id", f"dev-{i % 97:03d}"), ("n", i)]


def create_and_fill(client: ts.OTSClient, rows: int, payload=lambda i: f"{REGIONS[i % 3]}:{i}") -> None:
    meta = ts.TableMeta(TABLE.name, [(c.name, c.type) for c in TABLE.primary_key])
    client.create_table(meta, ts.TableOptions(-1, 1), ts.ReservedThroughput(ts.CapacityUnit(0, 0)))
    for start in range(0, rows, 200):
        request = ts.BatchWriteRowRequest()
        items = [ts.PutRowItem(ts.Row(key(i), [("payload", payload(i)), ("scratch", "x")]),
                               ts.Condition("IGNORE")) for i in range(start, min(rows, start + 200))]
        request.add(ts.TableInBatchWriteRowItem(TABLE.name, items))
        client.batch_write_row(request)


def read_all(client: ts.OTSClient) -> dict:
    """{(id, n): {column: value}} of every row."""
    out = {}
    start = [("id", ts.INF_MIN), ("n", ts.INF_MIN)]
    end = [("id", ts.INF_MAX), ("n", ts.INF_MAX)]
    while start:
        _, start, rows, _ = client.get_range(TABLE.name, "FORWARD", start, end, max_version=1)
        for row in rows:
            out[tuple(v for _, v in row.primary_key)] = {c[0]: c[1] for c in row.attribute_columns}
    return out
