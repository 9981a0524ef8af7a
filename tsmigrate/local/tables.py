"""Table APIs: CreateTable, ListTable, DescribeTable, UpdateTable, DeleteTable.

Validation rules and messages follow the service (tablestore-spec.md §1-§4); where the service's
text is unknown the message says plainly what is wrong.
"""

from __future__ import annotations

import copy
import itertools
import uuid
from typing import TYPE_CHECKING, Any

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local import keycodec, streams
from tsmigrate.local.errors import OTSError, invalid
from tsmigrate.local.model import PKColumn, TableInfo
from tsmigrate.local.searchapi import check_delete_table, check_update_table
from tsmigrate.local.table_rules import (
    MAX_DEFINED_COLUMNS,
    MAX_PK_COLUMNS,
    TABLE_QUOTA,
    check_column_name,
    check_index,
    check_index_base_options,
    check_table_name,
    get_table,
    names_in_use,
    quota_used,
)
from tsmigrate.wire import table_protocol
from tsmigrate.wire.plainbuffer import INF_MAX, INF_MIN, PlainBufferError, decode_value

if TYPE_CHECKING:
    from tsmigrate.local.context import Context

MAX_CU = 100_000
MIN_TTL = 86400
MAX_DEVIATION = (2**63 - 1) // 1_000_000
MAX_STREAM_EXPIRATION_H = 168

_PK_TYPE_NAMES = {pb.INTEGER: "INTEGER", pb.STRING: "STRING", pb.BINARY: "BINARY", pb.PK_BOOLEAN: "BOOLEAN"}
_DEFINED_TYPES = {pb.DCT_INTEGER, pb.DCT_DOUBLE, pb.DCT_BOOLEAN, pb.DCT_STRING, pb.DCT_BLOB}


# -- CreateTable -------------------------------------------------------------------------------


def create_table(ctx: Context, req: pb.CreateTableRequest) -> pb.CreateTableResponse:
    meta = req.table_meta
    name = meta.table_name
    check_table_name(name)
    primary_key = _primary_key(name, meta.primary_key)
    defined = _defined_columns(meta.defined_column, {c.name for c in primary_key})
    info = TableInfo(name=name, table_id=0, primary_key=primary_key, defined_columns=defined)
    if not req.HasField("table_options") or not req.table_options.HasField("time_to_live"):
        raise invalid("Time-to-live is missing while creating table.")
    if not req.table_options.HasField("max_versions"):
        raise invalid("MaxVersions is missing while creating table.")
    _apply_options(info, req.table_options)
    cu = req.reserved_throughput.capacity_unit
    if not (cu.HasField("read") and cu.HasField("write")):
        raise invalid("Both read and write capacity unit are required to create table.")
    _check_cu(cu.read)
    _check_cu(cu.write)
    info.read_cu, info.write_cu = cu.read, cu.write
    info.shard_splits = _shard_splits(req.partitions, primary_key[0])
    if req.HasField("stream_spec"):
        _apply_stream(info, req.stream_spec, ctx.now)
    if req.HasField("sse_spec"):
        _apply_sse(info, req.sse_spec)
    for index_meta in req.index_metas:
        info.indexes.append(check_index(info, index_meta))
    check_index_base_options(info)
    txn = table_protocol.CreateTableLocalTxn.FromString(req.SerializeToString())
    if txn.HasField("enable_local_txn"):
        if txn.enable_local_txn and any(c.auto_increment for c in primary_key):
            raise invalid("Local transaction can't be enabled on a table with an auto-increment primary key.")
        info.local_txn = txn.enable_local_txn
    index_names = [i.name for i in info.indexes]
    if len(set(index_names)) != len(index_names) or name in index_names:
        raise invalid("Duplicated index name in the request.")
    with ctx.storage.transaction():
        in_use = names_in_use(ctx)
        if name in in_use:
            raise OTSError(409, "OTSObjectAlreadyExist", "Requested table already exists.")
        for index_name in index_names:
            if index_name in in_use:
                raise OTSError(409, "OTSObjectAlreadyExist", f"Index already exists: {index_name}.")
        if quota_used(ctx) + 1 + len(info.indexes) > TABLE_QUOTA:
            raise OTSError(403, "OTSQuotaExhausted", "Number of tables exceeded the quota.")
        info.table_id = ctx.storage.new_table_id()
        for index in info.indexes:
            index.table_id = ctx.storage.new_table_id()
        info.creation_time = int(ctx.now * 1_000_000)
        info.last_increase_time = int(ctx.now)
        ctx.storage.save_table(ctx.instance, info)
        if info.stream_id is not None:
            streams.open_shards(ctx.storage, info.stream_id, ctx.server.options.stream_shards)
    return pb.CreateTableResponse()


