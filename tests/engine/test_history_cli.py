"""`tsmigrate history` as a user runs it, against the session's local server: applied steps
newest first with run, outcome, when and who; failed, interrupted and unfinished runs; --limit;
an instance never applied to; bad input."""

from __future__ import annotations

import getpass
import json
import os
import socket
from pathlib import Path

import pytest
from cliproject import CREDENTIALS, project, run

from tsmigrate.instance.state import STATE_TABLE, Owner, State
from tsmigrate.planning import ops


def _target(ots_instance) -> list[str]:
    return ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]


def _history(proj: Path, ots_instance, *args: str):
    return run(proj, "history", *_target(ots_instance), *args, extra_env=CREDENTIALS)


def test_no_history_on_a_fresh_instance_and_nothing_created(tmp_path: Path, ots_instance):
    proj = project(tmp_path, tables=1)
    text = _history(proj, ots_instance)
    assert text.returncode == 0, text.stderr
    assert "No history: no apply has changed this instance yet." in text.stdout
    assert f"instance '{ots_instance.instance}'" in text.stdout
    as_json = _history(proj, ots_instance, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["steps"] == [] and data["runs"] == [] and data["total_steps"] == 0
    assert STATE_TABLE not in ots_instance.client().list_table()  # reading created nothing


@pytest.mark.slow
def test_applied_steps_newest_first_with_run_outcome_when_and_who(tmp_path: Path, ots_instance):
    proj = project(tmp_path, tables=1)
    assert run(proj, "apply", "--yes", *_target(ots_instance), extra_env=CREDENTIALS).returncode == 0
    project(tmp_path, tables=2)
    assert run(proj, "apply", "--yes", *_target(ots_instance), extra_env=CREDENTIALS).returncode == 0

    data = json.loads(_history(proj, ots_instance, "--format", "json").stdout)
    assert data["total_steps"] == 4
    assert [s["summary"].split(" (")[0] for s in data["steps"]] == [
        "create search index search on t1", "create table t1",
        "create search index search on t0", "create table t0"]
    assert [s["step"] for s in data["steps"]] == [2, 1, 2, 1]
    assert {s["status"] for s in data["steps"]} == {"done"}
    assert {s["run_outcome"] for s in data["steps"]} == {"applied"}
    newest, oldest = data["runs"]
    assert newest["run"] != oldest["run"] and newest["started_ms"] > oldest["started_ms"]
    assert newest["outcome"] == "applied" and newest["steps"] == 2
    assert newest["by"] == f"{getpass.getuser()}@{socket.gethostname()}"
    assert data["steps"][0]["run"] == newest["run"] and data["steps"][0]["at"].endswith(" UTC")

    text = _history(proj, ots_instance)
    assert text.returncode == 0, text.stderr
    assert "History, newest first (4 of 4 step(s)):" in text.stdout
    assert text.stdout.index(newest["run"]) < text.stdout.index(oldest["run"])
    assert f"run {newest['run']}  applied  started {newest['started']}  by {newest['by']}" in text.stdout
    assert "\x1b[" not in text.stdout  # no terminal: no colour codes

    limited = _history(proj, ots_instance, "--limit", "3")
    assert "(3 of 4 step(s); --limit 4 shows all)" in limited.stdout
    assert limited.stdout.count("create table t0") == 0
    assert limited.stdout.count("create search index search on t0") == 1
    assert len(json.loads(_history(proj, ots_instance, "--limit", "1", "--format", "json").stdout)
               ["steps"]) == 1


def test_failed_interrupted_running_and_unfinished_runs(tmp_path: Path, ots_instance):
    client = ots_instance.client()
    step1, step2 = ops.DropTable("gone"), ops.DropTable("other")
    failed = State(client, Owner("failed000001", "ci-7", 11, "deploy"))
    failed.ensure_table()
    failed.record(step1, "started", plan_id="p1")
    failed.record(step1, "done", plan_id="p1")
    failed.record(step2, "started", plan_id="p1")
    failed.record(step2, "failed", plan_id="p1", error="OTSQuotaExhausted: too many tables")
    failed.run_started_ms -= 1  # (the runs below start later)
    killed = State(client, Owner("killed000002", "ci-8", 12, "deploy"))
    killed.run_started_ms = failed.run_started_ms + 10
    killed.record(step1, "started", plan_id="p2")
    live = State(client, Owner("live00000003", socket.gethostname(), os.getpid(), "ann"))
    live.run_started_ms = failed.run_started_ms + 20
    live.acquire()
    live.record(step1, "started", plan_id="p3")

    proj = project(tmp_path, tables=1)
    data = json.loads(_history(proj, ots_instance, "--format", "json").stdout)
    outcomes = {r["run"]: (r["outcome"], r["by"], r["failed_step"]) for r in data["runs"]}
    assert outcomes == {"live00000003": ("running", f"ann@{socket.gethostname()}", None),
                        "killed000002": ("unfinished", "deploy@ci-8", None),
                        "failed000001": ("failed", "deploy@ci-7", 2)}
    assert [r["run"] for r in data["runs"]] == ["live00000003", "killed000002", "failed000001"]
    failed_step = next(s for s in data["steps"] if s["status"] == "failed")
    assert failed_step["error"] == "OTSQuotaExhausted: too many tables"
    text = _history(proj, ots_instance).stdout
    assert "run failed000001  failed" in text
    assert "error: OTSQuotaExhausted: too many tables" in text
    live.release()


def test_history_of_an_apply_killed_and_noticed_is_interrupted(tmp_path: Path, ots_instance):
    client = ots_instance.client()
    killed = State(client, Owner("killed000009", "elsewhere", 1))
    killed.ensure_table()
    killed.record(ops.DropTable("t9"), "started", plan_id="p")
    proj = project(tmp_path, tables=1)
    assert run(proj, "apply", "--yes", *_target(ots_instance), extra_env=CREDENTIALS).returncode == 0
    data = json.loads(_history(proj, ots_instance, "--format", "json").stdout)
    runs = {r["run"]: r for r in data["runs"]}
    assert runs["killed000009"]["outcome"] == "interrupted"
    assert runs["killed000009"]["by"] == "elsewhere:1"  # no user recorded: the process


@pytest.mark.parametrize("limit", ["0", "-3", "many"])
def test_a_bad_limit_is_a_usage_error(tmp_path: Path, ots_instance, limit: str):
    result = _history(project(tmp_path, tables=1), ots_instance, "--limit", limit)
    assert result.returncode == 2
    assert "Invalid value for '--limit'" in result.stderr and "Traceback" not in result.stderr


def test_a_malformed_history_row_is_named_not_a_traceback(tmp_path: Path, ots_instance):
    import tablestore as ts

    client = ots_instance.client()
    State(client).ensure_table()
    client.put_row(STATE_TABLE, ts.Row([("kind", "history"), ("id", "x")],
                                       [("step", "create_table"), ("status", "done")]))
    result = _history(project(tmp_path, tables=1), ots_instance)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "history row (kind='history', id='x')" in result.stderr
    assert "column 'summary' is missing" in result.stderr
