"""The rewrite as a user runs it: `tsmigrate plan`, `apply`, `rewrite status|pause|resume|follow|
finish|abort` against a local server (in this process, as `clirun` runs them); kill -9 of apply
processes at random moments; plan showing the rewrites apply starts or continues without a plan
step of their own."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import clirun
import pytest
import rewrite_tables as rt
import tablestore as ts

from tsmigrate.rewrite import checkpoints, driver, machine
from tsmigrate.rewrite.job import RewriteJob

# Finish from ready, without a switch (these tests drive the rewrite, not services).
FORCE = ("--force", "--accept-target-writes")


def _project(root: Path, models: str) -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(models)
    return root


_env = clirun.instance_env
_run = clirun.run_on

def _source(tmp_path: Path, ots, rows: int) -> tuple[Path, int]:
    """The project with the old model applied and ``rows`` readings written, its model file
    then changed to the new one; and the base time of the readings' timestamps."""
    project = _project(tmp_path, rt.MODELS_V1)
    assert _run(project, ots, "apply", "--yes").returncode == 0
    now_ms = rt.fill(ots.client(), rows)
    (project / "app_models.py").write_text(rt.MODELS_V2)
    return project, now_ms


def _drain(ots) -> None:
    """Capture applies what the stream still holds (what `follow --for 1` had no time for)."""
    client = ots.client()
    with machine.Runner(client, "readings_by_seq") as runner:
        driver.catch_up(runner, driver.make_capture(client, runner.rewrite), driver.quiet)


def _target_equals_source(ots) -> None:
    client = ots.client()
    job = driver.job_of(machine.load(client, "readings_by_seq"))  # the IR the rewrite was given
    got = sorted(([tuple(k) for k in key], cells) for key, cells in rt.read_all(client, job.target))
    want = sorted(([tuple(k) for k in key], cells) for key, cells in rt.expected_target(client, job))
    assert got == want


@pytest.mark.slow
def test_plan_shows_the_cost_and_the_commands_drive_the_rewrite(tmp_path, ots_instance):
    project, _ = _source(tmp_path, ots_instance, 500)
    as_json = json.loads(_run(project, ots_instance, "plan", "--format", "json").stdout)
    (step,) = [s for s in as_json["steps"] if s["kind"] == "rewrite_table"]
    assert step["args"]["cost"]["bytes"] > 0 and step["args"]["cost"]["splits"] >= 1
    assert step["args"]["cost"]["rate_mb_s"] > 0 and "MB/s" in step["reason"]
    for fmt in ("text", "markdown"):
        shown = _run(project, ots_instance, "plan", "--format", fmt).stdout
        assert "rewrite readings into readings_by_seq" in shown and "MB/s" in shown and "split" in shown

    applied = _run(project, ots_instance, "apply", "--yes", "--workers", "2")
    assert applied.returncode == 0, applied.stderr
    assert "rewrite readings -> readings_by_seq: ready" in applied.stdout
    assert "tsmigrate rewrite follow readings_by_seq" in applied.stdout
    _target_equals_source(ots_instance)

    status = json.loads(_run(project, ots_instance, "rewrite", "status", "readings_by_seq",
                             "--format", "json").stdout)
    assert status["phase"] == "ready" and status["rows_copied"] == 500
    assert status["verification"]["ok"] and status["collisions"] == []
    assert status["eta_s"] == 0 and status["rows_per_s"] > 0
    # apply returned at ready: nothing captures until follow, so no lag is shown, only the
    # capture's last progress.
    (forward,) = status["captures"]
    assert (forward["state"], forward["why"]) == ("stopped", "no process runs it")
    assert forward["lag_s"] is None and status["capture_lag_s"] is None
    assert forward["last_progress_ms"] and forward["restart"] == "tsmigrate rewrite follow readings_by_seq"
    assert "ready" in _run(project, ots_instance, "rewrite", "status").stdout

    paused = _run(project, ots_instance, "rewrite", "pause", "readings_by_seq")
    assert paused.returncode == 0 and "paused in ready" in paused.stdout
    resumed = _run(project, ots_instance, "rewrite", "resume", "readings_by_seq")
    assert resumed.returncode == 0 and "ready" in resumed.stdout

    rt.fill(ots_instance.client(), 520)  # services keep writing the old table: 20 new rows
    followed = _run(project, ots_instance, "rewrite", "follow", "readings_by_seq", "--for", "1")
    assert followed.returncode == 0, followed.stderr
    stats = machine.load(ots_instance.client(), "readings_by_seq").get("capture_stats")
    assert stats["applied"] > 0  # follow applied records; a loaded machine may leave some for later
    _drain(ots_instance)
    _target_equals_source(ots_instance)

    finished = _run(project, ots_instance, "rewrite", "finish", "readings_by_seq",
                *FORCE, "--allow-destructive")
    assert finished.returncode == 0, finished.stderr
    assert "done" in finished.stdout and "readings dropped" in finished.stdout
    assert "readings" not in ots_instance.client().list_table()
    again = _run(project, ots_instance, "rewrite", "abort", "readings_by_seq")
    assert again.returncode == 1 and "already done" in again.stderr
    unknown = _run(project, ots_instance, "rewrite", "status", "nosuch")
    assert unknown.returncode == 1 and "no rewrite into or out of nosuch" in unknown.stderr


