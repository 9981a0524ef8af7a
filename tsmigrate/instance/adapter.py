"""The only door to the Tablestore SDK: IR <-> SDK objects, inspection, and step execution.

Inspection issues its describe calls concurrently (a thread pool over the SDK's thread-safe
client); everything else in tsmigrate sees only IR values and Steps. Every call is retried by
``tsmigrate.instance.retry``'s policy (installed on the client by ``inspect``, ``RawClient`` and
``execute``); a step whose write is not idempotent is checked by a read before it is sent again.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import attrs
import tablestore as ts
import urllib3.exceptions
from tablestore import metadata as md
from tablestore.protobuf import search_pb2
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.errors import TsmigrateError
from tsmigrate.instance import retry
from tsmigrate.instance.archive import archive_location, archive_table, verify_archive
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.planning import ops
from tsmigrate.schema import (
    GLOBAL,
    LOCAL,
    Catalog,
    DefinedColumn,
    IndexSorter,
    PrimaryKeyColumn,
    ReservedThroughput,
    SearchField,
    SearchIndex,
    SecondaryIndex,
    StreamSpec,
    Table,
    TableOptions,
)

_FIELD_TYPES = {
    "LONG": md.FieldType.LONG, "DOUBLE": md.FieldType.DOUBLE, "BOOLEAN": md.FieldType.BOOLEAN,
    "KEYWORD": md.FieldType.KEYWORD, "TEXT": md.FieldType.TEXT, "NESTED": md.FieldType.NESTED,
    "GEO_POINT": md.FieldType.GEOPOINT, "DATE": md.FieldType.DATE, "VECTOR": md.FieldType.VECTOR,
    "JSON": md.FieldType.JSON,
}
_FIELD_NAMES = {v: k for k, v in _FIELD_TYPES.items()}
_METRICS = {
    "euclidean": md.VectorMetricType.VM_EUCLIDEAN,
    "cosine": md.VectorMetricType.VM_COSINE,
    "dot_product": md.VectorMetricType.VM_DOT_PRODUCT,
}
_SORT_MODES = {"MIN": md.SortMode.MIN, "MAX": md.SortMode.MAX, "AVG": md.SortMode.AVG}
_ANALYZER_PARAMETERS = {
    "single_word": md.SingleWordAnalyzerParameter,
    "split": md.SplitAnalyzerParameter,
    "fuzzy": md.FuzzyAnalyzerParameter,
}
INSPECT_WORKERS = 16


class TargetError(TsmigrateError):
    """The instance refused a request or could not be reached."""


@contextmanager
def service_errors(target: str) -> Iterator[None]:
    """Turn the SDK's and the network's exceptions into one clear TargetError."""
    try:
        yield
    except ts.OTSServiceError as exc:
        hint = ""
        if exc.code == "OTSAuthFailed":
            token = ("; ALIBABA_CLOUD_SECURITY_TOKEN is set: an STS token must belong to that key "
                     "and expires" if os.environ.get("ALIBABA_CLOUD_SECURITY_TOKEN") else "")
            hint = f" (check ALIBABA_CLOUD_ACCESS_KEY_ID / _SECRET and the instance name{token})"
        raise TargetError(
            f"{target} answered {exc.http_status} {exc.code}: {exc.message}{hint}"
        ) from None
    except ts.OTSClientError as exc:
        raise TargetError(f"talking to {target} failed: {exc.message}") from None
    except BrokenPipeError:
        # urllib3 wraps the socket's own errors: a bare one is our stdout closed by the reader
        # (`plan | head -1`), which the command ends quietly (``commands.common.reports_errors``).
        raise
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise TargetError(f"cannot reach {target}: {network_failure(exc)}") from None


def network_failure(exc: BaseException) -> str:
    """What went wrong on the way to an endpoint and what to check, in a user's words: not
    urllib3's ("HTTPConnectionPool(...): Max retries exceeded ... Caused by ...")."""
    cause = retry._cause(exc)
    pool = getattr(exc, "pool", None) or getattr(cause, "conn", None) or getattr(cause, "pool", None)
    where = f"{pool.host}:{pool.port}" if getattr(pool, "host", None) else "the endpoint"
    errors = urllib3.exceptions
    if isinstance(cause, errors.NameResolutionError):
        return (f"cannot connect: the host name {getattr(pool, 'host', where)!r} does not resolve; "
                "check the endpoint's host name (and this machine's DNS)")
    socket_error = _socket_error(cause)
    if isinstance(socket_error, ConnectionRefusedError):
        return (f"cannot connect: connection refused by {where}; check the endpoint's host and "
                "port, and that the server is running there")
    if isinstance(cause, errors.NewConnectionError):
        reason = socket_error.strerror if isinstance(socket_error, OSError) and socket_error.strerror \
            else "no connection"
        return (f"cannot connect to {where}: {reason}; check the endpoint and this machine's "
                "network (a proxy or firewall in the way)")
    if isinstance(cause, errors.ConnectTimeoutError):
        return (f"cannot connect: {where} did not accept a connection in time; check the endpoint "
                "and that a firewall or network lets this machine through")
    if isinstance(cause, errors.ReadTimeoutError):
        return f"{where} accepted the connection but did not answer in time; try again later"
    if isinstance(cause, errors.SSLError):
        return (f"the TLS handshake with {where} failed ({_first_line(socket_error or cause)}); "
                "check the endpoint's scheme (https:// or http://) and port")
    if isinstance(cause, errors.ProtocolError) or isinstance(socket_error, ConnectionError):
        return (f"the connection was dropped ({_first_line(socket_error or cause)}); check that "
                "the endpoint is a Tablestore endpoint, and try again")
    return _first_line(socket_error or cause)


