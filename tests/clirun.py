"""Run the `tsmigrate` command in this process, as a subprocess would see it.

A CLI test pays about 0.8 s per `python -m tsmigrate.cli` process, nearly all of it imports; in
process the imports are paid once per worker. What a separate process gives for free is put back
here: its own working directory, environment (no TSMIGRATE_/ALIBABA_ variables leak in), empty
stdin, separate stdout and stderr, the program name in usage lines, a traceback on stderr for an
uncaught exception, and a fresh import of the project's models and revision scripts each run
(a test that edits a model file between two commands sees the edit).

Keep real processes for what only a process shows: a kill, a signal, the console script's exit
status, a virtual environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import tsmigrate
from tsmigrate.cli import main
from tsmigrate.contract.functions import SCRIPTS as loaded_scripts
from tsmigrate.schema import model as model_module

# Modules under these stay imported between runs: the interpreter's, the installed packages' and
# tsmigrate's own. Everything else a run imports (the project's models, its revision scripts) is
# forgotten after it, as it would be with the process.
_KEPT_ROOTS = tuple(
    str(Path(p).resolve())
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, Path(tsmigrate.__file__).parent}
)


def _is_project_module(module: object) -> bool:
    file = getattr(module, "__file__", None)
    paths = [file] if file else list(getattr(module, "__path__", None) or ())
    return any(not str(Path(p).resolve()).startswith(_KEPT_ROOTS) for p in paths)


def run(cwd: Path | str, *args: str, extra_env: dict[str, str] | None = None,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`tsmigrate ARGS` in ``cwd``: its exit code, stdout and stderr, as `subprocess.run` gives."""
    unset: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith(("TSMIGRATE_", "ALIBABA_"))
    }
    environment = {**unset, **(extra_env or {})}
    # Another project's modules (an earlier test's, or the repository's `models`) must not
    # answer this run's imports, nor its models be found: hidden during the run, put back after.
    hidden = {name: module for name, module in list(sys.modules.items()) if _is_project_module(module)}
    for name in hidden:
        del sys.modules[name]
    registry = list(model_module._REGISTRY)
    model_module._REGISTRY.clear()
    modules_before = set(sys.modules)
    path_before = list(sys.path)
    scripts_before = set(loaded_scripts)
    cwd_before = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, list(args), input=input, env=environment,
                                    catch_exceptions=True, prog_name="tsmigrate")
    finally:
        os.chdir(cwd_before)
        sys.path[:] = path_before
        model_module._REGISTRY[:] = registry
        for path in set(loaded_scripts) - scripts_before:
            del loaded_scripts[path]
        for name in set(sys.modules) - modules_before:
            if _is_project_module(sys.modules[name]) or name.startswith("_tsmigrate_revision_"):
                del sys.modules[name]
        sys.modules.update(hidden)
    stderr = result.stderr
    code = result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # What the interpreter prints for an exception nothing caught, and its exit status.
        stderr += "".join(traceback.format_exception(result.exception))
        code = 1
    return subprocess.CompletedProcess([*("tsmigrate", *args)], code, result.stdout, stderr)


def instance_env(ots: Any, **more: str) -> dict[str, str]:
    """The variables that point a command at a local test instance (``ots_instance``); ``run``
    drops any others."""
    return {"TSMIGRATE_ENDPOINT": ots.endpoint, "TSMIGRATE_INSTANCE": ots.instance,
            "ALIBABA_CLOUD_ACCESS_KEY_ID": ots.access_key_id,
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ots.access_key_secret, **more}


def run_on(cwd: Path | str, ots: Any, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`tsmigrate ARGS` in ``cwd`` against the local test instance ``ots`` (``env``: more
    variables); a traceback fails the test, whatever the exit code."""
    result = run(cwd, *args, extra_env=instance_env(ots, **env))
    assert "Traceback" not in result.stderr, result.stderr
    return result
