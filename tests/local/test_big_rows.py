"""Reads of big rows stay bounded: a GetRange page is cut while scanning (at 4 MB or the row limit)
and a BatchGetRow answers at most 4 MB of rows, so neither reads rows it does not return."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import rawhttp
from tablestore import (
    INF_MAX,
    INF_MIN,
    BatchGetRowRequest,
    CapacityUnit,
    OTSClient,
    ReservedThroughput,
    TableInBatchGetRowItem,
    TableMeta,
    TableOptions,
)
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.testing import local_tablestore
from tsmigrate.wire.plainbuffer import encode_row

MiB = 1024 * 1024
ROWS = 12
FULL = ([("id", INF_MIN)], [("id", INF_MAX)])


@pytest.fixture(scope="module")
def big_rows() -> Iterator[OTSClient]:
    """A table of 3 MB rows (two 1.5 MB columns each; one request writes one row), on a server
    of this module's own so that the session server does not keep 36 MB of rows.

    The PutRow requests are encoded by the server's own PlainBuffer encoder and sent raw: the
    SDK's put_row spends about 0.5 s per 3 MB row in its pure-Python CRC and in formatting the
    request for its debug log, which made this setup 6 s. The server receives the same requests."""
    with local_tablestore(memory=True) as ots:
        client = ots.client()
        client.create_table(TableMeta("big", [("id", "INTEGER")]), TableOptions(),
                            ReservedThroughput(CapacityUnit(0, 0)))
        half = 3 * MiB // 2
        for i in range(ROWS):
            request = pb.PutRowRequest(
                table_name="big", row=encode_row([("id", i)], [("a", "a" * half), ("b", "b" * half)]),
                condition=pb.Condition(row_existence=pb.IGNORE),
            )
            rawhttp.call(client, "PutRow", request, pb.PutRowResponse)
        # Written as the SDK would have written them: one row, its two columns, whole.
        _, row, _ = client.get_row("big", [("id", ROWS - 1)], max_version=1)
        assert [(name, len(value)) for name, value, _ in row.attribute_columns] == [
            ("a", half), ("b", half)]
        yield client


def traced_peak(call: Callable[[], Any]) -> tuple[Any, int]:
    """The call's result and the peak of Python memory allocated while it ran (server included:
    it runs in this process)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_a_range_of_big_rows_is_paged_at_4_mb_reading_only_the_page(big_rows: OTSClient) -> None:
    (_, next_pk, rows, _), peak = traced_peak(
        lambda: big_rows.get_range("big", "FORWARD", *FULL, max_version=1)
    )
    assert [r.primary_key for r in rows] == [[("id", 0)]]
    assert next_pk == [("id", 1)]
    # One 3 MB row on the way out (server and SDK copies), not the 12 rows of the range.
    assert peak < 32 * MiB, f"traced peak {peak / MiB:.0f} MiB"
    seen, start = [], FULL[0]
    while start is not None:
        _, start, rows, _ = big_rows.get_range("big", "FORWARD", start, FULL[1], max_version=1)
        seen += [r.primary_key[0][1] for r in rows]
    assert seen == list(range(ROWS))


def test_a_page_with_versions_or_a_limit_is_bounded_too(big_rows: OTSClient) -> None:
    (_, next_pk, rows, _), peak = traced_peak(
        lambda: big_rows.get_range("big", "BACKWARD", *reversed(FULL), max_version=2, limit=1)
    )
    assert [r.primary_key for r in rows] == [[("id", ROWS - 1)]]
    assert next_pk == [("id", ROWS - 2)]
    assert peak < 32 * MiB, f"traced peak {peak / MiB:.0f} MiB"


@pytest.mark.slow
def test_batch_get_answers_at_most_4_mb_and_fails_the_rest_retryably(big_rows: OTSClient) -> None:
    def batch(ids: list[int]) -> Any:
        request = BatchGetRowRequest()
        request.add(TableInBatchGetRowItem("big", [[("id", i)] for i in ids], max_version=1))
        return big_rows.batch_get_row(request).get_result_by_table("big")

    results, peak = traced_peak(lambda: batch(list(range(ROWS))))
    assert [r.is_ok for r in results] == [True] + [False] * (ROWS - 1)
    assert {(r.error_code, r.error_message) for r in results[1:]} == {
        ("OTSServerBusy", "The response reached 4 MB: read this row in another request.")
    }
    assert peak < 32 * MiB, f"traced peak {peak / MiB:.0f} MiB"
    # Asking again for the rows that failed makes progress, one 3 MB row per request.
    again = batch([1, 2])
    assert [r.is_ok for r in again] == [True, False]
    assert again[0].row.primary_key == [("id", 1)]
