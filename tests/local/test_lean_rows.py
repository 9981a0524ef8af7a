"""Lean rows: a put is stored as its encoded row alone (no blob of cell versions), read exactly like
a row stored with the blob, as every row of a data directory written before lean rows is; the
fast write path still refuses a corrupt cell.

(Streams' origin columns and secondary indexes read lean rows too: test_stream_shards.py and
test_secondary_indexes.py run over them.)"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import clirun
import pytest
from rawhttp import call
from refusedserve import refused_serve
from tablestore import (
    INF_MAX,
    INF_MIN,
    BatchWriteRowRequest,
    CapacityUnit,
    ComparatorType,
    Condition,
    OTSClient,
    OTSServiceError,
    PutRowItem,
    ReservedThroughput,
    Row,
    RowExistenceExpectation,
    SingleColumnCondition,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
)
from tablestore.plainbuffer.plain_buffer_builder import PlainBufferBuilder
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local import fastrow, keycodec
from tsmigrate.local.storage import DB_FILE, FORMAT, Storage, StorageFormatError, StoredRow
from tsmigrate.local.testing import LocalTablestore, local_tablestore
from tsmigrate.wire.plainbuffer import INF_MAX as MAX
from tsmigrate.wire.plainbuffer import INF_MIN as MIN
from tsmigrate.wire.plainbuffer import decode_row, encode_cell, encode_primary_key, encode_row

CU0 = ReservedThroughput(CapacityUnit(0, 0))
FULL = ([("k", INF_MIN), ("n", INF_MIN)], [("k", INF_MAX), ("n", INF_MAX)])
IGNORE = Condition(RowExistenceExpectation.IGNORE)
T0 = int(time.time() * 1000) - 60_000  # explicit timestamps: a minute ago, and 1 and 2 ms later


def create(client: OTSClient, name: str, versions: int = 3) -> None:
    meta = TableMeta(name, [("k", "STRING"), ("n", "INTEGER")])
    client.create_table(meta, TableOptions(max_version=versions), CU0)


def write(client: OTSClient, table: str) -> None:
    """Rows of every value type, cells unsorted (timestamps sent: two tables hold the same): a batch
    and a PutRow."""
    def cells(i: int) -> list[Any]:
        return [("s", f"v{i}", T0), ("b", bytearray(b"\x00\xff" * i), T0 + 1), ("a", i, T0 + 2),
                ("f", i / 4, T0), ("t", i % 2 == 0, T0 + 2)]
    request = BatchWriteRowRequest()
    request.add(TableInBatchWriteRowItem(table, [PutRowItem(Row([("k", "x"), ("n", i)], cells(i)), IGNORE)
                                                 for i in range(4)]))
    assert client.batch_write_row(request).is_all_succeed()
    client.put_row(table, Row([("k", "y"), ("n", 0)], cells(9)), IGNORE)


def stored_rows(ots: LocalTablestore, table: str) -> list[StoredRow]:
    storage = ots.server.storage
    info = storage.table(ots.instance, table)
    assert info is not None
    with storage.lock:
        return storage.scan(info.table_id, b"", b"\xff", True, 1000)


def to_blob_rows(ots: LocalTablestore, table: str) -> int:
    """Store every row of `table` with its blob of cell versions, as servers before lean rows did;
    the number of rows that were lean."""
    rows = stored_rows(ots, table)
    storage = ots.server.storage
    table_id = storage.table(ots.instance, table).table_id  # type: ignore[union-attr]
    with storage.transaction():
        for row in rows:
            storage.put(table_id, row._replace(blob=StoredRow.pack(*row.data)))
    return sum(1 for row in rows if not row.blob)


def reads(client: OTSClient, table: str) -> list[Any]:
    """What a battery of reads returns: GetRow and GetRange with versions, columns, filters, time
    ranges, column ranges, and the raw bytes of a whole scan."""
    pk = [("k", "x"), ("n", 2)]
    after = SingleColumnCondition("a", 1, ComparatorType.GREATER_THAN, pass_if_missing=False)
    out: list[Any] = []
    for kwargs in [
        {}, {"max_version": 3}, {"columns_to_get": ["s", "a"]}, {"columns_to_get": ["n", "f"]},
        {"column_filter": after}, {"time_range": T0 + 1, "max_version": None},
        {"time_range": (T0, T0 + 2), "max_version": 2}, {"start_column": "b", "end_column": "s"},
    ]:
        consumed, row, _ = client.get_row(table, pk, **kwargs)
        out.append((consumed.read, row and (row.primary_key, row.attribute_columns)))
        consumed, _, rows, _ = client.get_range(table, "FORWARD", *FULL, **{"max_version": 1, **kwargs})
        out.append((consumed.read, [(r.primary_key, r.attribute_columns) for r in rows]))
    scan = pb.GetRangeRequest(table_name=table, direction=pb.FORWARD, max_versions=3,
                              inclusive_start_primary_key=encode_primary_key([("k", MIN), ("n", MIN)]),
                              exclusive_end_primary_key=encode_primary_key([("k", MAX), ("n", MAX)]))
    out.append(call(client, "GetRange", scan, pb.GetRangeResponse).rows)
    return out


def test_lean_rows_read_as_rows_with_their_versions_stored(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    for table in ("lean", "blob"):
        create(client, table)
        write(client, table)
    assert all(not row.blob for row in stored_rows(ots_instance, "lean"))
    assert to_blob_rows(ots_instance, "blob") == 5
    assert reads(client, "lean") == reads(client, "blob")
    # Conditions on a lean row's columns; an update adding versions and deleting a column.
    exists = RowExistenceExpectation.EXPECT_EXIST
    must_hold = Condition(exists, SingleColumnCondition("s", "v2", ComparatorType.EQUAL))
    fails = Condition(exists, SingleColumnCondition("s", "v3", ComparatorType.EQUAL))
    for table in ("lean", "blob"):
        changes = {"put": [("s", "w", T0 + 5), ("a", -1, T0 + 6)], "delete_all": ["b"]}
        row = Row([("k", "x"), ("n", 2)], changes)
        client.update_row(table, row, must_hold)
        with pytest.raises(OTSServiceError, match="Condition check failed"):
            client.update_row(table, Row(row.primary_key, {"put": [("s", "z")]}), fails)
        client.update_row(table, Row([("k", "x"), ("n", 3)], {"delete_all": ["f"]}), IGNORE)
    updated = {row.pk: bool(row.blob) for row in stored_rows(ots_instance, "lean")}
    assert sorted(updated.values()) == [False] * 4 + [True]  # only the row given second versions
    assert reads(client, "lean") == reads(client, "blob")


def test_a_put_row_reads_back_as_the_service_encodes_it(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    create(client, "t", versions=1)
    pk = [("k", "\u00e9t\u00e9"), ("n", -7)]
    sent = [("z", "\U0001f600", T0), ("b", bytearray(b"\x00\x01"), T0 + 1), ("d", 2.5, T0), ("c", True, T0),
            ("a", 1 << 62)]
    before = int(time.time() * 1000)
    client.put_row("t", Row(pk, sent), IGNORE)
    request = pb.GetRowRequest(table_name="t", primary_key=encode_primary_key(pk), max_versions=1)
    got = call(client, "GetRow", request, pb.GetRowResponse).row
    stamped = next(c.timestamp for c in decode_row(got).cells if c.name == "a")  # the server's clock
    assert before <= stamped <= int(time.time() * 1000)
    cells = sorted([*sent[:-1], ("a", 1 << 62, stamped)])
    assert got == encode_row(pk, cells)
    # What the row's versions decode to is what the blob of cell versions held.
    (stored,) = stored_rows(ots_instance, "t")
    assert stored.blob == b"" and stored.key == keycodec.encode_key([v for _, v in pk])
    versions = {name: [(ts, bytes(v) if isinstance(v, bytearray) else v, *encode_cell(name, v, ts))]
                for name, v, ts in cells}
    assert stored.data == ((pk[0][1], pk[1][1]), versions)


def _batch_put(rows: list[bytes]) -> pb.BatchWriteRowRequest:
    ignore = pb.Condition(row_existence=pb.IGNORE)
    items = [pb.RowInBatchWriteRowRequest(type=pb.PUT, row_change=row, condition=ignore) for row in rows]
    return pb.BatchWriteRowRequest(tables=[pb.TableInBatchWriteRowRequest(table_name="t", rows=items)])


@pytest.mark.parametrize("rows", [2, fastrow.CHECK_TOGETHER])  # checked row by row, and together
@pytest.mark.parametrize("corrupt", ["key", "name", "value", "stamped", "timestamp", "long", "blob", "flag"])
def test_a_corrupt_cell_fails_the_batch(ots_instance: LocalTablestore, corrupt: str, rows: int) -> None:
    """A bit flipped in a PK value, a column name, a value (short, long, a blob, a boolean, one
    with a sent timestamp) or a sent timestamp: the cell's checksum no longer matches, and nothing
    of the batch is written."""
    client = ots_instance.client()
    create(client, "t")
    cells = [("name", "value"), ("x", 1), ("sent", "stamped", T0 + 1), ("long", "L" * 70),
             ("blob", bytearray(b"B" * 60)), ("flag", False)]
    serialize = PlainBufferBuilder.serialize_for_put_row
    keys = [f"ok{i:02d}" for i in range(rows - 1)] + ["key"]
    good = [bytes(serialize([("k", key), ("n", 1)], cells)) for key in keys]
    bad = bytearray(good[-1])
    # The second byte of what is found, or the byte after the boolean's head.
    find = {"timestamp": (T0 + 1).to_bytes(8, "little"), "long": b"LL", "blob": b"BB",
            "flag": b"flag\x05\x02\x00\x00\x00"}.get(corrupt, corrupt.encode())
    bad[bytes(bad).index(find) + (len(find) + 1 if corrupt == "flag" else 1)] ^= 0x04
    for at in (0, rows // 2, rows - 1):  # first, in the middle, last
        sent = [*good[:at], bytes(bad), *good[at:-1]]
        with pytest.raises(OTSServiceError) as info:
            call(client, "BatchWriteRow", _batch_put(sent), pb.BatchWriteRowResponse)
        assert info.value.code == "OTSParameterInvalid" and "checksum mismatch at cell" in info.value.message
    assert client.get_range("t", "FORWARD", *FULL)[2] == []
    written = call(client, "BatchWriteRow", _batch_put(good), pb.BatchWriteRowResponse).tables[0].rows
    assert all(row.is_ok for row in written)
    assert [r.primary_key[0][1] for r in client.get_range("t", "FORWARD", *FULL)[2]] == sorted(keys)


def test_values_of_every_length_checked_together(ots_instance: LocalTablestore) -> None:
    """Values of 0 to 70 bytes in one batch (slots of 8 to 64 bytes, and past them) read back."""
    client = ots_instance.client()
    create(client, "t", versions=1)
    request = BatchWriteRowRequest()
    cells = [[("s", "s" * n, T0), ("b", bytearray(range(n)), T0)] for n in range(71)]
    items = [PutRowItem(Row([("k", "x"), ("n", n)], cells[n]), IGNORE) for n in range(71)]
    request.add(TableInBatchWriteRowItem("t", items))
    assert client.batch_write_row(request).is_all_succeed()
    rows = client.get_range("t", "FORWARD", *FULL)[2]
    assert [r.attribute_columns for r in rows] == [sorted(row) for row in cells]


def test_a_data_directory_of_rows_with_versions_stored_reads_the_same(tmp_path: Path) -> None:
    with local_tablestore(data_dir=str(tmp_path)) as ots:
        client = ots.client()
        create(client, "t")
        write(client, "t")
        before = reads(client, "t")
        assert to_blob_rows(ots, "t") == 5
    with local_tablestore(data_dir=str(tmp_path)) as ots:
        assert all(row.blob for row in stored_rows(ots, "t"))
        assert reads(ots.client(), "t") == before
    db = sqlite3.connect(tmp_path / DB_FILE)
    assert db.execute("PRAGMA user_version").fetchone() == (FORMAT,)
    db.execute(f"PRAGMA user_version = {FORMAT + 1}")  # as a newer server would leave it
    db.close()
    with pytest.raises(StorageFormatError, match=f"has format {FORMAT + 1}, newer than"):
        Storage(str(tmp_path))
    # What an operator sees: one line naming the directory, no traceback, a failed exit.
    served = refused_serve(tmp_path, "--port", "0", "--data", str(tmp_path))
    assert served.returncode != 0
    assert f"{tmp_path} has format {FORMAT + 1}, newer than" in served.stderr
    assert "Traceback" not in served.stderr


def test_a_column_holding_every_type_in_turn(ots_instance: LocalTablestore) -> None:
    """The fast path learns a cell's layout per name and type: one name, five types, one batch."""
    client = ots_instance.client()
    create(client, "t", versions=1)
    values: list[Any] = [7, "seven", True, 7.5, bytearray(b"\x07"), -(2**63), "", bytearray()]
    request = BatchWriteRowRequest()
    items = [PutRowItem(Row([("k", "x"), ("n", i)], [("a", v, T0)]), IGNORE) for i, v in enumerate(values)]
    request.add(TableInBatchWriteRowItem("t", items))
    assert client.batch_write_row(request).is_all_succeed()
    rows = client.get_range("t", "FORWARD", *FULL)[2]
    assert [(r.attribute_columns[0][1], type(r.attribute_columns[0][1])) for r in rows] == [
        (v, type(v)) for v in values
    ]


