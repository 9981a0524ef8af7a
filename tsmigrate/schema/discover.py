"""Finding models: import the configured modules (packages recursively) and collect the Model
classes they define."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from tsmigrate.errors import ModelError
from tsmigrate.schema.model import Model, registered_models


def _import(name: str, root: Path) -> ModuleType:
    try:
        return importlib.import_module(name)
    except (Exception, SystemExit) as exc:  # a module that calls sys.exit() while importing, too
        # Name the module and the line that failed, without dumping a traceback on the user.
        frames = traceback.extract_tb(exc.__traceback__)
        # The innermost frame of the project's code (a model's line, not the tsmigrate code that
        # refused its arguments); a SyntaxError has none (its message says where).
        ours = [f for f in frames if not f.filename.startswith("<")  # generated code
                and Path(f.filename).resolve().is_relative_to(root.resolve())]
        others = [f for f in frames if "importlib" not in f.filename and f.filename != __file__]
        where = next((f"{f.filename}:{f.lineno}" for f in reversed(ours or others)), "")
        detail = f"{type(exc).__name__}: {exc}"
        raise ModelError(
            f"cannot import models module {name!r}: {detail}" + (f" ({where})" if where else "")
        ) from exc


def _module_name(spec: str, root: Path) -> str:
    """Accept dotted module paths and file or folder paths relative to the project root."""
    if spec.endswith(".py") or "/" in spec or spec.startswith("."):
        path = (root / spec).resolve()
        try:
            relative = path.relative_to(root)
        except ValueError:
            raise ModelError(f"models path {spec!r} is outside the project {root}") from None
        parts = list(relative.with_suffix("").parts) if path.suffix == ".py" else list(relative.parts)
        return ".".join(parts)
    return spec


def import_models(specs: Iterable[str], root: Path) -> list[type[Model]]:
    """Import every module of ``specs`` (a package brings its submodules) and return the concrete
    models they define, in definition order."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    modules: set[str] = set()
    for spec in specs:
        name = _module_name(spec, root)
        module = _import(name, root)
        modules.add(module.__name__)
        if hasattr(module, "__path__"):
            for info in pkgutil.walk_packages(module.__path__, prefix=f"{module.__name__}."):
                modules.add(_import(info.name, root).__name__)
    found = [m for m in registered_models() if m.__module__ in modules]
    if not found:
        raise ModelError(
            f"no models found in {', '.join(specs)}; define Model subclasses there or point "
            "[tool.tsmigrate] models (or --models) at the modules that do"
        )
    return found
