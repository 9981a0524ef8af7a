"""A small raw client for the service APIs the Python SDK 6.4.8 lacks.

ComputeSplitPointsBySize, the stream APIs (ListStream, DescribeStream, GetShardIterator,
GetStreamRecord), UpdateTable's stream specification, the stream details DescribeTable returns,
AddDefinedColumn / DeleteDefinedColumn, and the search-index reindex fields (source index,
switch, query flow weights) of the Java SDK's proto.

It rides on an ``OTSClient``: the same credentials provider, signer, connection pool, response
checks (MD5, date, signature) and retry policy (tsmigrate's, see ``tsmigrate.instance.retry``, installed on
the client when it still has the SDK's default), and it raises the SDK's own ``OTSServiceError``
and ``OTSClientError``. Messages come from the modules the local server parses them with, so
both sides agree on every field number. ``call_together`` sends several requests at once on the
process's event loop (``ioloop``, an aiohttp pool as the SDK's async client has), with the same
checks and retries.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
import attrs
from google.protobuf.message import DecodeError, Message
from tablestore import OTSClient
from tablestore.auth import RequestContext
from tablestore.error import OTSClientError, OTSServiceError
from tablestore.protobuf import search_pb2
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.instance import ioloop, retry
from tsmigrate.wire import plainbuffer, search_protocol, table_protocol

try:
    from tsmigrate.wire import _rowwalk
except ImportError:  # installed where no C compiler was found: answers read in Python
    _rowwalk = None

_DEFINED_TYPES = {
    "INTEGER": pb.DCT_INTEGER,
    "DOUBLE": pb.DCT_DOUBLE,
    "BOOLEAN": pb.DCT_BOOLEAN,
    "STRING": pb.DCT_STRING,
    "BINARY": pb.DCT_BLOB,
}
ACTIONS = {pb.PUT_ROW: "put", pb.UPDATE_ROW: "update", pb.DELETE_ROW: "delete"}


@attrs.frozen
class StreamRecord:
    action: str  # put / update / delete
    row: plainbuffer.Row
    # The row's origin columns before the write (StreamSpecification columns_to_get); None when
    # the row did not exist or the stream carries no origin columns.
    origin: plainbuffer.Row | None = None


@attrs.frozen
class Shard:
    shard_id: str
    parent_id: str | None = None
    parent_sibling_id: str | None = None


@attrs.frozen
class SplitPoints:
    """Split points of a table: ``points`` are partial primary keys in ascending order; N points
    cut the table into N + 1 ranges. ``locations`` name where each range lives."""

    points: tuple[tuple[tuple[str, Any], ...], ...]
    locations: tuple[str, ...]


def _parsed(api: str, answer: tuple[int, str, Any, bytes], response_type: type[Message]) -> Any:
    response = response_type()
    try:
        response.ParseFromString(answer[3])
    except DecodeError:
        raise OTSClientError(f"cannot parse the {api} response", answer[0]) from None
    return response


def stream_request(iterator: str, limit: int | None = None) -> pb.GetStreamRecordRequest:
    request = pb.GetStreamRecordRequest(shard_iterator=iterator)
    if limit is not None:
        request.limit = limit
    return request


def stream_page(page: StreamPage) -> tuple[list[tuple[str, bytes, bytes | None]], str | None]:
    """A GetStreamRecord answer as ``RawClient.stream_record_bytes`` returns it."""
    return [(ACTIONS[action], row, origin) for action, row, origin in page.records], page.following


class RawClient:
    def __init__(self, client: OTSClient):
        self.client = retry.install(client)

    def call(self, api: str, request: Message | bytes, response_type: type[Message]) -> Any:
        """Send one signed request (a message, or one already encoded) and parse the answer,
        retried by the client's retry policy."""
        body = request if isinstance(request, bytes) else request.SerializeToString()
        retries = 0
        while True:
            query, headers, context = _signed(self.client, api, body)
            answer = self.client.connection.send_receive(query, headers, body)
            try:
                self._check(api, query, *answer, context)
                break
            except OTSServiceError as exc:
                if not self.client.retry_policy.should_retry(retries, exc, api):
                    raise
                time.sleep(self.client.retry_policy.get_retry_delay(retries, exc, api))
                retries += 1
        return _parsed(api, answer, response_type)

    def call_together(self, api: str, requests: Sequence[Message | bytes],
                      response_type: type[Message]) -> list[Any]:
        """``call`` of each of ``requests``, sent at once on this process's event loop
        (``ioloop``) rather than from threads; the answers in request order. Each is signed,
        checked and retried as ``call`` does; a socket error counts as ambiguous (the request
        may have been done), so it is retried on the idempotent APIs only."""
        if not requests:
            return []
        loop = ioloop.io_loop()
        return loop.run_together([self._call_on(loop, api, request, response_type) for request in requests])

    def start_call(self, api: str, request: Message | bytes, response_type: type[Message]
                   ) -> concurrent.futures.Future[Any]:
        """``call_together`` of one request, started: its future answers (or raises) once done,
        while the caller goes on."""
        loop = ioloop.io_loop()
        return loop.start(self._call_on(loop, api, request, response_type))

    async def _call_on(self, loop: ioloop.IOLoop, api: str, request: Message | bytes,
                       response_type: type[Message]) -> Any:
        body = request if isinstance(request, bytes) else request.SerializeToString()
        policy = self.client.retry_policy
        pool = loop.pool(self.client)
        retries = failures = 0
        while True:
            query, headers, context = _signed(self.client, api, body)
            try:
                answer = await pool.send_receive(query, headers, body)
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                # As ``retry.RetryingConnection`` judges the sync pool's socket errors; an
                # aiohttp error that is no OSError reads as a connection error (ambiguous).
                error = exc if isinstance(exc, OSError) else ConnectionError(f"{type(exc).__name__}: {exc}")
                if not isinstance(policy, retry.TsmigrateRetryPolicy) or not policy.should_retry(
                        failures, error, api):
                    raise error from exc
                await asyncio.sleep(policy.get_retry_delay(failures, error, api))
                failures += 1
                continue
            try:
                self._check(api, query, *answer, context)
                break
            except OTSServiceError as exc:
                if not policy.should_retry(retries, exc, api):
                    raise
                await asyncio.sleep(policy.get_retry_delay(retries, exc, api))
                retries += 1
        return _parsed(api, answer, response_type)

    def _check(self, api, query, status, reason, headers, body, context) -> None:
        # The SDK's handle_error refuses API names it does not know; its checks are reused here.
        protocol = self.client.protocol
        std = protocol._convert_urllib3_headers(headers)
        protocol._check_headers(std, body, status=status)
        if status != 403:
            protocol._check_authorization(query, std, status, self.client._signer, context)
        if 200 <= status < 300:
            return
        error = pb.Error()
        try:
            error.ParseFromString(body)
        except DecodeError:
            raise OTSClientError(f"HTTP status: {status}, reason: {reason}.", status) from None
        if status == 403 and error.code != "OTSAuthFailed":
            protocol._check_authorization(query, std, status, self.client._signer, context)
        raise OTSServiceError(status, error.code, error.message, std.get("x-ots-requestid", ""))

    # -- tables --------------------------------------------------------------------------------

    def describe_table(self, table: str) -> Any:
        """The full DescribeTableResponse, stream details included (the SDK drops them)."""
        return self.call("DescribeTable", pb.DescribeTableRequest(table_name=table),
                         pb.DescribeTableResponse)

    def update_stream(
        self, table: str, enabled: bool, expiration_hours: int | None = None,
        origin_columns: Sequence[str] = (),
    ) -> Any:
        """Enable or disable ``table``'s stream; ``origin_columns``: columns whose values before
        each write the records carry (``columns_to_get``, see ``StreamRecord.origin``)."""
        request = pb.UpdateTableRequest(table_name=table)
        request.stream_spec.enable_stream = enabled
        if enabled and expiration_hours is not None:
            request.stream_spec.expiration_time = expiration_hours
        if enabled and origin_columns:
            extra = table_protocol.StreamSpecificationOrigin(columns_to_get=list(origin_columns))
            request.stream_spec.MergeFromString(extra.SerializeToString())
        return self.call("UpdateTable", request, pb.UpdateTableResponse).stream_details

    @staticmethod
    def origin_columns(stream_details: Any) -> list[str]:
        """The ``columns_to_get`` of a StreamDetails (a field the SDK's proto lacks)."""
        extra = table_protocol.StreamDetailsOrigin.FromString(stream_details.SerializeToString())
        return list(extra.columns_to_get)

    def add_defined_columns(self, table: str, columns: Sequence[tuple[str, str]]) -> None:
        request = table_protocol.AddDefinedColumnRequest(table_name=table)
        for name, kind in columns:
            request.columns.add(name=name, type=_DEFINED_TYPES[kind])
        self.call("AddDefinedColumn", request, table_protocol.AddDefinedColumnResponse)

    def delete_defined_columns(self, table: str, names: Sequence[str]) -> None:
        request = table_protocol.DeleteDefinedColumnRequest(table_name=table, columns=list(names))
        self.call("DeleteDefinedColumn", request, table_protocol.DeleteDefinedColumnResponse)

    def compute_split_points_by_size(
        self, table: str, split_size: int = 1, unit_bytes: int | None = None
    ) -> SplitPoints:
        """Points that cut ``table`` into ranges of about ``split_size`` units (100 MB each,
        unless ``unit_bytes`` says otherwise)."""
        request = pb.ComputeSplitPointsBySizeRequest(table_name=table, split_size=split_size)
        if unit_bytes is not None:
            request.split_size_unit_in_byte = unit_bytes
        response = self.call("ComputeSplitPointsBySize", request,
                             pb.ComputeSplitPointsBySizeResponse)
        locations = [loc.location for loc in response.locations for _ in range(loc.repeat)]
        return SplitPoints(
            points=tuple(
                tuple(plainbuffer.decode_primary_key(point)) for point in response.split_points
            ),
            locations=tuple(locations),
        )

    # -- streams -------------------------------------------------------------------------------

    def list_streams(self, table: str | None = None) -> list[tuple[str, str, int]]:
        """(stream id, table, creation time) of every stream, or of ``table``'s."""
        request = pb.ListStreamRequest()
        if table is not None:
            request.table_name = table
        response = self.call("ListStream", request, pb.ListStreamResponse)
        return [(s.stream_id, s.table_name, s.creation_time) for s in response.streams]

    def shards(self, stream_id: str) -> list[str]:
        return [shard.shard_id for shard in self.describe_shards(stream_id)]

    def describe_shards(self, stream_id: str) -> list[Shard]:
        """Every shard of the stream with its parents (a split has a parent, a merge two)."""
        shards: list[Shard] = []
        start = None
        while True:
            request = pb.DescribeStreamRequest(stream_id=stream_id)
            if start is not None:
                request.inclusive_start_shard_id = start
            response = self.call("DescribeStream", request, pb.DescribeStreamResponse)
            shards += [
                Shard(s.shard_id, s.parent_id if s.HasField("parent_id") else None,
                      s.parent_sibling_id if s.HasField("parent_sibling_id") else None)
                for s in response.shards
            ]
            if not response.HasField("next_shard_id"):
                return shards
            start = response.next_shard_id

    def shard_iterator(self, stream_id: str, shard_id: str) -> str:
        request = pb.GetShardIteratorRequest(stream_id=stream_id, shard_id=shard_id)
        return self.call("GetShardIterator", request, pb.GetShardIteratorResponse).shard_iterator

    def stream_records(
        self, iterator: str, limit: int | None = None
    ) -> tuple[list[StreamRecord], str | None]:
        """One page of records and the iterator of the next page (None at the shard's end)."""
        encoded, following = self.stream_record_bytes(iterator, limit)
        records = [
            StreamRecord(action, plainbuffer.decode_row(row),
                         None if origin is None else plainbuffer.decode_row(origin))
            for action, row, origin in encoded
        ]
        return records, following

    def stream_record_bytes(
        self, iterator: str, limit: int | None = None
    ) -> tuple[list[tuple[str, bytes, bytes | None]], str | None]:
        """``stream_records`` with each record's rows as they came (PlainBuffer): (action, the
        row written, its origin columns or None)."""
        return stream_page(self.call("GetStreamRecord", stream_request(iterator, limit), StreamPage))

    # -- search-index reindex ------------------------------------------------------------------

    def create_search_index_from(
        self, table: str, index: str, source_index: str, schema: bytes, time_to_live: int | None = None
    ) -> None:
        """Create ``index`` (a ``*_reindex`` canary) with a new schema from ``source_index``'s data."""
        request = search_protocol.CreateSearchIndexRequest(
            table_name=table, index_name=index, source_index_name=source_index
        )
        request.schema.CopyFrom(search_pb2.IndexSchema.FromString(schema))
        if time_to_live is not None:
            request.time_to_live = time_to_live
        self.call("CreateSearchIndex", request, search_pb2.CreateSearchIndexResponse)

    def switch_search_index(self, table: str, index: str, switch_to: str) -> None:
        """Swap schemas: ``index`` serves ``switch_to``'s schema and data from now on."""
        request = search_protocol.UpdateSearchIndexRequest(
            table_name=table, index_name=index, switch_index_name=switch_to
        )
        self.call("UpdateSearchIndex", request, search_pb2.UpdateSearchIndexResponse)

    def set_query_flow_weights(self, table: str, index: str, weights: dict[str, int]) -> None:
        request = search_protocol.UpdateSearchIndexRequest(table_name=table, index_name=index)
        for name, weight in weights.items():
            request.query_flow_weight.add(index_name=name, weight=weight)
        self.call("UpdateSearchIndex", request, search_pb2.UpdateSearchIndexResponse)

    def describe_search_index(self, table: str, index: str) -> Any:
        """The full DescribeSearchIndexResponse (brother index, flow weights, status)."""
        request = search_pb2.DescribeSearchIndexRequest(table_name=table, index_name=index)
        return self.call("DescribeSearchIndex", request,
                         search_protocol.DescribeSearchIndexResponse)