@pytest.mark.slow
def test_finish_keeps_the_old_table_then_finish_allow_destructive_drops_it(tmp_path, ots_instance):
    """The first finish says "drop it with finish --allow-destructive": that works once done."""
    project, _ = _source(tmp_path, ots_instance, 50)
    assert _run(project, ots_instance, "apply", "--yes").returncode == 0
    assert _run(project, ots_instance, "rewrite", "pause", "readings_by_seq").returncode == 0
    paused = _run(project, ots_instance, "rewrite", "finish", "readings_by_seq",
                *FORCE)
    assert paused.returncode == 1 and ("is paused; finish needs phase ready (next: tsmigrate "
                                       "rewrite resume readings_by_seq)") in paused.stderr
    follow = _run(project, ots_instance, "rewrite", "follow", "readings_by_seq", "--for", "1")
    assert follow.returncode == 1 and ("is paused; follow runs in phase ready or switched (next: tsmigrate "
                                       "rewrite resume readings_by_seq)") in follow.stderr
    assert _run(project, ots_instance, "rewrite", "resume", "readings_by_seq").returncode == 0
    kept = _run(project, ots_instance, "rewrite", "finish", "readings_by_seq",
                *FORCE)
    assert kept.returncode == 0 and "drop it with finish --allow-destructive" in kept.stdout
    assert "readings" in ots_instance.client().list_table()
    again = _run(project, ots_instance, "rewrite", "finish", "readings_by_seq",
                *FORCE)
    assert again.returncode == 0, again.stderr  # a retried deploy step
    assert "already done; readings kept (finish --allow-destructive drops it)" in again.stdout
    dropped = _run(project, ots_instance, "rewrite", "finish", "readings_by_seq",
                *FORCE,
                   "--allow-destructive")
    assert dropped.returncode == 0, dropped.stderr
    assert "readings dropped" in dropped.stdout
    assert "readings" not in ots_instance.client().list_table()
    assert len(rt.read_all(ots_instance.client(), rt.TARGET)) == 50


