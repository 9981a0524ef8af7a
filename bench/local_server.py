"""Throughput of the local Tablestore-compatible server: BatchWriteRow and a full GetRange scan.

The server runs in a separate process (`tsmigrate local serve`). Two measurements each:
- server-only: requests encoded and signed beforehand with the SDK, replayed over one keep-alive
  `http.client` connection, so the client costs almost nothing;
- SDK: the official `OTSClient` end to end (encoding, signing, response checks, decoding).

Both scans check that they returned every row written. Rows have 2 PK columns and 6 attribute
columns, about 150 bytes. The last line is:
batch_write_rows_per_s=N get_range_rows_per_s=N sdk_batch_write_rows_per_s=N
sdk_get_range_rows_per_s=N write_server_vs_sdk=R scan_server_vs_sdk=R write_server_cpu_us_per_row=C
scan_server_cpu_us_per_row=C (R: server-only rate / SDK rate; C: the server process's utime +
stime from /proc over the server-only write or scan, per row; each line gives it too)

    python bench/local_server.py [--rows 50000] [--memory]
"""

from __future__ import annotations

import argparse
import http.client
import logging
import socket
import tempfile
import time
from collections.abc import Iterator
from urllib.parse import urlparse

logging.getLogger("tablestore").addHandler(logging.NullHandler())

import tablestore as ts  # noqa: E402
from serve import AK_ID, AK_SECRET, INSTANCE, cpu_s_of, start_server  # noqa: E402
from tablestore.auth import RequestContext  # noqa: E402
from tablestore.protobuf import table_store_pb2 as pb  # noqa: E402

from tsmigrate.wire import plainbuffer  # noqa: E402

BATCH = 200
FULL = ([("user", ts.INF_MIN), ("seq", ts.INF_MIN)], [("user", ts.INF_MAX), ("seq", ts.INF_MAX)])


def make_row(i: int) -> ts.Row:
    return ts.Row(
        [("user", f"user{i // 10:08d}"), ("seq", i)],
        [
            ("name", f"name-{i:010d}"),
            ("age", i % 97),
            ("score", i * 0.5),
            ("active", i % 2 == 0),
            ("note", f"note {i:020d} lorem ipsum"),
            ("blob", bytearray(i.to_bytes(8, "big") * 2)),
        ],
    )


def batches(rows: int) -> Iterator[list[ts.Row]]:
    for start in range(0, rows, BATCH):
        yield [make_row(i) for i in range(start, min(start + BATCH, rows))]


def write_request(table: str, rows: list[ts.Row]) -> ts.BatchWriteRowRequest:
    request = ts.BatchWriteRowRequest()
    request.add(ts.TableInBatchWriteRowItem(table, [ts.PutRowItem(r, ts.Condition("IGNORE")) for r in rows]))
    return request


def create_table(client: ts.OTSClient, name: str) -> None:
    meta = ts.TableMeta(name, [("user", "STRING"), ("seq", "INTEGER")])
    client.create_table(meta, ts.TableOptions(), ts.ReservedThroughput(ts.CapacityUnit(0, 0)))


