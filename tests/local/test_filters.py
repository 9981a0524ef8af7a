"""Filters and column conditions, built and serialized by the official SDK's own encoder."""

from __future__ import annotations

import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tablestore.encoder import OTSProtoBufferEncoder
from tablestore.metadata import (
    CastType,
    ColumnCondition,
    ComparatorType,
    CompositeColumnCondition,
    Condition,
    LogicalOperator,
    RegexRule,
    RowExistenceExpectation,
    SingleColumnCondition,
    SingleColumnRegexCondition,
)
from tablestore.protobuf import table_store_filter_pb2 as fpb
from tablestore.protobuf import table_store_pb2 as pb2

from tsmigrate.local.filters import MAX_FILTER_COUNT, FilterError, compile_filter
from tsmigrate.wire.plainbuffer import INF_MIN, encode_value

SETTINGS = settings(max_examples=80, deadline=None)
ENCODER = OTSProtoBufferEncoder("utf-8")

OPS = {
    ComparatorType.EQUAL: operator.eq,
    ComparatorType.NOT_EQUAL: operator.ne,
    ComparatorType.GREATER_THAN: operator.gt,
    ComparatorType.GREATER_EQUAL: operator.ge,
    ComparatorType.LESS_THAN: operator.lt,
    ComparatorType.LESS_EQUAL: operator.le,
}
VALUES_BY_TYPE = {
    int: st.integers(-(1 << 63), (1 << 63) - 1),
    float: st.floats(allow_nan=False),
    bool: st.booleans(),
    str: st.text(max_size=12),
    bytes: st.binary(max_size=12),
}


def serialize(condition: ColumnCondition) -> bytes:
    """The bytes the SDK puts in GetRow/GetRange ``filter`` and ``column_condition``."""
    proto = fpb.Filter()
    ENCODER._make_column_condition(proto, condition)
    return proto.SerializeToString()


def sdk_value(value: object) -> object:
    # The SDK sends bytes as STRING; bytearray is its BLOB.
    return bytearray(value) if isinstance(value, bytes) else value


def single(column: str, value: object, comparator: int = ComparatorType.EQUAL,
           **kwargs: bool) -> SingleColumnCondition:
    return SingleColumnCondition(column, sdk_value(value), comparator, **kwargs)


def composite(combinator: int, *subs: ColumnCondition) -> CompositeColumnCondition:
    condition = CompositeColumnCondition(combinator)
    for sub in subs:
        condition.add_sub_condition(sub)
    return condition


def matches(condition: ColumnCondition, columns: dict) -> bool:
    return compile_filter(serialize(condition)).matches(columns)


def pagination(offset: int, limit: int) -> bytes:
    page = fpb.ColumnPaginationFilter(offset=offset, limit=limit).SerializeToString()
    return fpb.Filter(type=fpb.FT_COLUMN_PAGINATION, filter=page).SerializeToString()


def cols(**values: object) -> dict:
    return {name: [(1000, value)] for name, value in values.items()}


# --- single conditions -----------------------------------------------------------------------


@pytest.mark.parametrize(("comparator", "hits"), [
    (ComparatorType.EQUAL, [5]),
    (ComparatorType.NOT_EQUAL, [4, 6]),
    (ComparatorType.GREATER_THAN, [6]),
    (ComparatorType.GREATER_EQUAL, [5, 6]),
    (ComparatorType.LESS_THAN, [4]),
    (ComparatorType.LESS_EQUAL, [4, 5]),
])
def test_comparators(comparator: int, hits: list[int]) -> None:
    f = compile_filter(serialize(single("age", 5, comparator)))
    assert [v for v in (4, 5, 6) if f.matches(cols(age=v))] == hits
    assert f.pagination is None


def test_pass_if_missing() -> None:
    assert matches(single("age", 5), cols(other=1)) is True
    assert matches(single("age", 5, pass_if_missing=False), cols(other=1)) is False
    assert matches(single("age", 5, pass_if_missing=False), {"age": []}) is False


