"""Throttling and per-row batch failures injected by the local server: nothing lost or doubled."""

from __future__ import annotations

import pytest
import rewrite_tables as rt

from tsmigrate.instance.retry import RETRY_POLICY, TsmigrateRetryPolicy
from tsmigrate.local.faults import FaultPlan
from tsmigrate.rewrite import checkpoints, splits
from tsmigrate.rewrite.executors import InProcessExecutor, run_backfill
from tsmigrate.rewrite.verify import verify
from tsmigrate.rewrite.writer import BatchWriter, RateLimiter


@pytest.mark.slow
def test_the_backfill_survives_throttling_and_failed_rows(ots_instance, ots_server_options,
                                                         monkeypatch) -> None:
    # Retried as ever, only without the back-off a real service needs (seconds, here).
    monkeypatch.setattr(RETRY_POLICY, "base_delay_s", 0.001)
    monkeypatch.setattr(RETRY_POLICY, "throttled_delay_s", 0.001)
    spec, job, client = rt.setup(ots_instance, 1500)
    ranges = splits.plan(client, job.id, job.source, workers=2)
    ots_server_options.faults = FaultPlan.parse(
        "server_busy@BatchWriteRow|GetRange=0.05,batch_row@BatchWriteRow=0.05,seed=11"
    )
    result = run_backfill(spec, job, ranges, InProcessExecutor(workers=2))
    ots_server_options.faults = None
    assert result.rows == 1500
    assert sum(c.rows for c in checkpoints.list_splits(client, job.id)) == 1500
    report = verify(spec, job, ranges)
    assert report.ok, report.summary()


def test_only_the_failed_rows_are_sent_again(ots_instance, ots_server_options) -> None:
    _, job, client = rt.setup(ots_instance, 0)
    ots_server_options.faults = FaultPlan.parse("batch_row@BatchWriteRow=0.2,seed=5")
    quick = TsmigrateRetryPolicy(base_delay_s=0.001, throttled_delay_s=0.001)
    writer = BatchWriter(client, job.target.name, policy=quick)
    rows = [rt.encoded_target_row(i) for i in range(400)]
    writer.put(rows)
    ots_server_options.faults = None
    assert writer.stats.rows == 400
    assert 0 < writer.stats.retried_rows < 400  # retried rows only, never whole batches
    assert writer.stats.requests > 2
    assert len(rt.read_all(client, job.target)) == 400


def test_the_rate_limiter_paces_rows_per_second(monkeypatch) -> None:
    clock = [100.0]
    slept = []
    monkeypatch.setattr("tsmigrate.rewrite.writer.time.monotonic", lambda: clock[0])

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr("tsmigrate.rewrite.writer.time.sleep", sleep)
    limiter = RateLimiter(1000)
    for _ in range(10):
        limiter.acquire(200)  # 2,000 rows at 1,000 rows/s: the last batch may start at 1.8 s
    assert abs(sum(slept) - 1.8) < 1e-9
    unlimited = RateLimiter(None)
    unlimited.acquire(10**9)
    assert abs(sum(slept) - 1.8) < 1e-9
