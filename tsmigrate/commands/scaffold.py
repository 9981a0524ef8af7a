"""`tsmigrate init`: the files a new project starts from.

``[tool.tsmigrate]`` in ``pyproject.toml`` (the file created, or the table appended to an existing
one, leaving the rest byte for byte), a ``models/`` package with one commented example model that
compiles and plans, ``migrations/`` laid out as Alembic does (``versions/`` holds the scripts), and
``.tsmigrate/`` (the embedded local instance's data) in ``.gitignore``.

Nothing is overwritten: every conflict is found before anything is written, and all of them are
reported at once. The file contents come from ``templates/init/*.j2``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs
import jinja2

from tsmigrate.errors import TsmigrateError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

MODELS_PACKAGE = "models"
MIGRATIONS_DIR = "migrations"
LOCAL_DATA_IGNORE = ".tsmigrate/"
_IGNORE_NOTE = "the embedded local instance's data stays out of git"

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("tsmigrate.commands", "templates/init"),
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)


class InitRefused(TsmigrateError):
    """``tsmigrate init`` would overwrite something (or cannot edit pyproject.toml); nothing was
    written."""


@attrs.frozen
class Change:
    """One file init writes: its whole new content, and what it says about it."""

    path: Path
    content: str
    what: str  # "created", or what was added to an existing file
    existed: bool = False
    note: str = ""

    def describe(self, root: Path) -> str:
        name = self.path.relative_to(root).as_posix()
        text = f"{self.what} to {name}" if self.existed else f"{self.what} {name}"
        return f"{text} ({self.note})" if self.note else text


def _render(template: str, **values: str) -> str:
    return _ENV.get_template(template).render(**values)


def _pyproject_change(path: Path, problems: list[str]) -> Change | None:
    table = _render("pyproject_table.toml.j2", models_package=MODELS_PACKAGE,
                    migrations_dir=MIGRATIONS_DIR)
    if not path.exists():
        return Change(path, table, "created")
    try:
        text = path.read_bytes().decode("utf-8")
        existing = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        problems.append(f"{path.name}: cannot read it ({exc}); fix it, then run tsmigrate init again")
        return None
    tool = existing.get("tool")
    if isinstance(tool, dict) and "tsmigrate" in tool:
        problems.append(f"{path.name} already has a [tool.tsmigrate] table: this is a tsmigrate "
                        "project already (edit that table instead)")
        return None
    newline = "\r\n" if "\r\n" in text else "\n"
    separator = "" if not text.strip() else (newline if text.endswith("\n") else newline * 2)
    updated = text + separator + table.replace("\n", newline)
    try:
        tomllib.loads(updated)
    except tomllib.TOMLDecodeError as exc:  # e.g. `tool = {...}`, an inline table, cannot grow
        problems.append(f"{path.name}: appending [tool.tsmigrate] would not be valid TOML ({exc}); "
                        f"add this table by hand:\n{table}")
        return None
    return Change(path, updated, "added [tool.tsmigrate]", existed=True)


def _gitignore_change(path: Path) -> Change | None:
    if not path.exists():
        return Change(path, f"{LOCAL_DATA_IGNORE}\n", "created", note=_IGNORE_NOTE)
    text = path.read_text(encoding="utf-8")
    if any(line.strip().strip("/") == LOCAL_DATA_IGNORE.strip("/") for line in text.splitlines()):
        return None
    separator = "" if not text or text.endswith("\n") else "\n"
    return Change(path, f"{text}{separator}{LOCAL_DATA_IGNORE}\n", f"added {LOCAL_DATA_IGNORE}",
                  existed=True, note=_IGNORE_NOTE)


def plan_init(root: Path) -> list[Change]:
    """Every file init would write in ``root``; ``InitRefused`` naming every conflict instead
    when one of them exists already."""
    if root.exists() and not root.is_dir():
        raise InitRefused(f"{root} is not a directory")
    problems: list[str] = []
    for taken in (root / MODELS_PACKAGE, root / f"{MODELS_PACKAGE}.py", root / MIGRATIONS_DIR):
        if taken.exists():
            kind = "/" if taken.is_dir() else ""
            problems.append(f"{taken.name}{kind} exists already (init writes {MODELS_PACKAGE}/ and "
                            f"{MIGRATIONS_DIR}/, and overwrites nothing)")
    pyproject = _pyproject_change(root / "pyproject.toml", problems)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise InitRefused(f"tsmigrate init changed nothing in {root}:\n{listed}")
    models, migrations = root / MODELS_PACKAGE, root / MIGRATIONS_DIR
    changes = [
        pyproject,
        Change(models / "__init__.py", _render("models_init.py.j2"), "created"),
        Change(models / "orders.py", _render("example_model.py.j2"), "created",
               note="an example model: table orders"),
        Change(migrations / "README.md", _render("migrations_README.md.j2"), "created"),
        # Git keeps no empty directory; the versioned-migration scripts will go next to this.
        Change(migrations / "versions" / ".gitkeep", "", "created",
               note="migration scripts go in versions/"),
        _gitignore_change(root / ".gitignore"),
    ]
    return [c for c in changes if c is not None]


def write(changes: Sequence[Change]) -> None:
    """Write every change, or none: on a failure midway, what was written is undone."""
    done: list[tuple[Change, bytes | None]] = []
    created_dirs: list[Path] = []
    try:
        for change in changes:
            for parent in reversed(change.path.parents):
                if not parent.exists():
                    parent.mkdir()
                    created_dirs.append(parent)
            before = change.path.read_bytes() if change.existed else None
            with change.path.open("x" if not change.existed else "w", encoding="utf-8",
                                  newline="") as file:
                done.append((change, before))
                file.write(change.content)
    except OSError as exc:
        for change, before in reversed(done):
            with contextlib.suppress(OSError):
                if before is None:
                    change.path.unlink()
                else:
                    change.path.write_bytes(before)
        for directory in reversed(created_dirs):
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise InitRefused(f"cannot write {exc.filename}: {exc.strerror}; nothing was changed") from None


def init_project(root: Path) -> list[Change]:
    """Scaffold a project in ``root`` (created if missing); returns what was written."""
    changes = plan_init(root)
    write(changes)
    return changes
