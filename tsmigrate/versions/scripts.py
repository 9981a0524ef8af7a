"""Revision scripts: where they live, loading them, and the functions they define.

``[tool.tsmigrate] migrations`` names a directory of the project (``"migrations"``) or a package
resource (``"billing_schema:migrations"``: the ``migrations`` folder inside the installed package
``billing_schema``, read through importlib.resources, so a deploy job needs no checkout). The
scripts are ``<migrations>/versions/*.py``; each defines::

    revision = "3f2a9c1e5b7d"
    down_revision = "9b1c..."        # None for a first revision, a tuple for a merge
    message = "add index by_status"
    tsmigrate_version = "0.1.0"      # the tsmigrate that wrote it

    def upgrade(op): ...
    def downgrade(op): ...

Scripts are executed from their source text (not imported by module path), so a directory and a
package resource load the same way; each gets a module registered in ``sys.modules`` so its
functions can be pickled, and ``load_callable`` finds them again from another process.
"""

from __future__ import annotations

import importlib
import importlib.resources
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from tsmigrate.contract import functions
from tsmigrate.versions.errors import DuplicateRevisionError, ScriptImportError, UnknownRevisionError
from tsmigrate.versions.graph import RevisionGraph

if TYPE_CHECKING:
    from importlib.abc import Traversable

VERSIONS = "versions"
SUM_FILE = "tsmigrate.sum"
REVISION_ID = re.compile(r"^[A-Za-z0-9_]+$")


@attrs.frozen
class Location:
    """Where the migrations live: ``files`` to read them, ``path`` to write them (None for an
    installed package), ``label`` for messages, ``prefix`` for script references."""

    files: Traversable
    path: Path | None
    label: str
    prefix: str  # "/abs/dir" or "pkg:resource"

    @property
    def versions(self) -> Traversable:
        return self.files.joinpath(VERSIONS)

    def writable(self) -> Path:
        if self.path is None:
            raise ScriptImportError(
                f"the migrations in {self.label} are inside an installed package: write revisions "
                "in the package's source tree (an editable install), not in site-packages"
            )
        return self.path


def _installed(path: Path) -> bool:
    return any(part in ("site-packages", "dist-packages") for part in path.parts)


def locate(spec: str, root: Path) -> Location:
    """The migrations location ``spec`` names (a directory relative to ``root`` or ``pkg:resource``)."""
    if ":" in spec and not Path(spec).is_absolute():
        package, _, resource = spec.partition(":")
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        try:
            importlib.import_module(package)
            files = importlib.resources.files(package)
        except Exception as exc:  # ModuleNotFoundError, or the package's own import failing
            raise ScriptImportError(
                f"cannot import package {package!r} that [tool.tsmigrate] migrations = {spec!r} "
                f"names: {type(exc).__name__}: {exc}; install it (pip install ...) or correct the "
                "setting"
            ) from None
        for part in filter(None, resource.split("/")):
            files = files.joinpath(part)
        if not files.is_dir():
            raise ScriptImportError(
                f"package {package!r} has no resource folder {resource!r} (migrations = {spec!r}); "
                "ship the migrations folder as package data"
            )
        path = Path(str(files)) if isinstance(files, Path) else None
        if path is not None and _installed(path):
            path = None
        return Location(files=files, path=path, label=f"package resource {spec}", prefix=spec)
    path = (root / spec).resolve()
    return Location(files=path, path=path, label=f"directory {path}", prefix=str(path))


