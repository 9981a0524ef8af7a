"""AddDefinedColumn / DeleteDefinedColumn over raw protobuf (`table_protocol` messages, the Java
SDK's field numbers), checked through the SDK's DescribeTable."""

from __future__ import annotations

import pytest
from rawhttp import call
from tablestore import (
    CapacityUnit,
    OTSClient,
    OTSServiceError,
    ReservedThroughput,
    SecondaryIndexMeta,
    TableMeta,
    TableOptions,
)
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.wire import table_protocol as tp

CU0 = ReservedThroughput(CapacityUnit(0, 0))


def add(client: OTSClient, table: str, *columns: tuple[str, int]) -> None:
    request = tp.AddDefinedColumnRequest(table_name=table)
    for name, kind in columns:
        request.columns.add(name=name, type=kind)
    call(client, "AddDefinedColumn", request, tp.AddDefinedColumnResponse)


def delete(client: OTSClient, table: str, *names: str) -> None:
    request = tp.DeleteDefinedColumnRequest(table_name=table, columns=list(names))
    call(client, "DeleteDefinedColumn", request, tp.DeleteDefinedColumnResponse)


def defined(client: OTSClient, table: str) -> list[tuple[str, str]]:
    return list(client.describe_table(table).table_meta.defined_columns)


def error(fn, *args) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(OTSServiceError) as info:
        fn(*args)
    e = info.value
    return e.get_http_status(), e.get_error_code(), e.get_error_message()


def test_wire_format_matches_the_java_proto() -> None:
    request = tp.AddDefinedColumnRequest(table_name="t")
    request.columns.add(name="c", type=pb.DCT_STRING)
    # table_name = 1 (string), columns = 2 (DefinedColumnSchema{name = 1, type = 2}).
    assert request.SerializeToString() == b"\n\x01t\x12\x05\n\x01c\x10\x04"
    assert tp.DeleteDefinedColumnRequest(table_name="t", columns=["c"]).SerializeToString() == (
        b"\n\x01t\x12\x01c"
    )
    assert isinstance(request.columns[0], pb.DefinedColumnSchema)  # the SDK's own type


def test_add_and_delete_defined_columns(ots_client: OTSClient) -> None:
    client = ots_client
    client.create_table(TableMeta("t", [("id", "INTEGER")], [("a", "STRING")]), TableOptions(), CU0)
    add(client, "t", ("b", pb.DCT_INTEGER), ("c", pb.DCT_DOUBLE), ("d", pb.DCT_BOOLEAN), ("e", pb.DCT_BLOB))
    assert defined(client, "t") == [
        ("a", "STRING"), ("b", "INTEGER"), ("c", "DOUBLE"), ("d", "BOOLEAN"), ("e", "BINARY")
    ]
    delete(client, "t", "c", "a")
    assert defined(client, "t") == [("b", "INTEGER"), ("d", "BOOLEAN"), ("e", "BINARY")]
    add(client, "t", ("c", pb.DCT_STRING))  # deleted then added again with another type
    assert defined(client, "t")[-1] == ("c", "STRING")


def test_defined_column_errors_change_nothing(ots_client: OTSClient) -> None:
    client = ots_client
    client.create_table(
        TableMeta("t", [("id", "INTEGER")], [("a", "STRING"), ("b", "INTEGER"), ("c", "STRING")]),
        TableOptions(),
        CU0,
        [SecondaryIndexMeta("idx", ["b"], ["c"])],
    )
    before = defined(client, "t")
    bad = "OTSParameterInvalid"
    assert error(add, client, "t", ("a", pb.DCT_STRING)) == (400, bad, "Defined column already exists: 'a'.")
    assert error(add, client, "t", ("new", pb.DCT_STRING), ("id", pb.DCT_INTEGER)) == (
        400, bad, "Duplicated attribute column name with primary key column: 'id'."
    )
    assert error(add, client, "t", ("x", pb.DCT_STRING), ("x", pb.DCT_STRING)) == (
        400, bad, "Duplicated defined column name: 'x'."
    )
    assert error(add, client, "t", ("1x", pb.DCT_STRING))[2] == "Invalid column name: '1x'."
    assert error(add, client, "t", *[(f"c{i}", pb.DCT_STRING) for i in range(30)]) == (
        400, bad, "The number of defined columns must be in range: [0, 32]."
    )
    assert error(add, client, "t") == (400, bad, "No defined column is specified.")
    assert error(delete, client, "t", "zzz") == (400, bad, "Defined column does not exist: 'zzz'.")
    assert error(delete, client, "t", "a", "b") == (400, bad, "Defined column 'b' is used by index 'idx'.")
    assert error(delete, client, "t", "c") == (400, bad, "Defined column 'c' is used by index 'idx'.")
    assert error(delete, client, "t", "id")[2] == "Defined column does not exist: 'id'."
    assert error(add, client, "missing", ("x", pb.DCT_STRING))[:2] == (404, "OTSObjectNotExist")
    assert defined(client, "t") == before
    delete(client, "t", "a")  # unused by the index: allowed
    assert [name for name, _ in defined(client, "t")] == ["b", "c"]
