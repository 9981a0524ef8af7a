"""User functions that split tasks call (a backfill's row function, a rewrite's key transform),
named by a reference string so that any worker can load them: a thread, a process pool, a Dask
worker, or the run that resumes a killed one.

A reference is ``"package.module:function"`` (imported), or ``"<script>.py:function"`` for a
function of a revision script (a file path, or ``pkg:resource/versions/x.py`` inside an
installed package), which ``script_function`` loads the way ``tsmigrate.versions.scripts``
loads the scripts (from their source text, by ``execute_script``: scripts are not importable
modules). Only top-level functions have a reference; a lambda or a nested function cannot be
found again by another process.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.resources
import importlib.util
import re
import sys
import traceback
import types
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
            target: Any = script_function(ref)
        else:
            target = importlib.import_module(location)
            for part in qualname.split("."):
                target = getattr(target, part)
    except Exception as exc:  # ImportError, AttributeError, a script that fails or is gone
        raise FunctionError(f"{what} {ref!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
    if not callable(target):
        raise FunctionError(f"{what} {ref!r} is not a function")
    return target


# --- functions of revision scripts ---------------------------------------------------------------
# A script is executed from its source text into a module registered in sys.modules under a name
# made from its path (so its functions pickle); a process that has not loaded it (a worker, a
# resumed run) executes it again from its path.

SCRIPTS: dict[str, types.ModuleType] = {}  # path -> the module of a script this process loaded


def script_module_name(path: str) -> str:
    """The name of the module a revision script at ``path`` is executed into."""
    stem = re.sub(r"\W", "_", path.rsplit("/", 1)[-1].removesuffix(".py"))
    return f"_tsmigrate_revision_{hashlib.sha1(path.encode()).hexdigest()[:10]}_{stem}"


def execute_script(source: bytes, path: str, error: type[Exception] = FunctionError) -> types.ModuleType:
    """The module of the revision script ``source`` (read from ``path``), executed; ``error``
    (naming the line that failed) when it fails to import."""
    module = types.ModuleType(script_module_name(path))
    module.__file__ = path
    try:
        code = compile(source, path, "exec")
        sys.modules[module.__name__] = module
        exec(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module.__name__, None)
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
        line = f":{frames[-1].lineno}" if frames else ""
        if isinstance(exc, SyntaxError):
            line = f":{exc.lineno}"
        raise error(
            f"revision script {path}{line} fails to import: {type(exc).__name__}: {exc}"
        ) from None
    return module


def script_function(reference: str, unreadable: type[Exception] = FunctionError,
                    missing: type[Exception] = FunctionError) -> Callable[..., Any]:
    """The function ``"<script path>:<qualname>"`` names, its script loaded again in this process
    if needed: ``unreadable`` when the script cannot be read or fails to import, ``missing`` when
    it defines no such function."""
    path, _, qualname = reference.rpartition(":")
    module = SCRIPTS.get(path) or sys.modules.get(script_module_name(path))
    if module is None:
        try:
            if Path(path).is_file():
                source = Path(path).read_bytes()
            else:
                package, _, rest = path.partition(":")
                files: Any = importlib.resources.files(package)
                for part in filter(None, rest.split("/")):
                    files = files.joinpath(part)
                source = files.read_bytes()
        except Exception as exc:  # a missing file, a package that is not installed
            raise unreadable(
                f"cannot read revision script {path} (for {reference}): {type(exc).__name__}: {exc}"
            ) from None
        module = execute_script(source, path, unreadable)
    SCRIPTS[path] = module
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise missing(f"revision script {path} defines no {qualname}")
    return target
