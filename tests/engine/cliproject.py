"""Helpers for tests that run the `tsmigrate` command: a temp project, a server process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