def _socket_error(exc: BaseException) -> BaseException | None:
    """The operating system's error under urllib3's wrappers, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and not isinstance(current, urllib3.exceptions.HTTPError):
            return current
        reason = getattr(current, "reason", None)  # ProtocolError / SSLError carry it in args
        args = [a for a in getattr(current, "args", ()) if isinstance(a, BaseException)]
        current = current.__cause__ or current.__context__ or (
            reason if isinstance(reason, BaseException) else (args[0] if args else None))
    return None


def _first_line(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    line = (text.splitlines() or [type(exc).__name__])[0]
    return re.sub(r" \(_ssl\.c:\d+\)", "", line)  # where in CPython's ssl module: nobody's business


class ConditionFailed(TsmigrateError):
    """A conditional write found the row not as expected (the service's OTSConditionCheckFail)."""


# --- rows (tsmigrate's own bookkeeping: state table, lock, history) -------------------------------

_EXPECT = {
    "ignore": ts.RowExistenceExpectation.IGNORE,
    "exist": ts.RowExistenceExpectation.EXPECT_EXIST,
    "not_exist": ts.RowExistenceExpectation.EXPECT_NOT_EXIST,
}


def _condition(expect: str, column_equals: tuple[str, Any] | None) -> ts.Condition:
    column = None
    if column_equals is not None:
        column = ts.SingleColumnCondition(
            column_equals[0], column_equals[1], ts.ComparatorType.EQUAL, pass_if_missing=False
        )
    return ts.Condition(_EXPECT[expect], column)


@contextmanager
def _conditional() -> Iterator[None]:
    try:
        yield
    except ts.OTSServiceError as exc:
        if exc.code == "OTSConditionCheckFail":
            raise ConditionFailed(exc.message) from None
        raise


def put_row(
    client: ts.OTSClient,
    table: str,
    key: list[tuple[str, Any]],
    columns: dict[str, Any],
    *,
    expect: str = "ignore",
    column_equals: tuple[str, Any] | None = None,
) -> None:
    with _conditional():
        client.put_row(table, ts.Row(key, list(columns.items())), _condition(expect, column_equals))


def delete_row(
    client: ts.OTSClient,
    table: str,
    key: list[tuple[str, Any]],
    *,
    column_equals: tuple[str, Any] | None = None,
) -> None:
    with _conditional():
        client.delete_row(table, ts.Row(key), _condition("ignore", column_equals))


def get_row(client: ts.OTSClient, table: str, key: list[tuple[str, Any]]) -> dict[str, Any] | None:
    _consumed, row, _token = client.get_row(table, key, max_version=1)
    if row is None:
        return None
    return {name: value for name, value, *_ts in row.attribute_columns}


def scan_prefix_rows(client: ts.OTSClient, table: str, first: tuple[str, Any], second: str) -> Iterator[Any]:
    """Every row (the SDK's, newest version of each cell) whose first key column equals ``first``."""
    start = [first, (second, ts.INF_MIN)]
    end = [first, (second, ts.INF_MAX)]
    while start:
        _consumed, start, page, _token = client.get_range(
            table, ts.Direction.FORWARD, start, end, max_version=1
        )
        yield from page


def scan_prefix(
    client: ts.OTSClient, table: str, first: tuple[str, Any], second: str
) -> list[tuple[Any, dict[str, Any]]]:
    """Every row whose first key column equals ``first``: (second key value, attributes)."""
    return [(row.primary_key[1][1], {n: v for n, v, *_ in row.attribute_columns})
            for row in scan_prefix_rows(client, table, first, second)]


def create_state_table(client: ts.OTSClient, name: str) -> bool:
    """Create tsmigrate's bookkeeping table (kind, id) if missing; True when it was created.
    Safe to repeat as a whole, so an ambiguous failure of the create is simply retried."""
    return retry.retrying(lambda: _create_state_table(retry.install(client), name), api="CreateTable")


def _create_state_table(client: ts.OTSClient, name: str) -> bool:
    if name in client.list_table():
        return False
    try:
        client.create_table(
            md.TableMeta(name, [("kind", "STRING"), ("id", "STRING")]),
            md.TableOptions(-1, 1, 86400),
            md.ReservedThroughput(md.CapacityUnit(0, 0)),
        )
    except ts.OTSServiceError as exc:
        if exc.code != "OTSObjectAlreadyExist":  # another apply created it meanwhile
            raise
        return False
    return True


# --- IR -> SDK -----------------------------------------------------------------------------------


def _sdk_field(field: SearchField) -> md.FieldSchema:
    parameter = None
    if field.analyzer_parameters and field.analyzer in _ANALYZER_PARAMETERS:
        parameter = _ANALYZER_PARAMETERS[field.analyzer](**dict(field.analyzer_parameters))
    vector = None
    if field.type == "VECTOR":
        vector = md.VectorOptions(
            md.VectorDataType.VD_FLOAT_32, _METRICS[field.vector_metric or "euclidean"],
            field.vector_dimension,
        )
    nested = field.type == "NESTED"
    return md.FieldSchema(
        field.name,
        _FIELD_TYPES[field.type],
        index=field.index,
        store=field.store,
        is_array=field.is_array,
        enable_sort_and_agg=None if nested else field.sort_and_agg,
        analyzer=field.analyzer,
        sub_field_schemas=[_sdk_field(f) for f in field.sub_fields] or None,
        analyzer_parameter=parameter,
        date_formats=list(field.date_formats) or None,
        vector_options=vector,
    )


def sdk_search_index(index: SearchIndex) -> md.SearchIndexMeta:
    sorters: list[Any] = []
    for sorter in index.index_sort:
        order = md.SortOrder.DESC if sorter.order == "DESC" else md.SortOrder.ASC
        if sorter.field is None:
            sorters.append(md.PrimaryKeySort(order))
        else:
            sorters.append(md.FieldSort(sorter.field, order, _SORT_MODES.get(sorter.mode or "")))
    return md.SearchIndexMeta(
        [_sdk_field(f) for f in index.fields],
        index_setting=md.IndexSetting(list(index.routing_fields)) if index.routing_fields else None,
        index_sort=md.Sort(sorters) if sorters else None,
        time_to_live=index.time_to_live,
    )


def sdk_secondary_index(index: SecondaryIndex) -> md.SecondaryIndexMeta:
    kind = md.SecondaryIndexType.LOCAL_INDEX if index.type == LOCAL else md.SecondaryIndexType.GLOBAL_INDEX
    return md.SecondaryIndexMeta(index.name, list(index.keys), list(index.include), index_type=kind)


def sdk_options(options: TableOptions) -> md.TableOptions:
    return md.TableOptions(
        options.time_to_live, options.max_versions, options.max_time_deviation, options.allow_update
    )


# --- SDK -> IR -----------------------------------------------------------------------------------


def _ir_field(field: md.FieldSchema) -> SearchField:
    parameters: dict[str, Any] = {}
    if field.analyzer_parameter is not None:
        parameters = dict(vars(field.analyzer_parameter))
    vector = field.vector_options
    metric = None
    if vector is not None:
        metric = next(k for k, v in _METRICS.items() if v == vector.metric_type)
    return SearchField(
        name=field.field_name,
        type=_FIELD_NAMES[md.FieldType(field.field_type)],
        index=bool(field.index) if field.index is not None else True,
        sort_and_agg=bool(field.enable_sort_and_agg),
        store=bool(field.store),
        is_array=bool(field.is_array),
        analyzer=field.analyzer or None,
        analyzer_parameters=parameters,
        sub_fields=[_ir_field(f) for f in field.sub_field_schemas or ()],
        date_formats=tuple(field.date_formats or ()),
        vector_dimension=vector.dimension if vector is not None else None,
        vector_metric=metric,
    )


def ir_search_index(name: str, meta: md.SearchIndexMeta, schema: Any) -> SearchIndex:
    """IR of a search index from the SDK's decoding of it, and from the raw ``IndexSchema``
    where the SDK loses information (it reads an absent sort mode as MIN)."""
    sorters = []
    decoded = meta.index_sort.sorters if meta.index_sort else ()
    for sorter, raw in zip(decoded, schema.index_sort.sorter, strict=True):
        order = "DESC" if sorter.sort_order == md.SortOrder.DESC else "ASC"
        if isinstance(sorter, md.PrimaryKeySort):
            sorters.append(IndexSorter(None, order))
        else:
            mode = None
            if raw.field_sort.HasField("mode"):
                mode = next((k for k, v in _SORT_MODES.items() if v == sorter.sort_mode), None)
            sorters.append(IndexSorter(sorter.field_name, order, mode))
    routing = meta.index_setting.routing_fields if meta.index_setting else ()
    return SearchIndex(
        name=name,
        fields=[_ir_field(f) for f in meta.fields],
        routing_fields=tuple(routing or ()),
        index_sort=sorters,
        time_to_live=meta.time_to_live if meta.time_to_live is not None else -1,
    )


_PK_TYPES = {pb.INTEGER: "INTEGER", pb.STRING: "STRING", pb.BINARY: "BINARY", pb.PK_BOOLEAN: "BOOLEAN"}
_COLUMN_TYPES = {
    pb.DCT_INTEGER: "INTEGER", pb.DCT_DOUBLE: "DOUBLE", pb.DCT_BOOLEAN: "BOOLEAN",
    pb.DCT_STRING: "STRING", pb.DCT_BLOB: "BINARY",
}


def ir_table(describe: Any, search_indexes: list[SearchIndex]) -> Table:
    """IR of a raw DescribeTableResponse (which, unlike the SDK's, keeps the stream details)."""
    meta = describe.table_meta
    options = describe.table_options
    capacity = describe.reserved_throughput_details.capacity_unit
    stream = describe.stream_details if describe.HasField("stream_details") else None
    return Table(
        name=meta.table_name,
        primary_key=[
            PrimaryKeyColumn(
                name=column.name,
                type=_PK_TYPES.get(column.type, str(column.type)),
                auto_increment=column.HasField("option") and column.option == pb.AUTO_INCREMENT,
            )
            for column in meta.primary_key
        ],
        defined_columns=[
            DefinedColumn(c.name, _COLUMN_TYPES.get(c.type, str(c.type))) for c in meta.defined_column
        ],
        options=TableOptions(
            time_to_live=options.time_to_live,
            max_versions=options.max_versions,
            max_time_deviation=options.deviation_cell_version_in_sec,
            # The service leaves allow_update out when it is true.
            allow_update=options.allow_update if options.HasField("allow_update") else True,
        ),
        throughput=ReservedThroughput(capacity.read, capacity.write),
        secondary_indexes=[
            SecondaryIndex(
                name=index.name,
                keys=tuple(index.primary_key),
                include=tuple(index.defined_column),
                type=LOCAL if index.index_type == pb.IT_LOCAL_INDEX else GLOBAL,
            )
            for index in describe.index_metas
        ],
        search_indexes=search_indexes,
        stream=StreamSpec(True, stream.expiration_time) if stream and stream.enable_stream else StreamSpec(),
    )


# --- inspection ----------------------------------------------------------------------------------


def is_reindex_canary(index_name: str, describe: Any) -> bool:
    """Whether a search index is the rebuild of another in a reindex (``<name>_reindex``, its
    brother ``<name>``): a passing stage of that index's schema change, not an index of the
    schema (the reindex's checkpoint in tsmigrate's state tracks it)."""
    return (index_name.endswith("_reindex")
            and describe.brother_index_name == index_name[: -len("_reindex")])


def search_schema_bytes(client: ts.OTSClient, table: str, index: SearchIndex) -> bytes:
    """The ``IndexSchema`` message of ``index`` as the SDK encodes it for CreateSearchIndex."""
    request = client.protocol.encoder._encode_create_search_index(
        table, index.name, sdk_search_index(index))
    return request.schema.SerializeToString()  # type: ignore[no-any-return]


def inspect_table(client: ts.OTSClient, name: str) -> Table:
    return _describe(client, name)[0]


def _describe(client: ts.OTSClient, name: str) -> tuple[Table, list[str]]:
    """The table as IR, and the names of its search indexes still in their first full sync
    (being built from the table's existing rows)."""
    describe = RawClient(client).describe_table(name)
    search, building = [], []
    for _table, index_name in client.list_search_index(name):
        response = RawClient(client).describe_search_index(name, index_name)
        if is_reindex_canary(index_name, response):
            continue
        meta = client.protocol.decoder._parse_index_meta(response.schema)
        meta.time_to_live = response.time_to_live
        search.append(ir_search_index(index_name, meta, response.schema))
        if response.HasField("sync_stat") and response.sync_stat.sync_phase == search_pb2.FULL:
            building.append(index_name)
    return ir_table(describe, search), building


def inspect(
    client: ts.OTSClient,
    *,
    exclude: tuple[str, ...] = (),
    workers: int = INSPECT_WORKERS,
) -> Catalog:
    """The live instance as IR. Describe calls run concurrently; a client made by
    ``pacing.paced`` paces the table-level ones to the instance's limit, so that the service
    never has to throttle them."""
    retry.install(client)
    names = [n for n in client.list_table() if n not in exclude]
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as pool:
        tables = list(pool.map(lambda name: inspect_table(client, name), names))
    return Catalog(tables=tables)


# --- execution -----------------------------------------------------------------------------------


def _create_table(client: ts.OTSClient, step: ops.CreateTable) -> None:
    table = step.definition
    meta = md.TableMeta(
        table.name,
        [
            (c.name, c.type, ts.PK_AUTO_INCR) if c.auto_increment else (c.name, c.type)
            for c in table.primary_key
        ],
        [(c.name, c.type) for c in table.defined_columns],
    )
    client.create_table(
        meta,
        sdk_options(table.options),
        md.ReservedThroughput(md.CapacityUnit(table.throughput.read, table.throughput.write)),
        [sdk_secondary_index(i) for i in table.secondary_indexes] or None,
    )


def _enable_stream(client: ts.OTSClient, step: ops.CreateTable) -> None:
    stream = step.definition.stream
    if stream.enabled:  # the SDK's CreateTable cannot carry a stream specification
        RawClient(client).update_stream(step.table, True, stream.expiration_hours)


def _update_options(client: ts.OTSClient, step: ops.UpdateOptions) -> None:
    client.update_table(step.table, table_options=sdk_options(step.after))


def _update_throughput(client: ts.OTSClient, step: ops.UpdateThroughput) -> None:
    client.update_table(
        step.table,
        reserved_throughput=md.ReservedThroughput(md.CapacityUnit(step.after.read, step.after.write)),
    )


def _create_index(client: ts.OTSClient, step: ops.CreateIndex) -> None:
    client.create_secondary_index(step.table, sdk_secondary_index(step.index), step.index.include_base_data)


def _update_search_ttl(client: ts.OTSClient, step: ops.UpdateSearchIndexTTL) -> None:
    client.update_search_index(step.table, step.index, md.SearchIndexMeta(None, time_to_live=step.after))


def _retire_table(client: ts.OTSClient, step: ops.RetireTable) -> None:
    """Archive every row (cell timestamps included), check the archive reads back whole, drop."""
    from tsmigrate.instance import pipeprogress

    location = archive_location(step.archive, step.table)
    pipe = pipeprogress.for_stderr(f"archive {step.table}")  # a deploy log hears a long archive
    try:
        written = archive_table(client, inspect_table(client, step.table), location,
                                None if pipe is None else lambda done, total: pipe.count("copy", done, total))
    finally:
        if pipe is not None:
            pipe.stop()
    if verify_archive(location) != written:
        raise TargetError(f"the archive {location} does not read back whole; {step.table} is kept")
    client.delete_table(step.table)


EXECUTORS: dict[type[ops.Step], Callable[[ts.OTSClient, Any], None]] = {
    ops.CreateTable: _create_table,
    ops.DropTable: lambda client, step: client.delete_table(step.table),
    ops.RetireTable: _retire_table,
    ops.UpdateOptions: _update_options,
    ops.UpdateThroughput: _update_throughput,
    ops.CreateIndex: _create_index,
    ops.DropIndex: lambda client, step: client.delete_secondary_index(step.table, step.index.name),
    ops.CreateSearchIndex: lambda client, step: client.create_search_index(
        step.table, step.index.name, sdk_search_index(step.index)
    ),
    ops.DropSearchIndex: lambda client, step: client.delete_search_index(step.table, step.index.name),
    ops.UpdateSearchIndexTTL: _update_search_ttl,
    ops.UpdateStream: lambda client, step: RawClient(client).update_stream(
        step.table, step.after.enabled, step.after.expiration_hours
    ),
    ops.AddDefinedColumns: lambda client, step: RawClient(client).add_defined_columns(
        step.table, [(c.name, c.type) for c in step.columns]
    ),
    ops.DeleteDefinedColumns: lambda client, step: RawClient(client).delete_defined_columns(
        step.table, [c.name for c in step.columns]
    ),
}


# Second calls of a step, idempotent (retried by the policy), run once the first one landed.
FOLLOW_UPS: dict[type[ops.Step], Callable[[ts.OTSClient, Any], None]] = {
    ops.CreateTable: _enable_stream,
}


def _options_text(options: TableOptions) -> str:
    return (f"time_to_live={options.time_to_live}, max_versions={options.max_versions}, "
            f"max_time_deviation={options.max_time_deviation}, allow_update={options.allow_update}")


def _create_table_calls(step: ops.CreateTable) -> list[str]:
    table = step.definition
    pk = ", ".join(f"{c.name} {c.type}" + (" auto-increment" if c.auto_increment else "")
                   for c in table.primary_key)
    parts = [f"primary key ({pk})"]
    if table.defined_columns:
        defined = ", ".join(f"{c.name} {c.type}" for c in table.defined_columns)
        parts.append(f"defined columns ({defined})")
    parts.append(_options_text(table.options))
    parts.append(f"reserved read={table.throughput.read} write={table.throughput.write}")
    parts += [f"{i.type.lower()} index {i.name} on ({', '.join(i.keys)})" for i in table.secondary_indexes]
    out = [f"CreateTable {step.table}: " + "; ".join(parts)]
    if table.stream.enabled:
        out.append(f"UpdateTable {step.table}: stream on, records kept {table.stream.expiration_hours} h")
    return out


CALLS: dict[type[ops.Step], Callable[[Any], list[str]]] = {
    ops.CreateTable: _create_table_calls,
    ops.DropTable: lambda step: [f"DeleteTable {step.table}"],
    ops.RetireTable: lambda step: [f"GetRange {step.table} (every row and version) into {step.archive}",
                                   f"DeleteTable {step.table}"],
    ops.UpdateOptions: lambda step: [f"UpdateTable {step.table}: {_options_text(step.after)}"],
    ops.UpdateThroughput: lambda step: [
        f"UpdateTable {step.table}: reserved read={step.after.read} write={step.after.write}"],
    ops.CreateIndex: lambda step: [
        f"CreateIndex {step.table}: {step.index.type.lower()} index {step.index.name} on "
        f"({', '.join(step.index.keys)})" + (f" including ({', '.join(step.index.include)})"
                                              if step.index.include else "")],
    ops.DropIndex: lambda step: [f"DeleteIndex {step.table}: {step.index.name}"],
    ops.CreateSearchIndex: lambda step: [
        f"CreateSearchIndex {step.table}: {step.index.name} with fields "
        f"({', '.join(f'{f.name} {f.type}' for f in step.index.fields)})"],
    ops.DropSearchIndex: lambda step: [f"DeleteSearchIndex {step.table}: {step.index.name}"],
    ops.UpdateSearchIndexTTL: lambda step: [
        f"UpdateSearchIndex {step.table}: {step.index} time_to_live={step.after}"],
    ops.UpdateStream: lambda step: [
        f"UpdateTable {step.table}: stream " + (f"on, records kept {step.after.expiration_hours} h"
                                                if step.after.enabled else "off")],
    ops.AddDefinedColumns: lambda step: [
        f"AddDefinedColumn {step.table}: " + ", ".join(f"{c.name} {c.type}" for c in step.columns)],
    ops.DeleteDefinedColumns: lambda step: [
        f"DeleteDefinedColumn {step.table}: " + ", ".join(c.name for c in step.columns)],
}


def calls(step: ops.Step) -> list[str]:
    """The service calls ``execute`` makes for ``step``, as text (``upgrade --dry-run``)."""
    return CALLS[type(step)](step)


def can_execute(step: ops.Step) -> bool:
    return type(step) in EXECUTORS


class StepConflict(TargetError):
    """After a retry of its own write, a step found the object there but not as it asked."""


def _landed_part(step: ops.Step, table: Table | None) -> Any:
    """The part of ``table`` that ``step`` writes: equal in the live and the predicted table
    means the step is done."""
    if table is None or isinstance(step, (ops.CreateTable, ops.DropTable, ops.RetireTable)):
        # A created table is judged without what later calls of the step add (its stream).
        return None if table is None else attrs.evolve(table, stream=StreamSpec(), search_indexes=[])
    if isinstance(step, (ops.CreateIndex, ops.DropIndex)):
        return next((i for i in table.secondary_indexes if i.name == step.index.name), None)
    if isinstance(step, (ops.CreateSearchIndex, ops.DropSearchIndex)):
        return next((i for i in table.search_indexes if i.name == step.index.name), None)
    if isinstance(step, ops.UpdateSearchIndexTTL):
        return next((i.time_to_live for i in table.search_indexes if i.name == step.index), None)
    if isinstance(step, (ops.AddDefinedColumns, ops.DeleteDefinedColumns)):
        names = {c.name for c in step.columns}
        return sorted((c.name, c.type) for c in table.defined_columns if c.name in names)
    return table  # options, throughput, stream: the whole table


def _landed(client: ts.OTSClient, step: ops.Step, expected: Table | None) -> bool:
    try:
        live: Table | None = inspect_table(client, step.table)
    except ts.OTSServiceError as exc:
        if exc.code != "OTSObjectNotExist":
            raise
        live = None
    return _landed_part(step, live) == _landed_part(step, expected)


NOT_PREDICTED: Any = object()


def execute(client: ts.OTSClient, step: ops.Step, expected: Table | None = NOT_PREDICTED) -> None:
    """Run ``step``; ``expected`` is the table as the plan predicts it after the step (None:
    gone; left out, ambiguous failures are not checked and not retried).

    A write that failed ambiguously (a timeout, a 500: it may have been done) is checked by a
    read and sent again only if it did not land; an error after such a retry (409
    ObjectAlreadyExist to our own create) is success only if what exists is what the step asked
    for. A client with a retry policy of its own (not tsmigrate's) gets no retries here."""
    policy = retry.policy_of(retry.install(client))
    _first_call(client, step, expected, policy)
    follow_up = FOLLOW_UPS.get(type(step))
    if follow_up is not None:
        follow_up(client, step)


def _first_call(
    client: ts.OTSClient, step: ops.Step, expected: Table | None, policy: Any
) -> None:
    attempt = 0
    while True:
        try:
            EXECUTORS[type(step)](client, step)
            return
        except Exception as exc:
            if policy is None or expected is NOT_PREDICTED:
                raise
            definite = not (retry.ambiguous(exc) or retry.rejected(exc))
            if attempt and isinstance(exc, ts.OTSServiceError) and definite:
                if _landed(client, step, expected):
                    return
                if exc.code == "OTSObjectAlreadyExist":
                    raise StepConflict(
                        f"{step.summary()}: after a retry of this step the object exists but "
                        "differs from what the step asked for (another client changed it?); "
                        "plan again"
                    ) from None
                raise
            if not retry.ambiguous(exc) or attempt >= policy.max_retries:
                raise
            if _landed(client, step, expected):
                return
            time.sleep(policy.get_retry_delay(attempt, exc, step.kind))
            attempt += 1


Waiting = Callable[[str, float], None]


def settle(
    client: ts.OTSClient,
    name: str,
    expected: Table | None,
    timeout_s: float = 300.0,
    on_wait: Waiting | None = None,
) -> bool:
    """Wait until table ``name`` looks as ``expected`` (None: gone), as index builds and drops
    finish in the background on the service, and its search indexes have finished their first
    full sync; False when the table still differs after ``timeout_s``. A build that keeps going
    is waited for as long as it takes. ``on_wait(what, elapsed_s)`` is called on every look that
    finds something pending (it may raise to stop waiting)."""
    started = time.monotonic()
    delay = 0.05
    while True:
        building: list[str] = []
        try:
            current, building = _describe(client, name)
        except ts.OTSServiceError as exc:
            if exc.code != "OTSObjectNotExist":
                raise
            current = None
        differs = current != expected
        if not differs and not building:
            return True
        elapsed = time.monotonic() - started
        if differs and elapsed > timeout_s:
            return False
        if on_wait is not None:
            on_wait(_pending(name, current, expected, building), elapsed)
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def _pending(name: str, current: Table | None, expected: Table | None, building: list[str]) -> str:
    """What a settle wait is waiting for, in words."""
    if expected is None:
        return f"table {name} to be gone"
    if current is None:
        return f"table {name} to appear"
    waits = []
    live_indexes = {i.name: i for i in current.secondary_indexes}
    for index in expected.secondary_indexes:
        if live_indexes.get(index.name) != index:
            waits.append(f"index {index.name}")
    wanted = {i.name for i in expected.secondary_indexes}
    waits += [f"index {i} to be dropped" for i in live_indexes if i not in wanted]
    live_search = {i.name: i for i in current.search_indexes}
    for search in expected.search_indexes:
        if live_search.get(search.name) != search:
            waits.append(f"search index {search.name}")
    wanted = {i.name for i in expected.search_indexes}
    waits += [f"search index {i} to be dropped" for i in live_search if i not in wanted]
    waits += [f"search index {i} to finish building (full sync)" for i in building]
    if not waits:
        waits.append(f"table {name} to show the planned settings")
    return f"{name}: " + ", ".join(waits)
