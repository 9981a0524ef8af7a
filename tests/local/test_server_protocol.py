"""Transport, authentication, robustness, durability, concurrency and faults of the local server."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import random
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from tablestore import (
    INF_MAX,
    INF_MIN,
    PK_AUTO_INCR,
    AsyncOTSClient,
    BatchWriteRowRequest,
    CapacityUnit,
    Condition,
    NoRetryPolicy,
    OTSClient,
    OTSServiceError,
    PutRowItem,
    ReservedThroughput,
    ReturnType,
    Row,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
)
from tablestore import decoder as sdk_decoder
from tablestore import encoder as sdk_encoder
from tablestore.auth import SignV2
from tablestore.plainbuffer.plain_buffer_builder import PlainBufferBuilder
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.testing import LocalTablestore, local_tablestore

CU0 = ReservedThroughput(CapacityUnit(0, 0))
FULL = ([("id", INF_MIN)], [("id", INF_MAX)])


def make_table(client: OTSClient, name: str = "t") -> None:
    client.create_table(TableMeta(name, [("id", "INTEGER")]), TableOptions(), CU0)


def error_of(call, *args, **kwargs) -> OTSServiceError:  # type: ignore[no-untyped-def]
    with pytest.raises(OTSServiceError) as info:
        call(*args, **kwargs)
    return info.value


def roundtrip(client: OTSClient) -> None:
    """Exercise the codec paths of a client: rows in and out, one and many."""
    make_table(client)
    client.put_row("t", Row([("id", 1)], [("s", "x"), ("b", bytearray(b"\x01")), ("d", 0.5)]))
    request = BatchWriteRowRequest()
    items = [PutRowItem(Row([("id", i)], [("v", i)]), Condition("IGNORE")) for i in range(2, 12)]
    request.add(TableInBatchWriteRowItem("t", items))
    assert client.batch_write_row(request).is_all_succeed()
    _, row, _ = client.get_row("t", [("id", 1)], max_version=1)
    assert [c[:2] for c in row.attribute_columns] == [("b", bytearray(b"\x01")), ("d", 0.5), ("s", "x")]
    _, next_pk, rows, _ = client.get_range("t", "FORWARD", *FULL, limit=5, max_version=1)
    assert next_pk == [("id", 6)] and [r.primary_key[0][1] for r in rows] == [1, 2, 3, 4, 5]


# -- clients and signatures ------------------------------------------------------------------------


def _codec(client: OTSClient) -> tuple[bool, bool]:
    """Whether the client encodes and decodes with the SDK's native (C++) codec."""
    return client.protocol.encoder._use_native_encoder, client.protocol.decoder._use_native_decoder


