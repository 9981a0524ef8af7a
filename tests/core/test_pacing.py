"""Pacing: the service never sees more than the limit in any sliding window, across threads,
wherever between sending and answering a call reaches it."""

from __future__ import annotations

import random
import threading
import time

import pytest

from tsmigrate.instance.pacing import TABLE_OPERATIONS, PacedConnection, Pacer


def test_no_window_holds_more_than_the_limit_across_threads():
    limit, window = 3, 0.1
    pacer = Pacer(limit, window_s=window, margin_s=0.0)
    arrivals: list[float] = []
    lock = threading.Lock()
    rng = random.Random(7)
    delays = [(rng.uniform(0, 0.01), rng.uniform(0, 0.01)) for _ in range(12)]

    def worker(mine: list[tuple[float, float]]) -> None:
        for before, after in mine:
            with pacer.slot():
                time.sleep(before)  # the request travels...
                with lock:
                    arrivals.append(time.monotonic())  # ...reaches the service...
                time.sleep(after)  # ...and the answer travels back
    threads = [threading.Thread(target=worker, args=(delays[i::3],)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    arrivals.sort()
    assert len(arrivals) == 12
    # Any limit + 1 consecutive arrivals span at least a window.
    spans = [arrivals[i + limit] - arrivals[i] for i in range(len(arrivals) - limit)]
    assert min(spans) >= window - 1e-9


def test_only_table_level_requests_are_paced():
    class Recorder:
        timeout = 50

        def __init__(self) -> None:
            self.urls: list[str] = []

        def send_receive(self, url, headers, body):
            self.urls.append(url)
            return url

    class Counting(Pacer):
        taken = 0

        def slot(self):
            self.taken += 1
            return super().slot()

    recorder, pacer = Recorder(), Counting(10)
    connection = PacedConnection(recorder, pacer)
    for api in ("GetRow", "BatchWriteRow", "ListSearchIndex", "DescribeTable", "ListTable"):
        assert connection.send_receive(f"/{api}", {}, b"") == f"/{api}"
    assert pacer.taken == 2
    assert recorder.urls[-1] == "/ListTable"
    assert connection.timeout == 50  # everything else is the wrapped pool's
    assert {"ListTable", "DescribeTable", "CreateTable", "UpdateTable"} <= TABLE_OPERATIONS


def test_rejects_a_zero_limit():
    with pytest.raises(ValueError):
        Pacer(0)