def _primary_key(table: str, schema: Any) -> list[PKColumn]:
    if not 1 <= len(schema) <= MAX_PK_COLUMNS:
        raise invalid("The number of primary key columns must be in range: [1, 4].")
    columns: list[PKColumn] = []
    seen: set[str] = set()
    for col in schema:
        check_column_name(col.name)
        if col.name in seen:
            raise invalid(f"Duplicated primary key name: '{col.name}'.")
        seen.add(col.name)
        # BOOLEAN keys only after the partition key (aliyun-tablestore-java-sdk BoolPkFunctiontest)
        if col.type not in _PK_TYPE_NAMES or (col.type == pb.PK_BOOLEAN and not columns):
            raise invalid(f"{_PK_TYPE_NAMES.get(col.type, col.type)} is an invalid type for the primary key.")
        auto = col.HasField("option") and col.option == pb.AUTO_INCREMENT
        if auto and col.type != pb.INTEGER:
            raise invalid("AUTO_INCREMENT primary key must be integer.")
        if auto and not columns:
            raise invalid(f"First primary key can't be auto increment, table: {table}.")
        columns.append(PKColumn(col.name, col.type, auto))
    if sum(c.auto_increment for c in columns) > 1:
        raise invalid("AUTO_INCREMENT primary key count must <= 1.")
    return columns


def _defined_columns(schema: Any, pk_names: set[str]) -> list[tuple[str, int]]:
    if len(schema) > MAX_DEFINED_COLUMNS:
        raise invalid("The number of defined columns must be in range: [0, 32].")
    columns: list[tuple[str, int]] = []
    for col in schema:
        check_column_name(col.name)
        if col.name in pk_names:
            raise invalid(f"Duplicated attribute column name with primary key column: '{col.name}'.")
        if any(col.name == c[0] for c in columns):
            raise invalid(f"Duplicated defined column name: '{col.name}'.")
        if col.type not in _DEFINED_TYPES:
            raise invalid(f"Invalid type for the defined column: '{col.name}'.")
        columns.append((col.name, col.type))
    return columns


def _apply_options(info: TableInfo, options: pb.TableOptions) -> None:
    if options.HasField("time_to_live"):
        ttl = options.time_to_live
        if ttl == 0 or ttl < -1:
            raise invalid("TimeToLive cannot be 0 or less than -1.")
        if 0 < ttl < MIN_TTL:
            raise invalid(f"TimeToLive must be -1 or no less than {MIN_TTL} seconds: {ttl}.")
        info.ttl = ttl
    if options.HasField("max_versions"):
        if options.max_versions <= 0:
            raise invalid("The maximum versions cannot be less than or equal to 0.")
        info.max_versions = options.max_versions
    if options.HasField("deviation_cell_version_in_sec"):
        deviation = options.deviation_cell_version_in_sec
        if not 0 <= deviation <= MAX_DEVIATION:
            raise invalid("The maximum deviation must be in range [0, INT64_MAX/1000000].")
        info.deviation = deviation
    if options.HasField("allow_update"):
        info.allow_update = options.allow_update


def _check_cu(value: int) -> None:
    if value < 0:
        raise invalid(f"Invalid Capacity Unit:{value}. Capacity Unit must be nonnegative.")
    if value > MAX_CU:
        raise invalid(f"Invalid Capacity Unit:{value}. Capacity Unit must be at most {MAX_CU}.")


