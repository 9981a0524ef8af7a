"""Typed errors of versioned migrations: each names the script or revision and how to fix it."""

from __future__ import annotations

from tsmigrate.errors import TsmigrateError


class MigrationError(TsmigrateError):
    """Base of every versioned-migration error (the CLI prints it without a traceback, exit 1)."""


class ScriptImportError(MigrationError):
    """A revision script (or the package holding the scripts) cannot be imported or is malformed."""


class RevisionCycleError(MigrationError):
    """The revisions' parents form a cycle."""


class MissingParentError(MigrationError):
    """A revision names a parent no script defines."""


class DuplicateRevisionError(MigrationError):
    """Two scripts declare the same revision id."""


class UnknownRevisionError(MigrationError):
    """A revision id (or prefix, or relative spec) matches no revision."""


class NothingToDowngrade(MigrationError):
    """A relative downgrade (``-N``) of an instance with no revision applied."""


class AmbiguousRevisionError(MigrationError):
    """A revision prefix, or a relative step at a branch point, matches more than one revision."""


class MultipleHeadsError(MigrationError):
    """The graph has several heads where one is needed (``head``, ``revision``, ``check``)."""


class SumMismatchError(MigrationError):
    """``tsmigrate.sum`` does not match the scripts: one was edited, added or removed without it."""


class IrreversibleError(MigrationError):
    """A downgrade reached a step that cannot be undone without loss (``op.irreversible``)."""


class OperationError(MigrationError):
    """An ``op`` call that cannot apply to the schema at that point (unknown table, index, ...)."""


class ReplayError(MigrationError):
    """A revision's ``upgrade``/``downgrade`` fails when run offline, or leaves an invalid schema."""
