"""Issue 24, "errors that name the fix": each command fails fast and plainly, and says what to
run next."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cliproject import CREDENTIALS, cli_process, env, project, run

from tsmigrate.commands.common import EXIT_BROKEN_PIPE
from tsmigrate.instance import retry
from tsmigrate.instance.state import Owner, State


def _target(ots_instance) -> list[str]:
    return ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]




# --- item 10: every command gives up on an endpoint that never answered as fast as plan ----------


@pytest.mark.parametrize("command", [
    ["plan"], ["apply", "--yes"], ["stamp", "head"], ["upgrade"], ["status"], ["history"],
])
def test_a_refused_endpoint_is_given_up_after_the_first_contact_retries(
        tmp_path: Path, refused_endpoint: str, monkeypatch, command: list[str]):
    # Count the retry waits instead of timing them: before the fix apply, upgrade and stamp
    # repeated the state table's "list, create if missing" a dozen times, each with its own
    # first-contact retries (about 38 waits, 23-26 s).
    waits: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", waits.append)
    proj = project(tmp_path, tables=1)
    result = run(proj, *command, "--endpoint", refused_endpoint, "--instance", "x",
                 extra_env=CREDENTIALS)
    assert result.returncode == 1, result.stderr
    assert "cannot reach" in result.stderr and "Traceback" not in result.stderr
    assert len(waits) <= retry.FIRST_CONTACT_RETRIES, waits


def test_retrying_does_not_restart_the_first_contact_count():
    calls = 0
    gave_up = OSError("refused")
    gave_up.tsmigrate_unreachable = True  # type: ignore[attr-defined]

    def unreachable() -> None:
        nonlocal calls
        calls += 1
        raise gave_up

    with pytest.raises(OSError):
        retry.retrying(unreachable, policy=retry.TsmigrateRetryPolicy(base_delay_s=0))
    assert calls == 1


# --- item 12: local serve's bad options, a closed stdout ----------------------------------------


def test_local_serve_port_out_of_range_is_a_usage_error(tmp_path: Path):
    result = run(tmp_path, "local", "serve", "--memory", "--port", "99999")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "OverflowError" not in result.stderr
    assert "--port" in result.stderr and "0<=x<=65535" in result.stderr


def test_local_serve_unusable_data_dir_names_the_directory(tmp_path: Path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    data = blocked / "data"  # cannot be created: its parent is a file
    result = run(tmp_path, "local", "serve", "--port", "0", "--data", str(data))
    assert result.returncode == 1, result.stderr
    assert "cannot listen" not in result.stderr
    assert f"cannot use --data {data}" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", [["plan"], ["plan", "--format", "json"], ["status"]])
def test_a_closed_stdout_ends_the_command_quietly(tmp_path: Path, ots_instance, command: list[str]):
    # The reader is gone before the command writes (`| head -0`): its first write fails, every
    # time, whatever the scheduling. The process is the point: its exit status and last flush.
    proj = project(tmp_path, tables=1)
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tsmigrate.cli", *command, *_target(ots_instance)], cwd=proj,
            stdout=writer, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            env=env(CREDENTIALS), timeout=120)
    finally:
        os.close(writer)
    assert done.returncode == EXIT_BROKEN_PIPE, done.stderr
    assert done.stderr == ""  # no "cannot reach ... Broken pipe", no "Exception ignored"


# --- item 14: Ctrl-C says that apply resumes -----------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_outside_the_steps_says_apply_resumes(tmp_path: Path, ots_instance):
    # The apply waits for a lock this test holds: interrupted there, deterministically, outside
    # any step (before the fix: click's bare "Aborted!", exit 1).
    holder = State(ots_instance.client(), Owner("busy0001", socket.gethostname(), os.getpid()))
    holder.ensure_table()
    holder.acquire()
    proj = project(tmp_path, tables=1)
    try:
        applying = cli_process(proj, "apply", "--yes", "--lock-timeout", "600",
                               *_target(ots_instance), extra_env=CREDENTIALS)
        try:
            lines = []
            deadline = time.monotonic() + 120
            for line in applying.stderr:
                lines.append(line)
                if "waiting up to" in line or time.monotonic() > deadline:
                    break
            assert "waiting up to" in lines[-1], lines
            applying.send_signal(signal.SIGINT)
            code = applying.wait(120)
            rest = applying.stderr.read()
        finally:
            applying.kill()
    finally:
        holder.release()
    assert code == 130, rest
    assert "Aborted!" not in rest
    assert "interrupted (Ctrl-C)" in rest and "run `tsmigrate apply` again to resume" in rest


# --- item 7: upgrade after apply names stamp ---------------------------------------------------


@pytest.mark.slow
def test_upgrade_of_what_apply_created_names_stamp(tmp_path: Path, ots_instance):
    proj = project(tmp_path, tables=1)
    target = _target(ots_instance)
    assert run(proj, "apply", "--yes", *target, extra_env=CREDENTIALS).returncode == 0
    # The project moves to the versioned workflow; its first revision creates what apply made.
    (proj / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n'
                                         'workflow = "versioned"\nmigrations = "migrations"\n')
    written = run(proj, "revision", "--autogenerate", "-m", "init")
    assert written.returncode == 0, written.stderr
    [script] = (proj / "migrations" / "versions").glob("*_init.py")
    rev = script.name.split("_", 1)[0]
    for _ in range(2):  # before the fix the message said running it again continues; it fails alike
        failed = run(proj, "upgrade", "head", *target, extra_env=CREDENTIALS)
        assert failed.returncode == 1, failed.stderr
        assert "OTSObjectAlreadyExist" in failed.stderr
        assert "continues from there" not in failed.stderr
        assert f"`tsmigrate stamp {rev}`" in failed.stderr
    assert run(proj, "stamp", rev, *target, extra_env=CREDENTIALS).returncode == 0
    done = run(proj, "upgrade", "head", *target, extra_env=CREDENTIALS)
    assert done.returncode == 0, done.stderr


# --- item 9: a drop refused by lint names --allow-destructive ----------------------------------


def test_prune_refused_by_lint_names_allow_destructive(tmp_path: Path, ots_instance):
    proj = project(tmp_path, tables=2)
    target = _target(ots_instance)
    assert run(proj, "apply", "--yes", *target, extra_env=CREDENTIALS).returncode == 0
    models = proj / "app_models.py"
    text = models.read_text()
    models.write_text(text[: text.index("class T1")])  # t1 is no longer declared
    refused = run(proj, "apply", "--yes", "--prune", *target, extra_env=CREDENTIALS)
    assert refused.returncode == 3, refused.stderr
    assert "drop table t1" in refused.stdout
    assert "pass --allow-destructive to accept them" in refused.stderr
    accepted = run(proj, "apply", "--yes", "--prune", "--allow-destructive", *target,
                   extra_env=CREDENTIALS)
    assert accepted.returncode == 0, accepted.stderr
    assert "t1" not in ots_instance.client().list_table()


# --- item 11: --dask names the Dask scheduler --------------------------------------------------

KEYED = """from tsmigrate import Column, Model, PrimaryKey


