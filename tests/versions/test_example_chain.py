"""The repository's own chain (migrations/versions): the example models as the first revision,
an index, a backfill of result_count from the payload; upgraded on a server it gives exactly
the models (the declarative plan has nothing to do) and the backfilled column."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tablestore as ts
from cliproject import CREDENTIALS, run

REPO = Path(__file__).resolve().parents[2]


def checkout(tmp_path: Path) -> Path:
    """The repository's pyproject.toml, models and migrations, copied: what a command writes next
    to them (bytecode, an embedded instance) never lands in the checkout other tests read."""
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copy(REPO / "pyproject.toml", root)
    for name in ("models", "migrations"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def cli(cwd: Path, project: Path, target: list[str], *args: str):
    return run(cwd, *args, "--project", str(project), *target, extra_env=CREDENTIALS)


def put_snapshots(client: ts.OTSClient) -> None:
    payloads = {"r1": json.dumps({"results": [1, 2, 3]}), "r2": json.dumps({"results": []}),
                "r3": "not json", "r4": json.dumps({"error": "quota"})}
    for request_id, payload in payloads.items():
        key = [("keyword", "tablestore"), ("day", "2026-11-30"), ("request_id", request_id)]
        client.put_row("serp_snapshots", ts.Row(key, [("payload", payload), ("status", "ok")]))


def counts(client: ts.OTSClient) -> dict[str, int | None]:
    start = [("keyword", ts.INF_MIN), ("day", ts.INF_MIN), ("request_id", ts.INF_MIN)]
    end = [("keyword", ts.INF_MAX), ("day", ts.INF_MAX), ("request_id", ts.INF_MAX)]
    _, _, rows, _ = client.get_range("serp_snapshots", "FORWARD", start, end)
    return {r.primary_key[2][1]: dict((c[0], c[1]) for c in r.attribute_columns).get("result_count")
            for r in rows}


def test_the_repository_chain_passes_check(tmp_path: Path) -> None:
    project = checkout(tmp_path)
    checked = run(tmp_path, "check", "--project", str(project))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "3 revisions, one head (f8710b3fa125)" in checked.stdout


@pytest.mark.slow
def test_the_example_chain_upgrades_to_the_models_and_backfills(tmp_path: Path, target: list[str]) -> None:
    project = checkout(tmp_path)
    client = ts.OTSClient(target[1], "local", "local-secret", target[3])
    up = cli(tmp_path, project, target, "upgrade", "924edfc6227f")
    assert up.returncode == 0, up.stderr
    indexes = client.describe_table("serp_snapshots").secondary_indexes
    assert "by_status" in [i.index_name for i in indexes]
    put_snapshots(client)
    up = cli(tmp_path, project, target, "upgrade", "head")
    assert up.returncode == 0, up.stderr
    assert "backfill serp_snapshots with count_results" in up.stdout
    assert counts(client) == {"r1": 3, "r2": 0, "r3": None, "r4": None}
    # The head of the chain is the models: the declarative plan has nothing to do.
    plan = cli(tmp_path, project, target, "plan", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "No changes." in plan.stdout
    down = cli(tmp_path, project, target, "downgrade", "-1")
    assert down.returncode == 0, down.stderr
    assert set(counts(client).values()) == {None}
