"""Column conditions and read filters: the protobuf ``Filter`` compiled into a row predicate.

The same serialized ``Filter`` is a read filter (GetRow/GetRange/BatchGetRow ``filter``) and a
write condition (``Condition.column_condition``)::

    f = compile_filter(data)            # parse and validate once; FilterError on bad input
    f.matches(columns) -> bool          # columns: name -> [(timestamp, value), ...] newest first
    f.pagination -> (offset, limit) | None   # ColumnPaginationFilter: slice of attribute columns

``columns`` holds what the read sees: the caller restricts versions to the request's
time range / max_versions and drops columns not in ``columns_to_get`` first (a filter on a
column that was not read treats it as missing, as the service does). Values are the Python
types of tsmigrate.wire.plainbuffer (BLOB as bytes).

Semantics of a single condition (SingleColumnValueFilter):
  * missing column: ``filter_if_missing`` false -> passes, true -> fails (the SDK sends
    ``filter_if_missing = not pass_if_missing``); EXIST / NOT_EXIST only test presence.
  * ``latest_version_only`` true compares the newest version only; false passes if any
    version satisfies the comparison.
  * values of different types never compare (false for every comparator, no error);
    int and float are different types, so are bool and int. Strings compare by code point,
    which is their UTF-8 byte order; binary compares bytewise.
  * ``value_trans_rule`` (SingleColumnRegexCondition): on STRING values only, the regex is
    searched; the first group (or the whole match without groups) is cast to the cast type
    and compared. A version where this fails (not a string, no match, bad number) does not
    satisfy the condition. EXIST / NOT_EXIST ignore the rule. The regex is RE2 (google-re2):
    matching is linear in the value, so a pattern such as ``(a+)+$`` cannot backtrack
    exponentially while the request holds the storage; what RE2 refuses (backreferences,
    lookaround) is an invalid regex, as on the service, whose engine is not backtracking either.
Composite: NOT takes exactly one sub-filter, AND/OR at least two. A tree has at most
MAX_FILTER_COUNT nodes (composites included), as the service counts.

FilterError messages are the service's OTSParameterInvalid texts where known (from the
error-code reference and the Java SDK's functional tests against the service).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import re2
from google.protobuf.message import DecodeError, Message
from tablestore.protobuf import table_store_filter_pb2 as fpb

from tsmigrate.local.utf8 import check_utf8
from tsmigrate.wire.plainbuffer import PlainBufferError, decode_value

__all__ = ["MAX_FILTER_COUNT", "Columns", "Filter", "FilterError", "compile_filter"]

# The service's current limit counts every node; older docs said "up to 10 conditions".
MAX_FILTER_COUNT = 32
MAX_VALUE_LENGTH = 2 * 1024 * 1024
MAX_REGEX_LENGTH = 256
# RE2's memory for one compiled regex (its default, 8 MB, is per pattern and per request).
_RE2_MAX_MEM = 8 << 20

Columns = Mapping[str, Sequence[tuple[int, object]]]
_Predicate = Callable[[Columns], bool]

_COMPARE: dict[int, Callable[[object, object], bool]] = {
    fpb.CT_EQUAL: operator.eq,
    fpb.CT_NOT_EQUAL: operator.ne,
    fpb.CT_GREATER_THAN: operator.gt,
    fpb.CT_GREATER_EQUAL: operator.ge,
    fpb.CT_LESS_THAN: operator.lt,
    fpb.CT_LESS_EQUAL: operator.le,
}
_COMPARABLE = (int, float, bool, str, bytes)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INT64_RANGE = range(-(1 << 63), 1 << 63)
_M = TypeVar("_M", bound=Message)


class FilterError(ValueError):
    """An invalid filter; the message is the service's OTSParameterInvalid text."""


class Filter:
    """A compiled filter: ``matches(columns)`` and the optional column ``pagination``."""

    __slots__ = ("_predicate", "pagination")

    def __init__(self, predicate: _Predicate, pagination: tuple[int, int] | None) -> None:
        self._predicate = predicate
        self.pagination = pagination

    def matches(self, columns: Columns) -> bool:
        return self._predicate(columns)


def compile_filter(data: bytes) -> Filter:
    """Parse a serialized ``Filter``; raise FilterError as the service would."""
    proto = _parse(fpb.Filter, data, "Deserialize filter failed.")
    if proto.type == fpb.FT_COLUMN_PAGINATION:
        page = _parse(fpb.ColumnPaginationFilter, proto.filter,
                      "Deserialize column pagination filter failed.")
        if page.offset < 0:
            raise FilterError("Offset in ColumnPaginationFilter must be greater than or equal "
                              "to 0.")
        if page.limit <= 0:
            raise FilterError("Limit in ColumnPaginationFilter must be greater than 0.")
        return Filter(_always, (page.offset, page.limit))
    return Filter(_compile(proto, [0]), None)  # [0]: node counter shared by the tree


def _always(columns: Columns) -> bool:
    return True


def _parse(message_type: type[_M], data: bytes, error: str) -> _M:
    try:
        message = message_type.FromString(data)
    except DecodeError:
        raise FilterError(error) from None
    # upb accepts missing required fields and unknown enum values: check them here.
    if not message.IsInitialized():
        raise FilterError(error)
    check_utf8(message)
    return message