class StreamPage:
    """A GetStreamRecordResponse as ``stream_record_bytes`` reads it, for ``RawClient.call``:
    ``records`` ((action_type, record, origin_record or None) of each StreamRecord) and
    ``following`` (next_shard_iterator, None when absent). Read in one compiled pass over the
    answer where tsmigrate's compiled walks are built (``parse_in_python`` otherwise, the same
    values), without a message object per record."""

    __slots__ = ("following", "records")

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.following: str | None = None

    def ParseFromString(self, body: bytes) -> None:  # the message API RawClient.call uses
        if _rowwalk is None:
            self.parse_in_python(body)
            return
        try:
            self.records, self.following = _rowwalk.stream_records(body)
        except ValueError as exc:  # a UnicodeDecodeError too
            raise DecodeError(f"a GetStreamRecord answer is malformed ({exc})") from None

    def parse_in_python(self, body: bytes) -> None:
        response = pb.GetStreamRecordResponse.FromString(body)
        self.records = []
        for r in response.stream_records:
            origin = table_protocol.StreamRecordOrigin.FromString(r.SerializeToString())
            self.records.append((r.action_type, r.record,
                                 origin.origin_record if origin.HasField("origin_record") else None))
        self.following = response.next_shard_iterator if response.HasField("next_shard_iterator") else None