def test_a_lean_row_with_a_boolean_key_column(ots_instance: LocalTablestore) -> None:
    """The fast path takes no boolean key: such a row is put and its versions read the general way."""
    client = ots_instance.client()
    meta = pb.TableMeta(table_name="t", primary_key=[pb.PrimaryKeySchema(name="k", type=pb.STRING),
                                                     pb.PrimaryKeySchema(name="b", type=pb.PK_BOOLEAN)])
    throughput = pb.ReservedThroughput(capacity_unit=pb.CapacityUnit(read=0, write=0))
    create_table = pb.CreateTableRequest(table_meta=meta, reserved_throughput=throughput,
                                         table_options=pb.TableOptions(time_to_live=-1, max_versions=2))
    call(client, "CreateTable", create_table, pb.CreateTableResponse)
    pk = [("k", "x"), ("b", True)]
    ignore = pb.Condition(row_existence=pb.IGNORE)
    put = pb.PutRowRequest(table_name="t", row=encode_row(pk, [("a", 1, T0)]), condition=ignore)
    call(client, "PutRow", put, pb.PutRowResponse)
    (stored,) = stored_rows(ots_instance, "t")
    assert stored.blob == b"" and stored.data == (("x", True), {"a": [(T0, 1, *encode_cell("a", 1, T0))]})


def test_plan_on_local_data_of_a_newer_format_says_so(tmp_path: Path) -> None:
    """The embedded instance a command opens refuses the directory in one line, no traceback."""
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(
        "from tsmigrate import Model, PrimaryKey\n\n"
        "class Order(Model, table='orders'):\n    order_id = PrimaryKey(int)\n")
    data_dir = tmp_path / ".tsmigrate" / "local"
    data_dir.mkdir(parents=True)
    db = sqlite3.connect(data_dir / DB_FILE)
    db.execute(f"PRAGMA user_version = {FORMAT + 1}")
    db.close()
    result = clirun.run(tmp_path, "plan")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert f"has format {FORMAT + 1}, newer than this tsmigrate reads" in result.stderr
