"""Key derivations: how a primary-key value is computed from a row's fields.

One definition, used by models on write and on query and by the rewrite engine when it computes
new keys from old rows. Each derivation is a frozen value that is part of the schema IR, so a diff
sees a changed derivation (a different hash length is a different key, and needs a rewrite).

The derivations follow Tablestore's primary-key design guidance:

- ``HashPrefix``: ``md5(value)[:N] + sep + value`` spreads sequential ids over partitions.
- ``Concat``: several fields in one key; integers zero-padded to a fixed width and a separator
  that sorts below every data character, so the string order equals the order of the tuples.
- ``TimeBucket``: ``value mod N`` as a leading key column, to spread a time-ordered write load.
- ``Descending``: ``ceiling - value``, so a forward range read returns the newest first.

``invert(key)`` gives back the source values a key was built from (the rewrite engine reads old
keys with it): strip the hash prefix, split the concatenation and drop its padding, undo the
descending order. A time bucket cannot be inverted (``invertible`` is False); it is recomputed
from its source, which the row keeps elsewhere.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping
from typing import Any, ClassVar, Union

import attrs

from tsmigrate.errors import KeyDerivationError

# Public (README "Public API"): the derivations a model declares, and the error they raise.
__all__ = [
    "Concat", "Derivation", "Descending", "HashPrefix", "KeyDerivationError", "TimeBucket",
    "derivation_from_dict",
]

INT64_MAX = 2**63 - 1

Bound = Union[tuple[Any, bool], None]  # noqa: UP007 - (value, inclusive) of a range side
_EMPTY = object()  # a bound no value satisfies

# Named alphabets for Concat: the characters that may appear in the data of a string part.
ALPHABETS: dict[str, str] = {
    "digits": string.digits,
    "hex": string.digits + "abcdef",
    "alnum": string.digits + string.ascii_letters,
    "identifier": string.digits + string.ascii_letters + "_-.",
    "printable": "".join(chr(c) for c in range(0x21, 0x7F)),
}


def _text(value: Any, derivation: str, field: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, bytes)):
        raise KeyDerivationError(
            f"{derivation}: field {field!r} must be a string or an integer, got {type(value).__name__}"
        )
    return value.decode() if isinstance(value, bytes) else str(value)


def _require(values: Mapping[str, Any], field: str, derivation: str) -> Any:
    try:
        value = values[field]
    except KeyError:
        raise KeyDerivationError(f"{derivation}: field {field!r} is needed to build the key") from None
    if value is None:
        raise KeyDerivationError(f"{derivation}: field {field!r} is None; the key needs a value")
    return value


def _typed(kind: type, label: str) -> Any:
    """An attrs validator: a declaration with a wrong type is an error naming the argument, not a
    TypeError somewhere in validation later."""

    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, kind):
            raise KeyDerivationError(
                f"{type(instance).__name__} {attribute.name} must be {label}, got {value!r}"
            )

    return check


_NAME = _typed(str, "a field name (a string)")
_TEXT = _typed(str, "a string")
_WHOLE = _typed(int, "a whole number")


def _field_names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        raise KeyDerivationError(f"Concat fields must be a list of field names, got the string {value!r}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str):
            raise KeyDerivationError(f"Concat fields must be field names (strings), got {name!r}")
    return names


@attrs.frozen
class HashPrefix:
    """``md5(str(source))`` as ``length`` hex characters, then ``sep``, then the value itself."""

    kind: ClassVar[str] = "hash_prefix"
    output_type: ClassVar[str] = "STRING"
    invertible: ClassVar[bool] = True

    source: str = attrs.field(validator=_NAME)
    length: int = attrs.field(default=4, validator=_WHOLE)
    sep: str = attrs.field(default="|", validator=_TEXT)

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source,)

    def problems(self) -> list[str]:
        out = []
        if not 1 <= self.length <= 32:
            out.append(f"hash length must be 1 to 32 hex characters, got {self.length}")
        if len(self.sep) > 1:
            out.append(f"separator must be at most one character, got {self.sep!r}")
        return out

    def derive(self, values: Mapping[str, Any]) -> str:
        text = _text(_require(values, self.source, "HashPrefix"), "HashPrefix", self.source)
        digest = hashlib.md5(text.encode()).hexdigest()[: self.length]
        return f"{digest}{self.sep}{text}"

    def invert(self, key: Any) -> dict[str, Any]:
        """The source value a key was built from (as text: an integer source comes back as its
        digits; the caller knows the column's type). A key whose prefix is not the hash of the
        rest was not built by this derivation, and is refused."""
        if not isinstance(key, str):
            raise KeyDerivationError(f"HashPrefix: key {key!r} is not a string")
        head = self.length + len(self.sep)
        text = key[head:]
        if len(key) < head or key[self.length : head] != self.sep or key != self.derive({self.source: text}):
            raise KeyDerivationError(
                f"HashPrefix: {key!r} is not md5({self.source})[:{self.length}] + {self.sep!r} + value"
            )
        return {self.source: text}

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source, "length": self.length, "sep": self.sep}


def _as_pad(value: Any) -> tuple[tuple[str, int], ...]:
    items = list(value.items() if isinstance(value, Mapping) else value)
    for item in items:
        if (not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str)
                or isinstance(item[1], bool) or not isinstance(item[1], int)):
            raise KeyDerivationError(
                f"Concat pad must map field names to widths (whole numbers), got {value!r}"
            )
    return tuple(sorted((k, v) for k, v in items))


@attrs.frozen
class Concat:
    """Several fields joined into one STRING key that sorts like the tuple of the fields.

    ``pad`` gives the zero-padded width of each integer field; ``alphabet`` names (or lists) the
    characters string fields may contain. The separator must sort below all of them, or a shorter
    value would sort after a longer one that extends it (``a100:`` > ``a1001`` with ``:``).
    """

    kind: ClassVar[str] = "concat"
    output_type: ClassVar[str] = "STRING"
    invertible: ClassVar[bool] = True

    fields: tuple[str, ...] = attrs.field(converter=_field_names)
    sep: str = attrs.field(default=",", validator=_TEXT)
    pad: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=_as_pad)
    alphabet: str = attrs.field(default="identifier", validator=_TEXT)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.fields

    @property
    def characters(self) -> str:
        return ALPHABETS.get(self.alphabet, self.alphabet)

    def problems(self) -> list[str]:
        out = []
        if len(self.fields) < 2:
            out.append("Concat needs at least two fields")
        if len(set(self.fields)) != len(self.fields):
            out.append("Concat lists a field twice")
        if len(self.sep) != 1:
            out.append(f"separator must be exactly one character, got {self.sep!r}")
        out += self.order_problems()
        for name, width in self.pad:
            if name not in self.fields:
                out.append(f"pad names {name!r}, which is not one of the fields {list(self.fields)}")
            if not 1 <= width <= 19:
                out.append(f"pad width of {name!r} must be 1 to 19 digits, got {width}")
        return out

    @property
    def data_characters(self) -> str:
        """The characters the parts may hold: the alphabet (any printable character when none
        is declared), and digits when integers are zero-padded."""
        characters = self.characters or ALPHABETS["printable"]
        return characters + ALPHABETS["digits"] if self.pad else characters

    def order_problems(self) -> list[str]:
        """Why keys built this way would not sort like the tuples of their values, if they would not."""
        lowest = min(self.data_characters)
        if len(self.sep) != 1 or self.sep < lowest:
            return []
        hint = ", such as ','" if lowest > "," else ""
        return [
            f"separator {self.sep!r} (0x{ord(self.sep):02x}) does not sort below every data "
            f"character: {lowest!r} (0x{ord(lowest):02x}) may appear in the data, so "
            "concatenated keys would not sort like the original values ('a100:' sorts after "
            f"'a1001'); use a separator below 0x{ord(lowest):02x}{hint}"
        ]

    def part(self, field: str, value: Any) -> str:
        widths = dict(self.pad)
        if field in widths:
            if isinstance(value, bool) or not isinstance(value, int):
                raise KeyDerivationError(
                    f"Concat: field {field!r} is zero-padded and must be an integer, got {value!r}"
                )
            width = widths[field]
            if not 0 <= value < 10**width:
                raise KeyDerivationError(
                    f"Concat: field {field!r} = {value} does not fit {width} digits "
                    "(negative values and wider numbers break the order)"
                )
            return str(value).zfill(width)
        if isinstance(value, int) and not isinstance(value, bool):
            raise KeyDerivationError(
                f"Concat: integer field {field!r} needs a pad width to keep numeric order"
            )
        text = _text(value, "Concat", field)
        if any(ch <= self.sep for ch in text):
            raise KeyDerivationError(
                f"Concat: field {field!r} = {text!r} contains a character that sorts at or below "
                f"the separator {self.sep!r}; the key would not keep the order of the values"
            )
        return text

    def derive(self, values: Mapping[str, Any]) -> str:
        return self.sep.join(
            self.part(f, _require(values, f, "Concat")) for f in self.fields
        )

    def split(self, key: str) -> dict[str, Any]:
        """The inverse of derive: the field values a key was built from, padding dropped from
        the integers. A key this derivation could not have built is refused."""
        if not isinstance(key, str):
            raise KeyDerivationError(f"Concat: key {key!r} is not a string")
        parts = key.split(self.sep)
        if len(parts) != len(self.fields):
            raise KeyDerivationError(f"Concat: {key!r} does not have {len(self.fields)} parts")
        widths = dict(self.pad)
        values: dict[str, Any] = {}
        for field, part in zip(self.fields, parts, strict=True):
            if field not in widths:
                values[field] = part
            elif len(part) == widths[field] and part.isascii() and part.isdigit():
                values[field] = int(part)
            else:
                raise KeyDerivationError(
                    f"Concat: part {part!r} of {key!r} is not {field!r} zero-padded to {widths[field]} digits"
                )
        return values

    def invert(self, key: Any) -> dict[str, Any]:
        return self.split(key)

    def prefix_range(
        self, fixed: Mapping[str, Any], lower: Bound = None, upper: Bound = None,
    ) -> tuple[str | None, str | None] | None:
        """The keys whose first ``len(fixed)`` fields equal ``fixed`` and whose next field lies
        within ``lower`` / ``upper`` (``(value, inclusive)``, None for an open side), as one
        string range: (inclusive start, exclusive end), None for an unbounded side; None when
        no key can match.

        It is one range because the key sorts like the tuple of its fields: the separator sorts
        below every data character, so all keys with a given leading part are contiguous.
        Bounds on a later field (with the next one open or bounded) are not one range; callers
        filter those (see ``tsmigrate.service.query``).
        """
        k = len(fixed)
        if list(fixed) != list(self.fields[:k]) or k >= len(self.fields):
            raise KeyDerivationError(
                f"Concat: a prefix range fixes the first fields of {list(self.fields)} in order "
                f"and leaves at least one open, got {list(fixed)}"
            )
        head = "".join(self.part(name, value) + self.sep for name, value in fixed.items())
        above = chr(ord(self.sep) + 1)  # sorts below every data character but above sep
        field = self.fields[k]
        lower, upper = self._bound(field, lower, True), self._bound(field, upper, False)
        if lower is _EMPTY or upper is _EMPTY:
            return None
        # A key with field value x is head + x, then sep and the rest (or nothing): it is at
        # least head + v exactly when x >= v, and below head + v + above exactly when x <= v.
        start = (head or None) if lower is None else head + lower[0] + ("" if lower[1] else above)
        if upper is None:
            end = head[:-1] + above if head else None
        else:
            end = head + upper[0] + (above if upper[1] else "")
        if start is not None and end is not None and start >= end:
            return None
        return start, end

    def _bound(self, field: str, bound: Bound, is_lower: bool) -> Any:
        """A bound on one field as (text of the part, inclusive); None when it excludes nothing
        of the field's values, _EMPTY when it excludes all of them."""
        if bound is None:
            return None
        value, inclusive = bound
        widths = dict(self.pad)
        if field in widths:
            if isinstance(value, bool) or not isinstance(value, int):
                raise KeyDerivationError(
                    f"Concat: field {field!r} is zero-padded and its bounds must be integers, "
                    f"got {value!r}"
                )
            if not inclusive:  # integers: x > v is x >= v + 1, x < v is x <= v - 1
                value = value + 1 if is_lower else value - 1
            top = 10 ** widths[field] - 1
            if is_lower:
                return None if value <= 0 else _EMPTY if value > top else (self.part(field, value), True)
            return _EMPTY if value < 0 else None if value >= top else (self.part(field, value), True)
        if isinstance(value, int) and not isinstance(value, bool):
            raise KeyDerivationError(
                f"Concat: integer field {field!r} needs a pad width to keep numeric order"
            )
        text = _text(value, "Concat", field)
        cut = next((i for i, ch in enumerate(text) if ch <= self.sep), None)
        if cut is not None:
            # No value holds a character at or below the separator: against every value, the
            # bound orders like its part before that character, just above it.
            return text[:cut], not is_lower
        return text, inclusive

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "fields": list(self.fields),
            "sep": self.sep,
            "pad": dict(self.pad),
            "alphabet": self.alphabet,
        }


