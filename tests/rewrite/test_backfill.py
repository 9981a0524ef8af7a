"""Data migrations (op.backfill) on the rewrite engine: parallel, resumable after kill -9,
throttled, nothing lost, doubled or resurrected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import backfill_rows as br
import pytest
import rewrite_tables as rt
import tablestore as ts
from hypothesis import given
from hypothesis import strategies as st

from tsmigrate.instance.state import State
from tsmigrate.rewrite import backfill, checkpoints
from tsmigrate.rewrite.backfill import BackfillError, BackfillJob, RunOptions, UpdateWriter
from tsmigrate.rewrite.job import ConnectionSpec
from tsmigrate.rewrite.writer import RateLimiter
from tsmigrate.wire.plainbuffer import Cell, Row

TESTS = Path(__file__).resolve().parents[1]


def _spec(ots) -> ConnectionSpec:
    return ConnectionSpec(ots.endpoint, ots.instance, local_defaults=True)


def _setup(ots, rows: int, **fill):
    client = ots.client()
    State(client).ensure_table()
    br.create_and_fill(client, rows, **fill)
    return client


def rt_rows_read(ots):
    """Rows of the events table the server gives GetRange requests meanwhile."""
    return rt.rows_read(ots, br.TABLE.name)


def _expected_region(i: int) -> str:
    return br.REGIONS[i % 3]


# --- what fn's answer becomes (pure) ---------------------------------------------------------------

values = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=5), st.booleans(),
                   st.floats(allow_nan=False), st.binary(max_size=4))
columns = st.sampled_from(["a", "b", "c", "d"])


@given(st.dictionaries(columns, values), st.dictionaries(columns, st.one_of(st.none(), values)))
def test_an_update_holds_exactly_the_columns_fn_changes(stored, answer) -> None:
    job = BackfillJob("j", br.TABLE, "m:f")
    row = Row([("id", "x"), ("n", 1)], [Cell(k, v, None, 1) for k, v in stored.items()], False)
    update = backfill.update_of(lambda r: answer, job, row)
    put = dict(update.put) if update else {}
    delete = set(update.delete) if update else set()
    for name, value in answer.items():
        unchanged = name in stored and stored[name] == value and type(stored[name]) is type(value)
        if value is None:
            assert (name in delete) == (name in stored)
        elif unchanged:
            assert name not in put
        else:
            assert put[name] == value
    assert set(put) | delete <= set(answer)
    if not put and not delete:
        assert update is None


def test_fn_may_not_change_a_key_column_or_return_a_non_dict() -> None:
    job = BackfillJob("j", br.TABLE, "m:f")
    row = Row([("id", "x"), ("n", 1)], [], False)
    with pytest.raises(BackfillError, match=r"row \(id='x', n=1\) of table 'events'.*primary key"):
        backfill.update_of(lambda r: {"n": 2}, job, row)
    with pytest.raises(BackfillError, match="must return a dict"):
        backfill.update_of(lambda r: ["region"], job, row)
    with pytest.raises(BackfillError, match="holds str, int"):
        backfill.update_of(lambda r: {"when": object()}, job, row)


# --- on the local server -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_backfill_changes_every_row_in_parallel_and_a_rerun_changes_nothing_twice(ots_instance) -> None:
    client = _setup(ots_instance, 2500)
    job = backfill.start_or_resume(client, "rev1/000", br.TABLE, "backfill_fns:fill_region", None)
    seen = []
    result = backfill.run(client, _spec(ots_instance), job, RunOptions(workers=3), seen.append)
    assert result.rows == 2500 and result.changed == 2500 and len(result.results) > 1
    rows = br.read_all(client)
    assert len(rows) == 2500
    assert all(cells == {"payload": cells["payload"], "region": _expected_region(n)}
               for (_, n), cells in rows.items())
    assert seen and seen[-1].rows == 2500
    with rt_rows_read(ots_instance) as read:
        again = backfill.run(client, _spec(ots_instance), job, RunOptions(workers=2))
    assert again.rows == 2500 and again.changed == 2500  # the done splits, not run again
    assert read.requests == 0
    # Forgetting the job clears its checkpoints: a new run is a new job.
    backfill.forget(client, "rev1/000")
    assert checkpoints.list_splits(client, job.id) == []
    fresh = backfill.start_or_resume(client, "rev1/000", br.TABLE, "backfill_fns:fill_region", None)
    assert fresh.id != job.id
    assert backfill.run(client, _spec(ots_instance), fresh, RunOptions(workers=2)).changed == 0


def test_fn_sees_only_the_columns_it_reads_and_rows_without_them(ots_instance) -> None:
    client = _setup(ots_instance, 300)
    client.put_row(br.TABLE.name, ts.Row(br.key(9999), [("other", 1)]))  # no payload at all
    job = backfill.start_or_resume(client, "k", br.TABLE, "backfill_fns:only_payload_seen", ["payload"])
    result = backfill.run(client, _spec(ots_instance), job, RunOptions(workers=2))
    assert result.rows == 301 and result.changed == 301
    rows = br.read_all(client)
    assert rows[tuple(v for _, v in br.key(9999))]["seen"] == 2  # the key only
    assert rows[tuple(v for _, v in br.key(5))]["seen"] == 3


def test_a_row_deleted_meanwhile_is_not_brought_back(ots_instance) -> None:
    client = _setup(ots_instance, 3)
    writer = UpdateWriter(client, br.TABLE.name, RateLimiter(None))
    client.delete_row(br.TABLE.name, ts.Row(br.key(1)), ts.Condition("IGNORE"))
    updates = [backfill.Update(br.key(i), [("region", "eu")], []) for i in range(3)]
    assert writer.write(updates) == 1
    rows = br.read_all(client)
    assert tuple(v for _, v in br.key(1)) not in rows and len(rows) == 2


def test_a_row_fn_refuses_stops_the_backfill_naming_it_and_a_rerun_continues(ots_instance) -> None:
    client = _setup(ots_instance, 600, payload=lambda i: "bad" if i == 450 else f"eu:{i}")
    job = backfill.start_or_resume(client, "k", br.TABLE, "backfill_fns:refuse_bad", None)
    with pytest.raises(BackfillError, match=r"refuse_bad raised ValueError\('unparseable payload'\) on "
                                            r"row \(id='dev-062', n=450\) of table 'events'"):
        backfill.run(client, _spec(ots_instance), job, RunOptions(workers=1))
    copied = sum(c.rows for c in checkpoints.list_splits(client, job.id))
    client.put_row(br.TABLE.name, ts.Row(br.key(450), [("payload", "us:450")]))
    resumed = backfill.start_or_resume(client, "k", br.TABLE, "backfill_fns:refuse_bad", None)
    assert resumed.id == job.id  # the unfinished job, continued from its checkpoints
    with rt_rows_read(ots_instance) as read:
        result = backfill.run(client, _spec(ots_instance), resumed, RunOptions(workers=1))
    assert result.rows == 600
    assert copied > 0 and read.rows == 600 - copied  # what was done is not read again
    assert br.read_all(client)[("dev-062", 450)]["region"] == "us"


KILLED_RUN = textwrap.dedent("""
    import sys
    from tsmigrate.rewrite import backfill
    from tsmigrate.rewrite.job import ConnectionSpec
    endpoint, instance = sys.argv[1:3]
    spec = ConnectionSpec(endpoint, instance, local_defaults=True)
    client = spec.client()
    job = backfill.start_or_resume(client, "rev-kill/000", backfill.BackfillJob.from_json(sys.argv[3]).table,
                                   "backfill_fns:fill_region", None)
    print(job.id, flush=True)
    backfill.PAGE_ROWS = backfill.FIRST_PAGE_ROWS = 100  # a checkpoint every 100 rows
    backfill.run(client, spec, job, backfill.RunOptions(workers=2, max_rows_per_s=20000))