def _planned_drops(project: Path, ots, *args: str) -> list[str]:
    result = _run(project, ots, "plan", "--prune", "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    return [s["args"]["table"] for s in json.loads(result.stdout)["steps"] if s["kind"] == "drop_table"]


@pytest.mark.slow
def test_prune_drops_a_replaced_table_only_after_its_rewrite_finished(tmp_path, ots_instance):
    """plan --prune next to replaces=: no `drop table readings` while services may still use it
    (before apply, while the rewrite is ready), then planned and applied once finish ran."""
    project, _ = _source(tmp_path, ots_instance, 50)
    assert _planned_drops(project, ots_instance) == []
    note = json.loads(_run(project, ots_instance, "plan", "--prune", "--format", "json").stdout)
    assert "kept, even with --prune" in note["undeclared_tables"][0]["note"]
    applied = _run(project, ots_instance, "apply", "--yes", "--prune", "--allow-destructive")
    assert applied.returncode == 0, applied.stderr
    assert "readings_by_seq: ready" in applied.stdout
    assert _planned_drops(project, ots_instance) == []
    text = _run(project, ots_instance, "plan", "--prune").stdout
    assert "drop table readings" not in text and "No changes" in text

    kept = _run(project, ots_instance, "rewrite", "finish", "readings_by_seq",
                *FORCE)
    assert kept.returncode == 0 and "readings" in ots_instance.client().list_table()
    assert _planned_drops(project, ots_instance) == ["readings"]
    text = " ".join(_run(project, ots_instance, "plan", "--prune").stdout.split())
    assert "drop table readings" in text
    # Issue #38 (9): the note beside the drop step does not advise --prune again.
    assert ("table readings is not declared: replaced by readings_by_seq, rewrite finished; "
            "dropped by this plan (--prune)") in text and "with --prune" not in text, text
    pruned = _run(project, ots_instance, "apply", "--yes", "--prune", "--allow-destructive")
    assert pruned.returncode == 0, pruned.stderr
    assert "readings" not in ots_instance.client().list_table()
    assert len(rt.read_all(ots_instance.client(), rt.TARGET)) == 50


@pytest.mark.slow
def test_a_plan_file_with_a_rewrite_applies_and_abort_undoes_it(tmp_path, ots_instance):
    project, _ = _source(tmp_path, ots_instance, 50)
    assert _run(project, ots_instance, "plan", "--out", "plan.json").returncode == 0
    applied = _run(project, ots_instance, "apply", "--yes", "--plan", "plan.json")
    assert applied.returncode == 0, applied.stderr
    assert "readings_by_seq: ready" in applied.stdout
    aborted = _run(project, ots_instance, "rewrite", "abort", "readings_by_seq")
    assert aborted.returncode == 0 and "aborted" in aborted.stdout
    assert "readings_by_seq" not in ots_instance.client().list_table()
    assert len(rt.read_all(ots_instance.client(), rt.SOURCE)) == 50


def _copied(client) -> int:
    """Rows the rewrite's split checkpoints count as copied."""
    job = driver.job_of(machine.load(client, "readings_by_seq"))
    return sum(c.rows for c in checkpoints.list_splits(client, job.id))


@pytest.mark.slow  # three `tsmigrate apply` processes, killed: their start-up is most of it
def test_apply_killed_at_random_moments_resumes_to_an_equal_target(tmp_path, ots_instance):
    """Three apply processes, each killed with SIGKILL mid-copy: once it has written a random
    number (1-4) of split checkpoints, while its other worker is still copying. The apply that
    follows reads only the rows they left, and its target equals the source."""
    rows = 3000
    project, _ = _source(tmp_path, ots_instance, rows)
    client = ots_instance.client()
    rng = random.Random(11)
    copied_at_kills = []
    for attempt in range(3):
        # The process stops (for good) right after its checkpoint number `after`: the kill lands
        # there, on that event, however slow or fast the machine is.
        _killed_on_marker(tmp_path, project, ots_instance, f"{attempt}", rt.STALLING_CLI,
                          {rt.STALL_AFTER: str(rng.randint(1, 4)), rt.PAGE_ROWS: "100"},
                          "apply", "--yes", "--workers", "2", "--max-rows-per-s", "20000")
        copied_at_kills.append(_copied(client))
    # Every killed run went on from where the one before it stopped, and none got to the end.
    assert 0 < copied_at_kills[0] < copied_at_kills[1] < copied_at_kills[2] < rows
    rewrite = machine.load(client, "readings_by_seq")
    assert rewrite is not None and rewrite.phase == machine.BACKFILL
    with rt.rows_read(ots_instance, rt.SOURCE.name) as read:
        finished = _run(project, ots_instance, "apply", "--yes", "--workers", "2")
    assert finished.returncode == 0, finished.stderr
    assert "readings_by_seq: ready" in finished.stdout
    # Resumed from the checkpoints: exactly the rows they do not count are read (a page a killed
    # run wrote without its checkpoint again; verification takes the source's totals from the
    # checkpoints, no stream record having touched a split).
    assert read.rows == rows - copied_at_kills[-1]
    _target_equals_source(ots_instance)
    status = json.loads(_run(project, ots_instance, "rewrite", "status", "readings_by_seq",
                             "--format", "json").stdout)
    assert status["verification"]["ok"] and status["rows_copied"] == 3000


# -- plan shows the rewrites apply starts or continues (no plan step of their own) --------------

STARTS = "start rewrite of readings into readings_by_seq"


def _plan(project, ots, fmt: str) -> str:
    result = _run(project, ots, "plan", "--format", fmt)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_plan_shows_the_rewrite_apply_starts_into_an_existing_empty_table(tmp_path, ots_instance):
    project, now_ms = _source(tmp_path, ots_instance, 40)
    rt.create(ots_instance.client(), rt.TARGET)  # the replacing table exists, as declared, empty

    data = json.loads(_plan(project, ots_instance, "json"))
    assert data["steps"] == [] and data["has_changes"] is True
    (ahead,) = data["rewrites"]
    assert ahead["action"] == "start" and ahead["phase"] is None
    assert ahead["source"] == "readings" and ahead["table"] == "readings_by_seq"
    text = _plan(project, ots_instance, "text")
    assert "No changes" not in text and STARTS in text and "1 rewrite to start or continue" in text
    markdown = _plan(project, ots_instance, "markdown")
    assert "No changes" not in markdown and f"| {STARTS}" in markdown and "| start |" in markdown
    detailed = _run(project, ots_instance, "plan", "--detailed-exitcode")
    assert detailed.returncode == 2  # changes: apply will do something

    applied = _run(project, ots_instance, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    assert STARTS in applied.stdout  # apply shows the plan it runs
    assert "rewrite readings -> readings_by_seq: ready" in applied.stdout
    _target_equals_source(ots_instance)
    # The same rows, as written out by hand rather than by the transform under test.
    assert rt.read_all(ots_instance.client(), rt.TARGET) == rt.hand_built_target(40, now_ms, device=True)
    # A ready rewrite waits for `rewrite finish`: apply runs nothing, and plan says so.
    assert json.loads(_plan(project, ots_instance, "json"))["rewrites"] == []
    assert "No changes" in _plan(project, ots_instance, "text")


@pytest.mark.slow
def test_plan_shows_the_phase_apply_continues_an_unfinished_rewrite_from(tmp_path, ots_instance):
    project, _ = _source(tmp_path, ots_instance, 30)
    client = ots_instance.client()
    rt.create(client, rt.TARGET)
    job = RewriteJob("job-failed", rt.SOURCE, rt.TARGET)
    started = machine.start(client, source="readings", target="readings_by_seq",
                            doc={"job": job.to_json(), "key_change": "new key"})
    machine.save(client, started, phase=machine.FAILED, error="the worker was killed")

    data = json.loads(_plan(project, ots_instance, "json"))
    (ahead,) = data["rewrites"]
    assert ahead["action"] == "continue" and ahead["phase"] == machine.PREPARE
    assert "the worker was killed" in ahead["note"]
    continues = "continue rewrite of readings into readings_by_seq from phase prepare"
    for fmt in ("text", "markdown"):
        shown = _plan(project, ots_instance, fmt)
        assert continues in shown and "the worker was killed" in shown and "No changes" not in shown

    applied = _run(project, ots_instance, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    assert continues in applied.stdout and "readings_by_seq: ready" in applied.stdout
    _target_equals_source(ots_instance)
    assert json.loads(_plan(project, ots_instance, "json"))["rewrites"] == []


def test_plan_refuses_a_replacing_table_with_rows_as_apply_does(tmp_path, ots_instance):
    project, _ = _source(tmp_path, ots_instance, 10)
    client = ots_instance.client()
    rt.create(client, rt.TARGET)
    client.put_row("readings_by_seq", ts.Row([("key", "x"), ("region", "eu")], [("v", 1)]))
    for command in ("plan", "apply"):
        refused = _run(project, ots_instance, command, *(["--yes"] if command == "apply" else []))
        assert refused.returncode == 1
        assert "readings_by_seq already exists with rows" in refused.stderr
        assert "drop readings_by_seq" in refused.stderr
    assert machine.load(client, "readings_by_seq") is None  # nothing was started



@pytest.mark.slow
def test_a_trimmed_stream_stops_follow_and_finish_and_their_advice_starts_a_safe_rewrite(
        tmp_path, ots_instance, ots_server_options):  # restores the server's clock offset
    project, _ = _source(tmp_path, ots_instance, 30)
    assert _run(project, ots_instance, "apply", "--yes").returncode == 0
    client = ots_instance.client()
    key, cells = rt.source_row(3, int(time.time() * 1000))
    client.put_row(rt.SOURCE.name, ts.Row(key, cells))  # a change capture has not read yet
    ots_instance.server.clock_offset += 200 * 3600  # past the stream's 168 h: records trimmed
    client.put_row(rt.SOURCE.name, ts.Row(key, cells), ts.Condition("IGNORE"))
    advice = "tsmigrate rewrite abort readings_by_seq` then `tsmigrate apply`"
    for command in (["follow", "readings_by_seq", "--for", "1"], ["finish", "readings_by_seq", "--force"]):
        stopped = _run(project, ots_instance, "rewrite", *command)
        assert stopped.returncode == 1 and advice in stopped.stderr, stopped.stderr
        assert "Changes may have been missed" in stopped.stderr
    status = json.loads(_run(project, ots_instance, "rewrite", "status", "readings_by_seq",
                             "--format", "json").stdout)
    assert status["phase"] == "ready" and advice in status["error"]

    # The advice, followed: a new rewrite from scratch, equal to the source.
    assert _run(project, ots_instance, "rewrite", "abort", "readings_by_seq").returncode == 0
    again = _run(project, ots_instance, "apply", "--yes")
    assert again.returncode == 0, again.stderr
    assert "readings_by_seq: ready" in again.stdout
    _target_equals_source(ots_instance)


# -- capture killed mid-page, its shards applied by several workers --------------------------------


def _updates(client, rows: int, round_number: int) -> None:
    """Every source row gets a new temp, and every other row another region (part of the new
    key: the row moves), stamped later than the round before."""
    base = int(time.time() * 1000) + round_number
    items = []
    for i in range(rows):
        key, _ = rt.source_row(i, base)
        cells = [("temp", float(round_number * 10_000 + i), base)]
        if i % 2:
            cells.append(("region", ["eu", "us", "ap"][(i + round_number) % 3], base))
        items.append(ts.UpdateRowItem(ts.Row(key, {"put": cells}), ts.Condition("IGNORE")))
    for start in range(0, len(items), 200):
        request = ts.BatchWriteRowRequest()
        request.add(ts.TableInBatchWriteRowItem(rt.SOURCE.name, items[start:start + 200]))
        assert client.batch_write_row(request).is_all_succeed()


def _killed_on_marker(tmp_path: Path, project: Path, ots, name: str, script: str,
                      stall: dict[str, str], *args: str) -> str:
    """`tsmigrate ARGS` in a process of its own through ``script`` (``rt.STALLING_CLI``: stalled
    after a split checkpoint; ``rt.STALLING_CAPTURE_CLI``: its capture stalled mid-page), with
    ``stall`` saying where, killed there with SIGKILL; what the marker says."""
    marker = tmp_path / f"stalled-{name}"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TSMIGRATE_", "ALIBABA_"))}
    env = {**environ, **_env(ots), **stall, rt.STALL_MARKER: str(marker)}
    with open(tmp_path / f"stderr-{name}", "w+") as stderr:
        process = subprocess.Popen([sys.executable, "-c", script, *args], cwd=project,
                                   env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                                   stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while not marker.exists():
                assert process.poll() is None, (tmp_path / f"stderr-{name}").read_text()
                assert time.monotonic() < deadline, "the process never stalled where asked"
                time.sleep(0.01)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(60)
    assert process.returncode == -signal.SIGKILL
    return marker.read_text()


@pytest.mark.slow
def test_follow_killed_mid_page_with_four_workers_loses_nothing(tmp_path, ots_instance,
                                                                 ots_server_options):
    ots_server_options.stream_shards = 4
    rows = 400
    project, _ = _source(tmp_path, ots_instance, rows)
    assert _run(project, ots_instance, "apply", "--yes", "--workers", "2").returncode == 0
    client = ots_instance.client()
    for number in range(3):
        _updates(client, rows, number)
    before = machine.load(client, "readings_by_seq").doc["capture"]
    said = _killed_on_marker(tmp_path, project, ots_instance, "follow", rt.STALLING_CAPTURE_CLI,
                             {rt.STALL_AFTER: "2"}, "rewrite", "follow", "readings_by_seq",
                             "--workers", "4")
    assert "of a page written to readings_by_seq" in said
    # The killed run kept no position past the page it was killed in: its shard is read again.
    after = machine.load(client, "readings_by_seq").doc["capture"]
    stalled = [s for s in after["shards"] if after["shards"][s] == before["shards"][s]]
    assert stalled, "every shard's position moved past the page the kill interrupted"
    again = _run(project, ots_instance, "rewrite", "follow", "readings_by_seq", "--for", "2",
                 "--workers", "4")
    assert again.returncode == 0, again.stderr
    _drain(ots_instance)
    _target_equals_source(ots_instance)
    status = json.loads(_run(project, ots_instance, "rewrite", "status", "readings_by_seq",
                             "--format", "json").stdout)
    assert status["phase"] == "ready"


@pytest.mark.slow
def test_apply_killed_mid_page_of_capture_with_several_workers_loses_nothing(
        tmp_path, ots_instance, ots_server_options):
    ots_server_options.stream_shards = 4
    rows = 3000
    project, _ = _source(tmp_path, ots_instance, rows)
    client = ots_instance.client()
    writing = threading.Event()
    numbers = iter(range(1000))

    def services() -> None:  # the source keeps changing while the backfill copies it
        while not writing.is_set():
            _updates(client, 300, next(numbers))
            time.sleep(0.05)

    writer = threading.Thread(target=services, daemon=True)
    writer.start()
    try:
        said = _killed_on_marker(tmp_path, project, ots_instance, "apply", rt.STALLING_CAPTURE_CLI,
                                 {rt.STALL_AFTER: "2"}, "apply", "--yes", "--workers", "4",
                                 "--max-rows-per-s", "1500")
    finally:
        writing.set()
        writer.join(30)
    assert "of a page written to readings_by_seq" in said
    assert machine.load(client, "readings_by_seq").phase == machine.BACKFILL  # killed mid-copy
    finished = _run(project, ots_instance, "apply", "--yes", "--workers", "4")
    assert finished.returncode == 0, finished.stderr
    assert "readings_by_seq: ready" in finished.stdout
    _drain(ots_instance)
    _target_equals_source(ots_instance)
