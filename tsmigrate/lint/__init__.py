"""Lint: Tablestore design rules with stable codes, run on models and on plans.

Importing the package registers every rule; ``run_lint`` runs them. The codes, their rationale
and examples are documented in ``docs/lint.md``.
"""

from tsmigrate.lint import access, changes, columns, indexes, keys, spread, tables  # noqa: F401 - registers the rules
from tsmigrate.lint.core import (
    ERROR,
    INFO,
    RULES,
    SEVERITIES,
    WARNING,
    Finding,
    LintConfig,
    run_lint,
    settings_problems,
)

__all__ = ["ERROR", "INFO", "RULES", "SEVERITIES", "WARNING", "Finding", "LintConfig", "run_lint",
           "settings_problems"]