def test_latest_version_only() -> None:
    row = {"c": [(2000, 5), (1000, 10)]}  # newest first
    assert matches(single("c", 10), row) is False
    assert matches(single("c", 10, latest_version_only=False), row) is True
    assert matches(single("c", 5, ComparatorType.NOT_EQUAL, latest_version_only=False),
                   row) is True


@pytest.mark.parametrize(("column", "target"), [
    (1, 1.0), (1.0, 1), (1, True), (True, 1), ("a", b"a"), (b"a", "a"), (0, "0"),
])
def test_different_types_never_compare(column: object, target: object) -> None:
    for comparator in OPS:
        assert matches(single("c", target, comparator), cols(c=column)) is False


def test_strings_and_binary() -> None:
    # column <op> value: "é" (UTF-8 c3 a9) sorts after "z" (7a).
    assert matches(single("s", "z", ComparatorType.GREATER_THAN), cols(s="é")) is True
    assert matches(single("b", b"\x80", ComparatorType.GREATER_THAN), cols(b=b"\x7f")) is False
    assert matches(single("b", b"\x00\x01"), {"b": [(1, bytearray(b"\x00\x01"))]}) is True


def test_exist_and_not_exist() -> None:
    exist = SingleColumnRegexCondition("c", ComparatorType.EXIST)
    not_exist = SingleColumnRegexCondition("c", ComparatorType.NOT_EXIST)
    assert [matches(exist, row) for row in (cols(c=1), cols(d=1))] == [True, False]
    assert [matches(not_exist, row) for row in (cols(c=1), cols(d=1))] == [False, True]


def test_condition_of_a_conditional_write() -> None:
    proto = pb2.Condition()
    ENCODER._make_condition(proto, Condition(RowExistenceExpectation.EXPECT_EXIST,
                                             single("v", 3, ComparatorType.LESS_THAN)))
    f = compile_filter(proto.column_condition)
    assert (f.matches(cols(v=2)), f.matches(cols(v=3))) == (True, False)


# --- regex rule ------------------------------------------------------------------------------


def regex(rule: str, cast: CastType, value: object,
          comparator: int = ComparatorType.EQUAL) -> SingleColumnRegexCondition:
    return SingleColumnRegexCondition("j", comparator, value, RegexRule(rule, cast))


def test_regex_with_group_and_cast() -> None:
    cond = regex(r"lastupdatetime:([0-9]+)", CastType.VT_INTEGER, 12345,
                 ComparatorType.GREATER_THAN)
    assert matches(cond, cols(j="{cluster_name:n1,lastupdatetime:12346}")) is True
    assert matches(cond, cols(j="{cluster_name:n1,lastupdatetime:12345}")) is False
    assert matches(cond, cols(j="{cluster_name:n1}")) is False  # no match
    assert matches(cond, cols(j=12346)) is False  # regex applies to strings only
    assert matches(cond, cols(other="x")) is False  # the SDK always sends filter_if_missing


def test_regex_whole_match_and_double() -> None:
    assert matches(regex(r"1[a-z]+5", CastType.VT_STRING, "1aaa5"), cols(j="1aaa51bbb5"))
    assert matches(regex(r"1([a-z]+)5", CastType.VT_STRING, "aaa"), cols(j="1aaa51bbb5"))
    assert matches(regex(r"t=([-0-9.e]+)", CastType.VT_DOUBLE, 2.5), cols(j="t=2.5;"))
    assert not matches(regex(r"t=([-0-9.e]+)", CastType.VT_DOUBLE, 2.5), cols(j="t=2..5;"))
    assert not matches(regex(r"n=([0-9]+)", CastType.VT_INTEGER, 0), cols(j="n=" + "9" * 20))


def test_bad_regex() -> None:
    with pytest.raises(FilterError, match="Invalid regex"):
        compile_filter(serialize(regex("(", CastType.VT_STRING, "x")))
    with pytest.raises(FilterError, match="length of regex exceeds the max: 256"):
        compile_filter(serialize(regex("a" * 257, CastType.VT_STRING, "x")))


