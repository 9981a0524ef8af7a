"""One data directory, one owner: a second server is refused naming the holder, a command's embedded
instance talks to the server running on its directory (or waits for another command's), a dead
owner's directory is taken over.

The holders here are real processes (`tsmigrate local serve`, or a script holding the directory
as another command's embedded instance): the directory is shared between two processes, the
holder is named by its pid, and a dead one is one killed with SIGKILL. The commands that meet
them run in this process (`clirun`), which is the second process; only the test of two commands
started together runs both as processes. A holding script blocks on its stdin rather than
sleeping: it lives until killed, or until this process is gone.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import clirun
import pytest
from refusedserve import refused_serve
from tablestore import CapacityUnit, OTSClient, ReservedThroughput, TableMeta, TableOptions

from tsmigrate.local import embedded
from tsmigrate.local.embedded import embedded_instance
from tsmigrate.local.ownership import EMBEDDED_ROLE, HOLDER_FILE, DataDirInUse, Holder
from tsmigrate.local.storage import DB_FILE
from tsmigrate.local.testing import LocalTablestore, local_tablestore

CU0 = ReservedThroughput(CapacityUnit(0, 0))


def _env(**extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TSMIGRATE_", "ALIBABA_"))}
    environ.update(extra)
    return environ


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tsmigrate.cli", *args]


@contextmanager
def serving(data: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`tsmigrate local serve --data DATA` in a subprocess, with its endpoint once it is ready."""
    proc = subprocess.Popen(
        _cli("local", "serve", "--port", "0", "--data", str(data), *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:"), proc.stderr.read()  # type: ignore[union-attr]
        yield proc, endpoint
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)


def _create(client: OTSClient, name: str) -> None:
    client.create_table(TableMeta(name, [("id", "INTEGER")]), TableOptions(), CU0)


@pytest.mark.slow
def test_second_serve_on_a_directory_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with serving(tmp_path) as (first, endpoint):
        second = refused_serve(tmp_path, "--port", "0", "--data", str(tmp_path))
        assert second.returncode == 1
        assert f"pid {first.pid}" in second.stderr and endpoint in second.stderr
        assert "in use" in second.stderr and "Traceback" not in second.stderr
        # The first server is untouched and still the only one serving the data.
        client = OTSClient(endpoint, "local", "local-secret", "local")
        _create(client, "t")
        assert client.list_table() == ("t",)


def test_second_server_in_process_is_refused(tmp_path: Path) -> None:
    with local_tablestore(data_dir=str(tmp_path)) as ots:
        with pytest.raises(DataDirInUse) as info, local_tablestore(data_dir=str(tmp_path)):
            pass
        holder = info.value.holder
        assert holder is not None
        assert (holder.pid, holder.endpoint) == (os.getpid(), ots.endpoint)
    with local_tablestore(data_dir=str(tmp_path)):  # released on close
        pass


@pytest.mark.slow
def test_a_dead_owner_is_taken_over_and_its_rows_kept(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        from tablestore import CapacityUnit, ReservedThroughput, Row, TableMeta, TableOptions
        from tsmigrate.local.testing import local_tablestore
        with local_tablestore(data_dir={str(tmp_path)!r}) as ots:
            client = ots.client()
            client.create_table(TableMeta("t", [("id", "INTEGER")]), TableOptions(),
                                ReservedThroughput(CapacityUnit(0, 0)))
            client.put_row("t", Row([("id", 1)], [("v", "kept")]))
            print("ready", flush=True)
            sys.stdin.read()  # held until killed (or until the test's process is gone)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with pytest.raises(DataDirInUse) as info, local_tablestore(data_dir=str(tmp_path)):
            pass
        assert info.value.holder is not None and info.value.holder.pid == proc.pid
    finally:
        proc.kill()
        proc.wait()
    assert (tmp_path / HOLDER_FILE).exists()  # the dead owner's note is left behind...
    with local_tablestore(data_dir=str(tmp_path)) as ots:  # ...and the directory taken over
        _, row, _ = ots.client().get_row("t", [("id", 1)], max_version=1)
        assert row is not None and row.attribute_columns[0][1] == "kept"


def _project(root: Path) -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(textwrap.dedent("""
        from tsmigrate import Column, Model, PrimaryKey

        class Account(Model, table="accounts"):
            account_id = PrimaryKey(str)
            email = Column(str, defined=True)
    """))
    return root


def _apply(project: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`tsmigrate apply --yes` in this process: the server holding the directory is the other one."""
    return clirun.run(project, "apply", "--yes", extra_env=env)


@pytest.mark.slow
def test_embedded_instance_talks_to_the_server_running_on_its_directory(tmp_path: Path) -> None:
    project = _project(tmp_path)
    data = project / ".tsmigrate" / "local"
    with serving(data) as (_, endpoint):
        client = OTSClient(endpoint, "local", "local-secret", "local")
        _create(client, "made_by_serve")
        applied = _apply(project)
        assert applied.returncode == 0, applied.stderr
        # The server sees the apply's tables at once (nothing served stale), and the apply saw its.
        assert {"accounts", "made_by_serve"} <= set(client.list_table())
        inspected = clirun.run(project, "inspect")
        assert inspected.returncode == 0, inspected.stderr
        assert "made_by_serve" in inspected.stdout
    with local_tablestore(data_dir=str(data)) as ots:  # everything acknowledged was kept
        assert {"accounts", "made_by_serve"} <= set(ots.client().list_table())


@pytest.mark.slow
def test_embedded_instance_needs_the_running_servers_key(tmp_path: Path) -> None:
    project = _project(tmp_path)
    data = project / ".tsmigrate" / "local"
    with serving(data, "--access-key-id", "me", "--access-key-secret", "s3cret") as (proc, _):
        refused = _apply(project)
        assert refused.returncode == 1
        assert f"pid {proc.pid}" in refused.stderr and "ALIBABA_CLOUD_ACCESS_KEY_ID" in refused.stderr
        assert "Traceback" not in refused.stderr
        applied = _apply(project, ALIBABA_CLOUD_ACCESS_KEY_ID="me",
                         ALIBABA_CLOUD_ACCESS_KEY_SECRET="s3cret")
        assert applied.returncode == 0, applied.stderr
    with serving(data, "--instance", "other") as _:
        refused = _apply(project)
        assert refused.returncode == 1 and "not 'local'" in refused.stderr


@pytest.mark.slow  # six `tsmigrate apply` processes, two at a time: the race is between processes
def test_two_embedded_applies_started_together_share_one_owner(tmp_path: Path) -> None:
    project = _project(tmp_path)
    for _ in range(3):
        procs = [
            subprocess.Popen(_cli("apply", "--yes"), cwd=project, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=_env(), stdin=subprocess.DEVNULL)
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
    db = sqlite3.connect(project / ".tsmigrate" / "local" / DB_FILE)
    try:
        tables = dict(db.execute("SELECT name, table_id FROM tables").fetchall())
        row_ids = {t for (t,) in db.execute("SELECT DISTINCT t FROM rows")}
    finally:
        db.close()
    assert "tsmigrate_state" in tables
    # Every stored row belongs to a live table: no second copy of the state table under another id.
    assert row_ids <= set(tables.values())


def _hold_as_embedded(data: Path) -> subprocess.Popen[str]:
    script = textwrap.dedent(f"""
        import sys
        from tsmigrate.local.testing import local_tablestore
        with local_tablestore(data_dir={str(data)!r}, role={EMBEDDED_ROLE!r}):
            print("ready", flush=True)
            sys.stdin.read()  # held until killed (or until the test's process is gone)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


class _PollClock:
    """`embedded`'s clock, moved on by its polling sleeps alone: the wait runs its whole course
    (the default 300 s) at once, each poll a real attempt on the directory."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds


@pytest.mark.slow
def test_embedded_instance_waits_for_another_commands_then_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = _hold_as_embedded(tmp_path)
    try:
        clock = _PollClock()
        monkeypatch.setattr(embedded, "time", clock)
        monkeypatch.setattr(embedded, "_POLL_S", 10.0)  # some 30 attempts in the 300 s, not 3,000
        waits: list[Holder | None] = []
        opening = embedded_instance(str(tmp_path), "local", on_wait=waits.append)
        with pytest.raises(DataDirInUse) as info, opening:
            pass
        assert info.value.holder is not None and info.value.holder.pid == proc.pid
        assert len(waits) == 1 and waits[0] is not None and waits[0].pid == proc.pid
        assert f"pid {proc.pid}" in str(info.value)
        assert clock.now >= embedded.WAIT_S and clock.sleeps > 1  # it tried again, then gave up
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_embedded_instance_opens_the_directory_once_the_other_command_is_done(tmp_path: Path) -> None:
    proc = _hold_as_embedded(tmp_path)
    waiting = threading.Event()

    def release_when_waited_for(holder: Holder | None) -> None:
        waiting.set()
        proc.kill()

    try:
        with embedded_instance(str(tmp_path), "local", on_wait=release_when_waited_for) as found:
            assert isinstance(found, LocalTablestore)
            assert found.server.storage is not None
            _create(found.client(), "mine")
        assert waiting.is_set()
    finally:
        proc.kill()
        proc.wait()
