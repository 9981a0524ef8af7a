"""Progress a person can trust: without a terminal (a deploy job's pipe) a long rewrite prints
a plain line every TSMIGRATE_PROGRESS_EVERY_S seconds; the terminal bar shows a real ETA; and
`rewrite status` estimates from every key range and shows no rate or ETA for a rewrite nobody
runs or that has ended, and no "error: None"."""

from __future__ import annotations

import json
import os
import re
import socket
from io import StringIO
from pathlib import Path

import clirun
import pytest
import rewrite_tables as rt
from rich.console import Console

from tsmigrate.instance import adapter
from tsmigrate.instance.state import STATE_TABLE
from tsmigrate.rewrite import machine
from tsmigrate.rewrite.executors import BackfillProgress
from tsmigrate.rewrite.progress import ApplyProgress

TARGET = "readings_by_seq"
LINE = re.compile(r"rewrite backfill: ([\d,]+) of about ([\d,]+) rows, ([\d,]+) rows/s, ETA (\d+:\d\d:\d\d)")


_run = clirun.run_on

def _project(root: Path, ots, rows: int) -> Path:
    """The old model applied with ``rows`` readings, the model file changed to the new one."""
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(rt.MODELS_V1)
    assert _run(root, ots, "apply", "--yes").returncode == 0
    rt.fill(ots.client(), rows)
    (root / "app_models.py").write_text(rt.MODELS_V2)
    return root


def _status(project: Path, ots) -> tuple[dict, str]:
    data = json.loads(_run(project, ots, "rewrite", "status", TARGET, "--format", "json").stdout)
    return data, _run(project, ots, "rewrite", "status", TARGET).stdout


def _set_state(client, rewrite: machine.Rewrite, phase: str, **changes) -> None:
    """Write the rewrite's row as another process would have left it (no transition checks)."""
    doc = {**rewrite.doc, **changes}
    adapter.put_row(client, STATE_TABLE, [("kind", machine.KIND), ("id", rewrite.target)],
                    {"source": rewrite.source, "phase": phase, "version": rewrite.version + 1,
                     "doc": json.dumps(doc)})


@pytest.mark.slow
def test_apply_in_a_pipe_prints_progress_lines(tmp_path, ots_instance):
    project = _project(tmp_path, ots_instance, 600)
    applied = _run(project, ots_instance, "apply", "--yes", "--workers", "1", "--max-rows-per-s", "300",
                   TSMIGRATE_PROGRESS_EVERY_S="0.2")
    assert applied.returncode == 0, applied.stderr
    lines = [LINE.search(line) for line in applied.stderr.splitlines()]
    found = [m for m in lines if m]
    assert len(found) >= 3, applied.stderr
    assert any(int(m[3].replace(",", "")) > 0 for m in found)
    assert any(int(m[1].replace(",", "")) > 0 for m in found)
    assert "\x1b[" not in applied.stderr  # plain lines, no bar


# Any backfill line: the count ("N of about T rows", "N of more than T rows", "N rows, more to
# come ...", "N rows"), the ETA and the splits.
BACKFILL = re.compile(r"rewrite backfill: ([\d,]+)(?: of (about|more than) ([\d,]+))? rows.*? ETA (\S+), "
                      r".*\(splits (\d+) done, \d+ running, (\d+) in all\)")