# --- composites ------------------------------------------------------------------------------


def test_composites() -> None:
    young = single("age", 30, ComparatorType.LESS_THAN)
    named = single("name", "ann")
    both = composite(LogicalOperator.AND, young, named)
    either = composite(LogicalOperator.OR, young, named)
    neither = composite(LogicalOperator.NOT, either)
    rows = [cols(age=20, name="ann"), cols(age=20, name="bob"), cols(age=40, name="bob")]
    assert [matches(both, r) for r in rows] == [True, False, False]
    assert [matches(either, r) for r in rows] == [True, True, False]
    assert [matches(neither, r) for r in rows] == [False, False, True]
    three = composite(LogicalOperator.AND, young, named, single("x", 1, pass_if_missing=False))
    assert matches(three, cols(age=20, name="ann")) is False


def test_not_needs_exactly_one_sub_filter() -> None:
    cond = composite(LogicalOperator.NOT, single("a", 1), single("b", 2))
    with pytest.raises(FilterError, match=r"^Invalid NOT operator: the number of sub-filters "
                                          r"must be 1\.$"):
        compile_filter(serialize(cond))


@pytest.mark.parametrize("count", [0, 1])
def test_and_or_need_two_sub_filters(count: int) -> None:
    for op in (LogicalOperator.AND, LogicalOperator.OR):
        cond = composite(op, *[single("a", 1)] * count)
        with pytest.raises(FilterError, match=r"^Invalid AND/OR operator: the number of "
                                              r"sub-filters must be more than 1\.$"):
            compile_filter(serialize(cond))


def test_node_count_limit() -> None:
    at_limit = composite(LogicalOperator.OR, *[single(f"c{i}", i)
                                               for i in range(MAX_FILTER_COUNT - 1)])
    assert matches(at_limit, cols(c3=3)) is True
    over = composite(LogicalOperator.OR, *[single(f"c{i}", i) for i in range(MAX_FILTER_COUNT)])
    message = r"^The count of filter exceeds the max: 32\.$"
    with pytest.raises(FilterError, match=message):
        compile_filter(serialize(over))
    # Composites count too, and the count is reported before a NOT's arity.
    chain: ColumnCondition = single("c", 1)
    for _ in range(MAX_FILTER_COUNT):
        chain = composite(LogicalOperator.NOT, chain)
    with pytest.raises(FilterError, match=message):
        compile_filter(serialize(chain))
    wide_not = composite(LogicalOperator.NOT, *[single("c", 1)] * 40)
    with pytest.raises(FilterError, match=message):
        compile_filter(serialize(wide_not))


# --- column pagination -----------------------------------------------------------------------


def test_column_pagination() -> None:
    f = compile_filter(pagination(2, 3))
    assert f.pagination == (2, 3)
    assert f.matches({}) is True


@pytest.mark.parametrize(("offset", "limit", "message"), [
    (-1, 3, "Offset in ColumnPaginationFilter must be greater than or equal to 0."),
    (0, 0, "Limit in ColumnPaginationFilter must be greater than 0."),
])
def test_column_pagination_errors(offset: int, limit: int, message: str) -> None:
    with pytest.raises(FilterError) as info:
        compile_filter(pagination(offset, limit))
    assert str(info.value) == message


def test_pagination_is_not_a_sub_filter() -> None:
    page = fpb.Filter.FromString(pagination(0, 1))
    outer = fpb.CompositeColumnValueFilter(combinator=fpb.LO_NOT, sub_filters=[page])
    data = fpb.Filter(type=fpb.FT_COMPOSITE_COLUMN_VALUE,
                      filter=outer.SerializeToString()).SerializeToString()
    with pytest.raises(FilterError, match="Invalid type of sub-filter: FT_COLUMN_PAGINATION"):
        compile_filter(data)


