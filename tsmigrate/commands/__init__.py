"""The CLI's commands, one module per group of verbs; ``tsmigrate.cli`` assembles them.

- ``common``: error reporting, shared options, loading models and inspecting the target
- ``init``: init (scaffold a new project)
- ``status``, ``history``: where the target stands, and what applies did (read calls only)
- ``schema``: validate, show, lint (no instance needed)
- ``plan``: plan
- ``apply``: apply
- ``inspect``: inspect (and adoption with --write-models)
- ``analyze``: analyze (hot partitions in a table's data, from a sample of its rows)
- ``restore``: restore (an archive of a retired month table, back into the target)
"""

from tsmigrate.schema import config as _config


def _lint_settings_problems(key: str, value: object) -> list[str]:
    from tsmigrate.lint import settings_problems  # the lint codes are known once the rules load

    return settings_problems(key, value)


# Every command that loads a project checks [tool.tsmigrate.lint] with lint's own check: config,
# in schema, cannot import lint (above it), so this layer, above both, plugs it in (lint loads
# only when a project has the section).
_config.register_check("lint", _lint_settings_problems)
