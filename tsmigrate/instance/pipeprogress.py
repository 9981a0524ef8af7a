"""Progress for logs: when output is not a terminal (a deploy job's pipe), long work prints a
plain line at least every ``TSMIGRATE_PROGRESS_EVERY_S`` seconds (default 10): the phase, rows
done of the total (``of about N``; ``of more than N`` when the total is only a floor), rows/s and
the ETA (``ETA unknown`` when there is none to give). A thread prints the latest state, so a step that reports
rarely (verification, a finish) is still heard."""

from __future__ import annotations

import os
import threading
import time

from rich.console import Console

ENV = "TSMIGRATE_PROGRESS_EVERY_S"
DEFAULT_EVERY_S = 10.0


def every_s() -> float:
    """The interval from the environment; a bad or non-positive value is the default."""
    try:
        value = float(os.environ.get(ENV, DEFAULT_EVERY_S))
    except ValueError:
        return DEFAULT_EVERY_S
    return value if value > 0 else DEFAULT_EVERY_S


def clock(seconds: float | None) -> str:
    """``h:mm:ss``, or ``-`` when unknown."""
    if seconds is None:
        return "-"
    minutes, secs = divmod(max(0, round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class PipeProgress:
    """The latest state of one piece of work, printed by a thread every ``every_s`` seconds
    from the first ``update`` until ``stop``."""

    def __init__(self, console: Console, what: str, every: float | None = None) -> None:
        self.console, self.what = console, what
        self.every_s = every if every is not None else every_s()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._phase = ""
        self._since = time.monotonic()
        self._done: int | None = None
        self._total: int | None = None
        self._rate: float | None = None
        self._eta: float | None = None
        self._detail = ""
        self._floor = False
        self._first: float | None = None

    def update(self, phase: str, done: int | None = None, total: int | None = None,
               rate: float | None = None, eta_s: float | None = None, detail: str = "",
               floor: bool = False) -> None:
        """The latest state; ``floor``: ``total`` is only a floor, more is to come."""
        with self._lock:
            if phase != self._phase:
                self._phase, self._since = phase, time.monotonic()
            self._done, self._total, self._rate, self._eta = done, total, rate, eta_s
            self._detail, self._floor = detail, floor
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="pipe-progress", daemon=True)
                self._thread.start()

    @property
    def phase(self) -> str:
        return self._phase

    def count(self, phase: str, done: int, total: int | None = None, detail: str = "") -> None:
        """``update`` for a count of rows: the rate since this phase's first count, the ETA
        from it when the total is known."""
        if phase != self._phase or self._first is None:
            self._first = time.monotonic()
        rate = done / max(time.monotonic() - self._first, 1e-3)
        eta = (total - done) / rate if total is not None and rate > 0 else None
        self.update(phase, done, total, rate, eta, detail)

    def line(self) -> str:
        with self._lock:
            parts = [f"{self.what} {self._phase}:"]
            if self._done is not None:
                parts.append(self._count() + ",")
                parts.append(f"{self._rate:,.0f} rows/s," if self._rate is not None else "- rows/s,")
                parts.append(f"ETA {'unknown' if self._eta is None else clock(self._eta)},")
            parts.append(f"{clock(time.monotonic() - self._since)} in this phase")
            if self._detail:
                parts.append(f"({self._detail})")
            return " ".join(parts)

    def _count(self) -> str:
        done, total = self._done or 0, self._total
        if total is None:
            return f"{done:,} rows"
        if not self._floor:
            return f"{done:,} of about {total:,} rows"
        if total > done:
            return f"{done:,} of more than {total:,} rows"
        return f"{done:,} rows, more to come (past the size estimate)"

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.console.print(self.line(), markup=False, highlight=False, soft_wrap=True)

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def for_stderr(what: str) -> PipeProgress | None:
    """A PipeProgress on stderr when stderr is not a terminal (None when it is: a bar or
    nothing shows the work there)."""
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    return None if console.is_terminal else PipeProgress(console, what)