def _shard_splits(partitions: Any, first_pk: PKColumn) -> list[bytes]:
    """Validate pre-split partitions ([INF_MIN, p1), [p1, p2), ... [pn, INF_MAX)); the split points."""
    if not partitions:
        return []
    bounds = [partitions[0].begin]
    for part in partitions:
        if part.begin != bounds[-1]:
            raise invalid("Partitions must be contiguous.")
        bounds.append(part.end)
    try:
        values = [decode_value(b) for b in bounds]
    except PlainBufferError:
        raise invalid("Invalid partition boundary.") from None
    if values[0] is not INF_MIN or values[-1] is not INF_MAX:
        raise invalid("Partitions must start at INF_MIN and end at INF_MAX.")
    expected = {pb.INTEGER: int, pb.STRING: str, pb.BINARY: (bytes, bytearray)}[first_pk.type]
    points = values[1:-1]
    for value in points:
        if type(value) is bool or not isinstance(value, expected):
            raise invalid("The type of a split point does not match the partition key.")
    keys = [keycodec.encode_key([v]) for v in points]
    if any(a >= b for a, b in itertools.pairwise(keys)):
        raise invalid("Split points must be strictly increasing.")
    return list(bounds[1:-1])


def _apply_stream(info: TableInfo, spec: pb.StreamSpecification, now: float) -> None:
    if spec.enable_stream:
        if not spec.HasField("expiration_time"):
            raise invalid("Expiration time is required when enabling stream.")
        if not 1 <= spec.expiration_time <= MAX_STREAM_EXPIRATION_H:
            raise invalid(
                f"Expiration time of stream must be in range [1, {MAX_STREAM_EXPIRATION_H}]."
            )
        if not info.stream_enabled:
            info.stream_id = f"{info.name}_{uuid.uuid4().hex}"
            info.stream_last_enable_time = int(now * 1_000_000)
        info.stream_enabled = True
        info.stream_expiration = spec.expiration_time
        # columns_to_get: a field newer than the SDK's proto (see table_protocol.py)
        origin = table_protocol.StreamSpecificationOrigin.FromString(spec.SerializeToString())
        info.stream_columns = sorted(set(origin.columns_to_get))
    else:
        if spec.HasField("expiration_time"):
            raise invalid("Expiration time cannot be set when disabling stream.")
        info.stream_enabled = False
        info.stream_expiration = None
        info.stream_id = None
        info.stream_columns = []


def _apply_sse(info: TableInfo, spec: pb.SSESpecification) -> None:
    info.sse_enabled = spec.enable
    if spec.enable:
        info.sse_key_type = spec.key_type if spec.HasField("key_type") else pb.SSE_KMS_SERVICE
        if spec.HasField("key_id"):
            info.sse_key_id = spec.key_id.decode("latin-1")
        if spec.HasField("role_arn"):
            info.sse_role_arn = spec.role_arn.decode("latin-1")


# -- ListTable / DescribeTable / DeleteTable -----------------------------------------------------


def list_table(ctx: Context, req: pb.ListTableRequest) -> pb.ListTableResponse:
    names = sorted(t.name for t in ctx.storage.tables(ctx.instance))
    return pb.ListTableResponse(table_names=names)


def describe_table(ctx: Context, req: pb.DescribeTableRequest) -> pb.DescribeTableResponse:
    info = get_table(ctx, req.table_name)
    resp = pb.DescribeTableResponse()
    meta = resp.table_meta
    meta.table_name = info.name
    for col in info.primary_key:
        schema = meta.primary_key.add(name=col.name, type=col.type)
        if col.auto_increment:
            schema.option = pb.AUTO_INCREMENT
    for name, type_ in info.defined_columns:
        meta.defined_column.add(name=name, type=type_)
    _fill_throughput(resp.reserved_throughput_details, info)
    _fill_options(resp.table_options, info)
    _fill_stream(resp.stream_details, info)
    resp.shard_splits.extend(info.shard_splits)
    resp.sse_details.enable = info.sse_enabled
    if info.sse_enabled and info.sse_key_type is not None:
        resp.sse_details.key_type = info.sse_key_type
        if info.sse_key_id is not None:
            resp.sse_details.key_id = info.sse_key_id.encode("latin-1")
        if info.sse_role_arn is not None:
            resp.sse_details.role_arn = info.sse_role_arn.encode("latin-1")
    for index in info.indexes:
        resp.index_metas.add(
            name=index.name,
            primary_key=index.primary_key,
            defined_column=index.defined_columns,
            index_update_mode=index.update_mode,
            index_type=index.index_type,
        )
    return resp


