"""Project configuration: ``[tool.tsmigrate]`` in the nearest pyproject.toml."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from tsmigrate.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


@attrs.frozen
class Project:
    root: Path
    models: tuple[str, ...] = ("models",)
    migrations: str = "migrations"
    settings: Mapping[str, Any] = attrs.field(factory=dict)


def find_pyproject(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_project(start: Path | None = None, models: Sequence[str] = ()) -> Project:
    """Read the project around ``start`` (default: the working directory); ``models`` given on
    the command line replace the configured ones."""
    start = (start or Path.cwd()).resolve()
    pyproject = find_pyproject(start)
    settings: dict[str, Any] = {}
    root = start
    if pyproject is not None:
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{pyproject}: cannot read it: {exc}") from None
        settings = data.get("tool", {}).get("tsmigrate", {})
        if not isinstance(settings, dict):
            raise ConfigError(f"{pyproject}: [tool.tsmigrate] must be a table")
        root = pyproject.parent
    configured = settings.get("models", ["models"])
    if isinstance(configured, str):
        configured = [configured]
    if not isinstance(configured, list) or not all(isinstance(m, str) for m in configured):
        raise ConfigError(
            f"{pyproject}: [tool.tsmigrate] models must be a list of module paths, "
            f"got {configured!r}"
        )
    migrations = settings.get("migrations", "migrations")
    if not isinstance(migrations, str):
        raise ConfigError(f"{pyproject}: [tool.tsmigrate] migrations must be a path")
    return Project(
        root=root,
        models=tuple(models) or tuple(configured),
        migrations=migrations,
        settings=settings,
    )
