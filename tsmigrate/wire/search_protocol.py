"""Search-index messages of the Java SDK's ``search.proto`` that the Python SDK's copy lacks.

The Python SDK (6.4.8) cannot express dynamic schema modification ("reindex"). These messages
are supersets of the SDK's messages of the same name, with the Java proto's field numbers, so
bytes built by either side parse on the other (unknown fields are skipped):

    CreateSearchIndexRequest      table_name=1, index_name=2, schema=3 (IndexSchema),
                                  source_index_name=4, time_to_live=5
    QueryFlowWeight               index_name=1, weight=2
    UpdateSearchIndexRequest      table_name=1, index_name=2, switch_index_name=3,
                                  query_flow_weight=4 (repeated QueryFlowWeight), time_to_live=5,
                                  added_field_schemas=6 (repeated FieldSchema)
    MeteringInfo                  storage_size=1, row_count=2, reserved_read_cu=3, timestamp=4
    IndexStatus                   status=1 (IndexStatusEnum), status_description=2
    IndexStatusEnum               PENDING=1, FAILED=2, RUNNING=3
    DescribeSearchIndexResponse   schema=1 (IndexSchema), sync_stat=2 (SyncStat),
                                  metering_info=3, brother_index_name=4,
                                  query_flow_weight=5 (repeated QueryFlowWeight), create_time=6,
                                  time_to_live=7, index_status=8

They are built at runtime from a FileDescriptorProto that imports the SDK's ``search.proto`` (the
name the SDK registers in the default descriptor pool), so IndexSchema, FieldSchema and SyncStat
are the SDK's own classes: ``CreateSearchIndexRequest().schema`` is a ``search_pb2.IndexSchema``.
No protoc step and no generated file. The package is ``tsmigrate.search_ext``, so the full names
do not clash with the SDK's messages.
"""

from __future__ import annotations

from typing import Any

from tablestore.protobuf import search_pb2

from tsmigrate.wire.protoext import F, Field, build_messages

PACKAGE = "tsmigrate.search_ext"
FILE_NAME = "tsmigrate/local/search_ext.proto"
_SDK = "." + search_pb2.DESCRIPTOR.package

PENDING = 1
FAILED = 2
RUNNING = 3

_MESSAGES: list[tuple[str, list[Field]]] = [
    # (message, [(field, number, label, type, type name for messages / enums)])
    ("CreateSearchIndexRequest", [
        ("table_name", 1, F.LABEL_REQUIRED, F.TYPE_STRING, ""),
        ("index_name", 2, F.LABEL_REQUIRED, F.TYPE_STRING, ""),
        ("schema", 3, F.LABEL_OPTIONAL, F.TYPE_MESSAGE, f"{_SDK}.IndexSchema"),
        ("source_index_name", 4, F.LABEL_OPTIONAL, F.TYPE_STRING, ""),
        ("time_to_live", 5, F.LABEL_OPTIONAL, F.TYPE_INT32, ""),
    ]),
    ("QueryFlowWeight", [
        ("index_name", 1, F.LABEL_OPTIONAL, F.TYPE_STRING, ""),
        ("weight", 2, F.LABEL_OPTIONAL, F.TYPE_INT32, ""),
    ]),
    ("UpdateSearchIndexRequest", [
        ("table_name", 1, F.LABEL_OPTIONAL, F.TYPE_STRING, ""),
        ("index_name", 2, F.LABEL_OPTIONAL, F.TYPE_STRING, ""),
        ("switch_index_name", 3, F.LABEL_OPTIONAL, F.TYPE_STRING, ""),
        ("query_flow_weight", 4, F.LABEL_REPEATED, F.TYPE_MESSAGE, f".{PACKAGE}.QueryFlowWeight"),
        ("time_to_live", 5, F.LABEL_OPTIONAL, F.TYPE_INT32, ""),
        ("added_field_schemas", 6, F.LABEL_REPEATED, F.TYPE_MESSAGE, f"{_SDK}.FieldSchema"),
    ]),
    ("MeteringInfo", [
        ("storage_size", 1, F.LABEL_OPTIONAL, F.TYPE_INT64, ""),
        ("row_count", 2, F.LABEL_OPTIONAL, F.TYPE_INT64, ""),
        ("reserved_read_cu", 3, F.LABEL_OPTIONAL, F.TYPE_INT64, ""),
        ("timestamp", 4, F.LABEL_OPTIONAL, F.TYPE_INT64, ""),
    ]),
    ("IndexStatus", [
        ("status", 1, F.LABEL_OPTIONAL, F.TYPE_ENUM, f".{PACKAGE}.IndexStatusEnum"),
        ("status_description", 2, F.LABEL_OPTIONAL, F.TYPE_STRING, ""),
    ]),
    ("DescribeSearchIndexResponse", [
        ("schema", 1, F.LABEL_OPTIONAL, F.TYPE_MESSAGE, f"{_SDK}.IndexSchema"),
        ("sync_stat", 2, F.LABEL_OPTIONAL, F.TYPE_MESSAGE, f"{_SDK}.SyncStat"),
        ("metering_info", 3, F.LABEL_OPTIONAL, F.TYPE_MESSAGE, f".{PACKAGE}.MeteringInfo"),
        ("brother_index_name", 4, F.LABEL_OPTIONAL, F.TYPE_STRING, ""),
        ("query_flow_weight", 5, F.LABEL_REPEATED, F.TYPE_MESSAGE, f".{PACKAGE}.QueryFlowWeight"),
        ("create_time", 6, F.LABEL_OPTIONAL, F.TYPE_INT64, ""),
        ("time_to_live", 7, F.LABEL_OPTIONAL, F.TYPE_INT32, ""),
        ("index_status", 8, F.LABEL_OPTIONAL, F.TYPE_MESSAGE, f".{PACKAGE}.IndexStatus"),
    ]),
]


_classes = build_messages(
    FILE_NAME,
    PACKAGE,
    search_pb2.DESCRIPTOR.name,
    _MESSAGES,
    enums={"IndexStatusEnum": [("PENDING", PENDING), ("FAILED", FAILED), ("RUNNING", RUNNING)]},
)


# Typed Any: the classes are made at runtime, so static checkers cannot know their fields.
CreateSearchIndexRequest: Any = _classes["CreateSearchIndexRequest"]
QueryFlowWeight: Any = _classes["QueryFlowWeight"]
UpdateSearchIndexRequest: Any = _classes["UpdateSearchIndexRequest"]
MeteringInfo: Any = _classes["MeteringInfo"]
IndexStatus: Any = _classes["IndexStatus"]
DescribeSearchIndexResponse: Any = _classes["DescribeSearchIndexResponse"]