def _parents(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = (value,)
    if isinstance(value, (tuple, list)) and all(isinstance(v, str) and v for v in value):
        if len(set(value)) != len(value):
            raise ScriptImportError(f"{where}: down_revision names a parent twice: {tuple(value)!r}")
        return tuple(value)
    raise ScriptImportError(
        f"{where}: down_revision must be None, a revision id or a tuple of ids (a merge), "
        f"got {value!r}"
    )


@attrs.frozen
class Script:
    revision: str
    down_revisions: tuple[str, ...]
    message: str
    tsmigrate_version: str
    path: str  # a file path, or "pkg:resource/versions/<file>.py"
    filename: str
    source: bytes = attrs.field(repr=False)
    module: types.ModuleType = attrs.field(eq=False, repr=False)

    @property
    def parents(self) -> tuple[str, ...]:
        return self.down_revisions

    @property
    def upgrade(self) -> Callable[[Any], None]:
        return self.module.upgrade

    @property
    def downgrade(self) -> Callable[[Any], None]:
        return self.module.downgrade

    def reference(self, function: Callable[..., Any]) -> str:
        """``<script path>:<qualname>`` of a module-level function of this script."""
        return f"{self.path}:{function.__qualname__}"


def load_script(source: bytes, path: str, filename: str) -> Script:
    module = functions.execute_script(source, path, ScriptImportError)
    where = f"revision script {path}"
    revision = getattr(module, "revision", None)
    if not isinstance(revision, str) or not REVISION_ID.match(revision):
        raise ScriptImportError(
            f"{where}: `revision` must be an id of letters, digits and _ (such as "
            f"'3f2a9c1e5b7d'), got {revision!r}"
        )
    for name in ("upgrade", "downgrade"):
        function = getattr(module, name, None)
        if not callable(function):
            raise ScriptImportError(f"{where}: defines no function {name}(op)")
    message = getattr(module, "message", None)
    if message is None:
        message = (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""
    version = getattr(module, "tsmigrate_version", "")
    if not isinstance(message, str) or not isinstance(version, str):
        raise ScriptImportError(f"{where}: `message` and `tsmigrate_version` must be strings")
    return Script(
        revision=revision,
        down_revisions=_parents(getattr(module, "down_revision", None), where),
        message=message,
        tsmigrate_version=version,
        path=path,
        filename=filename,
        source=source,
        module=module,
    )


def _script_path(location: Location, filename: str) -> str:
    if location.path is not None:
        return str(location.path / VERSIONS / filename)
    return f"{location.prefix}/{VERSIONS}/{filename}"


def script_files(location: Location) -> list[Traversable]:
    versions = location.versions
    if not versions.is_dir():
        return []
    return sorted(
        (f for f in versions.iterdir()
         if f.name.endswith(".py") and not f.name.startswith(("_", ".")) and f.is_file()),
        key=lambda f: f.name,
    )


@attrs.frozen
class ScriptDirectory:
    location: Location
    scripts: dict[str, Script]
    graph: RevisionGraph

    @classmethod
    def load(cls, spec: str, root: Path) -> ScriptDirectory:
        location = locate(spec, root)
        scripts: dict[str, Script] = {}
        for file in script_files(location):
            script = load_script(file.read_bytes(), _script_path(location, file.name), file.name)
            if script.revision in scripts:
                raise DuplicateRevisionError(
                    f"revision {script.revision} is declared by both {scripts[script.revision].path} "
                    f"and {script.path}; give one of them a new id (and fix its children's "
                    "down_revision)"
                )
            scripts[script.revision] = script
        graph = RevisionGraph({rev: s.down_revisions for rev, s in scripts.items()})
        return cls(location=location, scripts=scripts, graph=graph)

    @classmethod
    def from_project(cls, project: Any) -> ScriptDirectory:
        """The scripts of a ``tsmigrate.schema.config.Project`` (its ``migrations`` setting)."""
        return cls.load(project.migrations, project.root)

    def get(self, spec: str) -> Script:
        """The script of a full or partial revision id."""
        return self.scripts[self.graph.lookup(spec)]

    def in_order(self) -> list[Script]:
        """Every script, parents before children (ties by id)."""
        return [self.scripts[rev] for rev in self.graph.topological()]


def load_callable(reference: str) -> Callable[..., Any]:
    """The function ``Script.reference`` named, loaded again in this process if needed
    (``tsmigrate.contract.functions.script_function``: a worker loads it so too)."""
    return functions.script_function(reference, ScriptImportError, UnknownRevisionError)
