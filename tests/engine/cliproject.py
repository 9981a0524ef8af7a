"""Helpers for tests that run the `tsmigrate` command: a temp project, a command in a process of
its own that starts without paying for imports, a server process, pacing that does not wait in
real time."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import clirun

CREDENTIALS = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "local", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "local-secret"}


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TSMIGRATE_", "ALIBABA_"))}
    environ.update(extra or {})
    return environ


def run(cwd: Path, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`tsmigrate ARGS` in ``cwd``, in this process (``clirun``)."""
    return clirun.run(cwd, *args, extra_env=extra_env)


def run_process(cwd: Path, *args: str, extra_env: dict[str, str] | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """`tsmigrate ARGS` in a process of its own: for tests where the process is the point."""
    return subprocess.run([sys.executable, "-m", "tsmigrate.cli", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=timeout, env=env(extra_env),
                          stdin=subprocess.DEVNULL)


# What `tsmigrate apply` imports (about 2 s, mostly the SDK and its pure-Python protobuf): the
# process a test kills is forked from a server that has imported it all once (`cli_process`).
_PRELOAD = [
    "tsmigrate.cli", "tsmigrate.instance.adapter", "tsmigrate.instance.apply", "tsmigrate.commands.apply",
    "tsmigrate.planning.planfile", "tsmigrate.planning.planrender", "tsmigrate.reindex.flow",
    "tsmigrate.reindex.progress", "tsmigrate.rewrite.driver", "tsmigrate.rewrite.planned",
    "tsmigrate.rewrite.progress", "tsmigrate.instance.target", "tsmigrate.local.testing",
]

# Runs in the forked process (``exec`` of this text: the fork server imports no test module),
# given ``cwd``, ``args``, ``environ`` and ``stderr`` (the write end of a pipe): what
# `python -m tsmigrate.cli ARGS` in ``cwd`` with ``environ`` does, stdin and stdout on /dev/null.
_CHILD = """
import os, sys
os.chdir(cwd)
sys.path.insert(0, cwd)  # `python -m` puts its working directory first on the path
os.environ.clear()
os.environ.update(environ)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
os.dup2(stderr.fileno(), 2)
stderr.close()
sys.argv = ["tsmigrate", *args]
from tsmigrate.cli import main
main(list(args), prog_name="tsmigrate")
"""


class CliProcess:
    """`tsmigrate ARGS` running in a process of its own (see ``cli_process``); the parts of
    ``subprocess.Popen`` the tests use: ``pid``, ``stderr`` (text, by line), ``send_signal``,
    ``kill``, ``wait`` and ``returncode`` (``-signal.SIGKILL`` once killed by it)."""

    def __init__(self, process: Any, stderr: Any) -> None:
        self._process, self.pid, self.stderr = process, process.pid, stderr

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, signum: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self._process.kill()

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(["tsmigrate"], timeout)
        return self._process.exitcode


def cli_process(cwd: Path, *args: str, extra_env: dict[str, str] | None = None) -> CliProcess:
    """`tsmigrate ARGS` in ``cwd`` in a real process of its own, for a test that kills it: forked
    from a fork server that imported tsmigrate once (``_PRELOAD``), so it starts in milliseconds,
    not the seconds of `python -m tsmigrate.cli`. Its environment is ``env(extra_env)``, stdin
    and stdout are /dev/null, its stderr is read through ``.stderr``."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(target=exec, daemon=True, name="tsmigrate", args=(_CHILD, {
        "cwd": str(cwd), "args": list(args), "environ": env(extra_env), "stderr": writer}))
    process.start()
    writer.close()  # the child holds the only write end: its death is the end of .stderr
    stderr = open(os.dup(reader.fileno()), encoding="utf-8", errors="replace")  # noqa: SIM115
    reader.close()
    return CliProcess(process, stderr)


def project(root: Path, tables: int = 2) -> Path:
    """A project whose models declare ``tables`` tables, each with a global and a search index."""
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    body = ["from tsmigrate import Column, GlobalIndex, Model, PrimaryKey, SearchField, SearchIndex", ""]
    for i in range(tables):
        body += [
            f"class T{i}(Model, table='t{i}'):",
            "    user_id = PrimaryKey(str)",
            "    seq = PrimaryKey(int)",
            "    status = Column(str, defined=True)",
            f"    t{i}_by_status = GlobalIndex(keys=['status'])",
            "    search = SearchIndex(fields=[SearchField('status', 'keyword')])",
            "",
        ]
    (root / "app_models.py").write_text("\n".join(body))
    return root


def kill_apply_midway(project_root: Path, ots: Any, monkeypatch: Any, tables: int,
                      extra_env: dict[str, str]) -> None:
    """`tsmigrate apply --yes` of ``project_root`` (tables t0..t{tables-1}) in its own process,
    SIGKILLed while the server holds the first CreateTable that arrives once two of the tables
    exist: the kill lands midway, whatever the machine's speed. Returns once the held call went
    on (into a closed connection)."""
    import signal

    server, instance = ots.server, ots.instance
    declared = {f"t{i}" for i in range(tables)}
    held, release, answered = threading.Event(), threading.Event(), threading.Event()
    admit = server._admit

    def holding_admit(api: str, on: str, now: float) -> None:
        if api == "CreateTable" and on == instance and not held.is_set():
            with server.storage.lock:
                created = [t.name for t in server.storage.tables(on) if t.name in declared]
            if len(created) >= 2:
                held.set()
                try:
                    release.wait(120)
                finally:
                    answered.set()
        admit(api, on, now)

    monkeypatch.setattr(server, "_admit", holding_admit)
    victim = cli_process(project_root, "apply", "--yes", "--endpoint", ots.endpoint,
                         "--instance", instance, extra_env=extra_env)
    try:
        deadline = time.monotonic() + 120
        while not held.wait(0.05):
            if victim.returncode is not None or time.monotonic() > deadline:
                victim.kill()
                victim.wait(30)
                raise AssertionError("the apply never got to a third table: " + victim.stderr.read())
        victim.send_signal(signal.SIGKILL)
        # Killed midway, not finished by itself before the signal.
        assert victim.wait(30) == -signal.SIGKILL
    finally:
        release.set()
        victim.kill()
        victim.wait(30)
        victim.stderr.close()
    assert answered.wait(30)


@contextmanager
def server(*options: str, instance: str = "faulty") -> Iterator[list[str]]:
    """`tsmigrate local serve` in its own process; yields the target options to reach it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tsmigrate.cli", "local", "serve", "--memory", "--port", "0",
         "--instance", instance, *options],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env(),
    )
    try:
        endpoint = process.stdout.readline().strip()
        assert endpoint.startswith("http://"), endpoint
        yield ["--endpoint", endpoint, "--instance", instance]
    finally:
        process.terminate()
        process.wait(10)


