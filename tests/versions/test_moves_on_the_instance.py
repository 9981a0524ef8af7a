"""Issue #38 (8), at the commands: `upgrade --dry-run` checks the revisions' creates against the
instance as the run does (a table or index made outside the revisions is the same refusal in
both, before anything runs), `history --runs` names upgrade and downgrade runs with the
revisions they moved between, and `downgrade -1` with nothing applied says so (exit 1, as
`alembic downgrade -1` at base fails: "Relative revision -1 didn't produce 1 migrations")."""

from __future__ import annotations

import json
from pathlib import Path

import tablestore as ts
from test_upgrade_cli import cli, client_of, make_project

from tsmigrate.instance.rawclient import RawClient
from tsmigrate.instance.state import State


def _applied(root: Path, target: list[str]) -> list[str]:
    current = json.loads(cli(root, target, "current", "--format", "json").stdout)
    return [h["revision"] for h in current["heads"]]


def test_a_create_of_what_exists_is_refused_alike_by_the_dry_run_and_the_run(
        tmp_path: Path, target: list[str]) -> None:
    root = make_project(tmp_path)
    client = client_of(target)
    client.create_table(ts.TableMeta("events", [("id", "STRING"), ("n", "INTEGER")]),
                        ts.TableOptions(), ts.ReservedThroughput(ts.CapacityUnit(0, 0)))
    refusal = ("upgrade of revision a1 would fail at operation 1 of 1 (create table events (id "
               "STRING, n INTEGER)): table events exists already (OTSObjectAlreadyExist)")
    dry = cli(root, target, "upgrade", "head", "--dry-run")
    assert dry.returncode == 0, dry.stderr  # a dry run shows the calls, and what is refused
    note = " ".join(dry.stderr.split())
    assert f"note: without --dry-run this is refused: {refusal}" in note, note
    assert "`tsmigrate stamp a1`" in note
    run = cli(root, target, "upgrade", "head")
    assert run.returncode == 1
    message = " ".join(run.stderr.split())
    assert f"error: {refusal}" in message and "nothing was changed" in message, message
    assert "Traceback" not in run.stderr
    assert _applied(root, target) == [] and State(client).history() == []  # nothing ran

    # An index made by hand: refused at b2's second operation before its first runs; the
    # schema is followed through the operations before it (the table a1 creates).
    client.delete_table("events")
    assert cli(root, target, "upgrade", "a1").returncode == 0
    raw = RawClient(client)
    raw.add_defined_columns("events", [("region", "STRING")])
    client.create_secondary_index("events", ts.SecondaryIndexMeta("by_region", ["region"], []), False)
    refusal = ("upgrade of revision b2 would fail at operation 2 of 2 (create global index "
               "by_region on events (region)): secondary index by_region of events exists already")
    dry = cli(root, target, "upgrade", "head", "--dry-run")
    assert refusal in " ".join(dry.stderr.split()), dry.stderr
    run = cli(root, target, "upgrade", "head")
    assert run.returncode == 1 and refusal in " ".join(run.stderr.split()), run.stderr
    assert _applied(root, target) == ["a1"]
    assert not [h for h in State(client).history() if h.get("plan") == "b2"]  # b2 ran nothing
    assert [i.index_name for i in client.describe_table("events").secondary_indexes] == ["by_region"]


def test_history_names_upgrade_and_downgrade_runs_and_their_revisions(
        tmp_path: Path, target: list[str]) -> None:
    root = make_project(tmp_path)
    for args in (("upgrade", "+2"), ("upgrade", "head"), ("downgrade", "-1")):
        moved = cli(root, target, *args)
        assert moved.returncode == 0, moved.stderr
    text = cli(root, target, "history", "--runs").stdout
    lines = [line for line in text.splitlines() if line.startswith("run ")]
    assert [line.split("  ")[1] for line in lines] == [
        "downgrade c3 -> b2", "upgrade b2 -> c3", "upgrade base -> b2"], text
    assert all("  done  started" in line for line in lines), text
    runs = json.loads(cli(root, target, "history", "--runs", "--format", "json").stdout)["runs"]
    assert [(r["command"], r["revisions"], r["outcome"]) for r in runs] == [
        ("downgrade", "c3 -> b2", "done"), ("upgrade", "b2 -> c3", "done"),
        ("upgrade", "base -> b2", "done")]
    status = cli(root, target, "status").stdout
    assert "downgrade c3 -> b2 done (1 step(s))" in status, status
    assert "drift:      none" in status, status  # the downgrade's own steps are not drift


def test_downgrade_minus_one_with_nothing_applied_says_so(tmp_path: Path, target: list[str]) -> None:
    root = make_project(tmp_path)
    for dry in ((), ("--dry-run",)):
        down = cli(root, target, "downgrade", "-1", *dry)
        assert down.returncode == 1, down.stdout
        assert "error: nothing to downgrade: no revision is applied" in down.stderr, down.stderr
        assert "Traceback" not in down.stderr
    base = cli(root, target, "downgrade", "base")  # to base from base: nothing to do, as before
    assert base.returncode == 0 and "Nothing to do." in base.stdout, base.stderr
