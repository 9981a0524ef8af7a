"""Versioned migrations (Alembic-style) over the declarative engine's Steps.

- ``scripts``: load revision scripts from ``migrations/versions/*.py`` (a directory or a package
  resource), ``graph``: the revision DAG (heads, paths, ``head``/``+N``/partial ids),
- ``op``: the ``op`` object scripts call; it collects the engine's own Steps plus ``Backfill`` and
  ``TransformedRewrite`` records, predicting the catalog as it goes,
- ``replay``: collect a script's operations and replay a chain offline onto an empty Catalog,
- ``sumfile``: ``migrations/tsmigrate.sum``, ``autogen``: render Steps into a new script.
"""
