"""Protobuf messages of the table, stream and split APIs, the ones the Python SDK 6.4.8 lacks included.

The local server parses requests with these classes and the raw client (`tsmigrate.instance.rawclient`)
sends them, so both agree on every field number. Names are stable:

Defined here (the Python SDK has no such messages; field numbers from the Java SDK's
`ots_internal_api.proto`, package `com.alicloud.openservices.tablestore.core.protocol`):

    AddDefinedColumnRequest     {table_name = 1 (string), columns = 2 (repeated DefinedColumnSchema)}
    AddDefinedColumnResponse    {}
    DeleteDefinedColumnRequest  {table_name = 1 (string), columns = 2 (repeated string)}
    DeleteDefinedColumnResponse {}
    CreateTableLocalTxn         {enable_local_txn = 8 (bool)}: the CreateTableRequest field the
                                Python SDK lacks, parsed from the same request bytes

    API names (the `/Name` of the request path): "AddDefinedColumn", "DeleteDefinedColumn".

Stream fields newer than the Python SDK's proto (numbers from the Go SDK's `table_store.proto`),
as fragments: a fragment's bytes merged into the SDK's message (``MergeFromString``) ride along
as fields the SDK does not know, and the SDK's message re-parsed as a fragment reads them:

    StreamSpecificationOrigin {columns_to_get = 3 (repeated string)}  (in StreamSpecification)
    StreamDetailsOrigin       {columns_to_get = 5 (repeated string)}  (in StreamDetails)
    StreamRecordOrigin        {origin_record = 3 (bytes)}  (in GetStreamRecordResponse.StreamRecord:
                              a PlainBuffer row, the row's values of those columns before the write)

Re-exported from the SDK's `table_store.proto` (same numbers as the Java proto):

    UpdateTableRequest{stream_spec = 4}, UpdateTableResponse{stream_details = 3},
    DescribeTableResponse{stream_details = 5}, StreamSpecification, StreamDetails,
    ListStreamRequest / ListStreamResponse, DescribeStreamRequest / DescribeStreamResponse,
    GetShardIteratorRequest / GetShardIteratorResponse,
    GetStreamRecordRequest / GetStreamRecordResponse (StreamRecord{action_type, record}),
    ComputeSplitPointsBySizeRequest / ComputeSplitPointsBySizeResponse, ActionType values
    PUT_ROW / UPDATE_ROW / DELETE_ROW, StreamStatus values STREAM_ENABLING / STREAM_ACTIVE.

    API names: "ListStream", "DescribeStream", "GetShardIterator", "GetStreamRecord",
    "ComputeSplitPointsBySize".

The new messages live in their own file, `tsmigrate_table_protocol.proto` (package
`tsmigrate.table_protocol`), added to the default descriptor pool with a dependency on the file
the SDK registers there, `table_store.proto`, so `DefinedColumnSchema` is the SDK's own type.
"""

from __future__ import annotations

from typing import Any

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.wire.protoext import F, build_messages

_SDK = "." + pb.DESCRIPTOR.package  # "com.aliyun.tablestore.protocol"

_classes = build_messages(
    "tsmigrate_table_protocol.proto",
    "tsmigrate.table_protocol",
    pb.DESCRIPTOR.name,  # "table_store.proto"
    [
        ("AddDefinedColumnRequest", [
            ("table_name", 1, F.LABEL_REQUIRED, F.TYPE_STRING, ""),
            ("columns", 2, F.LABEL_REPEATED, F.TYPE_MESSAGE, f"{_SDK}.DefinedColumnSchema"),
        ]),
        ("AddDefinedColumnResponse", []),
        ("DeleteDefinedColumnRequest", [
            ("table_name", 1, F.LABEL_REQUIRED, F.TYPE_STRING, ""),
            ("columns", 2, F.LABEL_REPEATED, F.TYPE_STRING, ""),
        ]),
        ("DeleteDefinedColumnResponse", []),
        # CreateTableRequest's field the Python SDK lacks, read from the same bytes.
        ("CreateTableLocalTxn", [
            ("enable_local_txn", 8, F.LABEL_OPTIONAL, F.TYPE_BOOL, ""),
        ]),
        ("StreamSpecificationOrigin", [("columns_to_get", 3, F.LABEL_REPEATED, F.TYPE_STRING, "")]),
        ("StreamDetailsOrigin", [("columns_to_get", 5, F.LABEL_REPEATED, F.TYPE_STRING, "")]),
        ("StreamRecordOrigin", [("origin_record", 3, F.LABEL_OPTIONAL, F.TYPE_BYTES, "")]),
    ],
)
AddDefinedColumnRequest: Any = _classes["AddDefinedColumnRequest"]
AddDefinedColumnResponse: Any = _classes["AddDefinedColumnResponse"]
DeleteDefinedColumnRequest: Any = _classes["DeleteDefinedColumnRequest"]
DeleteDefinedColumnResponse: Any = _classes["DeleteDefinedColumnResponse"]
CreateTableLocalTxn: Any = _classes["CreateTableLocalTxn"]
StreamSpecificationOrigin: Any = _classes["StreamSpecificationOrigin"]
StreamDetailsOrigin: Any = _classes["StreamDetailsOrigin"]
StreamRecordOrigin: Any = _classes["StreamRecordOrigin"]

DefinedColumnSchema = pb.DefinedColumnSchema
UpdateTableRequest = pb.UpdateTableRequest
UpdateTableResponse = pb.UpdateTableResponse
DescribeTableRequest = pb.DescribeTableRequest
DescribeTableResponse = pb.DescribeTableResponse
StreamSpecification = pb.StreamSpecification
StreamDetails = pb.StreamDetails
ListStreamRequest = pb.ListStreamRequest
ListStreamResponse = pb.ListStreamResponse
DescribeStreamRequest = pb.DescribeStreamRequest
DescribeStreamResponse = pb.DescribeStreamResponse
GetShardIteratorRequest = pb.GetShardIteratorRequest
GetShardIteratorResponse = pb.GetShardIteratorResponse
GetStreamRecordRequest = pb.GetStreamRecordRequest
GetStreamRecordResponse = pb.GetStreamRecordResponse
ComputeSplitPointsBySizeRequest = pb.ComputeSplitPointsBySizeRequest
ComputeSplitPointsBySizeResponse = pb.ComputeSplitPointsBySizeResponse
PUT_ROW, UPDATE_ROW, DELETE_ROW = pb.PUT_ROW, pb.UPDATE_ROW, pb.DELETE_ROW
STREAM_ENABLING, STREAM_ACTIVE = pb.STREAM_ENABLING, pb.STREAM_ACTIVE
