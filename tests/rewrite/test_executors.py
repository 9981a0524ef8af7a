"""The backfill on each executor: threads, processes (one killed midway), a Dask cluster."""

from __future__ import annotations

import functools
import os
import signal
import sys

import pytest
import rewrite_tables as rt

from tsmigrate.contract.transform import TransformError
from tsmigrate.rewrite import checkpoints, splits
from tsmigrate.rewrite.executors import DaskExecutor, InProcessExecutor, run_backfill


def _same(client, job) -> bool:
    def norm(rows):
        return [(k, [(n, bytes(v) if isinstance(v, bytearray) else v, t) for n, v, t in c]) for k, c in rows]

    return norm(rt.read_all(client, job.target)) == norm(rt.expected_target(client, job))


@pytest.mark.slow
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
    # Run again: every split is done, nothing is copied twice (nor read).
    with rt.rows_read(ots_instance, job.source.name) as read:
        again = run_backfill(spec, job, ranges, InProcessExecutor(workers=2))
    assert again.rows == 2000 and read.requests == 0
    assert sum(c.rows for c in checkpoints.list_splits(client, job.id)) == 2000


@pytest.mark.slow  # worker processes start twice (once more after the kill)
def test_a_killed_worker_process_loses_and_doubles_nothing(ots_instance, tmp_path) -> None:
    rows = 3000
    spec, job, client = rt.setup(ots_instance, rows)
    ranges = splits.plan(client, job.id, job.source, workers=2)
    # One worker process: killing it breaks the pool as killing one of several does (every
    # unfinished split is resubmitted to a new pool), at half the processes to start.
    executor = InProcessExecutor(workers=1, processes=True)
    # The first split task to keep a page's checkpoint waits there: its worker is killed then.
    marker = tmp_path / "stalled"
    task = functools.partial(rt.copy_split_stalling, str(marker))
    killed = []

    def kill_the_stalled_worker(progress) -> None:
        pid = rt.stalled_pid(marker)
        if not killed and pid is not None:
            assert pid in executor._pool._processes  # one of the pool's workers
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    try:
        with rt.rows_read(ots_instance, job.source.name) as read:
            result = run_backfill(spec, job, ranges, executor, progress=kill_the_stalled_worker,
                                  poll_s=0.05, task=task)
    finally:
        executor.close()
    assert killed
    assert result.rows == rows
    assert sum(c.rows for c in checkpoints.list_splits(client, job.id)) == rows
    assert any(r.resumed for r in result.results)  # the killed split went on from its checkpoint
    # Read again: only the pages past the killed split's checkpoint (at most two pages of 100
    # rows are read ahead), not the split from its start.
    assert rows <= read.rows <= rows + 2 * 100
    assert _same(client, job)


@pytest.mark.slow  # a Dask cluster of worker processes starts
def test_a_dask_cluster_survives_a_killed_worker_and_in_process_resumes_it(
    ots_instance, tmp_path
) -> None:
    distributed = pytest.importorskip("distributed")
    rows = 3000
    spec, job, client = rt.setup(ots_instance, rows)
    ranges = splits.plan(client, job.id, job.source, workers=2)
    # The first split in-process, then half the splits on the cluster (one worker process
    # killed midway), the rest in-process again: all see the same checkpoints.
    assert run_backfill(spec, job, ranges[:1], InProcessExecutor(workers=1)).rows > 0
    # The first split task on the cluster to keep a page's checkpoint waits there: its worker
    # process is killed then, mid-split.
    marker = tmp_path / "stalled"
    task = functools.partial(rt.copy_split_stalling, str(marker))
    killed = []
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        executor = DaskExecutor(cluster.scheduler_address)

        def kill_the_stalled_worker(progress) -> None:
            pid = rt.stalled_pid(marker)
            if not killed and pid is not None:
                (nanny,) = [n for n in cluster.workers.values() if n.process.pid == pid]
                # Not started again (seconds of start-up): the other worker takes its tasks.
                nanny.close_gracefully()
                killed.append(pid)
                os.kill(pid, signal.SIGKILL)

        try:
            assert executor.concurrency == 2
            first = run_backfill(spec, job, ranges[: len(ranges) // 2], executor,
                                 kill_the_stalled_worker, 0.05, task=task)
        finally:
            executor.close()
    assert killed and first.rows > 0
    done = {c.index for c in checkpoints.list_splits(client, job.id) if c.done}
    assert done == {s.index for s in ranges[: len(ranges) // 2]}
    assert first.results[0].resumed  # the cluster took the in-process split's checkpoint
    copied = sum(c.rows for c in checkpoints.list_splits(client, job.id))
    with rt.rows_read(ots_instance, job.source.name) as read:
        result = run_backfill(spec, job, ranges, InProcessExecutor(workers=2))
    assert result.rows == rows
    assert read.rows == rows - copied  # in-process went on from the cluster's checkpoints
    assert sum(c.rows for c in checkpoints.list_splits(client, job.id)) == rows
    assert _same(client, job)


@pytest.mark.slow
def test_a_row_the_transform_rejects_stops_the_backfill_naming_it_and_a_rerun_continues(ots_instance) -> None:
    spec, job, client = rt.setup(ots_instance, 1500)
    bad_key, cells = rt.source_row(10**9, int(rt.time.time() * 1000))  # seq wider than 8 digits
    client.put_row(job.source.name, rt.ts.Row(bad_key, [c[:2] for c in cells]))
    ranges = splits.plan(client, job.id, job.source, workers=2)
    executor = InProcessExecutor(workers=1)
    with pytest.raises(TransformError, match=r"seq=1000000000\).*fix or delete that row"):
        run_backfill(spec, job, ranges, executor)
    executor.close()  # a split its thread took up meanwhile stops (after its page)
    copied = sum(c.rows for c in checkpoints.list_splits(client, job.id))
    assert copied  # other rows were copied
    client.delete_row(job.source.name, rt.ts.Row(bad_key))
    with rt.rows_read(ots_instance, job.source.name) as read:
        result = run_backfill(spec, job, ranges, InProcessExecutor(workers=2))
    assert result.rows == 1500
    assert read.rows == 1500 - copied  # a rerun continues: what was copied is not read again
    assert _same(client, job)


@pytest.mark.slow
def test_a_stopped_backfill_stops_its_running_splits_after_their_page(ots_instance, monkeypatch) -> None:
    rows = 1500
    spec, job, client = rt.setup(ots_instance, rows)
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
    copied = sum(s.rows for s in states)
    assert copied < rows
    assert any(s.status == checkpoints.RUNNING for s in states)
    assert checkpoints.stop_requested(client, job.id)
    with rt.rows_read(ots_instance, job.source.name) as read:
        result = run_backfill(spec, job, ranges, InProcessExecutor(workers=2))  # resumed: the flag is cleared
    assert result.rows == rows and not checkpoints.stop_requested(client, job.id)
    assert read.rows == rows - copied  # from the checkpoints on
    assert _same(client, job)
