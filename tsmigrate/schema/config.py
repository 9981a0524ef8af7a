"""Project configuration: ``[tool.tsmigrate]`` in the nearest pyproject.toml.

The whole table is checked when it is read: unknown keys (with the closest known one), wrong
types, empty lists. Every problem is reported at once, each naming the key and showing an example
of a correct value, so a typo such as ``modles`` fails loudly instead of being ignored.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from tsmigrate.errors import ConfigError, unknown_keys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

DEFAULT_MODELS = ("models",)
DEFAULT_MIGRATIONS = "migrations"
WORKFLOWS = ("declarative", "versioned")


@attrs.frozen
class Project:
    root: Path
    models: tuple[str, ...] = DEFAULT_MODELS
    migrations: str = DEFAULT_MIGRATIONS
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    pyproject: Path | None = None
    # declarative: apply changes the instance to match the models; versioned: upgrade runs the
    # revisions in migrations/, and apply points there.
    workflow: str = WORKFLOWS[0]

    @property
    def versioned(self) -> bool:
        return self.workflow == "versioned"


def find_pyproject(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


# --- validation of [tool.tsmigrate] --------------------------------------------------------------

Check = Callable[[str, Any], list[str]]


def _module_list(key: str, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(m, str) and m.strip() for m in value):
        return [f"{key} must be a list of module or package paths, got {value!r}; "
                'example: models = ["models"]']
    if not value:
        return [f"{key} is empty: name at least one module or package holding the models; "
                'example: models = ["models"]']
    return []


def _path(key: str, value: Any) -> list[str]:
    if not isinstance(value, str) or not value.strip():
        return [f'{key} must be a directory path, got {value!r}; example: migrations = "migrations"']
    return []


def _workflow(key: str, value: Any) -> list[str]:
    if value not in WORKFLOWS:
        return [f"{key} must be one of {', '.join(map(repr, WORKFLOWS))}, got {value!r}; "
                'example: workflow = "versioned"']
    return []


def _lint(key: str, value: Any) -> list[str]:
    """[tool.tsmigrate.lint] names lint codes, known once the rules of tsmigrate.lint load, and
    schema imports nothing above it: the layers above both that load projects (the commands, the
    pytest plugin) register lint's own check (``register_check``) in place of this one. Checking
    the section before then is a wiring bug: fail loudly rather than let every code pass."""
    raise RuntimeError(
        f"{key} cannot be checked: its check is tsmigrate.lint.settings_problems, which schema "
        "does not import; register it first with "
        "tsmigrate.schema.config.register_check('lint', check), as tsmigrate.commands does")


TARGET_KEYS = ("endpoint", "instance", "table_ops_per_s")


def _targets(key: str, value: Any) -> list[str]:
    example = (f'    [{key}.prod]\n    endpoint = "https://myinstance.cn-hangzhou.ots.aliyuncs.com"\n'
               '    instance = "myinstance"')
    if not isinstance(value, dict):
        return [f"[{key}] must hold one table per target, got {value!r}; example:\n{example}"]
    problems = []
    for name, spec in value.items():
        where = f"{key}.{name}"
        if not isinstance(spec, dict):
            problems.append(f"[{where}] must be a table, got {spec!r}; example:\n{example}")
            continue
        problems += unknown_keys(where, spec, TARGET_KEYS)
        for field in ("endpoint", "instance"):
            if field in spec and (not isinstance(spec[field], str) or not spec[field]):
                problems.append(f"{where}.{field} must be a non-empty string, got {spec[field]!r}")
        rate = spec.get("table_ops_per_s", 0)
        if not isinstance(rate, int) or isinstance(rate, bool) or rate < 0:
            problems.append(
                f"{where}.table_ops_per_s must be a whole number of table operations per second "
                f"(0: no pacing), got {rate!r}; example: table_ops_per_s = 10"
            )
    return problems


SECTIONS: dict[str, Check] = {
    "models": _module_list,
    "migrations": _path,
    "workflow": _workflow,
    "lint": _lint,
    "targets": _targets,
}


def register_check(section: str, check: Check) -> None:
    """Check ``[tool.tsmigrate.<section>]`` with ``check`` (``check(key, value)`` returns the
    problems, each a message naming ``key``), for a section whose rules live above schema."""
    if section not in SECTIONS:
        raise ValueError(f"no section {section!r} in [tool.tsmigrate]; "
                         f"known: {', '.join(SECTIONS)}")
    SECTIONS[section] = check


def validate_settings(settings: Any, source: str = "[tool.tsmigrate]") -> None:
    """Raise one ConfigError listing every problem of the ``[tool.tsmigrate]`` table."""
    if not isinstance(settings, dict):
        raise ConfigError(f"{source}: [tool.tsmigrate] must be a table, got {settings!r}")
    problems = unknown_keys("tool.tsmigrate", settings, tuple(SECTIONS))
    for key, check in SECTIONS.items():
        if key in settings:
            problems += check(f"tool.tsmigrate.{key}", settings[key])
    if problems:
        count = len(problems)
        lines = [f"{source}: {count} configuration problem{'s' if count != 1 else ''}:"]
        lines += [f"  - {p}" for p in problems]
        raise ConfigError("\n".join(lines))


def read_pyproject(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from None


def load_project(start: Path | None = None, models: Sequence[str] = ()) -> Project:
    """Read the project around ``start`` (default: the working directory); ``models`` given on
    the command line replace the configured ones."""
    start = (start or Path.cwd()).resolve()
    pyproject = find_pyproject(start)
    settings: dict[str, Any] = {}
    root = start
    if pyproject is not None:
        tool = read_pyproject(pyproject).get("tool", {})
        settings = tool.get("tsmigrate", {}) if isinstance(tool, dict) else {}
        validate_settings(settings, str(pyproject))
        root = pyproject.parent
    configured = settings.get("models", list(DEFAULT_MODELS))
    if isinstance(configured, str):
        configured = [configured]
    return Project(
        root=root,
        models=tuple(models) or tuple(configured),
        migrations=settings.get("migrations", DEFAULT_MIGRATIONS),
        workflow=settings.get("workflow", WORKFLOWS[0]),
        settings=settings,
        pyproject=pyproject,
    )