def test_pure_python_client(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client(enable_native=False)
    assert _codec(client) == (False, False)
    roundtrip(client)


def test_native_client_without_fallback(ots_instance: LocalTablestore) -> None:
    if not (sdk_encoder.NATIVE_ENCODER_AVAILABLE and sdk_decoder.NATIVE_DECODER_AVAILABLE):
        # The SDK ships its native module built for one Python version (6.4.8: 3.12 on Linux).
        pytest.skip(f"the SDK's native codec does not load on Python {sys.version_info[:2]}")
    client = ots_instance.client(native_fallback=False)
    assert _codec(client) == (True, True)
    roundtrip(client)  # without fallback, a native failure would raise instead of hiding


def test_v4_signature(ots_instance: LocalTablestore) -> None:
    roundtrip(ots_instance.client(region="cn-hangzhou"))
    bad = OTSClient(
        ots_instance.endpoint,
        ots_instance.access_key_id,
        "wrong",
        ots_instance.instance,
        region="cn-hangzhou",
    )
    e = error_of(bad.list_table)
    assert (e.http_status, e.code, e.message) == (403, "OTSAuthFailed", "Signature mismatch.")


def test_async_client(ots_instance: LocalTablestore) -> None:
    async def run() -> list[int]:
        client: AsyncOTSClient = ots_instance.async_client()
        try:
            await client.create_table(TableMeta("t", [("id", "INTEGER")]), TableOptions(), CU0)
            for i in range(3):
                await client.put_row("t", Row([("id", i)], [("v", i)]))
            _, row, _ = await client.get_row("t", [("id", 2)], max_version=1)
            assert row.attribute_columns[0][:2] == ("v", 2)
            _, _, rows, _ = await client.get_range("t", "BACKWARD", FULL[1], FULL[0], max_version=1)
            return [r.primary_key[0][1] for r in rows]
        finally:
            await client.close()

    assert asyncio.run(run()) == [2, 1, 0]


def test_wrong_credentials_and_instance(ots_instance: LocalTablestore) -> None:
    ots = ots_instance
    cases = [
        (OTSClient(ots.endpoint, ots.access_key_id, "wrong-secret", ots.instance), "Signature mismatch."),
        (
            OTSClient(ots.endpoint, "nobody", ots.access_key_secret, ots.instance),
            "The AccessKeyID does not exist.",
        ),
        (
            OTSClient(ots.endpoint, ots.access_key_id, ots.access_key_secret, "other"),
            "The instance is not found: other.",
        ),
    ]
    for client, message in cases:
        e = error_of(client.list_table)
        assert (e.http_status, e.code, e.message) == (403, "OTSAuthFailed", message)
    assert ots.client().list_table() == ()  # still serving


def test_sts_token() -> None:
    with local_tablestore(
        access_key_id="tmp-id", access_key_secret="tmp-secret", sts_tokens={"tok": "tmp-id"}
    ) as ots:
        good = OTSClient(ots.endpoint, "tmp-id", "tmp-secret", ots.instance, sts_token="tok")
        make_table(good)
        assert good.list_table() == ("t",)
        bad = OTSClient(ots.endpoint, "tmp-id", "tmp-secret", ots.instance, sts_token="forged")
        assert error_of(bad.list_table).code == "OTSAuthFailed"


# -- raw HTTP: bad input gets the service's errors, and the server keeps serving ----------------


def raw(
    ots: LocalTablestore, api: str, body: bytes, *, date: str | None = None, md5: str | None = None
) -> tuple[int, bytes]:
    """POST a signed request (optionally with a forged date or content MD5)."""
    headers = {
        "x-ots-date": date or time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        "x-ots-apiversion": "2015-12-31",
        "x-ots-accesskeyid": ots.access_key_id,
        "x-ots-instancename": ots.instance,
        "x-ots-contentmd5": md5 or base64.b64encode(hashlib.md5(body).digest()).decode(),
    }
    client = ots.client()
    context = type(
        "Ctx", (), {"get_credentials": lambda self: client.credentials_provider.get_credentials()}
    )()
    SignV2("utf-8").make_request_signature_and_add_headers("/" + api, headers, context)
    return post(ots, "POST", "/" + api, body, headers)


def post(
    ots: LocalTablestore, method: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    url = urlparse(ots.endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.request(method, path, body, headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def error_body(data: bytes) -> tuple[str, str]:
    error = pb.Error.FromString(data)
    return error.code, error.message


def test_bad_requests_get_service_errors(ots_instance: LocalTablestore) -> None:
    ots = ots_instance
    make_table(ots.client())
    status, body = raw(ots, "PutRow", b"\xff\xff\xff")
    assert status == 400 and error_body(body)[0] == "OTSParameterInvalid"
    good_row = Row([("id", 1)], [("a", 1)])
    row_bytes = bytearray(
        PlainBufferBuilder.serialize_for_put_row(good_row.primary_key, good_row.attribute_columns)
    )
    row_bytes[-1] ^= 0xFF  # the row checksum
    request = pb.PutRowRequest(
        table_name="t", row=bytes(row_bytes), condition=pb.Condition(row_existence=pb.IGNORE)
    )
    status, body = raw(ots, "PutRow", request.SerializeToString())
    assert (
        status == 400 and error_body(body)[0] == "OTSParameterInvalid" and "checksum" in error_body(body)[1]
    )
    status, body = raw(ots, "NoSuchApi", b"")
    assert (status, error_body(body)) == (400, ("OTSParameterInvalid", "Unsupported operation: NoSuchApi."))
    status, body = raw(ots, "ListTable", b"", md5="AAAA")
    assert status == 403 and error_body(body) == (
        "OTSAuthFailed",
        "Mismatch between MD5 value of request body and x-ots-contentmd5 in header.",
    )
    stale = "2020-01-01T00:00:00.000Z"
    status, body = raw(ots, "ListTable", b"", date=stale)
    assert (status, error_body(body)) == (
        403,
        ("OTSAuthFailed", f"Mismatch between system time and x-ots-date: {stale}."),
    )
    status, body = raw(ots, "ListTable", b"", date="yesterday")
    assert (status, error_body(body)) == (400, ("OTSParameterInvalid", "Invalid date format: yesterday."))
    status, body = post(ots, "POST", "/ListTable", b"", {})
    assert (status, error_body(body)) == (400, ("OTSParameterInvalid", "Missing header: x-ots-date."))
    status, body = post(ots, "GET", "/ListTable", b"", {})
    assert status == 405 and error_body(body)[0] == "OTSMethodNotAllowed"
    status, body = raw(ots, "PutRow", b"\x00" * (5 * 1024 * 1024 + 1))
    assert (status, error_body(body)) == (
        413,
        ("OTSRequestBodyTooLarge", "The size of POST data is too large."),
    )
    # Nothing was written by any of the above.
    assert ots.client().get_range("t", "FORWARD", *FULL, max_version=1)[2] == []


@pytest.mark.parametrize("size", [161, 5000])
def test_a_long_value_is_checked_byte_for_byte(ots_instance: LocalTablestore, size: int) -> None:
    """Values past the write path's byte loop have their checksum folded as one big int: a bit
    flipped in the middle is still refused, and the intact row stores the value as sent."""
    make_table(ots_instance.client())
    value = bytearray(random.Random(size).randbytes(size))
    good = PlainBufferBuilder.serialize_for_put_row([("id", 1)], [("blob", value)])
    bad = bytearray(good)
    bad[bytes(good).index(bytes(value)) + size // 2] ^= 0x10
    for row, status in [(bytes(bad), 400), (bytes(good), 200)]:
        request = pb.PutRowRequest(table_name="t", row=row, condition=pb.Condition(row_existence=pb.IGNORE))
        assert raw(ots_instance, "PutRow", request.SerializeToString())[0] == status
    _, stored, _ = ots_instance.client().get_row("t", [("id", 1)], max_version=1)
    assert stored.attribute_columns[0][1] == value


def test_garbage_http_does_not_stop_the_server(ots_instance: LocalTablestore) -> None:
    import socket

    url = urlparse(ots_instance.endpoint)
    with socket.create_connection((url.hostname, url.port), timeout=5) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")
    assert ots_instance.client().list_table() == ()


# -- durability and concurrency --------------------------------------------------------------------


def test_restart_with_same_data_directory(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    with local_tablestore(data_dir=data) as ots:
        client = ots.client()
        client.create_table(
            TableMeta("t", [("p", "STRING"), ("id", "INTEGER", PK_AUTO_INCR)]),
            TableOptions(max_version=2),
            CU0,
        )
        _, first = client.put_row(
            "t", Row([("p", "a"), ("id", PK_AUTO_INCR)], [("v", 1)]), return_type=ReturnType.RT_PK
        )
    with local_tablestore(data_dir=data) as ots:
        client = ots.client()
        assert client.list_table() == ("t",)
        assert client.describe_table("t").table_options.max_version == 2
        _, row, _ = client.get_row("t", first.primary_key, max_version=1)
        assert row.attribute_columns[0][:2] == ("v", 1)
        _, second = client.put_row(
            "t", Row([("p", "a"), ("id", PK_AUTO_INCR)], [("v", 2)]), return_type=ReturnType.RT_PK
        )
        assert second.primary_key[1][1] > first.primary_key[1][1]


def test_concurrent_writers(ots_instance: LocalTablestore) -> None:
    make_table(ots_instance.client())
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            client = ots_instance.client()
            for start in range(offset, offset + 400, 100):
                request = BatchWriteRowRequest()
                items = [
                    PutRowItem(Row([("id", i)], [("w", offset)]), Condition("IGNORE"))
                    for i in range(start, start + 100)
                ]
                request.add(TableInBatchWriteRowItem("t", items))
                assert client.batch_write_row(request).is_all_succeed()
                client.put_row("t", Row([("id", -1)], [("w", offset)]))
        except BaseException as e:  # surfaced in the main thread
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n * 1000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = list(ots_instance.client().xget_range("t", "FORWARD", *FULL, CapacityUnit()))
    assert len(rows) == 4 * 400 + 1


# -- faults and latency ------------------------------------------------------------------------------


def test_faults_and_latency(ots_instance: LocalTablestore, ots_server_options) -> None:  # type: ignore[no-untyped-def]
    from tsmigrate.local.faults import FaultPlan

    client = ots_instance.client(retry_policy=NoRetryPolicy())
    make_table(client)
    ots_server_options.faults = FaultPlan.parse("server_busy@PutRow=1,capacity@GetRow=1")
    e = error_of(client.put_row, "t", Row([("id", 1)], [("a", 1)]))
    assert (e.http_status, e.code, e.message) == (503, "OTSServerBusy", "Server is busy.")
    e = error_of(client.get_row, "t", [("id", 1)], max_version=1)
    assert (e.http_status, e.code) == (403, "OTSNotEnoughCapacityUnit")
    ots_server_options.faults = FaultPlan.parse("batch_row=1")
    request = BatchWriteRowRequest()
    request.add(
        TableInBatchWriteRowItem("t", [PutRowItem(Row([("id", 2)], [("a", 1)]), Condition("IGNORE"))])
    )
    failed = client.batch_write_row(request).get_put_by_table("t")[0]
    assert (failed.is_ok, failed.error_code) == (False, "OTSServerBusy")
    ots_server_options.faults = None
    assert client.get_range("t", "FORWARD", *FULL, max_version=1)[2] == []  # nothing was written
    ots_server_options.latency_ms = 60
    start = time.perf_counter()
    client.list_table()
    assert time.perf_counter() - start >= 0.06


def test_fault_spec_parsing() -> None:
    from tsmigrate.local.faults import FaultPlan

    plan = FaultPlan.parse("server_busy=0.5,capacity@PutRow|GetRow=0.25,seed=3")
    assert [(r.kind, r.fraction, r.apis) for r in plan.rules] == [
        ("server_busy", 0.5, None),
        ("capacity", 0.25, frozenset({"PutRow", "GetRow"})),
    ]
    for bad in ("nonsense=1", "server_busy=2", "server_busy"):
        with pytest.raises(ValueError):
            FaultPlan.parse(bad)
