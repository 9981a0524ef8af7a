"""What `history` and `status` record beyond apply's own steps (issue 24, items 5 and 6): the
rewrite commands (switch, revert, pause, resume, finish, abort) as runs with a step per action,
the tables they drop; an apply killed with -9 as unfinished (not running), the tables it created
as its own (not drift); and a run that resumed a killed one, named on it."""

from __future__ import annotations

import json
from pathlib import Path

import cutover_tables as ct
import pytest
from cliproject import CREDENTIALS, kill_apply_midway, project, run

from tsmigrate.instance.state import Owner, State
from tsmigrate.planning import ops


def _cli(proj: Path, ots_instance, *args: str):
    result = run(proj, *args, "--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance,
                 extra_env=CREDENTIALS)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _history(proj: Path, ots_instance) -> tuple[str, dict]:
    text = _cli(proj, ots_instance, "history", "--limit", "100")
    as_json = _cli(proj, ots_instance, "history", "--limit", "100", "--format", "json")
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    return text.stdout, json.loads(as_json.stdout)


def _status(proj: Path, ots_instance) -> tuple[str, dict]:
    text = _cli(proj, ots_instance, "status")
    as_json = _cli(proj, ots_instance, "status", "--format", "json")
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    return text.stdout, json.loads(as_json.stdout)


def _runs(data: dict) -> list[tuple[str, str, list[str]]]:
    """(command, outcome, step summaries oldest first) of each run, oldest first."""
    out = []
    for one in reversed(data["runs"]):
        steps = [s["summary"] for s in reversed(data["steps"]) if s["run"] == one["run"]]
        out.append((one["command"], one["outcome"], steps))
    return out


def _rewrite_at_ready(tmp_path: Path, ots_instance) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(ct.MODELS_V1)
    assert _cli(tmp_path, ots_instance, "apply", "--yes").returncode == 0
    (tmp_path / "app_models.py").write_text(ct.MODELS_V2)
    applied = _cli(tmp_path, ots_instance, "apply", "--yes")
    assert applied.returncode == 0 and "counters_by_seq: ready" in applied.stdout, applied.stderr
    return tmp_path


@pytest.mark.slow
def test_switch_and_finish_with_the_drop_are_runs_and_the_drop_is_not_drift(tmp_path, ots_instance):
    proj = _rewrite_at_ready(tmp_path, ots_instance)
    early = _cli(proj, ots_instance, "rewrite", "finish", "counters_by_seq")  # refused: not switched
    assert early.returncode == 1
    assert _cli(proj, ots_instance, "rewrite", "switch", "counters_by_seq", "--lease", "0.5").returncode == 0
    done = _cli(proj, ots_instance, "rewrite", "finish", "counters_by_seq", "--allow-destructive")
    assert done.returncode == 0, done.stderr
    assert "counters" not in ots_instance.client().list_table()

    text, data = _history(proj, ots_instance)
    assert _runs(data)[2:] == [
        ("rewrite finish", "failed", ["finish counters_by_seq"]),
        ("rewrite switch", "done", ["switch counters_by_seq"]),
        ("rewrite finish", "done", ["finish counters_by_seq", "drop table counters"]),
    ]
    drop = next(s for s in data["steps"] if s["summary"] == "drop table counters")
    assert (drop["status"], drop["risk"], drop["table"]) == ("done", "destructive", "counters")
    assert "ready, not switched" in next(s["error"] for s in data["steps"] if s["status"] == "failed")
    assert "rewrite finish  done" in text and "drop table counters  [destructive]" in text

    status, sdata = _status(proj, ots_instance)
    assert sdata["drift"]["drifted"] is False and sdata["drift"]["tables"] == []
    # Said, as tsmigrate's own change.
    assert "counters, counters_by_seq: changed since by rewrite finish run" in status
    assert [c["command"] for c in sdata["last_apply"]["later_commands"]] == [
        "rewrite finish", "rewrite switch", "rewrite finish"]
    assert "since then: rewrite finish done (finish counters_by_seq; drop table counters)" in status


@pytest.mark.slow
def test_pause_resume_switch_revert_and_abort_are_runs_with_their_drop(tmp_path, ots_instance):
    proj = _rewrite_at_ready(tmp_path, ots_instance)
    for args in (("pause",), ("resume",), ("switch", "--lease", "0.5"), ("revert",), ("abort",)):
        result = _cli(proj, ots_instance, "rewrite", args[0], "counters_by_seq", *args[1:])
        assert result.returncode == 0, (args, result.stderr)
    assert "counters_by_seq" not in ots_instance.client().list_table()
    _text, data = _history(proj, ots_instance)
    assert _runs(data)[2:] == [
        ("rewrite pause", "done", ["pause counters_by_seq"]),
        ("rewrite resume", "done", ["resume counters_by_seq"]),
        ("rewrite switch", "done", ["switch counters_by_seq"]),
        ("rewrite revert", "done", ["revert counters_by_seq"]),
        ("rewrite abort", "done", ["abort counters_by_seq", "drop table counters_by_seq"]),
    ]
    # The apply runs are still apply's, with their outcome.
    assert [r[:2] for r in _runs(data)[:2]] == [("apply", "applied"), ("apply", "applied")]
    status, sdata = _status(proj, ots_instance)
    assert sdata["drift"]["drifted"] is False, status
    assert sdata["last_apply"]["outcome"] == "applied" and sdata["last_apply"]["command"] == "apply"


