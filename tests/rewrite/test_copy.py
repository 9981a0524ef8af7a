"""Split tasks against the local server: every version and timestamp copied, resumable."""

from __future__ import annotations

import attrs
import pytest
import rewrite_tables as rt
from tablestore import INF_MAX, INF_MIN

from tsmigrate.contract.transform import TransformError
from tsmigrate.rewrite import checkpoints, splits
from tsmigrate.rewrite.copy import copy_split, sample_check
from tsmigrate.rewrite.verify import verify
from tsmigrate.schema import TableOptions


def _normalize(rows):
    return [
        ([(n, v) for n, v in key], [(n, bytes(v) if isinstance(v, bytearray) else v, t) for n, v, t in cells])
        for key, cells in rows
    ]


@pytest.mark.slow
def test_copying_every_split_gives_the_transformed_source_with_timestamps(ots_instance) -> None:
    spec, job, client = rt.setup(ots_instance, 0)
    now_ms = rt.fill(client, 1500)
    ranges = splits.compute(client, job.source, workers=2)
    assert len(ranges) > 1
    results = [copy_split(spec, job, s) for s in ranges]
    assert sum(r.rows for r in results) == 1500
    target = rt.read_all(client, job.target)
    assert _normalize(target) == _normalize(rt.expected_target(client, job))
    # The same rows, as written out by hand rather than by the transform under test.
    assert _normalize(target) == _normalize(rt.hand_built_target(1500, now_ms))
    # Two versions of temp, the older one with its original timestamp (a day back).
    assert [c for c in target[0][1] if c[0] == "temp"][1][2] < target[0][1][0][2]
    assert all(checkpoints.split_done(client, job.id, s.index) for s in ranges)


@pytest.mark.slow
def test_a_split_task_killed_after_a_page_resumes_without_losing_or_doubling(ots_instance, monkeypatch):
    spec, job, client = rt.setup(ots_instance, 1200)
    monkeypatch.setattr("tsmigrate.rewrite.copy.PAGE_ROWS", 250)
    whole = splits.Split(0, [("pk", INF_MIN), ("seq", INF_MIN)], [("pk", INF_MAX), ("seq", INF_MAX)])

    class Killed(Exception):
        pass

    def die_after_two_pages(state):
        if state.rows >= 500:
            raise Killed

    with pytest.raises(Killed):
        copy_split(spec, job, whole, on_page=die_after_two_pages)
    kept = checkpoints.load(client, job.id, 0)
    assert kept.status == checkpoints.RUNNING and kept.rows == 500 and kept.next_start
    with rt.rows_read(ots_instance, job.source.name) as read:
        result = copy_split(spec, job, whole)
    assert result.resumed and result.rows == 1200
    assert read.rows == 1200 - 500  # from the checkpoint's key on: the two pages are not read again
    assert _normalize(rt.read_all(client, job.target)) == _normalize(rt.expected_target(client, job))
    # Done splits are not copied again.
    with rt.rows_read(ots_instance, job.source.name) as read:
        assert copy_split(spec, job, whole).rows == 1200
    assert read.requests == 0


def test_the_sample_check_finds_a_row_the_transform_rejects_before_anything_is_written(ots_instance) -> None:
    spec, job, client = rt.setup(ots_instance, 300)
    assert sample_check(spec, job, 100) >= 100
    # A row whose seq does not fit the 8 padded digits of the new key.
    key, cells = rt.source_row(10**9, 0)
    client.put_row(job.source.name, rt.ts.Row(key, [c[:2] for c in cells]))
    rejected = r"source row \(pk='.*', seq=1000000000\).*does not fit 8 digits"
    with pytest.raises(TransformError, match=rejected):
        sample_check(spec, job, 10_000)
    assert rt.read_all(client, job.target) == []


@pytest.mark.slow
def test_a_jobs_ranges_are_kept_so_a_resumed_rewrite_copies_the_same_ones(ots_instance) -> None:
    _, job, client = rt.setup(ots_instance, 2000)
    first = splits.plan(client, job.id, job.source, workers=4)
    assert len(first) > 4  # the 100 MB unit is divided until every worker has several ranges
    rt.fill(client, 4000, first=2000)  # more data: fresh split points would differ
    assert splits.plan(client, job.id, job.source, workers=4) == first
    assert splits.compute(client, job.source, workers=4) != first
    # The ranges tile the key space: every source row falls in exactly one.
    keys = [key for key, _ in rt.read_all(client, job.source)]
    counts = [0] * len(first)
    for key in keys:
        counts[splits.split_of(first, key)] += 1
    assert sum(counts) == 4000 and all(counts)


def test_the_size_estimate_comes_from_the_split_points(ots_instance) -> None:
    _, job, client = rt.setup(ots_instance, 1000)
    estimate = splits.estimate(client, job.source.name)
    assert estimate.splits > 1
    unit = estimate.unit_bytes
    assert unit * (estimate.splits - 1) <= estimate.bytes <= unit * estimate.splits


def test_ranges_for_a_table_of_known_size_take_one_call(ots_instance, monkeypatch) -> None:
    _, job, client = rt.setup(ots_instance, 2000)
    estimate = splits.estimate(client, job.source.name)
    calls = []
    asked = splits.RawClient.compute_split_points_by_size
    monkeypatch.setattr(splits.RawClient, "compute_split_points_by_size",
                        lambda self, *args: calls.append(args) or asked(self, *args))
    blind = splits.compute(client, job.source, workers=2)
    blind_calls, calls[:] = len(calls), []
    hinted = splits.compute(client, job.source, workers=2, size_hint=estimate.bytes)
    assert blind_calls > 1 and len(calls) == 1
    want = 2 * splits.SPLITS_PER_WORKER
    assert want // 2 <= len(hinted) <= 2 * want and len(blind) >= want // 2
    # A hint far off still ends with enough ranges: the unit is divided as without one.
    assert len(splits.compute(client, job.source, workers=2, size_hint=10**12)) >= want // 2


def test_a_target_keeping_fewer_versions_gets_the_newest_ones_and_verifies(ots_instance) -> None:
    client = ots_instance.client()
    rt.State(client).ensure_table()
    options = TableOptions(max_versions=1, max_time_deviation=rt.YEAR_S)
    target = attrs.evolve(rt.TARGET, name="one_version", options=options)
    rt.create(client, rt.SOURCE)
    rt.create(client, target)
    rt.fill(client, 200)
    job = rt.RewriteJob("newest", rt.SOURCE, target)
    spec = rt.ConnectionSpec(ots_instance.endpoint, ots_instance.instance, local_defaults=True)
    ranges = splits.plan(client, job.id, job.source)
    assert sum(copy_split(spec, job, s).rows for s in ranges) == 200
    rows = rt.read_all(client, target)
    assert all(len([c for c in cells if c[0] == "temp"]) == 1 for _, cells in rows)
    assert verify(spec, job, ranges).ok
