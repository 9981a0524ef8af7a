"""Column conditions and filters, written with model field names:

    (Attr("battery") < 20) & (Attr("status") == "active")
    Attr("owner").eq("ann", if_missing=True)      # also passes rows without the column
    ~(Attr("temp_c") > 80.0) | (Attr("kind") != "probe")

The same expression is a write condition (put/update/delete) or a server-side read filter.
A row without the column fails a comparison unless ``if_missing=True`` (Tablestore's
``pass_if_missing``, whose own default of True is a classic source of wrong results).
"""

from __future__ import annotations

from typing import Any

from tablestore import metadata as md

from tsmigrate.service.codec import ModelCodec


class Condition:
    """Base of condition expressions; combine with ``&``, ``|`` and ``~``."""

    def __and__(self, other: Condition) -> Condition:
        return Logical(md.LogicalOperator.AND, (self, other))

    def __or__(self, other: Condition) -> Condition:
        return Logical(md.LogicalOperator.OR, (self, other))

    def __invert__(self) -> Condition:
        return Logical(md.LogicalOperator.NOT, (self,))

    def sdk(self, codec: ModelCodec) -> md.ColumnCondition:
        raise NotImplementedError

    def fields(self) -> frozenset[str]:
        """The fields the condition reads (a read must fetch their columns for it to see them)."""
        raise NotImplementedError


class Compare(Condition):
    def __init__(self, field: str, comparator: int, value: Any, if_missing: bool = False):
        self.field = field
        self.comparator = comparator
        self.value = value
        self.if_missing = if_missing

    def sdk(self, codec: ModelCodec) -> md.ColumnCondition:
        column, value = codec.value(self.field, self.value)
        return md.SingleColumnCondition(
            column, value, self.comparator, pass_if_missing=self.if_missing, latest_version_only=True
        )

    def fields(self) -> frozenset[str]:
        return frozenset((self.field,))

    def __repr__(self) -> str:
        return f"Compare({self.field!r}, {self.comparator}, {self.value!r})"


class Logical(Condition):
    def __init__(self, operator: int, parts: tuple[Condition, ...]):
        self.operator = operator
        flattened: list[Condition] = []
        for part in parts:
            if not isinstance(part, Condition):
                raise TypeError(f"conditions combine with conditions, not {part!r}")
            same = isinstance(part, Logical) and part.operator == operator != md.LogicalOperator.NOT
            flattened.extend(part.parts if same else (part,))
        self.parts = tuple(flattened)

    def fields(self) -> frozenset[str]:
        return frozenset().union(*(part.fields() for part in self.parts))

    def sdk(self, codec: ModelCodec) -> md.ColumnCondition:
        composite = md.CompositeColumnCondition(self.operator)
        for part in self.parts:
            composite.add_sub_condition(part.sdk(codec))
        return composite


class Attr:
    """A model field in a condition: ``Attr("battery") < 20``."""

    def __init__(self, field: str):
        self.field = field

    def _compare(self, comparator: int, value: Any, if_missing: bool) -> Compare:
        if value is None:
            raise ValueError(
                f"comparing {self.field!r} with None: None means 'not stored'; "
                "use expect= on the row, or if_missing=True"
            )
        return Compare(self.field, comparator, value, if_missing)

    def eq(self, value: Any, *, if_missing: bool = False) -> Compare:
        return self._compare(md.ComparatorType.EQUAL, value, if_missing)

    def ne(self, value: Any, *, if_missing: bool = False) -> Compare:
        return self._compare(md.ComparatorType.NOT_EQUAL, value, if_missing)

    def lt(self, value: Any, *, if_missing: bool = False) -> Compare:
        return self._compare(md.ComparatorType.LESS_THAN, value, if_missing)

    def le(self, value: Any, *, if_missing: bool = False) -> Compare:
        return self._compare(md.ComparatorType.LESS_EQUAL, value, if_missing)

    def gt(self, value: Any, *, if_missing: bool = False) -> Compare:
        return self._compare(md.ComparatorType.GREATER_THAN, value, if_missing)

    def ge(self, value: Any, *, if_missing: bool = False) -> Compare:
        return self._compare(md.ComparatorType.GREATER_EQUAL, value, if_missing)

    __eq__ = eq  # type: ignore[assignment]
    __ne__ = ne  # type: ignore[assignment]
    __lt__ = lt
    __le__ = le
    __gt__ = gt
    __ge__ = ge
    __hash__ = None  # type: ignore[assignment]


def sdk_condition(condition: Condition | None, codec: ModelCodec) -> md.ColumnCondition | None:
    if condition is None:
        return None
    if not isinstance(condition, Condition):
        raise TypeError(f"expected a condition such as Attr('x') == 1, got {condition!r}")
    return condition.sdk(codec)
