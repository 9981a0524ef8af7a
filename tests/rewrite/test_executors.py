"""The backfill on each executor: threads, processes (one killed midway), a Dask cluster."""

from __future__ import annotations

import os
import signal
import sys

import pytest
import rewrite_tables as rt

from tsmigrate.rewrite import checkpoints, splits
from tsmigrate.rewrite.executors import DaskExecutor, InProcessExecutor, run_backfill
from tsmigrate.rewrite.transform import TransformError


def _same(client, job) -> bool:
    def norm(rows):
        return [(k, [(n, bytes(v) if isinstance(v, bytearray) else v, t) for n, v, t in c]) for k, c in rows]

    return norm(rt.read_all(client, job.target)) == norm(rt.expected_target(client, job))


def test_threads_copy_every_split_and_report_progress(ots_instance) -> None:
    spec, job, client = rt.setup(ots_instance, 2000)
    ranges = splits.plan(client, job.id, job.source, workers=3)
    seen = []
    switch_interval = sys.getswitchinterval()
    with_executor = InProcessExecutor(workers=3)
    try:
        result = run_backfill(spec, job, ranges, with_executor, progress=seen.append, poll_s=0.05)
    finally:
        with_executor.close()
    assert sys.getswitchinterval() == switch_interval  # shortened for the backfill only
    assert result.rows == 2000 and len(result.results) == len(ranges) > 1
    assert _same(client, job)
    assert seen and seen[-1].rows == 2000 and seen[-1].done_splits == len(ranges)
    assert all(p.rows_per_s >= 0 for p in seen)
    # Run again: every split is done, nothing is copied twice.
    again = run_backfill(spec, job, ranges, InProcessExecutor(workers=2))
    assert again.rows == 2000
    assert sum(c.rows for c in checkpoints.list_splits(client, job.id)) == 2000


def test_a_killed_worker_process_loses_and_doubles_nothing(ots_instance, ots_server_options) -> None:
    spec, job, client = rt.setup(ots_instance, 3000)
    ranges = splits.plan(client, job.id, job.source, workers=2)
    ots_server_options.latency_ms = 15  # slow enough for the kill to land mid-copy
    executor = InProcessExecutor(workers=2, processes=True)
    killed = []

    def kill_one_worker(progress) -> None:
        if not killed and progress.rows > 0:
            pid = next(iter(executor._pool._processes))
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    try:
        result = run_backfill(spec, job, ranges, executor, progress=kill_one_worker, poll_s=0.05)
    finally:
        executor.close()
    assert killed
    assert result.rows == 3000
    assert sum(c.rows for c in checkpoints.list_splits(client, job.id)) == 3000
    assert _same(client, job)


def test_a_dask_cluster_survives_a_killed_worker_and_in_process_resumes_it(
    ots_instance, ots_server_options
) -> None:
    distributed = pytest.importorskip("distributed")
    spec, job, client = rt.setup(ots_instance, 3000)
    ranges = splits.plan(client, job.id, job.source, workers=2)
    # The first split in-process, then half the splits on the cluster (one worker process
    # killed midway), the rest in-process again: all see the same checkpoints.
    assert run_backfill(spec, job, ranges[:1], InProcessExecutor(workers=1)).rows > 0
    ots_server_options.latency_ms = 10  # slow enough for the kill to land mid-copy
    killed = []
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        executor = DaskExecutor(cluster.scheduler_address)

        def kill_a_worker(progress) -> None:
            if not killed and progress.rows > 0:
                nanny = next(iter(cluster.workers.values()))
                killed.append(nanny.process.pid)
                os.kill(nanny.process.pid, signal.SIGKILL)

        try:
            assert executor.concurrency == 2
            first = run_backfill(spec, job, ranges[: len(ranges) // 2], executor, kill_a_worker, 0.05)
        finally:
            executor.close()
    assert killed and first.rows > 0
    done = {c.index for c in checkpoints.list_splits(client, job.id) if c.done}
    assert done == {s.index for s in ranges[: len(ranges) // 2]}
    assert first.results[0].resumed  # the cluster took the in-process split's checkpoint
    ots_server_options.latency_ms = 0
    result = run_backfill(spec, job, ranges, InProcessExecutor(workers=2))
    assert result.rows == 3000
    assert sum(c.rows for c in checkpoints.list_splits(client, job.id)) == 3000
    assert _same(client, job)


def test_a_row_the_transform_rejects_stops_the_backfill_naming_it_and_a_rerun_continues(ots_instance) -> None:
    spec, job, client = rt.setup(ots_instance, 1500)
    bad_key, cells = rt.source_row(10**9, int(rt.time.time() * 1000))  # seq wider than 8 digits
    client.put_row(job.source.name, rt.ts.Row(bad_key, [c[:2] for c in cells]))
    ranges = splits.plan(client, job.id, job.source, workers=2)
    with pytest.raises(TransformError, match=r"seq=1000000000\).*fix or delete that row"):
        run_backfill(spec, job, ranges, InProcessExecutor(workers=1))
    assert any(c.rows for c in checkpoints.list_splits(client, job.id))  # other rows were copied
    client.delete_row(job.source.name, rt.ts.Row(bad_key))
    result = run_backfill(spec, job, ranges, InProcessExecutor(workers=2))
    assert result.rows == 1500
    assert _same(client, job)


def test_a_stopped_backfill_stops_its_running_splits_after_their_page(ots_instance, monkeypatch) -> None:
    spec, job, client = rt.setup(ots_instance, 3000)
    monkeypatch.setattr("tsmigrate.rewrite.copy.PAGE_ROWS", 100)
    monkeypatch.setattr("tsmigrate.rewrite.copy.FIRST_PAGE_ROWS", 100)
    ranges = splits.plan(client, job.id, job.source, workers=1)

    class Paused(Exception):
        pass

    def pause(progress) -> None:
        if progress.rows > 0:
            raise Paused

    executor = InProcessExecutor(workers=2)
    with pytest.raises(Paused):
        run_backfill(spec, job, ranges, executor, pause, poll_s=0.01)
    executor.close()  # waits for the running tasks: they stop at their next page, not their end
    states = checkpoints.list_splits(client, job.id)
    assert sum(s.rows for s in states) < 3000
    assert any(s.status == checkpoints.RUNNING for s in states)
    assert checkpoints.stop_requested(client, job.id)
    result = run_backfill(spec, job, ranges, InProcessExecutor(workers=2))  # resumed: the flag is cleared
    assert result.rows == 3000 and not checkpoints.stop_requested(client, job.id)
    assert _same(client, job)