def _compile(proto: fpb.Filter, count: list[int]) -> _Predicate:
    count[0] += 1
    if count[0] > MAX_FILTER_COUNT:
        raise FilterError(f"The count of filter exceeds the max: {MAX_FILTER_COUNT}.")
    if proto.type == fpb.FT_SINGLE_COLUMN_VALUE:
        return _compile_single(_parse(fpb.SingleColumnValueFilter, proto.filter,
                                      "Deserialize relation filter failed."))
    if proto.type == fpb.FT_COMPOSITE_COLUMN_VALUE:
        return _compile_composite(_parse(fpb.CompositeColumnValueFilter, proto.filter,
                                         "Deserialize composite filter failed."), count)
    raise FilterError(f"Invalid type of filter: {fpb.FilterType.Name(proto.type)}.")


def _compile_composite(proto: fpb.CompositeColumnValueFilter, count: list[int]) -> _Predicate:
    subs = []
    for sub in proto.sub_filters:
        if sub.type == fpb.FT_COLUMN_PAGINATION:
            raise FilterError(f"Invalid type of sub-filter: {fpb.FilterType.Name(sub.type)}.")
        subs.append(_compile(sub, count))
    # Arity is checked after the children: the service reports an oversized tree first.
    if proto.combinator == fpb.LO_NOT:
        if len(subs) != 1:
            raise FilterError("Invalid NOT operator: the number of sub-filters must be 1.")
        only = subs[0]
        return lambda columns: not only(columns)
    if len(subs) < 2:
        raise FilterError("Invalid AND/OR operator: the number of sub-filters must be more "
                          "than 1.")
    if proto.combinator == fpb.LO_AND:
        return lambda columns: all(sub(columns) for sub in subs)
    return lambda columns: any(sub(columns) for sub in subs)


def _compile_single(proto: fpb.SingleColumnValueFilter) -> _Predicate:
    name = proto.column_name
    if proto.comparator in (fpb.CT_EXIST, fpb.CT_NOT_EXIST):
        want = proto.comparator == fpb.CT_EXIST
        return lambda columns: bool(columns.get(name)) == want

    transform = _compile_rule(proto.value_trans_rule) if proto.HasField(
        "value_trans_rule") else None
    compare = _COMPARE[proto.comparator]
    target = _filter_value(name, proto.column_value)
    target_type = type(target)
    pass_if_missing = not proto.filter_if_missing
    latest_only = proto.latest_version_only

    def test(value: object) -> bool:
        if transform is not None:
            value = transform(value)
        vtype = type(value)
        if vtype is not target_type and not (vtype is bytearray and target_type is bytes):
            return False
        return compare(value, target)

    def single(columns: Columns) -> bool:
        versions = columns.get(name)
        if not versions:
            return pass_if_missing
        if latest_only:
            return test(versions[0][1])
        return any(test(value) for _, value in versions)

    return single


def _filter_value(name: str, data: bytes) -> object:
    try:
        value = decode_value(data)
    except PlainBufferError as exc:
        raise FilterError(f"Invalid column value of filter for column: '{name}'. {exc}") \
            from None
    if type(value) not in _COMPARABLE:
        raise FilterError(f"Invalid column value of filter for column: '{name}', type: "
                          f"{value!r}.")
    if isinstance(value, str):
        length = len(value.encode("utf-8"))
    elif isinstance(value, bytes):
        length = len(value)
    else:
        length = 0
    if length > MAX_VALUE_LENGTH:
        raise FilterError(f"The length of attribute column: '{name}' exceeds the MaxLength:"
                          f"{MAX_VALUE_LENGTH} with CurrentLength:{length}.")
    return value


def _compile_rule(rule: fpb.ValueTransferRule) -> Callable[[object], object]:
    """The value_trans_rule as value -> extracted and cast value, or None when it fails."""
    if len(rule.regex.encode("utf-8")) > MAX_REGEX_LENGTH:
        raise FilterError(f"The length of regex exceeds the max: {MAX_REGEX_LENGTH}.")
    try:
        pattern = re2.compile(rule.regex, _RE2_OPTIONS)
    except re2.error as exc:
        raise FilterError(f"Invalid regex: {rule.regex}, {_re2_reason(exc)}.") from None
    cast_type = rule.cast_type if rule.HasField("cast_type") else fpb.VT_STRING
    cast = _CASTS.get(cast_type)
    if cast is None:
        raise FilterError(f"Invalid cast type of regex rule: {fpb.VariantType.Name(cast_type)}.")
    group = 1 if pattern.groups else 0

    def transform(value: object) -> object:
        if type(value) is not str:
            return None
        found = pattern.search(value)
        if found is None:
            return None
        text = found.group(group)
        return None if text is None else cast(text)

    return transform


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a client's bad pattern is its 400 answer, not a server log line
    options.max_mem = _RE2_MAX_MEM
    return options


_RE2_OPTIONS = _re2_options()


def _re2_reason(exc: re2.error) -> str:
    reason = exc.args[0] if exc.args else ""
    return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)


def _cast_integer(text: str) -> int | None:
    if _INTEGER.fullmatch(text) is None:
        return None
    value = int(text)
    return value if value in _INT64_RANGE else None


def _cast_double(text: str) -> float | None:
    return float(text) if _DOUBLE.fullmatch(text) else None


_CASTS: dict[int, Callable[[str], object]] = {
    fpb.VT_INTEGER: _cast_integer,
    fpb.VT_DOUBLE: _cast_double,
    fpb.VT_STRING: str,
}