def _number(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.mark.slow
def test_a_low_size_estimate_never_reads_as_done_in_a_pipe(tmp_path, ots_instance, monkeypatch):
    """Issue #38 (4): the split points' estimate counts the stored newest versions, the copy its
    own bytes of every version (1.4 times as many here, more when the estimate is low), and a
    deploy log read "20,500 of about 20,500" with "ETA 0:00:00" and a quarter of the copy left.
    With the estimate a third of what it was, no line with a split left may read as done (a
    total not above the rows copied, or ETA 0:00:00), and the total grows with the ranges done
    to the rows there are."""
    import attrs

    from tsmigrate.rewrite import splits

    compute = splits.compute

    def low(*args, **kwargs):
        return [attrs.evolve(s, estimated_bytes=s.estimated_bytes // 3) for s in compute(*args, **kwargs)]

    monkeypatch.setattr(splits, "compute", low)
    project = _project(tmp_path, ots_instance, 1500)
    applied = _run(project, ots_instance, "apply", "--yes", "--workers", "2", "--max-rows-per-s", "600",
                   TSMIGRATE_PROGRESS_EVERY_S="0.1")
    assert applied.returncode == 0, applied.stderr
    found = [m for m in map(BACKFILL.search, applied.stderr.splitlines()) if m]
    assert any(int(m[5]) < int(m[6]) for m in found), applied.stderr  # lines with ranges left
    totals = []
    for m in found:
        rows, kind, total, eta, done, in_all = m[1], m[2], m[3], m[4], int(m[5]), int(m[6])
        if done == in_all:
            continue
        assert eta != "0:00:00", m[0]
        if kind == "about":
            assert _number(total) > _number(rows), m[0]
            totals.append((done, _number(total)))
    assert any(done and total >= 1500 * 0.8 for done, total in totals), applied.stderr


@pytest.mark.slow
def test_status_estimates_from_all_ranges_and_shows_no_rate_when_nobody_runs(tmp_path, ots_instance):
    project = _project(tmp_path, ots_instance, 120)
    assert _run(project, ots_instance, "apply", "--yes", "--workers", "2").returncode == 0
    data, text = _status(project, ots_instance)
    assert data["rows_copied"] == 120 and data["rows_estimated"] == 120, data  # every range done
    assert "rows copied: 120 of about 120" in text and "error:" not in text

    # The size estimate prepare kept is not the rows' bytes: the old ratio was off.
    client = ots_instance.client()
    rewrite = machine.load(client, TARGET)
    assert rewrite.get("estimate")["bytes"] > data["bytes_copied"] * 1.5

    # Interrupted in the backfill (kill -9): no runner.
    _set_state(client, rewrite, machine.BACKFILL, backfill=None, runner=None,
               backfill_started_ms=machine.now_ms() - 1000)
    data, text = _status(project, ots_instance)
    assert data["rows_per_s"] is None and data["eta_s"] is None, data
    assert "rows/s" not in text and "ETA" not in text and "not running" in text, text

    # The same state with a live runner (this process) does show a rate and an ETA.
    rewrite = machine.load(client, TARGET)
    owner = f"test@{socket.gethostname()}:{os.getpid()}"
    _set_state(client, rewrite, machine.BACKFILL,
               runner={"owner": owner, "expires_ms": machine.now_ms() + 60_000})
    data, text = _status(project, ots_instance)
    assert data["rows_per_s"] > 0 and "rows/s" in text and "ETA" in text, text
    assert data["runner"] == owner


@pytest.mark.slow
def test_status_after_resume_and_abort_says_no_error_and_no_rows(tmp_path, ots_instance):
    project = _project(tmp_path, ots_instance, 50)
    assert _run(project, ots_instance, "apply", "--yes").returncode == 0
    assert _run(project, ots_instance, "rewrite", "pause", TARGET).returncode == 0
    assert _run(project, ots_instance, "rewrite", "resume", TARGET).returncode == 0
    data, text = _status(project, ots_instance)
    assert data["error"] is None and "error" not in text, text  # resume saved error=None

    assert _run(project, ots_instance, "rewrite", "abort", TARGET).returncode == 0
    data, text = _status(project, ots_instance)
    assert data["phase"] == machine.ABORTED
    assert data["rows_per_s"] is None and data["eta_s"] is None
    assert "rows copied" not in text and "rows/s" not in text and "error" not in text, text


def _progress(rows: int, eta_s: float | None) -> BackfillProgress:
    return BackfillProgress(rows=rows, bytes=rows * 100, rows_per_s=100.0, eta_s=eta_s,
                            estimated_bytes=100_000, splits=(), total_splits=4,
                            estimated_rows=None if eta_s is None else round(rows + eta_s * 100))


def test_the_terminal_bar_shows_the_eta():
    out = StringIO()
    report = ApplyProgress(Console(force_terminal=True, file=out, width=200))
    assert getattr(report, "pipe", None) is None  # a terminal: the bar
    for rows, eta in ((100, None), (200, 42.0), (300, 41.0)):
        # The estimated total changes with each report (it did reset rich's ETA samples).
        report("backfill", {"progress": _progress(rows, eta)})
        assert report.bar is not None
        report.bar.refresh()
    report.close()
    assert "0:00:41" in out.getvalue(), out.getvalue()


def test_without_a_terminal_there_is_no_bar_but_lines(monkeypatch):
    monkeypatch.setenv("TSMIGRATE_PROGRESS_EVERY_S", "0.05")
    out = StringIO()
    report = ApplyProgress(Console(file=out, width=200))
    report("backfill", {"progress": _progress(200, 42.0)})
    assert report.bar is None and report.pipe is not None
    line = report.pipe.line()
    report.close()
    assert LINE.search(line) and "ETA 0:00:42" in line and "200 of about 4,400 rows" in line, line


def test_the_estimate_counts_every_range():
    """A finished range counts its rows; the others their size estimate at the finished ranges'
    rows per estimated byte (the old estimate scaled the rows copied by bytes, which the size
    estimate does not measure alike: "26,946 of about 27,764" for 60,000 rows)."""
    from tsmigrate.rewrite.checkpoints import DONE, RUNNING, SplitCheckpoint
    from tsmigrate.rewrite.progress import _estimate_rows
    from tsmigrate.rewrite.splits import Split

    kept = [Split(i, [("k", i)], [("k", i + 1)], 1000) for i in range(4)]
    states = [SplitCheckpoint(0, DONE, rows=100, bytes=5000),
              SplitCheckpoint(1, RUNNING, rows=30, bytes=1500)]
    assert _estimate_rows(kept, states, 6500) == 400
    assert _estimate_rows(kept, [], 0) is None  # nothing copied yet: unknown
    # Before any range finished: the rows per byte copied.
    assert _estimate_rows(kept, [SplitCheckpoint(0, RUNNING, rows=10, bytes=100)], 100) == 400


def test_a_range_past_its_estimate_makes_the_total_a_floor_and_the_eta_unknown():
    """The copy's bytes per estimated byte come from the finished ranges; a range not done that
    copied its whole (scaled) estimate leaves the rest unknown: "of more than", "ETA unknown"."""
    from tsmigrate.instance.pipeprogress import PipeProgress
    from tsmigrate.rewrite.checkpoints import DONE, RUNNING, SplitCheckpoint
    from tsmigrate.rewrite.executors import expected_bytes
    from tsmigrate.rewrite.splits import Split

    kept = [Split(i, [("k", i)], [("k", i + 1)], 1000) for i in range(4)]
    # Range 0 done at 1.5 copied bytes per estimated byte: the others count 1,500 each.
    done = SplitCheckpoint(0, DONE, rows=100, bytes=1500)
    assert expected_bytes(kept, [done, SplitCheckpoint(1, RUNNING, rows=10, bytes=150)]) == (6000, False)
    # Range 1 copied more than 1,500 and is not done: a floor.
    assert expected_bytes(kept, [done, SplitCheckpoint(1, RUNNING, rows=200, bytes=3000)]) == (7500, True)

    pipe = PipeProgress(Console(file=StringIO()), "rewrite")
    pipe.update("backfill", 300, 500, 100.0, None, floor=True)
    assert "300 of more than 500 rows, 100 rows/s, ETA unknown," in pipe.line(), pipe.line()
    pipe.update("backfill", 300, 300, 100.0, None, floor=True)
    assert "300 rows, more to come" in pipe.line() and "of about" not in pipe.line(), pipe.line()
    pipe.stop()


def _wait_for_lines(out: StringIO, pattern: str, count: int, deadline_s: float = 5.0) -> list[str]:
    """The lines matching ``pattern`` once there are ``count`` of them (or the deadline passes)."""
    import time

    end = time.monotonic() + deadline_s
    while True:
        found = [line for line in out.getvalue().splitlines() if re.search(pattern, line)]
        if len(found) >= count or time.monotonic() > end:
            return found
        time.sleep(0.02)


def test_a_step_that_reports_rarely_is_still_heard(monkeypatch):
    """The thread prints the latest state every interval, whether or not new reports came."""
    from tsmigrate.instance.pipeprogress import PipeProgress

    monkeypatch.setenv("TSMIGRATE_PROGRESS_EVERY_S", "0.05")
    out = StringIO()
    pipe = PipeProgress(Console(file=out, width=200), "restore x.jsonl")
    pipe.count("load", 500, 2000)  # one report, then silence
    found = _wait_for_lines(out, r"restore x.jsonl load: 500 of about 2,000 rows, [\d,]+ rows/s, ETA \d", 3)
    pipe.stop()
    assert len(found) >= 3, out.getvalue()


def test_a_reindex_build_in_a_pipe_prints_rows_rate_and_eta(monkeypatch):
    from tsmigrate.reindex.progress import ReindexProgress

    monkeypatch.setenv("TSMIGRATE_PROGRESS_EVERY_S", "0.05")
    out = StringIO()
    report = ReindexProgress(Console(file=out, width=200))
    where = {"table": "orders", "index": "by_user"}
    report("stage", {**where, "stage": "build"})
    report("build", {**where, "phase": "full", "indexed": 300, "total": 1200, "elapsed_s": 3.0})
    found = _wait_for_lines(out, r"reindex orders.by_user build: 300 of about 1,200 rows, 100 rows/s, "
                                 r"ETA 0:00:09", 2)
    report.close()
    assert len(found) >= 2 and "\x1b[" not in out.getvalue(), out.getvalue()