class PacingClock:
    """The clock of tsmigrate's pacer (``tsmigrate.instance.pacing``), on which the pacer's waits pass at
    once: real time plus ``skew``, and where the pacer would sleep until a deadline, ``skew``
    grows to reach it. With a ``server`` (a ``LocalServer``), the server's clock moves on by the
    same amount, so the two clocks see the same spacing between calls as if the wait had been
    slept: the server's rate limit judges exactly what pacing would have sent in real time.
    Without one, the pacer just stops costing time (for a server without a rate limit).

    ``install(monkeypatch)`` puts it in place for the in-process commands (``run``) of a test.
    """

    def __init__(self, server: Any = None) -> None:
        self.server, self.skew, self._lock = server, 0.0, threading.Lock()

    def monotonic(self) -> float:
        return time.monotonic() + self.skew

    def pass_until(self, deadline: float) -> None:
        with self._lock:
            ahead = deadline - self.monotonic()
            if ahead > 0:
                self.skew += ahead
                if self.server is not None:
                    self.server.clock_offset += ahead

    def condition(self) -> threading.Condition:
        clock = self

        class PassingCondition(threading.Condition):
            def wait(self, timeout: float | None = None) -> bool:
                if timeout is None:  # for a call in flight to answer: a real wait
                    return super().wait()
                clock.pass_until(clock.monotonic() + timeout)
                return False  # as at a timeout: the pacer looks at its window again

        return PassingCondition()

    def install(self, monkeypatch: Any) -> PacingClock:
        from tsmigrate.instance import pacing

        monkeypatch.setattr(pacing, "time", SimpleNamespace(monotonic=self.monotonic))
        monkeypatch.setattr(pacing, "threading", SimpleNamespace(Condition=self.condition))
        return self
