"""Verification: counts and order-independent digests per split, both directions, first keys."""

from __future__ import annotations

import pytest
import rewrite_tables as rt
import tablestore as ts

from tsmigrate.contract.transform import build
from tsmigrate.rewrite import splits
from tsmigrate.rewrite.copy import copy_split
from tsmigrate.rewrite.job import RewriteJob
from tsmigrate.rewrite.verify import DIFFERENT, EXTRA, MISSING, verify
from tsmigrate.schema import PrimaryKeyColumn, Table


def _copied(ots_instance, rows: int):
    spec, job, client = rt.setup(ots_instance, rows)
    ranges = splits.plan(client, job.id, job.source, workers=2)
    for split in ranges:
        copy_split(spec, job, split)
    return spec, job, client, ranges


@pytest.mark.slow
def test_a_complete_copy_verifies_in_every_split(ots_instance) -> None:
    spec, job, _, ranges = _copied(ots_instance, 900)
    report = verify(spec, job, ranges)
    assert report.ok, report.summary()
    assert report.source_rows == report.target_rows == 900
    assert len(report.per_split) == len(ranges) > 1 and all(v.ok for v in report.per_split)
    assert report.differences == () and "900 rows" in report.summary()


def test_missing_different_and_extra_target_rows_are_named(ots_instance) -> None:
    spec, job, client, ranges = _copied(ots_instance, 300)
    target = rt.read_all(client, job.target)
    (gone, gone_cells), (changed, cells), (kept, _) = target[5], target[17], target[40]
    client.delete_row(job.target.name, ts.Row(gone))
    client.update_row(job.target.name, ts.Row(changed, {"put": [("note", "tampered", cells[0][2])]}),
                      ts.Condition("IGNORE"))
    # A row whose source row does not exist, and one no source row could become.
    stray = [("key", "dev-999,00000001"), ("region", "eu")]
    client.put_row(job.target.name, ts.Row(stray, [("seq", 1)]))
    client.put_row(job.target.name, ts.Row([("key", "no-comma"), ("region", "eu")], [("x", 1)]))
    report = verify(spec, job, ranges)
    assert not report.ok
    kinds = {(d.kind, tuple(d.target_key)) for d in report.differences}
    assert (MISSING, tuple(gone)) in kinds
    assert (DIFFERENT, tuple(changed)) in kinds
    assert (EXTRA, tuple(stray)) in kinds
    assert (EXTRA, (("key", "no-comma"), ("region", "eu"))) in kinds
    assert all(tuple(d.target_key) != tuple(kept) for d in report.differences)
    assert len(report.differences) == 4
    missing = next(d for d in report.differences if d.kind == MISSING)
    assert missing.source_key == build(job).source_key_of(gone, gone_cells)
    assert "missing: source (pk=" in report.summary()


def test_two_source_rows_for_one_target_key_are_a_collision_naming_both(ots_instance) -> None:
    client = ots_instance.client()
    from tsmigrate.instance.state import State

    State(client).ensure_table()
    source = Table("pairs", [PrimaryKeyColumn("a", "STRING"), PrimaryKeyColumn("b", "INTEGER")])
    target = Table("by_a", [PrimaryKeyColumn("a", "STRING")])  # b leaves the key: (x,1) and (x,2) collide
    rt.create(client, source)
    rt.create(client, target)
    for a, b in [("w", 1), ("x", 1), ("x", 2), ("y", 1)]:
        client.put_row("pairs", ts.Row([("a", a), ("b", b)], [("v", f"{a}{b}")]))
    job = RewriteJob("collide", source, target)
    spec = rt.ConnectionSpec(ots_instance.endpoint, ots_instance.instance, local_defaults=True)
    ranges = splits.plan(client, job.id, source)
    for split in ranges:
        copy_split(spec, job, split)
    report = verify(spec, job, ranges)
    assert not report.ok
    assert [(c.source_key, c.other_source_key, c.target_key) for c in report.collisions] == [
        ([("a", "x"), ("b", 1)], [("a", "x"), ("b", 2)], [("a", "x")])
    ]
    expected = "collision: source rows (a='x', b=1) and (a='x', b=2) both map to target row (a='x')"
    assert expected in report.summary()


def test_splits_given_their_copy_totals_are_not_read_again_but_the_target_always_is(ots_instance) -> None:
    from tsmigrate.rewrite import checkpoints

    spec, job, client, ranges = _copied(ots_instance, 600)
    copied = {c.index: (c.rows, c.digest) for c in checkpoints.list_splits(client, job.id)}
    assert sorted(copied) == [s.index for s in ranges]
    report = verify(spec, job, ranges, copied=copied)
    assert report.ok and report.source_from_copy == len(ranges) and report.source_rows == 600
    # The source is not read for those splits: a source row deleted behind their back (which
    # capture would have seen and marked) goes unnoticed, while a re-read finds it.
    first = rt.read_all(client, job.source)[0][0]
    client.delete_row(job.source.name, ts.Row(first))
    assert verify(spec, job, ranges, copied=copied).ok
    assert not verify(spec, job, ranges).ok
    # A tampered target row is found whatever the source totals came from.
    key, cells = rt.read_all(client, job.target)[3]
    client.update_row(job.target.name, ts.Row(key, {"put": [("note", "tampered", cells[0][2])]}),
                      ts.Condition("IGNORE"))
    tampered = verify(spec, job, ranges, copied=copied)
    assert not tampered.ok
    assert (DIFFERENT, tuple(key)) in {(d.kind, tuple(d.target_key)) for d in tampered.differences}
