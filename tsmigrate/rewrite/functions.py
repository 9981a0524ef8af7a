"""User functions that split tasks call (a backfill's row function, a rewrite's key transform),
named by a reference string so that any worker can load them: a thread, a process pool, a Dask
worker, or the run that resumes a killed one.

A reference is ``"package.module:function"`` (imported), or ``"<script>.py:function"`` for a
function of a revision script (a file path, or ``pkg:resource/versions/x.py`` inside an
installed package), which ``tsmigrate.versions.scripts.load_callable`` loads the way the
scripts were loaded (scripts are not importable modules). Only top-level functions have a
reference; a lambda or a nested function cannot be found again by another process.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tsmigrate.errors import TsmigrateError


class FunctionError(TsmigrateError):
    """A function reference that cannot be made or loaded."""


def reference(fn: Callable[..., Any], what: str) -> str:
    """The reference of a module-level function (``what`` names its use in errors)."""
    if isinstance(fn, str):
        return fn
    qualname = getattr(fn, "__qualname__", "")
    if not callable(fn) or not qualname or "<" in qualname:
        raise FunctionError(
            f"{what} must be a function defined at the top level of its module or migration "
            f"script (got {fn!r}): workers and a resumed run load it again by name"
        )
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is not None and _importable(module.__name__, path):
        return f"{module.__name__}:{qualname}"
    code = getattr(fn, "__code__", None)
    path = path or (code.co_filename if code is not None else None)
    if not path or not str(path).endswith(".py"):
        raise FunctionError(f"{what} {qualname!r} comes from no script that a worker could load")
    return f"{Path(path).resolve() if Path(path).is_file() else path}:{qualname}"


def _importable(name: str, path: str | None) -> bool:
    """Whether importing ``name`` in a fresh process finds this same file."""
    if name == "__main__" or not path:
        return False
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None)
    return bool(origin) and Path(origin).resolve() == Path(path).resolve()


def resolve(ref: str, what: str = "function") -> Callable[..., Any]:
    """The function a reference names (importing its module, or loading its script)."""
    location, _, qualname = ref.rpartition(":")
    if not location or not qualname:
        raise FunctionError(f"{what} {ref!r} is not 'module:function' or 'script.py:function'")
    try:
        if location.endswith(".py"):
            from tsmigrate.versions.scripts import load_callable

            target: Any = load_callable(ref)
        else:
            target = importlib.import_module(location)
            for part in qualname.split("."):
                target = getattr(target, part)
    except Exception as exc:  # ImportError, AttributeError, a script that fails or is gone
        raise FunctionError(f"{what} {ref!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
    if not callable(target):
        raise FunctionError(f"{what} {ref!r} is not a function")
    return target