class Replayer:
    """Pre-signed SDK requests sent over one keep-alive connection."""

    def __init__(self, client: ts.OTSClient, endpoint: str) -> None:
        self.client = client
        url = urlparse(endpoint)
        self.conn = http.client.HTTPConnection(url.hostname, url.port)

    def _connect(self) -> None:
        # On the first send, not before the requests are prepared: the server closes a connection
        # that sent no request within its header timeout (10 s), which preparing can outlast.
        self.conn.connect()
        # http.client sends headers and body in two writes; without TCP_NODELAY the body waits
        # on Nagle's algorithm, which would be the client's cost, not the server's. The SDK's
        # urllib3 pool sets it too.
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def prepare(self, api: str, *args: object) -> tuple[str, dict[str, str], bytes]:
        context = RequestContext(self.client.credentials_provider.get_credentials())
        return self.client.protocol.make_request(api, self.client._signer, context, *args)

    def send(self, request: tuple[str, dict[str, str], bytes]) -> bytes:
        query, headers, body = request
        if self.conn.sock is None:
            self._connect()
        self.conn.request("POST", query, body, headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise SystemExit(f"{query}: HTTP {response.status}: {data!r}")
        return data


def server_only_write(replayer: Replayer, table: str, rows: int) -> float:
    requests = [replayer.prepare("BatchWriteRow", write_request(table, b)) for b in batches(rows)]
    start = time.perf_counter()
    for request in requests:
        resp = pb.BatchWriteRowResponse.FromString(replayer.send(request))
        if not all(r.is_ok for t in resp.tables for r in t.rows):
            raise SystemExit("a row failed in BatchWriteRow")
    return rows / (time.perf_counter() - start)


def page_starts(client: ts.OTSClient, table: str) -> list[list[tuple[str, object]]]:
    starts = [FULL[0]]
    next_pk = FULL[0]
    while True:
        _, next_pk, _, _ = client.get_range(table, "FORWARD", next_pk, FULL[1], max_version=1)
        if next_pk is None:
            return starts
        starts.append(next_pk)


def server_only_scan(replayer: Replayer, table: str, rows: int) -> float:
    starts = page_starts(replayer.client, table)
    requests = [
        # (columns_to_get, limit, filter, max_version=1, time_range, start/end column, token, txn)
        replayer.prepare("GetRange", table, "FORWARD", s, FULL[1], None, None, None, 1, *[None] * 5)
        for s in starts
    ]
    start = time.perf_counter()
    bodies = [pb.GetRangeResponse.FromString(replayer.send(request)).rows for request in requests]
    elapsed = time.perf_counter() - start
    # Counted after the clock stops: a rate over a scan that missed rows would mean nothing.
    seen = sum(len(plainbuffer.decode_rows(body)) for body in bodies)
    if seen != rows:
        raise SystemExit(f"server-only scan saw {seen} rows, expected {rows}")
    return rows / elapsed


def sdk_write(client: ts.OTSClient, table: str, rows: int) -> float:
    start = time.perf_counter()
    for batch in batches(rows):
        result = client.batch_write_row(write_request(table, batch))
        if not result.is_all_succeed():
            raise SystemExit("a row failed in BatchWriteRow")
    return rows / (time.perf_counter() - start)


def sdk_scan(client: ts.OTSClient, table: str, rows: int) -> float:
    start = time.perf_counter()
    seen = 0
    next_pk = FULL[0]
    while next_pk is not None:
        _, next_pk, page, _ = client.get_range(table, "FORWARD", next_pk, FULL[1], max_version=1)
        seen += len(page)
    elapsed = time.perf_counter() - start
    if seen != rows:
        raise SystemExit(f"scan saw {seen} rows, expected {rows}")
    return rows / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=50_000, help="rows written and scanned per measurement")
    parser.add_argument("--memory", action="store_true", help="in-memory server instead of a data directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        proc, endpoint = start_server(*(["--memory"] if args.memory else ["--data", data_dir]))
        try:
            client = ts.OTSClient(endpoint, AK_ID, AK_SECRET, INSTANCE)
            create_table(client, "raw")
            create_table(client, "sdk")
            replayer = Replayer(client, endpoint)
            runs = [("server-only BatchWriteRow", lambda: server_only_write(replayer, "raw", args.rows)),
                    ("server-only GetRange scan", lambda: server_only_scan(replayer, "raw", args.rows)),
                    ("SDK BatchWriteRow", lambda: sdk_write(client, "sdk", args.rows)),
                    ("SDK GetRange scan", lambda: sdk_scan(client, "sdk", args.rows))]
            rates, server_us = [], []
            for label, run in runs:
                served = cpu_s_of(proc.pid)
                rates.append(run())
                server_us.append((cpu_s_of(proc.pid) - served) / args.rows * 1e6)
                print(f"{label}: {rates[-1]:,.0f} rows/s, server CPU {server_us[-1]:.1f} us/row", flush=True)
            write, scan, sdk_w, sdk_s = rates
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    # Side by side in this run: how much of the SDK's end-to-end time the server accounts for.
    print(f"server-only / SDK: BatchWriteRow {write / sdk_w:.2f}x, GetRange scan {scan / sdk_s:.2f}x")
    print(
        f"batch_write_rows_per_s={write:.0f} get_range_rows_per_s={scan:.0f} "
        f"sdk_batch_write_rows_per_s={sdk_w:.0f} sdk_get_range_rows_per_s={sdk_s:.0f} "
        f"write_server_vs_sdk={write / sdk_w:.2f} scan_server_vs_sdk={scan / sdk_s:.2f} "
        f"write_server_cpu_us_per_row={server_us[0]:.1f} scan_server_cpu_us_per_row={server_us[1]:.1f}"
    )


if __name__ == "__main__":
    main()
