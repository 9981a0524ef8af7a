"""Change capture's stream shards, applied in parallel.

A capture (``capture.Capture``, and the reverse capture and late-write net built on it) keeps
every shard's position; each round (``Capture.step``) it hands each readable shard (its parents
read to their end) to a worker as a ``ShardWork``: read pages from this iterator for up to a
budget, apply them, say what happened (``ShardOutcome``). The capture then takes in every
outcome: positions, records kept for splits whose backfill still runs, rows set aside, counts.
A worker keeps nothing between tasks, so any executor can run them:

- ``Inline``: one after the other, in this thread;
- ``Threads(n)``: n threads of this process (the stream reads and row reads wait on the network);
- ``OnExecutor(executor, spec)``: the backfill's executors (``executors.InProcessExecutor`` with
  processes, ``executors.DaskExecutor``). A worker there builds the capture from the rewrite's
  state (``CaptureRef``) once per process, then runs each task on a fresh copy of it.

Records of one key stay in one shard (the service routes a key to one partition) and a child
shard is read only after its parents, so per-key order holds however many workers run. A
position moves only with an outcome: records a killed worker applied are read and applied
again, which capture's re-reading makes idempotent.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import threading
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs

from tsmigrate.errors import TsmigrateError

if TYPE_CHECKING:
    from tsmigrate.rewrite.job import ConnectionSpec


class ShardCapture(Protocol):
    """What a runner needs of a capture (``capture.Capture``): a fresh copy per task, and how
    workers elsewhere build it. Tasks are ``capture.ShardWork``, results ``capture.ShardOutcome``."""

    ref: CaptureRef | None
    runner: ShardRunner

    def worker(self) -> ShardCapture: ...

    def run_shard(self, work: Any) -> Any: ...


C = TypeVar("C", bound=ShardCapture)
DEFAULT_WORKERS = 4
POLL_S = 0.2
MAX_RESTARTS = 5


class ShardRunner(Protocol):
    workers: int

    def run(self, capture: ShardCapture, works: list[Any]) -> list[Any]: ...

    def close(self) -> None: ...


class Inline:
    """Every shard in turn, in the calling thread."""

    workers = 1

    def run(self, capture: ShardCapture, works: list[Any]) -> list[Any]:
        return [capture.worker().run_shard(work) for work in works]

    def close(self) -> None:
        return None


class Threads:
    """Shards on up to ``workers`` threads of this process, each task on its own copy of the
    capture (they share the client, whose connection pool is thread-safe)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise TsmigrateError(f"--workers must be at least 1, got {workers}")
        self.workers = workers

    def run(self, capture: ShardCapture, works: list[Any]) -> list[Any]:
        if self.workers == 1 or len(works) <= 1:
            return Inline().run(capture, works)
        with cf.ThreadPoolExecutor(min(self.workers, len(works)),
                                   thread_name_prefix="capture-shard") as pool:
            running = [pool.submit(capture.worker().run_shard, work) for work in works]
            return [future.result() for future in running]

    def close(self) -> None:
        return None


@attrs.frozen
class CaptureRef:
    """How a worker elsewhere builds a capture: the rewrite (its target), the function that
    makes that capture of it (forward, reverse, late) and a stamp that changes when the
    capture's rule does (the net of another fence), so a worker's cached copy is built again."""

    target: str
    factory: str  # "module:function", called with (client, rewrite): what builds it here
    stamp: str = ""

    def build(self, client: Any) -> ShardCapture:
        from tsmigrate.rewrite import machine

        module, _, name = self.factory.partition(":")
        made = getattr(importlib.import_module(module), name)(client, machine.load(client, self.target))
        if made is None:
            raise TsmigrateError(f"the rewrite into {self.target} has no such capture now ({self.factory})")
        return made


_built: dict[tuple[Any, CaptureRef], ShardCapture] = {}
_built_lock = threading.Lock()


def run_remote(spec: ConnectionSpec, ref: CaptureRef, work: Any) -> Any:
    """A shard task on a process or Dask worker: the capture ``ref`` names, built once per
    process (and stamp), runs ``work`` on a fresh copy."""
    key = (spec, ref)
    with _built_lock:
        capture = _built.get(key)
        if capture is None:
            capture = _built[key] = ref.build(spec.client())
    return capture.worker().run_shard(work)


class OnExecutor:
    """Shards as tasks of a backfill executor (processes, or a Dask cluster): ``run_remote``."""

    def __init__(self, executor: Any, spec: ConnectionSpec, *, own: bool = False) -> None:
        self.executor = executor
        self.spec = spec
        self.workers = executor.concurrency
        self._own = own

    def run(self, capture: ShardCapture, works: list[Any]) -> list[Any]:
        if capture.ref is None:
            raise TsmigrateError("this capture cannot run on other processes: it has no CaptureRef")
        outcomes: dict[str, Any] = {}
        restarts = 0
        todo = list(works)
        while todo:
            handles = {self.executor.submit(run_remote, self.spec, capture.ref, w): w for w in todo}
            todo = []
            pending = list(handles)
            while pending:
                done, pending = self.executor.wait(pending, POLL_S)
                for handle in done:
                    try:
                        outcome = self.executor.result(handle)
                    except BrokenProcessPool:
                        # A worker died: its shards' positions did not move; read them again.
                        if restarts >= MAX_RESTARTS or not self.executor.restart():
                            raise TsmigrateError("capture workers kept dying") from None
                        restarts += 1
                        todo = [w for w in works if w.shard_id not in outcomes]
                        pending = []
                        break
                    outcomes[outcome.shard_id] = outcome
        return [outcomes[w.shard_id] for w in works]

    def close(self) -> None:
        if self._own:
            self.executor.close()


def runner(workers: int = DEFAULT_WORKERS, *, dask: str | None = None, processes: bool = False,
           spec: ConnectionSpec | None = None) -> ShardRunner:
    """The runner ``--workers`` / ``--dask`` ask for: threads of this process, unless a Dask
    scheduler or processes are named (which need ``spec``: how workers reach the instance)."""
    if not (dask or processes):
        return Threads(workers)
    from tsmigrate.rewrite import executors

    if spec is None:
        raise TsmigrateError("capture on other processes needs the instance's connection spec")
    executor = (executors.DaskExecutor(dask) if dask
                else executors.InProcessExecutor(workers, processes=True))
    return OnExecutor(executor, spec, own=True)


def attach(capture: C, rewrite: Any, factory: str, stamp: str, runner: ShardRunner | None) -> C:
    """``capture`` with its runner (``of_rewrite`` unless given) and what builds it on workers
    (``factory``: "module:function")."""
    capture.runner = runner or of_rewrite(rewrite)
    capture.ref = CaptureRef(rewrite.target, factory, stamp)
    return capture


def of_rewrite(rewrite: Any) -> ShardRunner:
    """Threads, as many as the rewrite's last ``--workers`` (``capture_workers``): what the
    cut-over commands, which take no ``--workers``, capture with."""
    return Threads(int(rewrite.get("capture_workers") or DEFAULT_WORKERS))

