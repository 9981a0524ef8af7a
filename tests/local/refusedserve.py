"""`tsmigrate local serve` run in this process, for tests that expect it to refuse to start.

A refusal (a bad option, an insecure bind, a data directory in use) is an exit status and a
message: `clirun.run` shows both without a 0.8 s process. What a process gave for free is a way
out when the command wrongly starts serving: it would serve until signalled. Here a watchdog
does what SIGTERM would: after ``timeout_s`` it calls the signal handler the command installed,
the command stops and exits 0, and the test fails on that exit status instead of hanging.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import clirun

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def refused_serve(cwd: Path | str, *args: str, timeout_s: float = 60.0,
                  extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`tsmigrate local serve ARGS` in ``cwd`` (``extra_env``: its environment's TSMIGRATE_
    variables), stopped after ``timeout_s`` if it started serving."""
    saved = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    finished = threading.Event()

    def stop_a_started_server() -> None:
        if finished.wait(timeout_s):
            return
        while not finished.wait(0.1):  # until the command has installed its handler, and after
            handler = signal.getsignal(signal.SIGTERM)
            if handler is not saved[signal.SIGTERM] and callable(handler):
                handler(signal.SIGTERM, None)

    watchdog = threading.Thread(target=stop_a_started_server, daemon=True)
    watchdog.start()
    try:
        return clirun.run(cwd, "local", "serve", *args, extra_env=extra_env)
    finally:
        finished.set()
        watchdog.join()
        for signum, handler in saved.items():  # a server that started replaced them
            if handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
