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
