"""`tsmigrate upgrade`, `downgrade`, `current`, `stamp` and the versioned `plan`, run as commands
(in process, ``cliproject.run``) against an in-process local server: the revisions' operations,
the backfill, the state rows, the refusals (nothing applied), a kill -9 midway (that upgrade is a
process of its own), package versions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tablestore as ts
from cliproject import CREDENTIALS, env, run
from scriptdir import write_script

from tsmigrate.instance.state import STATE_TABLE, State
from tsmigrate.local.testing import local_tablestore
from tsmigrate.rewrite import backfill, checkpoints
from tsmigrate.wire.plainbuffer import decode_rows

REGIONS = ("eu", "us", "ap")
MODEL = """
    from tsmigrate import Column, Model, PrimaryKey


    class Event(Model, table="events"):
        id = PrimaryKey(str)
        n = PrimaryKey(int)
        payload = Column(str, defined=True)
"""
BACKFILL = """
    def fill_region(row):
        return {"region": row["payload"].split(":", 1)[0]}


    def clear_region(row):
        return {"region": None}
"""


def make_project(root: Path, version: str = "1.0.0") -> Path:
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "billing-schema"\nversion = "{version}"\n\n'
        '[tool.tsmigrate]\nmigrations = "migrations"\nworkflow = "versioned"\n'
    )
    migrations = root / "migrations"
    write_script(migrations, "a1", None, "op.create_table(Event)", "op.drop_table('events')",
                 header=MODEL, message="events")
    write_script(migrations, "b2", "a1",
                 "op.add_defined_columns('events', ('region', 'STRING'))\n"
                 "op.create_index('events', 'by_region', keys=['region'])",
                 "op.drop_index('events', 'by_region')\nop.delete_defined_columns('events', 'region')",
                 message="index by region")
    write_script(migrations, "c3", "b2", "op.backfill('events', fill_region, columns=['payload'])",
                 "op.backfill('events', clear_region, columns=['region'])",
                 header=BACKFILL, message="backfill region")
    return root


def cli(root: Path, target: list[str], *args: str) -> subprocess.CompletedProcess:
    return run(root, *args, *target, extra_env=CREDENTIALS)


def client_of(target: list[str]) -> ts.OTSClient:
    return ts.OTSClient(target[1], "local", "local-secret", target[3])


def fill(client: ts.OTSClient, rows: int) -> None:
    for start in range(0, rows, 200):
        request = ts.BatchWriteRowRequest()
        items = [ts.PutRowItem(ts.Row([("id", f"d{i % 7}"), ("n", i)],
                                      [("payload", f"{REGIONS[i % 3]}:{i}")]), ts.Condition("IGNORE"))
                 for i in range(start, min(rows, start + 200))]
        request.add(ts.TableInBatchWriteRowItem("events", items))
        client.batch_write_row(request)


def regions(client: ts.OTSClient) -> dict[int, str | None]:
    out = {}
    start, end = [("id", ts.INF_MIN), ("n", ts.INF_MIN)], [("id", ts.INF_MAX), ("n", ts.INF_MAX)]
    while start:
        _, start, rows, _ = client.get_range("events", "FORWARD", start, end, max_version=1)
        for row in rows:
            out[row.primary_key[1][1]] = dict((c[0], c[1]) for c in row.attribute_columns).get("region")
    return out


@pytest.mark.slow  # 1,200 rows backfilled and cleared again
def test_upgrade_step_by_step_backfill_current_plan_and_downgrade(tmp_path: Path,
                                                                  target: list[str]) -> None:
    root = make_project(tmp_path)
    client = client_of(target)
    first = cli(root, target, "current")
    assert first.returncode == 0, first.stderr
    assert "current: base (no revision applied)" in first.stdout
    assert "pending: 3 revision(s)" in first.stdout

    dry = cli(root, target, "upgrade", "head", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert ("CreateTable events: primary key (id STRING, n INTEGER); defined columns "
            "(payload STRING)") in dry.stdout
    assert "AddDefinedColumn events: region STRING" in dry.stdout
    assert "CreateIndex events: global index by_region on (region)" in dry.stdout
    assert "BatchWriteRow events: UpdateRow of the columns it changes" in dry.stdout
    assert "events" not in client.list_table()  # a dry run changes nothing

    up = cli(root, target, "upgrade", "+2")
    assert up.returncode == 0, up.stderr
    assert "Upgraded through 2 revision(s) (a1, b2), 3 operation(s) run; now at b2." in up.stdout
    fill(client, 1200)
    plan = cli(root, target, "plan", "--detailed-exitcode")
    assert plan.returncode == 2, plan.stderr
    assert "1 revision(s) pending" in plan.stdout and "c3 backfill region" in plan.stdout
    assert "no drift" in plan.stdout

    up = cli(root, target, "upgrade", "--workers", "2")
    assert up.returncode == 0, up.stderr
    assert regions(client) == {i: REGIONS[i % 3] for i in range(1200)}
    current = cli(root, target, "current", "--format", "json")
    data = json.loads(current.stdout)
    assert data["heads"] == [{"revision": "c3", "message": "backfill region", "head": True}]
    assert data["migrated_by"]["dist"] == "billing-schema" and data["migrated_by"]["version"] == "1.0.0"
    plan = cli(root, target, "plan", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "no revision pending" in plan.stdout and "no drift" in plan.stdout
    steps = [h["step"] for h in State(client).history() if h["status"] == "done"]
    assert steps == ["create_table", "add_defined_columns", "create_index", "backfill"]
    status = cli(root, target, "status", "--format", "json")
    assert status.returncode == 0, status.stdout + status.stderr
    report = json.loads(status.stdout)
    assert report["revisions"]["heads"] == data["heads"] and report["revisions"]["pending"] == 0
    assert report["drift"]["drifted"] is False, report["drift"]  # upgrade records what it left
    text = cli(root, target, "status").stdout
    assert "revisions:" in text and "c3 (head) backfill region" in text

    # Drift: a change made outside migrations.
    client.delete_secondary_index("events", "by_region")
    drift = cli(root, target, "plan")
    assert "drift: the instance differs" in drift.stdout and "by_region" in drift.stdout
    client.create_secondary_index("events", ts.SecondaryIndexMeta("by_region", ["region"], []), True)

    down = cli(root, target, "downgrade", "-1")
    assert down.returncode == 0, down.stderr
    assert set(regions(client).values()) == {None}
    refused = cli(root, target, "downgrade", "base")
    assert refused.returncode == 1
    assert "destructive step(s) need --allow-destructive" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert "events" in client.list_table() and "by_region" in json.dumps(
        [i.index_name for i in client.describe_table("events").secondary_indexes])
    down = cli(root, target, "downgrade", "base", "--allow-destructive")
    assert down.returncode == 0, down.stderr
    assert "events" not in client.list_table()
    assert "current: base" in cli(root, target, "current").stdout


@pytest.mark.slow
def test_refusals_are_one_message_and_change_nothing(tmp_path: Path, target: list[str]) -> None:
    root = make_project(tmp_path)
    migrations = root / "migrations"
    client = client_of(target)
    assert cli(root, target, "upgrade", "a1").returncode == 0
    unknown = cli(root, target, "upgrade", "zz9")
    assert unknown.returncode == 1 and "unknown revision 'zz9'" in unknown.stderr
    write_script(migrations, "d4", "a1", "op.update_stream('events', True)",
                 "op.irreversible('consumers read the stream')", message="stream")
    two = cli(root, target, "upgrade", "head")
    assert two.returncode == 1 and "2 heads (c3, d4)" in two.stderr
    assert "Traceback" not in two.stderr
    assert cli(root, target, "upgrade", "d4").returncode == 0
    irreversible = cli(root, target, "downgrade", "a1")
    assert irreversible.returncode == 1
    assert "cannot be downgraded: consumers read the stream" in irreversible.stderr
    assert client.describe_table("events").table_options is not None
    current = json.loads(cli(root, target, "current", "--format", "json").stdout)
    assert [h["revision"] for h in current["heads"]] == ["d4"]
    listing = run(root, "history")  # workflow = "versioned": the revisions, no instance needed
    assert listing.returncode == 0, listing.stderr
    assert "a1 -> d4" in listing.stdout and "a1 -> b2" in listing.stdout
    applied = cli(root, target, "apply", "--yes")
    assert applied.returncode == 1 and "tsmigrate upgrade head" in applied.stderr
    bad = root / "pyproject.toml"
    bad.write_text(bad.read_text().replace('"versioned"', '"versions"'))
    config = cli(root, target, "current")
    assert config.returncode == 1
    assert "workflow must be one of 'declarative', 'versioned'" in config.stderr


@pytest.mark.slow
def test_an_older_package_is_refused_and_stamp_runs_nothing(tmp_path: Path,
                                                            target: list[str]) -> None:
    root = make_project(tmp_path, version="1.4.0")
    client = client_of(target)
    assert cli(root, target, "upgrade", "b2").returncode == 0
    make_project(root, version="1.3.9")
    older = cli(root, target, "upgrade", "head")
    assert older.returncode == 1
    assert "this is billing-schema 1.3.9, older than billing-schema 1.4.0" in older.stderr
    assert "--allow-older" in older.stderr
    current = json.loads(cli(root, target, "current", "--format", "json").stdout)
    assert current["heads"][0]["revision"] == "b2"
    allowed = cli(root, target, "upgrade", "head", "--allow-older")
    assert allowed.returncode == 0, allowed.stderr
    stamped = cli(root, target, "stamp", "a1")
    assert stamped.returncode == 0, stamped.stderr
    assert "Stamped a1: nothing was run." in stamped.stdout
    assert "by_region" in [i.index_name for i in client.describe_table("events").secondary_indexes]
    data = json.loads(cli(root, target, "current", "--format", "json").stdout)
    assert data["heads"][0]["revision"] == "a1" and data["migrated_by"]["version"] == "1.3.9"


KILL_AFTER_ROWS = 300


@pytest.mark.slow
def test_an_upgrade_killed_during_a_backfill_continues_where_it_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unpaced: None) -> None:
    root = make_project(tmp_path)
    # A server of its own: the hook added below kills whoever writes its checkpoints.
    with local_tablestore(instance="killed") as ots:
        target = ["--endpoint", ots.endpoint, "--instance", ots.instance]
        client = client_of(target)
        assert cli(root, target, "upgrade", "b2").returncode == 0
        fill(client, 3000)
        # The killed upgrade is a process of its own: SIGKILL is the point.
        process = subprocess.Popen(
            [sys.executable, "-m", "tsmigrate.cli", "upgrade", "head", "--workers", "2", *target],
            cwd=root, env=env(CREDENTIALS), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        killed = threading.Event()
        saved: dict[str, int] = {}  # split -> rows, as the killed upgrade last checkpointed them

        def kill_at_a_checkpoint(ctx, table, key, old, new) -> None:
            """In the server, as a split's checkpoint is written: once the upgrade's checkpoints
            cover KILL_AFTER_ROWS rows, SIGKILL it before it hears back."""
            if new is None:
                return
            (kind, split), cells = new.data
            if kind != checkpoints.KIND or not cells["worker"][0][1].endswith(f":{process.pid}"):
                return
            saved[split] = cells["rows"][0][1]
            if not killed.is_set() and sum(saved.values()) >= KILL_AFTER_ROWS:
                os.kill(process.pid, signal.SIGKILL)
                killed.set()

        ots.server.add_table_hook(lambda table: table.name == STATE_TABLE, kill_at_a_checkpoint)
        try:
            _, stderr = process.communicate(timeout=120)
        finally:
            process.kill()
        assert killed.is_set(), f"the upgrade ended before it was killed: {stderr}"
        assert process.returncode == -signal.SIGKILL
        [row] = [r for _, r in _backfills(client)]
        job = json.loads(row["job"])["id"]
        done = sum(c.rows for c in checkpoints.list_splits(client, job))
        assert KILL_AFTER_ROWS <= done < 3000

        # What the resumed run reads (in this process, so its reads can be counted).
        read: list[int] = []
        read_page = backfill.read_page

        def counted(*args, **kwargs):
            page, following = read_page(*args, **kwargs)
            read.append(len(decode_rows(page)))
            return page, following

        monkeypatch.setattr(backfill, "read_page", counted)
        again = cli(root, target, "upgrade", "head")
        assert again.returncode == 0, again.stderr
        assert "took over a stale lock" in again.stdout
        # It continued from the checkpoints: only the rows they do not cover were read again.
        assert sum(read) < 3000
        assert sum(read) == 3000 - sum(saved.values())
        assert regions(client) == {i: REGIONS[i % 3] for i in range(3000)}
        assert _backfills(client) == []  # the job and its checkpoints are dropped once recorded
        statuses = [(h["step"], h["status"]) for h in State(client).history()]
        assert statuses[-2:] == [("backfill", "interrupted"), ("backfill", "done")]


def _backfills(client: ts.OTSClient) -> list:
    from tsmigrate.instance import adapter

    return adapter.scan_prefix(client, "tsmigrate_state", ("kind", "backfill"), "id")


@pytest.mark.parametrize("spec", ["head", "+1"])
def test_nothing_to_do_at_head(tmp_path: Path, spec: str, target: list[str]) -> None:
    root = make_project(tmp_path)
    assert cli(root, target, "upgrade").returncode == 0
    again = cli(root, target, "upgrade", spec)
    if spec == "head":
        assert again.returncode == 0 and "Nothing to do." in again.stdout
    else:
        assert again.returncode == 1 and "c3 is a head" in again.stderr
