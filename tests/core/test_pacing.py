"""Pacing: never more than the limit in any sliding window, across threads."""

from __future__ import annotations

import threading
import time

import pytest

from tsmigrate.pacing import Pacer


def test_no_window_holds_more_than_the_limit_across_threads():
    pacer = Pacer(3, window_s=0.1, margin_s=0.0)
    stamps: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(4):
            pacer.acquire()
            with lock:
                stamps.append(time.monotonic())

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    stamps.sort()
    assert len(stamps) == 12
    for i, start in enumerate(stamps):
        in_window = [s for s in stamps[i:] if s - start < 0.1 - 1e-4]
        assert len(in_window) <= 3


def test_rejects_a_zero_limit():
    with pytest.raises(ValueError):
        Pacer(0)
