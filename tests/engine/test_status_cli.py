"""`tsmigrate status` as a user runs it, against the session's local server: a fresh instance,
after an apply, a lock held by another run (live and stale), drift made outside tsmigrate, a
rewrite in progress, and a malformed state row."""

from __future__ import annotations

import getpass
import json
import socket
import time
from pathlib import Path

import pytest
import rewrite_tables as rt
import tablestore as ts
from cliproject import CREDENTIALS, project, run

from tsmigrate.instance.state import LOCK_KEY, STATE_TABLE, Owner, State


def _target(ots_instance) -> list[str]:
    return ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]


def _cli(proj: Path, ots_instance, *args: str):
    result = run(proj, *args, *_target(ots_instance), extra_env=CREDENTIALS)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _status(proj: Path, ots_instance) -> tuple[str, dict]:
    text = _cli(proj, ots_instance, "status")
    assert text.returncode == 0, text.stderr
    as_json = _cli(proj, ots_instance, "status", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    return text.stdout, json.loads(as_json.stdout)


def test_a_fresh_instance_says_nothing_was_applied(tmp_path: Path, ots_instance):
    text, data = _status(project(tmp_path, tables=1), ots_instance)
    assert f"instance '{ots_instance.instance}'" in text
    assert "no tsmigrate_state table: tsmigrate has not applied anything here yet" in text
    assert "lock:       free" in text
    assert "last apply: none: no apply has changed this instance" in text
    assert "drift:      unknown: nothing has been applied to compare with" in text
    assert "rewrites:   none in progress" in text
    assert "\x1b[" not in text  # no terminal: no colour codes
    assert data["target"]["state_table"] is False
    assert data["lock"] == {"held": False}
    assert data["last_apply"]["run"] is None
    assert data["drift"]["checked"] is False and data["rewrites"] == [] and data["errors"] == []
    assert STATE_TABLE not in ots_instance.client().list_table()  # status created nothing


@pytest.mark.slow
def test_after_an_apply_no_drift_and_the_last_run(tmp_path: Path, ots_instance):
    proj = project(tmp_path, tables=1)
    assert _cli(proj, ots_instance, "apply", "--yes").returncode == 0
    text, data = _status(proj, ots_instance)
    run_id = data["last_apply"]["run"]
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    assert data["last_apply"]["outcome"] == "applied" and data["last_apply"]["steps"] == 2
    assert data["last_apply"]["by"] == who
    assert f"last apply: run {run_id} applied (2 step(s)), started " in text and f"by {who}" in text
    assert data["drift"]["checked"] is True and data["drift"]["drifted"] is False
    assert "drift:      none: the instance is as the last apply left it" in text
    assert "a later apply found nothing to change" not in text
    # An apply that finds nothing to change is the latest check, not a new run.
    assert _cli(proj, ots_instance, "apply", "--yes").returncode == 0
    text, data = _status(proj, ots_instance)
    assert data["last_apply"]["run"] == run_id
    assert data["last_apply"]["last_complete"]["at_ms"] >= data["last_apply"]["started_ms"]
    assert "a later apply found nothing to change" in text


def test_a_lock_held_by_another_run_names_the_holder(tmp_path: Path, ots_instance):
    client = ots_instance.client()
    holder = State(client, Owner("other0000042", "ci-runner-9", 4242, "deploy"))
    holder.ensure_table()
    holder.acquire()
    proj = project(tmp_path, tables=1)
    text, data = _status(proj, ots_instance)
    assert data["lock"]["held"] is True
    assert data["lock"]["owner"] == "other0000042@ci-runner-9:4242"
    assert data["lock"]["user"] == "deploy" and data["lock"]["stale"] is None
    assert data["lock"]["since_ms"] == holder.read_lock().acquired_ms
    assert "lock:       held by other0000042@ci-runner-9:4242 (user deploy), since " in text
    assert "its holder is gone" not in text
    # Its lease runs out: status says the holder is gone and what releases it.
    row = {"owner": "other0000042@ci-runner-9:4242", "host": "ci-runner-9", "pid": 4242,
           "acquired_ms": 1000, "expires_ms": int(time.time() * 1000) - 1000}
    client.put_row(STATE_TABLE, ts.Row(LOCK_KEY, list(row.items())))
    text, data = _status(proj, ots_instance)
    assert data["lock"]["stale"] == "its lease ran out"
    assert "its holder is gone (its lease ran out)" in text and "tsmigrate unlock" in text


@pytest.mark.slow
def test_drift_made_outside_tsmigrate_is_listed(tmp_path: Path, ots_instance):
    proj = project(tmp_path, tables=2)
    assert _cli(proj, ots_instance, "apply", "--yes").returncode == 0
    client = ots_instance.client()
    client.update_table("t0", ts.TableOptions(max_time_deviation=2 * 86400))
    client.delete_search_index("t1", "search")
    client.create_table(ts.TableMeta("by_hand", [("id", "STRING")]), ts.TableOptions(-1, 1),
                        ts.ReservedThroughput(ts.CapacityUnit(0, 0)))
    text, data = _status(proj, ots_instance)
    assert data["drift"]["drifted"] is True
    assert data["drift"]["tables"] == [
        {"table": "by_hand", "kind": "extra", "details": []},
        {"table": "t0", "kind": "changed", "details": ["max time deviation 1d -> 2d"]},
        {"table": "t1", "kind": "changed", "details": ["search index search dropped"]},
    ]
    assert "drift:      3 table(s) changed outside tsmigrate since the last apply" in text
    assert "  by_hand: not left by the last apply (created outside it)" in text
    assert "  t0: max time deviation 1d -> 2d" in text
    assert "  t1: search index search dropped" in text
    client.delete_table("t1")
    _text, data = _status(proj, ots_instance)
    assert {"table": "t1", "kind": "missing", "details": []} in data["drift"]["tables"]


@pytest.mark.slow
def test_a_rewrite_in_progress_shows_its_phase_and_rows(tmp_path: Path, ots_instance):
    proj = tmp_path
    (proj / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (proj / "app_models.py").write_text(rt.MODELS_V1)
    assert _cli(proj, ots_instance, "apply", "--yes").returncode == 0
    rt.fill(ots_instance.client(), 300)
    (proj / "app_models.py").write_text(rt.MODELS_V2)
    applied = _cli(proj, ots_instance, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    text, data = _status(proj, ots_instance)
    (rewrite,) = data["rewrites"]
    assert rewrite["source"] == "readings" and rewrite["target"] == "readings_by_seq"
    assert rewrite["phase"] == "ready" and rewrite["rows_copied"] == 300
    assert "rewrites:   1 in progress" in text
    assert "readings -> readings_by_seq: ready" in text and "rows copied: 300" in text
    assert "capture readings -> readings_by_seq: stopped (no process runs it); last progress " in text
    assert rewrite["captures"][0]["state"] == "stopped" and rewrite["capture_lag_s"] is None
    # The rewrite's own changes (stream on, deviation widened) are not drift.
    assert data["drift"]["drifted"] is False, data["drift"]


def test_a_malformed_lock_row_is_reported_and_the_rest_shown(tmp_path: Path, ots_instance):
    client = ots_instance.client()
    State(client).ensure_table()
    client.put_row(STATE_TABLE, ts.Row(LOCK_KEY, [("owner", "x"), ("pid", "12ab")]))
    result = _cli(project(tmp_path, tables=1), ots_instance, "status")
    assert result.returncode == 1
    assert "lock:       error: the apply lock in tsmigrate_state" in result.stdout
    assert "column 'pid' is '12ab', not an integer" in result.stderr
    assert "rewrites:   none in progress" in result.stdout