class T(Model, table={table}):
    {first} = PrimaryKey({first_type})
    {second} = PrimaryKey({second_type})
    status = Column(str, defined=True)
"""


@pytest.mark.slow
def test_an_unreachable_dask_scheduler_is_named(tmp_path: Path, ots_instance, refused_endpoint: str,
                                               monkeypatch):
    from tsmigrate.rewrite import executors

    monkeypatch.setattr(executors, "DASK_CONNECT_TIMEOUT_S", 0.5)
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    models = tmp_path / "app_models.py"
    models.write_text(KEYED.format(table="'t0'", first="user_id", first_type="str", second="seq",
                                   second_type="int"))
    target = _target(ots_instance)
    assert run(tmp_path, "apply", "--yes", *target, extra_env=CREDENTIALS).returncode == 0
    # The key changes: apply's rewrite copies the rows on the --dask cluster.
    models.write_text(KEYED.format(table="'t0b', replaces='t0'", first="seq", first_type="int",
                                   second="user_id", second_type="str"))
    scheduler = refused_endpoint.replace("http://", "tcp://")
    failed = run(tmp_path, "apply", "--yes", "--dask", scheduler, *target, extra_env=CREDENTIALS)
    assert failed.returncode == 1, failed.stderr
    assert f"cannot reach the Dask scheduler at {scheduler}" in failed.stderr
    assert "cannot reach the instance" not in failed.stderr and "Traceback" not in failed.stderr


# --- item 13: downgrade --dry-run prints the calls; a dropped table's downgrade raises -----------

VERSIONED = ('[tool.tsmigrate]\nmodels = ["app_models"]\nworkflow = "versioned"\n'
             'migrations = "migrations"\n')


@pytest.mark.slow
def test_downgrade_dry_run_prints_the_calls_and_a_drop_cannot_be_undone(tmp_path: Path,
                                                                        ots_instance):
    proj = project(tmp_path, tables=2)
    (proj / "pyproject.toml").write_text(VERSIONED)
    target = _target(ots_instance)
    assert run(proj, "revision", "--autogenerate", "-m", "init").returncode == 0
    assert run(proj, "upgrade", "head", *target, extra_env=CREDENTIALS).returncode == 0
    # Undoing "init" drops both tables: the dry run shows it (before the fix: refused, no calls).
    dry = run(proj, "downgrade", "-1", "--dry-run", *target, extra_env=CREDENTIALS)
    assert dry.returncode == 0, dry.stderr
    assert "DeleteTable" in dry.stdout and "t1" in dry.stdout
    assert "without --dry-run this is refused" in dry.stderr and "--allow-destructive" in dry.stderr
    assert set(ots_instance.client().list_table()) >= {"t0", "t1"}  # nothing ran
    # A revision that drops t1: its downgrade would recreate t1 empty, so it raises instead.
    models = proj / "app_models.py"
    text = models.read_text()
    models.write_text(text[: text.index("class T1")])
    assert run(proj, "revision", "--autogenerate", "-m", "drop t1").returncode == 0
    [script] = (proj / "migrations" / "versions").glob("*_drop_t1.py")
    assert "op.irreversible(" in script.read_text()
    dropped = run(proj, "upgrade", "head", "--allow-destructive", *target, extra_env=CREDENTIALS)
    assert dropped.returncode == 0, dropped.stderr
    back = run(proj, "downgrade", "-1", "--allow-destructive", *target, extra_env=CREDENTIALS)
    assert back.returncode == 1, back.stderr
    assert "recreating it gives an empty table" in back.stderr, back.stderr
    assert "t1" not in ots_instance.client().list_table()


def test_a_wrong_sts_token_is_named_in_the_hint(tmp_path):
    import clirun

    from tsmigrate.local.testing import local_tablestore

    with local_tablestore(memory=True, sts_tokens={"the-right-token": "local"}) as ots:
        environment = {"TSMIGRATE_ENDPOINT": ots.endpoint, "TSMIGRATE_INSTANCE": ots.instance,
                       "ALIBABA_CLOUD_ACCESS_KEY_ID": "local",
                       "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "local-secret"}
        wrong = clirun.run(tmp_path, "status", extra_env={
            **environment, "ALIBABA_CLOUD_SECURITY_TOKEN": "an-expired-token"})
        assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
        assert "OTSAuthFailed" in wrong.stderr
        assert "ALIBABA_CLOUD_SECURITY_TOKEN is set: an STS token must belong to that key" in wrong.stderr
        assert "an-expired-token" not in wrong.stderr  # never printed
        right = clirun.run(tmp_path, "status", extra_env={
            **environment, "ALIBABA_CLOUD_SECURITY_TOKEN": "the-right-token"})
        assert right.returncode == 0, right.stderr
