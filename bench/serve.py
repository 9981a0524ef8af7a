"""Start `tsmigrate local serve` in its own process for a benchmark, as a remote service would be."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AK_ID, AK_SECRET, INSTANCE = "bench", "bench-secret", "bench"
CREDENTIALS = {"ALIBABA_CLOUD_ACCESS_KEY_ID": AK_ID, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": AK_SECRET}
# What the caller's environment may set that would point the bench's clients, workers and child
# processes elsewhere: another instance's keys or STS token, a target, a local secret.
NOT_INHERITED = ("ALIBABA_", "TSMIGRATE_")
# `python -c` puts the working directory first on sys.path: run from a checkout, another
# interpreter's install of tsmigrate would import the checkout's instead (Python 3.11+).
SAFE_PATH = {"PYTHONSAFEPATH": "1"}


def use_bench_credentials() -> None:
    """This process's environment, and so every child's and worker's that inherits it, without
    the caller's ALIBABA_*/TSMIGRATE_* variables and with the bench server's keys: what code
    that reads the environment (a rewrite's ``ConnectionSpec``, `tsmigrate` commands) connects
    with. A bench talks to its own server only."""
    for name in [name for name in os.environ if name.startswith(NOT_INHERITED)]:
        del os.environ[name]
    os.environ.update(CREDENTIALS)


def start_server(*options: str, python: str = sys.executable) -> tuple[subprocess.Popen[str], str]:
    """The server process and its endpoint; ``options`` are extra `local serve` flags; ``python``:
    the interpreter, and so the install of tsmigrate, that serves. From here on this process's
    environment carries the server's keys (``use_bench_credentials``)."""
    use_bench_credentials()
    cmd = [python, "-c", "from tsmigrate.cli import main; main()", "local", "serve",
           "--port", "0", "--instance", INSTANCE, "--access-key-id", AK_ID, *options]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "TSMIGRATE_LOCAL_SECRET": AK_SECRET, **SAFE_PATH})
    assert proc.stdout is not None
    endpoint = proc.stdout.readline().strip()
    if not endpoint.startswith("http://"):
        proc.kill()
        raise SystemExit("server did not start")
    return proc, endpoint


def cpu_s_of(pid: int) -> float:
    """utime + stime of a running process, every thread (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
