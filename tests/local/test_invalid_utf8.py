"""Bytes that are not UTF-8 in a protobuf string field (a table, index or column name, in any API,
nested messages and filters included) answer 400 OTSParameterInvalid, never 500."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import rawhttp
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from tablestore import OTSClient, OTSServiceError
from tablestore.protobuf import search_pb2
from tablestore.protobuf import table_store_filter_pb2 as filter_pb
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.server import HANDLERS
from tsmigrate.local.testing import LocalTablestore

MARK = "ZZMARKZZ"
BAD = b"\xffZZMARKZ"  # the same length: every enclosing length prefix stays right
MAX_DEPTH = 4


class Corrupted:
    """A request whose serialization has the marker replaced by bytes that are not UTF-8."""

    def __init__(self, message: Message) -> None:
        data = message.SerializePartialToString()
        assert MARK.encode() in data
        self.data = data.replace(MARK.encode(), BAD)

    def SerializeToString(self) -> bytes:
        return self.data


def string_paths(descriptor: Descriptor, depth: int = 0) -> Iterator[tuple[FieldDescriptor, ...]]:
    """Every string field reachable from `descriptor` (through message fields, bounded depth)."""
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            yield (field,)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and depth < MAX_DEPTH:
            for rest in string_paths(field.message_type, depth + 1):
                yield (field, *rest)


def fill_required(message: Message) -> None:
    """Give every required field a value, so the message reaches the handler's own checks."""
    for field in message.DESCRIPTOR.fields:
        if field.label != FieldDescriptor.LABEL_REQUIRED or message.HasField(field.name):
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            fill_required(getattr(message, field.name))
            getattr(message, field.name).SetInParent()
        elif field.type == FieldDescriptor.TYPE_STRING:
            setattr(message, field.name, "t")
        elif field.type == FieldDescriptor.TYPE_BYTES:
            setattr(message, field.name, b"")
        elif field.type == FieldDescriptor.TYPE_ENUM:
            setattr(message, field.name, field.enum_type.values[0].number)
        elif field.type == FieldDescriptor.TYPE_BOOL:
            setattr(message, field.name, False)
        else:
            setattr(message, field.name, 0)


def with_mark(request_cls: type[Message], path: tuple[FieldDescriptor, ...]) -> Message:
    message = request_cls()
    fill_required(message)
    node = message
    for field in path[:-1]:
        if field.label == FieldDescriptor.LABEL_REPEATED:
            node = getattr(node, field.name).add()
        else:
            node = getattr(node, field.name)
            node.SetInParent()
        fill_required(node)
    last = path[-1]
    if last.label == FieldDescriptor.LABEL_REPEATED:
        getattr(node, last.name).append(MARK)
    else:
        setattr(node, last.name, MARK)
    return message


CASES = [
    (api, ".".join(f.name for f in path), path)
    for api, (request_cls, _) in sorted(HANDLERS.items())
    for path in string_paths(request_cls.DESCRIPTOR)
]


def assert_refused(client: OTSClient, api: str, request: Corrupted, field: str) -> None:
    with pytest.raises(OTSServiceError) as info:
        rawhttp.call(client, api, request, pb.Error)
    error = info.value
    assert (error.get_http_status(), error.get_error_code()) == (400, "OTSParameterInvalid"), (
        api, field, error.get_error_message()
    )
    assert "UTF-8" in error.get_error_message()


def test_every_string_field_of_every_api_is_checked() -> None:
    apis = {api for api, _, _ in CASES}
    # Names live in string fields of nearly every API; the sweep below covers them all.
    assert {"CreateTable", "PutRow", "GetRange", "BatchGetRow", "CreateIndex", "Search"} <= apis
    assert len(CASES) > 60


@pytest.mark.parametrize(("api", "field", "path"), CASES, ids=[f"{a}:{f}" for a, f, _ in CASES])
def test_invalid_utf8_in_a_string_field(
    ots_instance: LocalTablestore, api: str, field: str, path: tuple[FieldDescriptor, ...]
) -> None:
    request_cls = HANDLERS[api][0]
    assert_refused(ots_instance.client(), api, Corrupted(with_mark(request_cls, path)), field)


def _table(client: OTSClient) -> None:
    from tablestore import CapacityUnit, ReservedThroughput, TableMeta, TableOptions

    client.create_table(TableMeta("t", [("id", "INTEGER")]), TableOptions(),
                        ReservedThroughput(CapacityUnit(0, 0)))


def test_invalid_utf8_in_a_filter_or_condition_column(ots_instance: LocalTablestore) -> None:
    from tablestore.plainbuffer.plain_buffer_builder import PlainBufferBuilder

    client = ots_instance.client()
    _table(client)
    pk = bytes(PlainBufferBuilder.serialize_primary_key([("id", 1)]))
    value = bytes(PlainBufferBuilder.serialize_column_value(1))
    single = filter_pb.SingleColumnValueFilter(
        comparator=filter_pb.CT_EQUAL, column_name=MARK, column_value=value,
        filter_if_missing=False, latest_version_only=True,
    )
    column_filter = filter_pb.Filter(
        type=filter_pb.FT_SINGLE_COLUMN_VALUE, filter=single.SerializeToString()
    ).SerializeToString()
    get = pb.GetRowRequest(table_name="t", primary_key=pk, max_versions=1, filter=column_filter)
    assert_refused(client, "GetRow", Corrupted(get), "filter")
    put = pb.PutRowRequest(
        table_name="t",
        row=bytes(PlainBufferBuilder.serialize_for_put_row([("id", 1)], [("v", 1)])),
        condition=pb.Condition(row_existence=pb.IGNORE, column_condition=column_filter),
    )
    assert_refused(client, "PutRow", Corrupted(put), "condition")


def test_invalid_utf8_in_a_search_query_field(ots_instance: LocalTablestore) -> None:
    from tablestore import FieldSchema, FieldType, SearchIndexMeta

    client = ots_instance.client()
    _table(client)
    client.create_search_index("t", "i", SearchIndexMeta([FieldSchema("v", FieldType.KEYWORD)]))
    term = search_pb2.TermQuery(field_name=MARK, term=b"x")
    query = search_pb2.SearchQuery(
        query=search_pb2.Query(type=search_pb2.TERM_QUERY, query=term.SerializeToString()), limit=1
    )
    search = search_pb2.SearchRequest(
        table_name="t", index_name="i", search_query=query.SerializeToString()
    )
    assert_refused(client, "Search", Corrupted(search), "search_query")