def _fill_throughput(details: pb.ReservedThroughputDetails, info: TableInfo) -> None:
    details.capacity_unit.read = info.read_cu
    details.capacity_unit.write = info.write_cu
    details.last_increase_time = info.last_increase_time
    if info.last_decrease_time is not None:
        details.last_decrease_time = info.last_decrease_time


def _fill_options(options: pb.TableOptions, info: TableInfo) -> None:
    options.time_to_live = info.ttl
    options.max_versions = info.max_versions
    options.deviation_cell_version_in_sec = info.deviation
    options.allow_update = info.allow_update


def _fill_stream(details: pb.StreamDetails, info: TableInfo) -> None:
    details.enable_stream = info.stream_enabled
    if info.stream_enabled:
        details.stream_id = info.stream_id or ""
        details.expiration_time = info.stream_expiration or 0
        details.last_enable_time = info.stream_last_enable_time or 0
        if info.stream_columns:
            extra = table_protocol.StreamDetailsOrigin(columns_to_get=info.stream_columns)
            details.MergeFromString(extra.SerializeToString())


def delete_table(ctx: Context, req: pb.DeleteTableRequest) -> pb.DeleteTableResponse:
    with ctx.storage.transaction():
        info = get_table(ctx, req.table_name)
        check_delete_table(ctx, info)
        ctx.storage.drop_table(ctx.instance, info)
        streams.drop_records(ctx.storage, info.stream_id)
    return pb.DeleteTableResponse()


# -- UpdateTable ---------------------------------------------------------------------------------


def update_table(ctx: Context, req: pb.UpdateTableRequest) -> pb.UpdateTableResponse:
    has_cu = req.HasField("reserved_throughput")
    has_options = req.HasField("table_options")
    if not (has_cu or has_options or req.HasField("stream_spec")):
        raise invalid("No parameter is specified while updating table.")
    with ctx.storage.transaction():
        info = copy.deepcopy(get_table(ctx, req.table_name))
        if has_options:
            if not req.table_options.ListFields():
                raise invalid("No parameter is specified in table options.")
            _apply_options(info, req.table_options)
            check_index_base_options(info)
            check_update_table(ctx, info)
        if has_cu:
            _update_cu(ctx, info, req.reserved_throughput.capacity_unit)
        old_stream_id = info.stream_id
        if req.HasField("stream_spec"):
            _apply_stream(info, req.stream_spec, ctx.now)
            if info.stream_id is None:
                streams.drop_records(ctx.storage, old_stream_id)
        ctx.storage.save_table(ctx.instance, info)
        if info.stream_id is not None and info.stream_id != old_stream_id:  # a new stream
            streams.open_shards(ctx.storage, info.stream_id, ctx.server.options.stream_shards)
    resp = pb.UpdateTableResponse()
    _fill_throughput(resp.reserved_throughput_details, info)
    _fill_options(resp.table_options, info)
    _fill_stream(resp.stream_details, info)
    return resp


def _update_cu(ctx: Context, info: TableInfo, cu: pb.CapacityUnit) -> None:
    if not (cu.HasField("read") or cu.HasField("write")):
        raise invalid("At least one of read or write capacity unit is required.")
    read = cu.read if cu.HasField("read") else info.read_cu
    write = cu.write if cu.HasField("write") else info.write_cu
    _check_cu(read)
    _check_cu(write)
    interval = ctx.server.options.cu_adjust_interval_s
    if info.last_cu_update is not None and ctx.now - info.last_cu_update < interval:
        raise OTSError(
            403,
            "OTSTooFrequentReservedThroughputAdjustment",
            "Capacity unit adjustment is too frequent.",
        )
    if read > info.read_cu or write > info.write_cu:
        info.last_increase_time = int(ctx.now)
    if read < info.read_cu or write < info.write_cu:
        info.last_decrease_time = int(ctx.now)
    info.read_cu, info.write_cu = read, write
    info.last_cu_update = ctx.now


HANDLERS: dict[str, tuple[type, Any]] = {
    "CreateTable": (pb.CreateTableRequest, create_table),
    "ListTable": (pb.ListTableRequest, list_table),
    "DescribeTable": (pb.DescribeTableRequest, describe_table),
    "UpdateTable": (pb.UpdateTableRequest, update_table),
    "DeleteTable": (pb.DeleteTableRequest, delete_table),
}