# --- malformed input -------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "message"), [
    (b"\xff\xff", "Deserialize filter failed."),
    (b"", "Deserialize filter failed."),  # required fields missing
    (b"\x08\x09\x12\x00", "Deserialize filter failed."),  # unknown filter type
    (fpb.Filter(type=fpb.FT_SINGLE_COLUMN_VALUE, filter=b"\x08\x01").SerializeToString(),
     "Deserialize relation filter failed."),
    (fpb.Filter(type=fpb.FT_COMPOSITE_COLUMN_VALUE, filter=b"\xff").SerializeToString(),
     "Deserialize composite filter failed."),
    (fpb.Filter(type=fpb.FT_COLUMN_PAGINATION, filter=b"").SerializeToString(),
     "Deserialize column pagination filter failed."),
])
def test_malformed_filters(data: bytes, message: str) -> None:
    with pytest.raises(FilterError) as info:
        compile_filter(data)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def raw_single(value: bytes, comparator: int = fpb.CT_EQUAL) -> bytes:
    proto = fpb.SingleColumnValueFilter(comparator=comparator, column_name="c",
                                        column_value=value, filter_if_missing=False,
                                        latest_version_only=True)
    return fpb.Filter(type=fpb.FT_SINGLE_COLUMN_VALUE,
                      filter=proto.SerializeToString()).SerializeToString()


@pytest.mark.parametrize("value", [b"", b"\x05", encode_value(INF_MIN), encode_value(None),
                                   b"\x00\x01"])
def test_bad_filter_values(value: bytes) -> None:
    with pytest.raises(FilterError, match="Invalid column value of filter for column: 'c'"):
        compile_filter(raw_single(value))


def test_exist_ignores_the_value() -> None:
    assert compile_filter(raw_single(b"", fpb.CT_EXIST)).matches(cols(c=None)) is True


def test_value_length_limit() -> None:
    ok = "a" * (2 * 1024 * 1024)
    assert matches(single("c", ok), cols(c=ok)) is True
    with pytest.raises(FilterError) as info:
        compile_filter(serialize(single("c", bytes(2 * 1024 * 1024 + 1))))
    assert str(info.value) == ("The length of attribute column: 'c' exceeds the "
                               "MaxLength:2097152 with CurrentLength:2097153.")


# --- properties ------------------------------------------------------------------------------


@st.composite
def same_typed_pair(draw: st.DrawFn) -> tuple[object, object]:
    values = VALUES_BY_TYPE[draw(st.sampled_from(sorted(VALUES_BY_TYPE, key=str)))]
    return draw(values), draw(values)


@SETTINGS
@given(same_typed_pair(), st.sampled_from(sorted(OPS)))
def test_comparator_semantics_match_python(pair: tuple[object, object],
                                           comparator: int) -> None:
    column, target = pair
    expected = OPS[comparator](column, target)
    assert matches(single("c", target, comparator), cols(c=column)) is expected
    if isinstance(column, str):  # code point order is UTF-8 byte order
        assert OPS[comparator](column.encode(), target.encode()) is expected  # type: ignore[union-attr]


@SETTINGS
@given(st.sampled_from(sorted(VALUES_BY_TYPE, key=str)),
       st.sampled_from(sorted(VALUES_BY_TYPE, key=str)), st.data())
def test_mixed_types_are_false(column_type: type, target_type: type,
                               data: st.DataObject) -> None:
    if column_type is target_type:
        return
    column = data.draw(VALUES_BY_TYPE[column_type])
    target = data.draw(VALUES_BY_TYPE[target_type])
    comparator = data.draw(st.sampled_from(sorted(OPS)))
    assert matches(single("c", target, comparator), cols(c=column)) is False


@SETTINGS
@given(st.lists(st.integers(-5, 5), min_size=1, max_size=5), st.integers(-5, 5),
       st.sampled_from(sorted(OPS)), st.booleans())
def test_versions(versions: list[int], target: int, comparator: int, latest_only: bool) -> None:
    row = {"c": [(100 - i, v) for i, v in enumerate(versions)]}
    cond = single("c", target, comparator, latest_version_only=latest_only)
    considered = versions[:1] if latest_only else versions
    assert matches(cond, row) is any(OPS[comparator](v, target) for v in considered)
