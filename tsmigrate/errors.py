"""Typed errors. Each says what is wrong, where, and how to fix it; the CLI prints them plainly."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs


class TsmigrateError(Exception):
    """Base of every error tsmigrate raises on purpose; the CLI prints it without a traceback."""

    exit_code = 1


@attrs.frozen
class Problem:
    """One broken rule: which model and table, which field, which rule, and how to fix it."""

    table: str
    field: str
    rule: str
    message: str
    fix: str = ""
    model: str = ""

    def where(self) -> str:
        owner = f"{self.model} (table {self.table!r})" if self.model else f"table {self.table!r}"
        return f"{owner}, {self.field}" if self.field else owner

    def __str__(self) -> str:
        text = f"{self.where()}: {self.message} [{self.rule}]"
        return f"{text}\n    fix: {self.fix}" if self.fix else text


class SchemaError(TsmigrateError):
    """A catalog breaks Tablestore's rules; carries every problem found, not just the first."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = tuple(problems)
        count = len(self.problems)
        lines = [f"{count} schema problem{'s' if count != 1 else ''}:"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class ModelError(TsmigrateError):
    """A model declaration cannot be compiled at all (e.g. its module does not import)."""


class KeyDerivationError(TsmigrateError, ValueError):
    """A key derivation is misdeclared, or a value cannot be turned into a key that keeps order."""


class ConfigError(TsmigrateError):
    """The project configuration ([tool.tsmigrate] or command-line options) is invalid."""


class ApplyRefused(TsmigrateError):
    """Apply will not run this plan (and changed nothing)."""


class QueryError(TsmigrateError, ValueError):
    """A query names fields or ranges the table's key (or the index's) cannot serve.

    Kept here, below schema, so that a table family (tsmigrate.schema.families) can refuse a
    range too; its public home is tsmigrate.service, whose errors module re-exports this very
    class, and it names that module as its own (so tracebacks, reprs and pickles read
    ``tsmigrate.service.errors.QueryError`` as they always have)."""

    __module__ = "tsmigrate.service.errors"


class StepFailed(TsmigrateError):
    """A run failed at one of its steps; ``cause`` says why. Kept here, below the engine, so
    that code that knows a better cause (the embedded instance's full disk) can restate it."""

    cause: str

    def with_cause(self, cause: str) -> StepFailed:
        """The same failure, with ``cause`` as its reason."""
        raise NotImplementedError


# Phrasing helpers for configuration errors, shared by config and lint (below both).


def did_you_mean(key: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}known: {', '.join(known)}"


def unknown_keys(where: str, table: Mapping[str, Any], known: Sequence[str]) -> list[str]:
    """A problem per key of ``table`` not in ``known``, with the closest known one."""
    return [f"{where}: unknown key {key!r}; {did_you_mean(key, known)}"
            for key in table if key not in known]