# -- encoded requests of the SDK's own APIs ----------------------------------------------------


def send(client: OTSClient, api: str, body: bytes) -> bytes:
    """The body of the answer to ``body``, a request of one of the SDK's own APIs encoded by
    the caller, sent as the SDK's ``_request_helper`` sends it: signed once, the client's
    connection, its response checks and errors, its retry policy (left as it is)."""
    query, headers, context = _signed(client, api, body)
    retries = 0
    while True:
        try:
            return _checked(client, api, query, context,
                            client.connection.send_receive(query, headers, body))
        except OTSServiceError as exc:
            if not client.retry_policy.should_retry(retries, exc, api):
                raise
            time.sleep(client.retry_policy.get_retry_delay(retries, exc, api))
            retries += 1


async def asend(client: Any, api: str, body: bytes) -> bytes:
    """``send`` on an ``AsyncOTSClient``."""
    connection = client._get_or_create_connection()
    query, headers, context = _signed(client, api, body)
    retries = 0
    while True:
        try:
            return _checked(client, api, query, context,
                            await connection.send_receive(query, headers, body))
        except OTSServiceError as exc:
            if not client.retry_policy.should_retry(retries, exc, api):
                raise
            await asyncio.sleep(client.retry_policy.get_retry_delay(retries, exc, api))
            retries += 1


def _signed(client: Any, api: str, body: bytes) -> tuple[str, dict[str, str], RequestContext]:
    context = RequestContext(client.credentials_provider.get_credentials())
    query = "/" + api
    return query, client.protocol._make_request_headers(body, query, client._signer, context), context


def _checked(client: Any, api: str, query: str, context: RequestContext, answer: Any) -> bytes:
    """The body of an answer that passed the SDK's checks (else its error, raised)."""
    status, reason, headers, body = answer
    client.protocol.handle_error(api, query, status, reason, headers, body, client._signer, context)
    return body