""")


@pytest.mark.slow  # a process of its own, to kill
def test_a_backfill_killed_with_sigkill_midway_resumes_losing_and_doubling_nothing(
    ots_instance, tmp_path
) -> None:
    rows = 3000
    client = _setup(ots_instance, rows)
    table_json = BackfillJob("x", br.TABLE, "m:f").to_json()
    last_in_key_order = max(i for i in range(rows) if i % 97 == 96)  # id dev-096 sorts last
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "BACKFILL_FNS_HANG_AT": str(last_in_key_order)}
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, ots_instance.endpoint, ots_instance.instance, table_json],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    job_id = process.stdout.readline().strip()
    assert job_id.startswith("bf-"), process.stderr.read()
    # Killed once a quarter of the rows are checkpointed and a split is part-way: the run
    # always gets there, since the split holding the last row stops on it, a page past its
    # first checkpoint, for good.
    deadline = time.monotonic() + 120
    while True:
        states = checkpoints.list_splits(client, job_id)
        if (sum(c.rows for c in states) >= rows // 4
                and any(c.status == checkpoints.RUNNING for c in states)):
            break
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, states
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)  # a real kill -9, mid-page
    process.wait()
    at_kill = checkpoints.list_splits(client, job_id)
    assert 0 < sum(c.rows for c in at_kill) < rows and not all(c.done for c in at_kill)
    # Rows of the page being written when it died may be written already: harmless, fn is
    # a function of the payload. The resumed job continues from the checkpoints.
    job = backfill.start_or_resume(client, "rev-kill/000", br.TABLE, "backfill_fns:fill_region", None)
    assert job.id == job_id
    with rt_rows_read(ots_instance) as read:
        result = backfill.run(client, _spec(ots_instance), job, RunOptions(workers=2))
    assert result.rows == rows  # every row read once, counted once
    assert read.rows == rows - sum(c.rows for c in at_kill)  # the rows checkpointed: not again
    assert sum(c.rows for c in checkpoints.list_splits(client, job_id)) == rows
    stored = br.read_all(client)
    assert len(stored) == rows
    wrong = [(k, c) for k, c in stored.items()
             if c != {"payload": c["payload"], "region": _expected_region(k[1])}]
    assert wrong == []