@attrs.frozen
class TimeBucket:
    """``source mod buckets``: an INTEGER leading key column that spreads sequential writes."""

    kind: ClassVar[str] = "time_bucket"
    output_type: ClassVar[str] = "INTEGER"
    invertible: ClassVar[bool] = False

    source: str = attrs.field(validator=_NAME)
    buckets: int = attrs.field(default=16, validator=_WHOLE)

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source,)

    def problems(self) -> list[str]:
        if not 2 <= self.buckets <= 4096:
            return [f"bucket count must be 2 to 4096, got {self.buckets}"]
        return []

    def derive(self, values: Mapping[str, Any]) -> int:
        value = _require(values, self.source, "TimeBucket")
        if isinstance(value, bool) or not isinstance(value, int):
            raise KeyDerivationError(f"TimeBucket: field {self.source!r} must be an integer")
        return value % self.buckets

    def all_buckets(self) -> range:
        """Every bucket a reader must query and merge."""
        return range(self.buckets)

    def invert(self, key: Any) -> dict[str, Any]:
        """A bucket does not tell its source value: it is recomputed from the source, which
        must be kept elsewhere in the row (another key column or an attribute)."""
        raise KeyDerivationError(
            f"TimeBucket: bucket {key!r} does not tell {self.source!r}; the row must keep {self.source!r}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source, "buckets": self.buckets}


@attrs.frozen
class Descending:
    """``ceiling - source``: reverses integer order, so forward scans return the newest first."""

    kind: ClassVar[str] = "descending"
    output_type: ClassVar[str] = "INTEGER"
    invertible: ClassVar[bool] = True

    source: str = attrs.field(validator=_NAME)
    ceiling: int = attrs.field(default=INT64_MAX, validator=_WHOLE)

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source,)

    def problems(self) -> list[str]:
        if not 0 < self.ceiling <= INT64_MAX:
            return [f"ceiling must be 1 to 2**63-1, got {self.ceiling}"]
        return []

    def derive(self, values: Mapping[str, Any]) -> int:
        value = _require(values, self.source, "Descending")
        if isinstance(value, bool) or not isinstance(value, int):
            raise KeyDerivationError(f"Descending: field {self.source!r} must be an integer")
        if not 0 <= value <= self.ceiling:
            raise KeyDerivationError(
                f"Descending: field {self.source!r} = {value} is outside 0..{self.ceiling}"
            )
        return self.ceiling - value

    def flip(self, value: int) -> int:
        """``ceiling - value``: a key from a value, and a value from a key (range bounds)."""
        return self.ceiling - value

    def invert(self, key: Any) -> dict[str, Any]:
        """The source value of a key (``ceiling - key``), refused when outside 0..ceiling."""
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key <= self.ceiling:
            raise KeyDerivationError(f"Descending: key {key!r} is outside 0..{self.ceiling}")
        return {self.source: self.ceiling - key}

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source, "ceiling": self.ceiling}


Derivation = Union[HashPrefix, Concat, TimeBucket, Descending]  # noqa: UP007 - a runtime alias on 3.10

_KINDS: dict[str, type] = {
    cls.kind: cls for cls in (HashPrefix, Concat, TimeBucket, Descending)
}


def derivation_from_dict(data: Mapping[str, Any]) -> Derivation:
    fields = dict(data)
    kind = fields.pop("kind", None)
    try:
        cls = _KINDS[kind]
    except KeyError:
        raise KeyDerivationError(f"unknown key derivation kind {kind!r}") from None
    return cls(**fields)
