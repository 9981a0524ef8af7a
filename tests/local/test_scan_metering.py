"""GetRange meters the logical size (names plus values) of the rows it returns from a size stored
with each row, not by walking every cell of every row: the stored size must be the row's, whatever
wrote it, and rows stored before sizes were (a NULL) are metered all the same."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

from tablestore import (
    INF_MAX,
    INF_MIN,
    BatchWriteRowRequest,
    CapacityUnit,
    Condition,
    OTSClient,
    PutRowItem,
    ReservedThroughput,
    Row,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
)

from tsmigrate.local.storage import DB_FILE, StoredRow
from tsmigrate.local.testing import LocalTablestore, local_tablestore
from tsmigrate.wire.plainbuffer import logical_size

FULL = ([("k", INF_MIN), ("n", INF_MIN)], [("k", INF_MAX), ("n", INF_MAX)])
IGNORE = Condition("IGNORE")


def make_table(client: OTSClient, options: TableOptions | None = None) -> None:
    client.create_table(TableMeta("t", [("k", "STRING"), ("n", "INTEGER")]), options or TableOptions(),
                        ReservedThroughput(CapacityUnit(0, 0)))


def write_every_way(ots: LocalTablestore, client: OTSClient) -> None:
    """Rows of every value type through each write path: PutRow (plain, and with a column given
    twice), BatchWriteRow, UpdateRow (put, increment, delete; a version older than the newest)."""
    ts = int(ots.server.now() * 1000) - 60_000  # explicit timestamps, a minute old
    client.put_row("t", Row([("k", "héllo"), ("n", 1)], [
        ("s", "ünïcode"), ("e", ""), ("i", 7), ("d", 0.5), ("b", True), ("x", bytearray(b"\x00\xff")),
    ]))
    client.put_row("t", Row([("k", "a"), ("n", 2)], [("v", "old", ts), ("v", "newer", ts + 1)]))
    client.put_row("t", Row([("k", "a"), ("n", 3)], []))  # no attribute column
    request = BatchWriteRowRequest()
    request.add(TableInBatchWriteRowItem("t", [
        PutRowItem(Row([("k", "b"), ("n", i)], [("v", i), ("w", "x" * i)]), IGNORE) for i in range(5)
    ]))
    assert client.batch_write_row(request).is_all_succeed()
    client.update_row("t", Row([("k", "b"), ("n", 1)], {"put": [("z", "zz")], "increment": [("v", 5)]}),
                      IGNORE)
    client.update_row("t", Row([("k", "b"), ("n", 2)], {"delete_all": ["w"]}), IGNORE)
    client.update_row("t", Row([("k", "b"), ("n", 3)], {"put": [("w", "older", ts)]}), IGNORE)


def stored_rows(ots: LocalTablestore) -> list[StoredRow]:
    storage = ots.server.storage
    table = storage.table(ots.instance, "t")
    assert table is not None
    with storage.lock:
        return storage.scan(table.table_id, b"", b"\xff", True, 1000)


def test_stored_size_is_the_logical_size_of_the_newest_versions(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    make_table(client, TableOptions(max_version=3))
    write_every_way(ots_instance, client)
    rows = stored_rows(ots_instance)
    assert len(rows) == 8
    assert [(row.lsize, row.key) for row in rows] == [(logical_size(row.latest), row.key) for row in rows]


def scan_cu(client: OTSClient, **read: object) -> tuple[int, int]:
    """(read CU, rows) of one GetRange page over the whole table."""
    consumed, next_pk, rows, _ = client.get_range("t", "FORWARD", *FULL, max_version=1, **read)
    assert next_pk is None
    return consumed.read, len(rows)


def test_get_range_over_expiring_cells(ots_instance: LocalTablestore, ots_server_options) -> None:  # type: ignore[no-untyped-def]
    """A row whose cells expire one by one is read whole, then without them, metered for what
    it returns, and the page's next key follows it."""
    client = ots_instance.client()
    make_table(client, TableOptions(time_to_live=86400, max_time_deviation=100_000))
    expiring = int(ots_instance.server.now() * 1000) - 86_398_000  # 2 s to live
    client.put_row("t", Row([("k", "a"), ("n", 1)], [("gone", "x" * 4096, expiring), ("v", 1)]))
    client.put_row("t", Row([("k", "a"), ("n", 2)], [("v", 2)]))
    consumed, next_pk, rows, _ = client.get_range("t", "FORWARD", *FULL, max_version=1, limit=1)
    assert (consumed.read, [c[0] for c in rows[0].attribute_columns]) == (2, ["gone", "v"])
    assert next_pk == [("k", "a"), ("n", 2)]
    ots_instance.server.clock_offset = 3.0
    consumed, next_pk, rows, _ = client.get_range("t", "FORWARD", *FULL, max_version=1, limit=1)
    assert (consumed.read, rows[0].attribute_columns[0][:2]) == (1, ("v", 1))
    assert len(rows[0].attribute_columns) == 1 and next_pk == [("k", "a"), ("n", 2)]


def test_get_range_meters_names_and_values_to_the_byte(ots_instance: LocalTablestore) -> None:
    """Two rows of exactly 4,096 logical bytes together are 1 CU, one byte more is 2: whole rows
    (the stored size) and columns_to_get (the size of the cells returned) alike."""
    client = ots_instance.client()
    make_table(client)
    # Key: "k" + "p" (2) and "n" + 8 bytes (9); columns "i" + 8, "b" + 1, "s" + the string.
    fixed = 2 + 9 + 9 + 2 + 1
    client.put_row("t", Row([("k", "p"), ("n", 1)], [("i", 1), ("b", False), ("s", "é" * 1000)]))
    pad = 4096 - (fixed + 2000) - fixed
    client.put_row("t", Row([("k", "p"), ("n", 2)], [("i", 2), ("b", True), ("s", "s" * pad)]))
    assert scan_cu(client) == (1, 2)
    client.update_row("t", Row([("k", "p"), ("n", 2)], {"put": [("s", "s" * (pad + 1))]}), IGNORE)
    assert scan_cu(client) == (2, 2)
    assert scan_cu(client, columns_to_get=["s", "i", "b"]) == (2, 2)
    assert scan_cu(client, columns_to_get=["s"]) == (1, 2)  # 4,097 - 2 * (9 + 2)


def test_rows_stored_before_sizes_were_are_metered_alike(tmp_path: Path) -> None:
    """A data directory written before `rows` had its size column: opened, the column is added,
    the old rows read and metered as before, and rows written since carry their size."""
    with local_tablestore(data_dir=str(tmp_path)) as ots:
        client = ots.client()
        make_table(client)
        write_every_way(ots, client)
        client.put_row("t", Row([("k", "c"), ("n", 0)], [("big", "x" * 5000)]))  # past 4 KB
        expected = scan_cu(client)
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        db.execute("ALTER TABLE rows DROP COLUMN lsize")  # as an older version left it
    with local_tablestore(data_dir=str(tmp_path)) as ots:
        client = ots.client()
        assert {row.lsize for row in stored_rows(ots)} == {None}
        assert scan_cu(client) == expected == (2, 9)
        assert expected[0] == math.ceil(sum(logical_size(r.latest) for r in stored_rows(ots)) / 4096)
        client.put_row("t", Row([("k", "c"), ("n", 1)], [("v", 1)]))
        assert [row.lsize for row in stored_rows(ots) if row.lsize is not None] == [2 + 9 + 9]
