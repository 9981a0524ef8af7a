"""tsmigrate: declarative schema-as-code and migrations for Alibaba Cloud Tablestore."""

__version__ = "0.1.0"

import importlib as _importlib
import importlib.machinery as _machinery
import logging as _logging
import sys as _sys
import warnings as _warnings
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING as _TYPE_CHECKING

# The SDK warns on import that its optional C++ codec is missing (it uses Python's): a notice,
# not a fault, that would open every service script's and test run's output. Set before any
# tsmigrate module imports the SDK; its other warnings still show.
for _name in ("tablestore.encoder", "tablestore.decoder"):
    _logging.getLogger(_name).setLevel(_logging.ERROR)

# The declarations load on first use (PEP 562), so that importing a part of tsmigrate that needs
# none of them (the local server: `import tsmigrate.local.server`) loads no model or schema code.
_PUBLIC = {
    **dict.fromkeys(("AccessPattern", "Column", "GlobalIndex", "LocalIndex", "Model", "PrimaryKey",
                     "SearchField", "SearchIndex"), "tsmigrate.schema.model"),
    "Monthly": "tsmigrate.schema.families",
}

if _TYPE_CHECKING:
    from tsmigrate.schema.families import Monthly
    from tsmigrate.schema.model import (
        AccessPattern,
        Column,
        GlobalIndex,
        LocalIndex,
        Model,
        PrimaryKey,
        SearchField,
        SearchIndex,
    )


def __getattr__(name: str) -> object:
    home = _PUBLIC.get(name)
    if home is None:
        raise AttributeError(f"module 'tsmigrate' has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


# The public API is this package, tsmigrate.keys, tsmigrate.service, tsmigrate.schema,
# tsmigrate.local.testing and tsmigrate.local.faults (README "Public API"; held by
# tests/core/test_public_api.py). Every other module is internal and may move.
__all__ = [
    "AccessPattern",
    "Column",
    "GlobalIndex",
    "LocalIndex",
    "Model",
    "Monthly",
    "PrimaryKey",
    "SearchField",
    "SearchIndex",
    "__version__",
]

# Module paths that existed at a832d9a and moved (b856fd5, 969969e; the wire layer's and the rewrite
# contract's since, with the contract's rewrite/shapes.py, written after a832d9a), importable
# under the old name until a later release. Importing one warns (DeprecationWarning, naming the new path, at
# the importing line) and gives the module it became, the very same object; an old module now
# split in two gives a module holding both one's public names. No file of tsmigrate's stands at
# these paths (the top level keeps to the layers README's Layout lists): a finder at the end of
# sys.meta_path answers for them, after every real module.
_MOVED: dict[str, tuple[str, ...]] = {
    **{f"tsmigrate.{name}": (f"tsmigrate.schema.{name}",) for name in (
        "adopt", "config", "discover", "families", "model", "render", "validate")},
    **{f"tsmigrate.{name}": (f"tsmigrate.planning.{name}",) for name in (
        "drift", "familyplan", "ops", "plan", "planfile", "planrender")},
    **{f"tsmigrate.{name}": (f"tsmigrate.instance.{name}",) for name in (
        "adapter", "apply", "history", "pacing", "pipeprogress", "rawclient", "records", "retry",
        "state", "status", "target")},
    "tsmigrate.scaffold": ("tsmigrate.commands.scaffold",),
    "tsmigrate.service.family": ("tsmigrate.instance.archive", "tsmigrate.service.restore"),
    # The wire protocol, out of the local server and the client side into its own layer (#40).
    **{f"tsmigrate.local.{name}": (f"tsmigrate.wire.{name}",) for name in (
        "plainbuffer", "protoext", "search_protocol", "table_protocol")},
    "tsmigrate.instance.protowire": ("tsmigrate.wire.protowire",),
    "tsmigrate.service.wire": ("tsmigrate.wire.rows",),
    # The rewrite's contract with services and planning, out of the engine (#40): the key
    # transform and its inverse, the row bytes they work on, and which tables can be rewritten.
    **{f"tsmigrate.rewrite.{name}": (f"tsmigrate.contract.{name}",) for name in (
        "functions", "rekey", "rowbytes", "shapes", "transform")},
}


class _MovedModules:
    """Finder and loader of the ``_MOVED`` paths."""

    tsmigrate_moved = True  # marks the one instance on sys.meta_path

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        return _machinery.ModuleSpec(name, self) if name in _MOVED else None

    def create_module(self, spec: object) -> None:
        return None  # the default module; exec_module fills or replaces it

    def exec_module(self, module: _ModuleType) -> None:
        name = module.__name__
        homes = _MOVED[name]
        # stacklevel 2: the frame importing the old path (warnings skips importlib's own frames)
        _warnings.warn(f"{name} moved to {' and '.join(homes)}; import it from there (this alias "
                       "goes in a later release)", DeprecationWarning, stacklevel=2)
        modules = [_importlib.import_module(home) for home in homes]
        if len(modules) == 1:
            _sys.modules[name] = modules[0]  # what the import statement gives: the new module
            return
        for home in reversed(modules):  # the first home's name wins (the same object anyway)
            module.__dict__.update({k: v for k, v in vars(home).items() if not k.startswith("_")})


if not any(getattr(finder, "tsmigrate_moved", False) for finder in _sys.meta_path):
    _sys.meta_path.append(_MovedModules())
