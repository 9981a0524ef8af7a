"""A row of one side of a rewrite as the other side stores it (``tsmigrate.service.routing``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tsmigrate.errors import TsmigrateError
from tsmigrate.service.errors import RowValueError


class Translator:
    """Rows of one side of a rewrite as the other side stores them: the rewrite's key transform
    one way, its inverse (the transform of the target's key back to the source's) the other."""

    def __init__(self, job: Any, own_is_source: bool):
        from tsmigrate.contract import transform  # loaded when a rewrite is routed, not before

        forward = transform.build(job)
        backward = transform.RowTransform.build(job.target, job.source)
        self.out, self.back = (forward, backward) if own_is_source else (backward, forward)
        self.own_table, self.other_table = (
            (job.source.name, job.target.name) if own_is_source else (job.target.name, job.source.name)
        )
        # The other table may refuse UpdateRow when this side's table takes it (routed.py).
        self.other_allows_update = (job.target if own_is_source else job.source).options.allow_update

    def _values(self, pk: Sequence[tuple[str, Any]], cells: Sequence[Sequence[Any]], what: str) -> dict:
        try:
            return self.out.natural(list(pk), [(c[0], c[1]) for c in cells])
        except TsmigrateError as exc:
            raise self._refused(pk, what, exc) from None

    def _refused(self, pk: Sequence[tuple[str, Any]], what: str, exc: Exception) -> RowValueError:
        return RowValueError(
            f"{self.own_table} is being rewritten and {self.other_table} takes the writes now: "
            f"the {what} of {list(pk)} cannot be located there ({exc}); give the whole row "
            "(or its fields) rather than its key alone"
        )

    def key(self, pk: Sequence[tuple[str, Any]], cells: Sequence[Sequence[Any]] = (),
            what: str = "row") -> list[tuple[str, Any]]:
        values = self._values(pk, cells, what)
        try:
            return list(self.out.target_key(values, list(pk)))
        except TsmigrateError as exc:
            raise self._refused(pk, what, exc) from None

    def cells(self, pk: Sequence[tuple[str, Any]], cells: Sequence[Sequence[Any]]) -> list:
        """Attribute cells of the other side: columns that enter its key leave, fields of this
        key that its key does not hold come in (so its rows tell the key they came from)."""
        values = self._values(pk, cells, "row")
        present = {c[0] for c in cells}
        kept = [tuple(c) for c in cells if c[0] not in self.out.dropped]
        return kept + [(f, values[f]) for f in self.out.added if f not in present and f in values]

    def check_columns(self, names: Sequence[str], pk: Sequence[tuple[str, Any]]) -> None:
        moving = [n for n in names if n in self.out.dropped or n in self.out.key_sources]
        if moving:
            raise RowValueError(
                f"{self.own_table} is being rewritten and {self.other_table} takes the writes now; "
                f"{', '.join(moving)} of {list(pk)} is part of {self.other_table}'s key there, so "
                "changing it moves the row: put the whole row instead of updating it"
            )

    def row_back(self, row: Any) -> tuple[list, list]:
        """A row read from the other side, as this side stores it (key, cells)."""
        if row is None or not (row.primary_key or row.attribute_columns):
            return [], []
        cells = [tuple(c) if len(c) >= 3 else (c[0], c[1], 0) for c in row.attribute_columns]
        translated = self.back.apply(row.primary_key, cells)
        return list(translated.primary_key), [tuple(c) for c in translated.columns]
