"""Run the backfill's split tasks: in-process workers, or a Dask distributed cluster.

The tasks are ``copy.copy_split(spec, job, split)``: independent, resumable, checkpointed in
the state table. So an executor only has to run functions and hand back results; scheduling,
retries of a lost worker (Dask reschedules its tasks) and placement are the engine's. Progress
is read from the checkpoints, the same way whichever executor runs the tasks, so a rewrite
started on a cluster can be resumed in-process and the other way round.

- ``InProcessExecutor(workers, processes=False)``: a thread or process pool. Threads share the
  process (the GIL bounds the transform to one core); processes use every core. A process pool
  broken by a killed worker is started again and the unfinished splits resubmitted: they
  continue from their checkpoints.
- ``DaskExecutor(address)``: ``tcp://scheduler:8786`` (``pip install 'tsmigrate[dask]'``).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

import attrs

from tsmigrate.errors import TsmigrateError
from tsmigrate.rewrite import checkpoints
from tsmigrate.rewrite.checkpoints import SplitCheckpoint
from tsmigrate.rewrite.copy import SplitResult, copy_split
from tsmigrate.rewrite.job import ConnectionSpec, RewriteJob
from tsmigrate.rewrite.splits import Split

POLL_S = 0.5
MAX_POOL_RESTARTS = 5
# A split task's writer thread waits for the GIL while its reader thread transforms a page; with
# Python's default 5 ms switch interval every write goes out later, and the server idles.
# bench/rewrite.py: about a quarter more rows/s with 1 ms.
SWITCH_INTERVAL_S = 0.001


def _short_switch_interval() -> None:
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))


class Executor(Protocol):
    concurrency: int

    def submit(self, fn: Callable[..., SplitResult], *args: Any) -> Any: ...

    def wait(self, handles: Sequence[Any], timeout: float) -> tuple[list[Any], list[Any]]: ...

    def result(self, handle: Any) -> SplitResult: ...

    def restart(self) -> bool: ...

    def close(self) -> None: ...


class InProcessExecutor:
    def __init__(self, workers: int = 4, processes: bool = False) -> None:
        if workers < 1:
            raise TsmigrateError(f"--workers must be at least 1, got {workers}")
        self.concurrency = workers
        self.processes = processes
        self._pool = self._new_pool()

    def _new_pool(self) -> cf.Executor:
        if self.processes:
            # spawn: a fork would copy this process's threads' locks (the embedded server's).
            return cf.ProcessPoolExecutor(self.concurrency, mp_context=multiprocessing.get_context("spawn"),
                                          initializer=_short_switch_interval)
        return cf.ThreadPoolExecutor(self.concurrency, thread_name_prefix="rewrite-split")

    def submit(self, fn: Callable[..., SplitResult], *args: Any) -> cf.Future:
        return self._pool.submit(fn, *args)

    def wait(self, handles: Sequence[cf.Future], timeout: float) -> tuple[list[cf.Future], list[cf.Future]]:
        done, pending = cf.wait(handles, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return list(done), list(pending)

    def result(self, handle: cf.Future) -> SplitResult:
        return handle.result()

    def restart(self) -> bool:
        """After a worker process died: a new pool (the old one refuses work)."""
        if not self.processes:
            return False
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._new_pool()
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


# How long to try to connect to a --dask scheduler (Dask's own default is 30 s of retries).
DASK_CONNECT_TIMEOUT_S = 10.0


class DaskExecutor:
    """Split tasks on a Dask distributed cluster (its scheduler's address, or a Client)."""

    def __init__(self, address: Any) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise TsmigrateError(
                "--dask needs Dask distributed: pip install 'tsmigrate[dask]'"
            ) from None
        self._own = not isinstance(address, Client)
        try:
            self.client = Client(address, timeout=DASK_CONNECT_TIMEOUT_S) if self._own else address
        except OSError as exc:  # TimeoutError included: said here, or it reads as the instance's
            raise TsmigrateError(
                f"cannot reach the Dask scheduler at {address} (--dask): {exc}; start it, or "
                "leave out --dask to copy in this process"
            ) from None
        self.concurrency = max(1, sum(self.client.nthreads().values()))

    def submit(self, fn: Callable[..., SplitResult], *args: Any) -> Any:
        return self.client.submit(fn, *args, pure=False)

    def wait(self, handles: Sequence[Any], timeout: float) -> tuple[list[Any], list[Any]]:
        from distributed import wait

        try:
            done, pending = wait(list(handles), timeout=timeout, return_when="FIRST_COMPLETED")
        except TimeoutError:
            return [], list(handles)
        return list(done), list(pending)

    def result(self, handle: Any) -> SplitResult:
        return handle.result()

    def restart(self) -> bool:
        return False  # the scheduler already reschedules the tasks of a lost worker

    def close(self) -> None:
        if self._own:
            self.client.close()


@attrs.frozen
class BackfillProgress:
    """What a progress bar shows: totals so far and each split's state."""

    rows: int
    bytes: int
    rows_per_s: float
    # The seconds left at this run's bytes a second, of ``estimated_bytes``; None when unknown
    # (nothing copied yet, or ``past_estimate``), at least a second while a range is unfinished.
    eta_s: float | None
    estimated_bytes: int  # what the copy should reach, in its own bytes (see ``expected_bytes``)
    splits: tuple[SplitCheckpoint, ...]
    total_splits: int
    # The rows the copy should reach (the rows copied per byte copied, at ``estimated_bytes``);
    # None before any row. With ``past_estimate``, a floor: more rows are to come.
    estimated_rows: int | None = None
    # An unfinished range already copied its estimate: what it still holds is unknown.
    past_estimate: bool = False

    @property
    def done_splits(self) -> int:
        return sum(1 for s in self.splits if s.done)


def expected_bytes(splits: Sequence[Split], states: Sequence[SplitCheckpoint]) -> tuple[int, bool]:
    """The bytes the copy should reach, in the copy's own bytes, and whether that is only a
    floor. A range's size estimate (its split points') counts the stored newest versions; the
    copy counts the target rows it writes, every version: on the local server about 1.4 times as
    many for a table keeping two versions of a cell. So the finished ranges give the copy's
    bytes per estimated byte, and every unfinished range counts its estimate at that scale (the
    estimate as it is before any range finished), or what it copied when that is more. A range
    that copied its whole scaled estimate and is not done leaves the rest unknown: a floor."""
    by_index = {s.index: s for s in states}
    finished = [s for s in splits if s.index in by_index and by_index[s.index].done]
    finished_estimate = sum(s.estimated_bytes for s in finished)
    finished_copied = sum(by_index[s.index].bytes for s in finished)
    scale = finished_copied / finished_estimate if finished_copied and finished_estimate else 1.0
    total, floor = 0, False
    for split in splits:
        state = by_index.get(split.index)
        copied = state.bytes if state is not None else 0
        if state is not None and state.done:
            total += copied
            continue
        guess = round(split.estimated_bytes * scale)
        if copied >= guess:
            floor = True
        total += max(guess, copied)
    return total, floor


@attrs.frozen
class BackfillResult:
    rows: int
    bytes: int
    results: tuple[SplitResult, ...]
    elapsed_s: float

    @property
    def changed(self) -> int:
        return sum(r.changed for r in self.results)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _progress(
    client: Any, job: RewriteJob, splits: Sequence[Split], started: float, rows_before: int,
    bytes_before: int = 0,
) -> BackfillProgress:
    states = checkpoints.list_splits(client, job.id)
    rows = sum(s.rows for s in states)
    copied = sum(s.bytes for s in states)
    estimate, past = expected_bytes(splits, states)
    elapsed = max(time.monotonic() - started, 1e-6)
    rate = (rows - rows_before) / elapsed
    byte_rate = (copied - bytes_before) / elapsed  # this run's: earlier runs' bytes took no time here
    left = estimate - copied
    unfinished = len(splits) - sum(1 for s in states if s.done)
    eta = None
    if not past and byte_rate > 0:
        eta = left / byte_rate if left > 0 else 0.0
        if unfinished:  # a range is still being copied: never "0:00:00"
            eta = max(eta, 1.0)
    rows_total = max(rows, round(rows * estimate / copied)) if copied else None
    return BackfillProgress(rows=rows, bytes=copied, rows_per_s=rate, eta_s=eta, estimated_bytes=estimate,
                            splits=tuple(states), total_splits=len(splits), estimated_rows=rows_total,
                            past_estimate=past)


def run_backfill(
    spec: ConnectionSpec,
    job: RewriteJob,
    splits: Sequence[Split],
    executor: Executor,
    progress: Callable[[BackfillProgress], None] | None = None,
    poll_s: float = POLL_S,
    task: Callable[..., SplitResult] = copy_split,
) -> BackfillResult:
    """Copy every split not done yet, ``executor.concurrency`` at a time, calling ``progress``
    about every ``poll_s`` seconds; returns once all are done. When a task fails or ``progress``
    raises (a pause, say), the running tasks are asked to stop after their current page, and the
    error propagates: the checkpoints keep where every split was.

    ``task(spec, job, split)`` is the split task: the rewrite's copy, or a data migration's
    (``tsmigrate.rewrite.backfill``); ``job`` needs an ``id`` and a ``max_rows_per_s``."""
    client = spec.client()
    checkpoints.clear_stop(client, job.id)
    switch_interval = sys.getswitchinterval()
    _short_switch_interval()  # for the split tasks this process runs (threads)
    started = time.monotonic()
    known = {s.index: s for s in checkpoints.list_splits(client, job.id)}
    rows_before = sum(s.rows for s in known.values())
    bytes_before = sum(s.bytes for s in known.values())
    todo = [s for s in splits if not (s.index in known and known[s.index].done)]
    rate = job.max_rows_per_s
    task_job = attrs.evolve(job, max_rows_per_s=rate / executor.concurrency) if rate else job
    results = {i: SplitResult(i, s.rows, s.bytes, s.digest, True, changed=s.changed)
               for i, s in known.items() if s.done}
    restarts = 0
    handles = {executor.submit(task, spec, task_job, split): split for split in todo}
    try:
        while handles:
            done, _ = executor.wait(list(handles), poll_s)
            for handle in done:
                split = handles.pop(handle)
                try:
                    results[split.index] = executor.result(handle)
                except BrokenProcessPool:
                    if restarts >= MAX_POOL_RESTARTS or not executor.restart():
                        raise TsmigrateError(
                            "backfill workers kept dying; run the rewrite again to continue from "
                            "its checkpoints"
                        ) from None
                    restarts += 1
                    unfinished = [split, *handles.values()]
                    handles = {executor.submit(task, spec, task_job, s): s for s in unfinished}
                    break
            if progress is not None:
                progress(_progress(client, job, splits, started, rows_before, bytes_before))
    except BaseException:
        checkpoints.request_stop(client, job.id)
        raise
    finally:
        sys.setswitchinterval(switch_interval)
        for handle in handles:
            handle.cancel()
    if any(r.stopped for r in results.values()):
        raise TsmigrateError(
            "the backfill was stopped; run it again (apply, or upgrade) to continue from its "
            "checkpoints"
        )
    ordered = tuple(results[s.index] for s in splits)
    return BackfillResult(
        rows=sum(r.rows for r in ordered),
        bytes=sum(r.bytes for r in ordered),
        results=ordered,
        elapsed_s=time.monotonic() - started,
    )
