"""Malformed rows of tsmigrate_state, as a hand edit or another tool leaves them: every command
that reads one says, on one line, which row, what is wrong and how to repair it (exit 1, no
traceback); `apply` lets the lock go; `tsmigrate state remove` takes a malformed row away."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rewrite_tables as rt
import tablestore as ts
from cliproject import CREDENTIALS, project, run

from tsmigrate.instance.state import STATE_TABLE, State
from tsmigrate.rewrite.job import RewriteJob

JOB = RewriteJob("job1", rt.SOURCE, rt.TARGET, created_ms=1)
GOOD_REWRITE = {"source": "readings", "phase": "ready", "version": 3,
                "doc": json.dumps({"job": JOB.to_json(), "created_ms": 1})}
GOOD_SPLIT = {"status": "done", "rows": 10, "bytes": 100, "digest": "0" * 32, "updated_ms": 1,
              "worker": "h:1"}

# (name, rows to plant: (kind, id, columns)), what the error says.
MALFORMED: dict[str, tuple[list[tuple[str, str, dict[str, Any]]], str]] = {
    "bogus phase": ([("rewrite", "readings_by_seq", {**GOOD_REWRITE, "phase": "bogus"})],
                    "column 'phase' is 'bogus', not one of prepare"),
    "doc not JSON": ([("rewrite", "readings_by_seq", {**GOOD_REWRITE, "doc": "{"})],
                     "column 'doc' is not JSON"),
    "version not a number": ([("rewrite", "readings_by_seq", {**GOOD_REWRITE, "version": "abc"})],
                             "column 'version' is 'abc', not an integer"),
    "no source": ([("rewrite", "readings_by_seq", {k: v for k, v in GOOD_REWRITE.items()
                                                   if k != "source"})],
                  "column 'source' is missing"),
    "doc field of another type": (
        [("rewrite", "readings_by_seq",
          {**GOOD_REWRITE, "doc": json.dumps({"job": JOB.to_json(), "runner": "me"})})],
        "doc field 'runner' is 'me', not an object"),
    "job not a job": ([("rewrite", "readings_by_seq", {**GOOD_REWRITE, "doc": '{"job": "{}"}'})],
                      "doc field 'job' is not a rewrite job (KeyError"),
    "split rows not a count": ([("rewrite", "readings_by_seq", GOOD_REWRITE),
                                ("rewrite-split", "job1/000000", {**GOOD_SPLIT, "rows": "x"})],
                               "column 'rows' is 'x', not a count"),
}
REWRITE_ROW = "row (kind='rewrite', id='readings_by_seq') of tsmigrate_state is malformed"
SPLIT_ROW = "(kind='rewrite-split', id='job1/000000') of tsmigrate_state is malformed"


def _target(ots_instance) -> list[str]:
    return ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]


def _cli(proj: Path, ots_instance, *args: str):
    result = run(proj, *args, *_target(ots_instance), extra_env=CREDENTIALS)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _plant(client: ts.OTSClient, rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    State(client).ensure_table()
    for kind, row_id, columns in rows:
        client.put_row(STATE_TABLE, ts.Row([("kind", kind), ("id", row_id)], list(columns.items())))


def _one_line_error(result, *expected: str) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


def _whole_row(name: str) -> bool:
    """A rewrite row the plan and apply read too (they do not look at the job or the copy)."""
    return MALFORMED[name][0][-1][0] == "rewrite" and name != "job not a job"


@pytest.mark.parametrize("name", MALFORMED)
@pytest.mark.slow
def test_every_command_names_the_malformed_row(tmp_path: Path, ots_instance, name: str):
    rows, expected = MALFORMED[name]
    _plant(ots_instance.client(), rows)
    where = SPLIT_ROW if rows[-1][0] == "rewrite-split" else REWRITE_ROW
    proj = project(tmp_path, tables=1)
    repair = f"tsmigrate state remove {rows[-1][0]} {rows[-1][1]} --force"

    # status shows the other sections and the row's error.
    status = _cli(proj, ots_instance, "status")
    line = _one_line_error(status, where, expected, repair)
    assert "lock:       free" in status.stdout
    # Every command that reads the row; a row the rewrite's job or checkpoints are in is read by
    # those that look at the job or the copy's progress (plan and apply do not).
    commands = [["rewrite", "status"], ["rewrite", "status", "readings_by_seq"]]
    whole_row = _whole_row(name)
    if whole_row:
        commands += [["plan"], ["rewrite", "follow", "readings_by_seq", "--for", "0"],
                     ["rewrite", "finish", "readings_by_seq"], ["rewrite", "pause", "readings_by_seq"]]
    for args in commands:
        _one_line_error(_cli(proj, ots_instance, *args), where, expected)
    if whole_row:
        _one_line_error(_cli(proj, ots_instance, "apply", "--yes"), where, expected)
        # The apply that stopped on the row let the lock go.
        assert "lock:       free" in _cli(proj, ots_instance, "status").stdout
    assert line.count("error:") == 1


def test_key_ranges_that_are_not_json(tmp_path: Path, ots_instance):
    _plant(ots_instance.client(), [("rewrite", "readings_by_seq", GOOD_REWRITE),
                                   ("rewrite-splits", "job1", {"splits": "not json"})])
    proj = project(tmp_path, tables=1)
    # follow reads the key ranges at once (to place captured rows), long before --for runs out.
    _one_line_error(_cli(proj, ots_instance, "rewrite", "follow", "readings_by_seq", "--for", "60"),
                    "the key ranges (kind='rewrite-splits', id='job1') of tsmigrate_state are malformed",
                    "JSONDecodeError", "tsmigrate rewrite abort")
    assert _cli(proj, ots_instance, "rewrite", "status").returncode == 0  # status does not need them


def test_a_history_row_with_only_a_status(tmp_path: Path, ots_instance):
    _plant(ots_instance.client(), [("history", "0000000000001-run-001", {"status": "started"})])
    proj = project(tmp_path, tables=1)
    expected = ("history row (kind='history', id='0000000000001-run-001')", "column 'step' is missing",
                "tsmigrate state remove history 0000000000001-run-001 --force")
    _one_line_error(_cli(proj, ots_instance, "status"), *expected)
    _one_line_error(_cli(proj, ots_instance, "history"), *expected)
    applied = _cli(proj, ots_instance, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr  # a record only: applies go on
    _one_line_error(_cli(proj, ots_instance, "status"), *expected)


def test_state_remove_takes_a_malformed_row_away_only_with_force(tmp_path: Path, ots_instance):
    client = ots_instance.client()
    _plant(client, [("rewrite", "readings_by_seq", {**GOOD_REWRITE, "phase": "bogus"}),
                    ("rewrite", "good_one", GOOD_REWRITE)])
    proj = project(tmp_path, tables=1)
    key = [("kind", "rewrite"), ("id", "readings_by_seq")]
    # Without --force: what removing it means, and nothing removed.
    _one_line_error(_cli(proj, ots_instance, "state", "remove", "rewrite", "readings_by_seq"),
                    "is malformed; removing it means: the rewrite is forgotten", "Pass --force")
    assert client.get_row(STATE_TABLE, key)[1] is not None
    # A well-formed row, or one that is not there, is refused even with --force.
    _one_line_error(_cli(proj, ots_instance, "state", "remove", "rewrite", "good_one", "--force"),
                    "is well-formed: not removed", "tsmigrate rewrite abort")
    _one_line_error(_cli(proj, ots_instance, "state", "remove", "history", "nope", "--force"),
                    "no row kind='history', id='nope'")
    removed = _cli(proj, ots_instance, "state", "remove", "rewrite", "readings_by_seq", "--force")
    assert removed.returncode == 0, removed.stderr
    assert "removed the malformed row kind='rewrite', id='readings_by_seq'" in removed.stdout
    assert client.get_row(STATE_TABLE, key)[1] is None
    assert client.get_row(STATE_TABLE, [("kind", "rewrite"), ("id", "good_one")])[1] is not None
    assert "readings_by_seq" not in _cli(proj, ots_instance, "rewrite", "status").stderr


def test_state_remove_every_other_kind_of_row(tmp_path: Path, ots_instance):
    client = ots_instance.client()
    _plant(client, [("history", "0000000000001-run-001", {"status": "started"}),
                    ("rewrite-split", "job1/000000", {**GOOD_SPLIT, "rows": "x"}),
                    ("rewrite-split", "job1/000001", GOOD_SPLIT),
                    ("rewrite-splits", "job2", {"splits": "not json"}),
                    ("catalog", "applied", {"json": "{"})])
    proj = project(tmp_path, tables=1)
    assert _cli(proj, ots_instance, "status").returncode == 1
    for kind, row_id in (("history", "0000000000001-run-001"), ("rewrite-split", "job1/000000"),
                         ("rewrite-splits", "job2"), ("catalog", "applied")):
        result = _cli(proj, ots_instance, "state", "remove", kind, row_id, "--force")
        assert result.returncode == 0, result.stderr
        assert client.get_row(STATE_TABLE, [("kind", kind), ("id", row_id)])[1] is None
    _one_line_error(_cli(proj, ots_instance, "state", "remove", "rewrite-split", "job1/000001", "--force"),
                    "is well-formed")
    assert _cli(proj, ots_instance, "status").returncode == 0


def test_a_service_write_stops_with_routing_unavailable_on_a_malformed_row(ots_instance, monkeypatch):
    from cutover_tables import IDENTITY, Counter

    from tsmigrate.instance.apply import apply
    from tsmigrate.schema.model import compile_models
    from tsmigrate.service import Rows, routing

    routing.clear()
    client = ots_instance.client()
    apply(client, compile_models([Counter]), target_identity=IDENTITY)
    _plant(client, [("rewrite", "counters_by_seq", {**GOOD_REWRITE, "source": "counters",
                                                    "version": "abc"})])
    reads = []
    real = routing._rewrites_op

    def counted():
        reads.append(1)
        return (yield from real())

    monkeypatch.setattr(routing, "_rewrites_op", counted)
    rows = Rows(Counter, client)
    with pytest.raises(routing.RoutingUnavailable,
                       match=r"counters: the rewrite row \(kind='rewrite', id='counters_by_seq'\) of "
                             r"tsmigrate_state is malformed: column 'version' is 'abc'.*guess a side"):
        rows.put(Counter(device="d1", seq=1, count=0, note="x"))
    assert reads == [1]  # not read again for REFRESH_WAIT_S: a damaged row does not mend itself
    _, row, _ = client.get_row("counters", [("device", "d1"), ("seq", 1)], max_version=1)
    assert row is None  # nothing written to a guessed side
