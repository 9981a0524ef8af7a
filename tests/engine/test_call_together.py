"""Requests sent together on the process's event loop (``RawClient.call_together``) and the
writer's batches sent that way (``BatchWriter.send_together``): the same answers, checks,
retries and errors as one request at a time, against the local server."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest
import tablestore as ts
from breaking_proxy import BreakingProxy
from tablestore.error import OTSServiceError
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.contract.rowbytes import key_row
from tsmigrate.instance import ioloop, retry
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.local.faults import FaultPlan
from tsmigrate.rewrite import writer
from tsmigrate.wire import plainbuffer

ROWS = 450


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(retry.RETRY_POLICY, "base_delay_s", 0.001)
    monkeypatch.setattr(retry.RETRY_POLICY, "throttled_delay_s", 0.001)


def _table(client: ts.OTSClient, rows: int = ROWS) -> None:
    client.create_table(ts.TableMeta("t", [("pk", "STRING")]), ts.TableOptions(-1, 1, 86400),
                        ts.ReservedThroughput(ts.CapacityUnit(0, 0)))
    for start in range(0, rows, 200):
        request = ts.BatchWriteRowRequest()
        request.add(ts.TableInBatchWriteRowItem("t", [
            ts.PutRowItem(ts.Row([("pk", f"k{i:04d}")], [("n", i)]), ts.Condition("IGNORE"))
            for i in range(start, min(rows, start + 200))]))
        assert client.batch_write_row(request).is_all_succeed()


def _gets(keys: list[int], prefix: str = "k") -> list[pb.BatchGetRowRequest]:
    """BatchGetRows of 100 keys each (``prefix`` + number)."""
    requests = []
    for start in range(0, len(keys), 100):
        request = pb.BatchGetRowRequest()
        item = request.tables.add(table_name="t", max_versions=1)
        item.primary_key.extend([key_row((("pk", f"{prefix}{i:04d}"),)) for i in keys[start:start + 100]])
        requests.append(request)
    return requests


def _values(response: pb.BatchGetRowResponse) -> list[int | None]:
    """The ``n`` of each row answered (None: absent), in request order."""
    values: list[int | None] = []
    for row in response.tables[0].rows:
        assert row.is_ok
        values.append(plainbuffer.decode_row(row.row).cells[0].value if row.row else None)
    return values


def test_answers_come_back_in_request_order_as_one_call_gives_them(ots_client) -> None:
    _table(ots_client)
    raw = RawClient(ots_client)
    keys = [*range(ROWS - 1, -1, -1), 9999]  # reversed, and one absent key
    requests = _gets(keys)
    together = raw.call_together("BatchGetRow", requests, pb.BatchGetRowResponse)
    one_by_one = [raw.call("BatchGetRow", request, pb.BatchGetRowResponse) for request in requests]
    assert len(together) == len(requests) == 5
    assert [_values(r) for r in together] == [_values(r) for r in one_by_one]
    assert [v for r in together for v in _values(r)] == [*range(ROWS - 1, -1, -1), None]
    started = [raw.start_call("BatchGetRow", request, pb.BatchGetRowResponse) for request in requests]
    assert [_values(future.result()) for future in started] == [_values(r) for r in one_by_one]


def test_service_errors_are_retried_by_the_client_s_policy(ots_client, ots_server_options,
                                                            quick_retries) -> None:
    _table(ots_client)
    raw = RawClient(ots_client)
    ots_server_options.faults = FaultPlan.parse("server_busy@BatchGetRow=0.5,seed=3")
    try:
        answers = [raw.call_together("BatchGetRow", _gets(list(range(ROWS))), pb.BatchGetRowResponse)
                   for _ in range(4)]
    finally:
        ots_server_options.faults = None
    for answer in answers:
        assert [v for r in answer for v in _values(r)] == list(range(ROWS))


def test_a_refused_request_raises_its_error_once_all_are_done(ots_client) -> None:
    _table(ots_client)
    raw = RawClient(ots_client)
    missing = pb.BatchGetRowRequest()
    missing.tables.add(table_name="no_such_table", max_versions=1).primary_key.append(
        key_row((("pk", "a"),)))
    with pytest.raises(OTSServiceError) as info:
        raw.call_together("BatchGetRow", [*_gets(list(range(200))), missing], pb.BatchGetRowResponse)
    assert info.value.code == "OTSObjectNotExist"
    with pytest.raises(OTSServiceError, match="OTSObjectNotExist"):
        raw.start_call("BatchGetRow", missing, pb.BatchGetRowResponse).result()
    # The loop goes on serving this process.
    again = raw.call_together("BatchGetRow", _gets(list(range(200))), pb.BatchGetRowResponse)
    assert [v for r in again for v in _values(r)] == list(range(200))


@pytest.mark.slow
def test_broken_connections_are_retried_on_reads_and_idempotent_writes(ots_instance, quick_retries) -> None:
    _table(ots_instance.client())
    proxy = BreakingProxy(ots_instance.endpoint, fraction=0.3, seed=5)
    try:
        client = ts.OTSClient(proxy.endpoint, ots_instance.access_key_id,
                              ots_instance.access_key_secret, ots_instance.instance)
        raw = RawClient(client)
        for _ in range(3):
            answer = raw.call_together("BatchGetRow", _gets(list(range(ROWS))), pb.BatchGetRowResponse)
            assert [v for r in answer for v in _values(r)] == list(range(ROWS))
        rows = [plainbuffer.encode_row([("pk", f"w{i:04d}")], [("n", i)])
                for i in range(ROWS)]
        batch = writer.BatchWriter(client, "t")
        batch.put(rows)  # three requests, sent together
        assert batch.stats.rows == ROWS
        assert proxy.dropped > 2
    finally:
        proxy.close()
    written = RawClient(ots_instance.client()).call_together(
        "BatchGetRow", _gets(list(range(ROWS)), "w"), pb.BatchGetRowResponse)
    assert [v for r in written for v in _values(r)] == list(range(ROWS))


def test_guarded_writes_sent_together_name_the_rows_whose_condition_failed(
        ots_client, ots_server_options, quick_retries) -> None:
    _table(ots_client, rows=0)
    raw = RawClient(ots_client)
    existing = set(range(0, ROWS, 7))
    writer.BatchWriter(ots_client, "t").put(
        [plainbuffer.encode_row([("pk", f"k{i:04d}")], [("n", -1)]) for i in existing])
    rows = [plainbuffer.encode_row([("pk", f"k{i:04d}")], [("n", i)])
            for i in range(ROWS)]
    absent = writer.row_condition(pb.EXPECT_NOT_EXIST)
    ots_server_options.faults = FaultPlan.parse("batch_row@BatchWriteRow=0.2,seed=9")
    try:
        batch = writer.BatchWriter(ots_client, "t")
        refused = batch.write_guarded(pb.PUT, rows, [absent] * ROWS)
    finally:
        ots_server_options.faults = None
    assert refused == sorted(existing)
    assert batch.stats.retried_rows > 0  # rows failed inside requests that went through
    answer = raw.call_together("BatchGetRow", _gets(list(range(ROWS))), pb.BatchGetRowResponse)
    assert [v for r in answer for v in _values(r)] == [-1 if i in existing else i for i in range(ROWS)]


def test_rows_that_keep_failing_raise_a_write_error_naming_one(ots_client, ots_server_options) -> None:
    _table(ots_client, rows=0)
    rows = [plainbuffer.encode_row([("pk", f"k{i:04d}")], [("n", i)])
            for i in range(ROWS)]
    policy = retry.TsmigrateRetryPolicy(max_retries=2, base_delay_s=0.001, throttled_delay_s=0.001)
    ots_server_options.faults = FaultPlan.parse("batch_row@BatchWriteRow=1.0,seed=1")
    try:
        expected = r"could not be written to 't' after 3 attempts, first \(pk="
        with pytest.raises(writer.WriteError, match=expected):
            writer.BatchWriter(ots_client, "t", policy=policy).put(rows)
    finally:
        ots_server_options.faults = None


def _call_in_child(endpoint: str, key_id: str, secret: str, instance: str, out) -> None:
    raw = RawClient(ts.OTSClient(endpoint, key_id, secret, instance))
    answer = raw.call_together("BatchGetRow", _gets(list(range(200))), pb.BatchGetRowResponse)
    out.send(([v for r in answer for v in _values(r)], ioloop.io_loop().pid))


def test_a_loop_closed_at_exit_is_started_again_if_a_call_comes_later(ots_client) -> None:
    _table(ots_client, rows=3)
    loop = ioloop.io_loop()
    loop.close()  # as at exit
    answer = RawClient(ots_client).call_together("BatchGetRow", _gets([0, 1, 2]), pb.BatchGetRowResponse)
    assert [v for r in answer for v in _values(r)] == [0, 1, 2]
    assert ioloop.io_loop() is not loop and ioloop.io_loop().running


def test_a_forked_child_sends_on_a_loop_of_its_own(ots_instance) -> None:
    client = ots_instance.client()
    _table(client)
    parent_loop = ioloop.io_loop()
    RawClient(client).call_together("BatchGetRow", _gets(list(range(200))), pb.BatchGetRowResponse)
    receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(
        target=_call_in_child, args=(ots_instance.endpoint, ots_instance.access_key_id,
                                     ots_instance.access_key_secret, ots_instance.instance, send))
    child.start()
    values, child_pid = receive.recv()
    child.join(30)
    assert child.exitcode == 0
    assert values == list(range(200))
    assert child_pid == child.pid != parent_loop.pid


def test_a_process_that_sent_together_exits_without_an_unclosed_session(ots_instance) -> None:
    _table(ots_instance.client())
    code = (
        "import tablestore as ts\n"
        "from tablestore.protobuf import table_store_pb2 as pb\n"
        "from tsmigrate.contract.rowbytes import key_row\n"
        "from tsmigrate.instance.rawclient import RawClient\n"
        f"client = ts.OTSClient({ots_instance.endpoint!r}, {ots_instance.access_key_id!r}, "
        f"{ots_instance.access_key_secret!r}, {ots_instance.instance!r})\n"
        "requests = []\n"
        "for n in range(3):\n"
        "    r = pb.BatchGetRowRequest()\n"
        "    item = r.tables.add(table_name='t', max_versions=1)\n"
        "    item.primary_key.append(key_row((('pk', f'k{n:04d}'),)))\n"
        "    requests.append(r)\n"
        "print(len(RawClient(client).call_together('BatchGetRow', requests, pb.BatchGetRowResponse)))\n"
    )
    done = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-X", "dev", "-c", code],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"
    assert "Unclosed" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_https_is_verified_with_the_bundle_the_sdk_s_sync_pool_uses() -> None:
    import ssl

    import certifi

    client = ts.OTSClient("https://example.cn-hangzhou.ots.aliyuncs.com", "id", "secret", "example",
                          ssl_version=ssl.TLSVersion.TLSv1_2)
    loop = ioloop.io_loop()

    async def pool() -> ioloop.HTTPPool:
        return loop.pool(client)

    made = loop.run_together([pool()])[0]
    bundle = ssl.create_default_context(cafile=certifi.where()).get_ca_certs()
    assert len(bundle) > 50 and made.ssl_context.get_ca_certs() == bundle
    assert made.ssl_context.verify_mode == ssl.CERT_REQUIRED and made.ssl_context.check_hostname
    assert made.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert made.url == "https://example.cn-hangzhou.ots.aliyuncs.com"


def test_nothing_to_write_sends_nothing(ots_client) -> None:
    _table(ots_client, rows=0)
    batch = writer.BatchWriter(ots_client, "t")
    assert batch.write_guarded(pb.PUT, [], []) == []
    batch.put([])
    assert RawClient(ots_client).call_together("BatchGetRow", [], pb.BatchGetRowResponse) == []
    assert batch.stats.requests == 0