@pytest.mark.slow
def test_an_apply_killed_with_9_is_unfinished_its_tables_are_not_drift_and_the_rerun_says_so(
        tmp_path: Path, ots_instance, monkeypatch):
    """An apply in its own process, SIGKILLed midway (``cliproject.kill_apply_midway``)."""
    proj = project(tmp_path, tables=4)
    kill_apply_midway(proj, ots_instance, monkeypatch, 4, CREDENTIALS)

    text, data = _history(proj, ots_instance)
    killed = data["runs"][0]
    assert killed["outcome"] == "unfinished", text  # its holder is gone: not running
    assert f"run {killed['run']}  unfinished" in text
    status, sdata = _status(proj, ots_instance)
    assert sdata["lock"]["stale"] and "its holder is gone" in status
    assert sdata["last_apply"]["outcome"] == "unfinished"
    # t0, t1 (and t2 if the held call went on) are the killed apply's, not made outside it.
    assert "created outside it" not in status, status
    assert sdata["drift"]["drifted"] is False and sdata["drift"]["tables"] == []
    assert {"t0", "t1"} <= {r["table"] for r in sdata["drift"]["recorded"]}
    assert "t0, t1" in status and f"changed since by apply run {killed['run']} (unfinished), not drift" \
        in status

    rerun = _cli(proj, ots_instance, "apply", "--yes")
    assert rerun.returncode == 0, rerun.stderr
    text, data = _history(proj, ots_instance)
    resumed, killed = data["runs"][0], data["runs"][1]
    assert killed["outcome"] == "interrupted" and killed["resumed_by"] == resumed["run"]
    assert killed["resumed_outcome"] == "applied"
    assert f"run {killed['run']}  interrupted; resumed by run {resumed['run']}, which completed it" in text
    status, sdata = _status(proj, ots_instance)
    assert sdata["last_apply"]["outcome"] == "applied" and sdata["drift"]["drifted"] is False
    assert sdata["drift"]["recorded"] == [] and "lock:" in status and "free" in status


def test_a_run_that_resumes_a_killed_one_is_named_on_it_even_when_it_fails(tmp_path, ots_instance):
    client = ots_instance.client()
    killed = State(client, Owner("killed000024", "elsewhere", 1))
    killed.ensure_table()
    killed.record(ops.DropTable("t9"), "started", plan_id="p")
    proj = project(tmp_path, tables=1)
    # Not running: the lock is free, so the killed run is unfinished, not running.
    _text, data = _history(proj, ots_instance)
    assert data["runs"][0]["outcome"] == "unfinished" and data["runs"][0]["resumed_by"] is None
    later = State(client, Owner("later0000024", "elsewhere", 2))
    later.resumes = {"killed000024"}
    later.record(ops.DropTable("t8"), "started", plan_id="p")
    later.record(ops.DropTable("t8"), "failed", plan_id="p", error="boom")
    text, data = _history(proj, ots_instance)
    runs = {r["run"]: r for r in data["runs"]}
    assert runs["killed000024"]["resumed_by"] == "later0000024"
    assert "resumed by run later0000024, now failed" in text



@pytest.mark.slow
def test_an_apply_that_continues_a_killed_runs_rewrite_records_it_and_says_it_completed(
        tmp_path: Path, ots_instance):
    import rewrite_tables as rt

    from tsmigrate.rewrite import machine
    from tsmigrate.rewrite.job import RewriteJob

    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(rt.MODELS_V1)
    assert _cli(tmp_path, ots_instance, "apply", "--yes").returncode == 0
    client = ots_instance.client()
    rt.fill(client, 30)
    (tmp_path / "app_models.py").write_text(rt.MODELS_V2)
    # What an apply killed with -9 mid-rewrite leaves: its step started, the rewrite unfinished.
    killed = State(client, Owner("killed000025", "elsewhere", 1))
    killed.record(ops.RewriteTable("readings_by_seq", "readings", "new key"), "started", plan_id="p")
    rt.create(client, rt.TARGET)
    job = RewriteJob("job-killed", rt.SOURCE, rt.TARGET)
    started = machine.start(client, source="readings", target="readings_by_seq",
                            doc={"job": job.to_json(), "key_change": "new key"})
    machine.save(client, started, phase=machine.FAILED, error="the worker was killed")

    applied = _cli(tmp_path, ots_instance, "apply", "--yes")
    assert applied.returncode == 0 and "readings_by_seq: ready" in applied.stdout, applied.stderr
    text, data = _history(tmp_path, ots_instance)
    resumer, killed_run = data["runs"][0], data["runs"][1]
    assert _runs(data)[-1] == ("apply", "applied", ["continue rewrite of readings into readings_by_seq"])
    assert killed_run["run"] == "killed000025" and killed_run["outcome"] == "interrupted"
    assert (killed_run["resumed_by"], killed_run["resumed_outcome"]) == (resumer["run"], "applied")
    assert f"run killed000025  interrupted; resumed by run {resumer['run']}, which completed it" in text


def test_a_rewrite_command_left_started_is_running_while_its_process_runs(tmp_path, ots_instance):
    import os
    import socket
    import subprocess
    import sys

    from tsmigrate.instance.records import Action

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    client = ots_instance.client()
    State(client).ensure_table()
    finish = Action("rewrite_finish", "finish t_by_seq", "t_by_seq")
    for run_id, host, pid in (("alive0000026", socket.gethostname(), os.getpid()),
                              ("killed000026", socket.gethostname(), int(gone.stdout)),
                              ("other0000026", "elsewhere", 1)):
        state = State(client, Owner(run_id, host, pid))
        state.command = "rewrite finish"
        state.record(finish, "started", plan_id="")
    text, data = _history(project(tmp_path, tables=1), ots_instance)
    assert {r["run"]: (r["command"], r["outcome"]) for r in data["runs"]} == {
        "alive0000026": ("rewrite finish", "running"),
        "killed000026": ("rewrite finish", "unfinished"),
        "other0000026": ("rewrite finish", "unfinished")}
    assert "run alive0000026  rewrite finish  running" in text
