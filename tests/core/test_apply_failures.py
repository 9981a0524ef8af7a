"""A failed or interrupted apply names the step, what was done before it, and that running
again continues; the history says the same. Through the local server and the official SDK."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import tablestore as ts
from click.testing import CliRunner

from tsmigrate.cli import main
from tsmigrate.instance import adapter
from tsmigrate.instance.apply import ApplyFailed, ApplyHooks, ApplyInterrupted, apply
from tsmigrate.schema import Catalog, PrimaryKeyColumn, Table

IDENTITY = "local:test"


def _tables(*names: str) -> Catalog:
    return Catalog([Table(n, (PrimaryKeyColumn("pk", "STRING"),)) for n in names])


def test_a_failing_step_names_its_number_and_what_was_done(ots_client):
    def sabotage(number, total, step):
        if number == 2:  # someone else takes the name between plan and step 2
            meta = ts.TableMeta("b", [("other", "STRING")])
            ots_client.create_table(meta, ts.TableOptions(), ts.ReservedThroughput(ts.CapacityUnit(0, 0)))

    with pytest.raises(ApplyFailed) as caught:
        apply(ots_client, _tables("a", "b", "c"), hooks=ApplyHooks(progress=sabotage),
              target_identity=IDENTITY)
    message = str(caught.value)
    assert "apply failed at step 2 of 3 (create table b (pk STRING))" in message
    assert "OTSObjectAlreadyExist" in message
    assert "step 1 was done (create table a (pk STRING))" in message
    assert "running tsmigrate apply again" in message
    assert [s.table for s in caught.value.done] == ["a"]


def test_an_interrupt_names_the_steps_done_and_the_history_records_it(ots_client):
    def interrupt(number, total, step):
        if number == 3:
            raise KeyboardInterrupt

    with pytest.raises(ApplyInterrupted) as caught:
        apply(ots_client, _tables("a", "b", "c"), hooks=ApplyHooks(progress=interrupt),
              target_identity=IDENTITY)
    message = str(caught.value)
    assert "interrupted during step 3 of 3" in message
    assert "steps 1-2 were done (create table a (pk STRING); create table b (pk STRING))" in message
    assert caught.value.exit_code == 130
    # Running again continues with what is left.
    assert apply(ots_client, _tables("a", "b", "c"), target_identity=IDENTITY).executed == 1


MODELS = """
from tsmigrate import Model, PrimaryKey

class A(Model, table="a"):
    pk = PrimaryKey(str)

class B(Model, table="b"):
    pk = PrimaryKey(str)
"""


def test_ctrl_c_in_the_cli_says_what_was_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = f"m_{tmp_path.name.replace('-', '_')}"
    (tmp_path / "pyproject.toml").write_text(f'[tool.tsmigrate]\nmodels = ["{module}"]\n')
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(MODELS))
    real_execute = adapter.execute
    calls = []

    def execute(client, step, *expected):  # Ctrl-C arrives while the second step runs
        calls.append(step)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_execute(client, step, *expected)

    monkeypatch.setattr(adapter, "execute", execute)
    result = CliRunner().invoke(main, ["apply", "--yes", "--project", str(tmp_path)])
    assert result.exit_code == 130, result.output
    assert "Aborted!" not in result.output
    assert "interrupted during step 2 of 2 (create table b (pk STRING))" in result.output
    assert "step 1 was done (create table a (pk STRING))" in result.output
    assert "running tsmigrate apply again" in result.output
