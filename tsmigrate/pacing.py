"""Client-side pacing of table-level operations.

Tablestore allows about 10 table operations (CreateTable, DescribeTable, ListTable, ...) per
second per instance and answers more with "Too frequent table operations.". The SDK retries
those with exponential backoff, which turns a burst into seconds of waiting; pacing the calls
to the limit instead finishes as early as the limit allows.
"""

from __future__ import annotations

import collections
import threading
import time


class Pacer:
    """At most ``per_second`` acquisitions in any sliding window of ``window_s`` seconds."""

    def __init__(self, per_second: int, window_s: float = 1.0, margin_s: float = 0.02):
        if per_second < 1:
            raise ValueError("per_second must be at least 1")
        self.per_second = per_second
        # The margin absorbs the gap between sending here and arriving at the service.
        self.window_s = window_s + margin_s
        self._sent: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                while self._sent and now - self._sent[0] >= self.window_s:
                    self._sent.popleft()
                if len(self._sent) < self.per_second:
                    self._sent.append(now)
                    return
                wait = self.window_s - (now - self._sent[0])
            time.sleep(max(wait, 0.001))


class Unpaced:
    """No limit (a local server without one)."""

    def acquire(self) -> None:
        return None
