"""Capture's guard (the condition that a target row is still as read) encoded by hand: the same
bytes as the SDK's condition objects and encoder give, on any values, and the guard of a row as
read (its cells' values passed through as they came) the same as one built from the decoded
values by the SDK."""

from __future__ import annotations

import math
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tablestore.protobuf import table_store_filter_pb2 as filter_pb2
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.contract import rowbytes
from tsmigrate.rewrite import capture, writer
from tsmigrate.wire.plainbuffer import PlainBufferError, encode_cell

INT64 = st.integers(-(2**63), 2**63 - 1)
_VALUE = st.one_of(INT64, st.text(max_size=40), st.booleans(), st.floats(), st.binary(max_size=40))
_NAME = st.one_of(st.sampled_from(["a", "status", "é名", "z" * 300]), st.text(min_size=1, max_size=12))
SETTINGS = settings(max_examples=300, deadline=None)


@st.composite
def _condition(draw: st.DrawFn) -> tuple[list, list]:
    values = draw(st.lists(st.tuples(_NAME, _VALUE), max_size=writer.GUARD_COLUMNS))
    room = (writer.GUARD_COLUMNS - len(values)) // 2
    absent = draw(st.lists(_NAME, max_size=room))
    if not values and not absent:
        values = [draw(st.tuples(_NAME, _VALUE))]
    return values, absent


@SETTINGS
@given(_condition())
def test_the_condition_is_the_sdks_byte_for_byte(condition) -> None:
    values, absent = condition
    encoded = writer.values_unchanged(values, absent)
    assert encoded == writer.values_unchanged_by_sdk(values, absent)
    assert filter_pb2.Filter.FromString(encoded).IsInitialized()


def test_more_comparisons_than_a_condition_holds_are_refused() -> None:
    with pytest.raises(ValueError):
        writer.values_unchanged([("a", 1)] * 8, ["b"])
    with pytest.raises(ValueError):
        writer.variants_unchanged([], [])


def _cell(name: str, value, stamp: int) -> tuple[bytes, int]:
    if isinstance(value, float) and math.isnan(value):
        value = 0.5  # a NaN read back compares as its bits; the SDK's is its own NaN
    return encode_cell(name, value, stamp)


_CELLS = st.lists(st.tuples(_NAME, _VALUE, st.integers(0, 2**45)), max_size=14)
_DECLARED = st.lists(st.sampled_from(["a", "status", "é名", "payload", "credits"]), max_size=5)


def _guard_by_sdk(before: dict, declared: list[str], existed: bool) -> bytes:
    """The guard as capture built it from decoded values through the SDK."""
    if not existed:
        return writer.row_condition(pb.EXPECT_NOT_EXIST)
    newest: dict = {}
    for (name, stamp), (cell, _) in before.items():
        if name not in newest or stamp > newest[name][0]:
            newest[name] = (stamp, cell)
    values = [(name, rowbytes.cell_value(cell)) for name, (_, cell) in sorted(newest.items())]
    values = values[:writer.GUARD_COLUMNS]
    absent = [name for name in declared if name not in newest]
    absent = absent[:(writer.GUARD_COLUMNS - len(values)) // 2]
    column = writer.values_unchanged_by_sdk(values, absent) if values or absent else None
    return writer.row_condition(pb.EXPECT_EXIST, column)


@SETTINGS
@given(_CELLS, _DECLARED, st.booleans())
def test_a_rows_guard_from_its_cells_as_read_is_the_sdks_from_their_values(cells, declared, existed) -> None:
    before = {(name, stamp): _cell(name, value, stamp) for name, value, stamp in cells}
    if not existed:
        before = {}
    row = capture._TargetRow((("k", "1"),), existed, before, existed, dict(before))
    declared = sorted(set(declared))
    guard = capture.Capture._guard(types.SimpleNamespace(writer=writer), row, declared)
    assert guard == _guard_by_sdk(before, declared, existed)


def test_a_cell_without_a_value_cannot_be_guarded() -> None:
    cell = encode_cell("a", None, 5)
    row = capture._TargetRow((("k", "1"),), True, {("a", 5): cell}, True, {("a", 5): cell})
    with pytest.raises(PlainBufferError):
        capture.Capture._guard(types.SimpleNamespace(writer=writer), row, [])
