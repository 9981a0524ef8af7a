"""The late-write net's rule for one column (``late.settle_column``), as properties: nothing late
when the side of record already has the watched side's versions, a carry whenever the side of
record did not change since the switch, a conflict whenever it did, and a carry applied once
leaves nothing late."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tsmigrate.contract.rowbytes import cell_value
from tsmigrate.rewrite.late import CARRY, CONFLICT, settle_column
from tsmigrate.wire import plainbuffer

SINCE = 1_000


def cell(value: int, stamp: int) -> tuple[bytes, int]:
    encoded, crc = plainbuffer.encode_cell("c", value, stamp)
    return encoded, crc


versions = st.dictionaries(st.integers(1, 2_000), st.integers(0, 5), max_size=4).map(
    lambda d: {stamp: cell(value, stamp) for stamp, value in d.items()})


def carried_into(watched: dict, record: dict, until: int) -> dict:
    """The side of record after a carry (``LateWrites._carry``)."""
    out = {s: c for s, c in record.items() if s in watched or s > until}
    out.update(watched)
    return out


@given(versions)
def test_a_column_both_sides_have_alike_is_nothing_late(same):
    assert settle_column(same, dict(same), since_ms=SINCE, until=3_000, carried=set(),
                         written=set()) is None


@given(versions, st.lists(st.integers(0, 5), min_size=1, max_size=3))
def test_a_side_of_record_unchanged_since_the_switch_takes_the_late_write(before, values):
    # At the switch both sides held ``before`` (older than the switch); late writes added
    # versions after it.
    before = {s: c for s, c in before.items() if s < SINCE}
    late = {SINCE + 1 + i: cell(v, SINCE + 1 + i) for i, v in enumerate(values)}
    watched = {**before, **late}
    got = settle_column(watched, before, since_ms=SINCE, until=SINCE + 10, carried=set(),
                        written=set(late))
    newest_before = cell_value(before[max(before)][0]) if before else None
    assert got == (None if values[-1] == newest_before else CARRY)


@given(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5))
def test_a_column_changed_on_both_sides_since_the_switch_is_a_conflict(old, new, late_value):
    before = {10: cell(old, 10)}
    record = {**before, SINCE + 5: cell(new, SINCE + 5)}  # a service wrote it after the switch
    watched = {**before, SINCE + 9: cell(late_value, SINCE + 9)}  # and a late write
    got = settle_column(watched, record, since_ms=SINCE, until=SINCE + 9, carried=set(),
                        written={SINCE + 9})
    assert got == (None if late_value == new else CONFLICT)
    # A version the net carried there itself is not a change of the side of record.
    assert settle_column(watched, record, since_ms=SINCE, until=SINCE + 9, carried={SINCE + 5},
                         written={SINCE + 9}) in (CARRY, None)


@given(versions, versions, st.integers(1, 4_000))
def test_a_carry_applied_leaves_nothing_late(watched, record, until):
    if settle_column(watched, record, since_ms=SINCE, until=until, carried=set(),
                     written=set(watched)) != CARRY:
        return
    after = carried_into(watched, record, until)
    assert settle_column(watched, after, since_ms=SINCE, until=until, carried=set(watched),
                         written=set(watched)) is None


def test_a_late_delete_of_a_column_unchanged_since_the_switch_is_carried():
    record = {10: cell(1, 10)}
    assert settle_column({}, record, since_ms=SINCE, until=SINCE + 3, carried=set(),
                         written=set()) == CARRY
    # ... and of one the side of record changed since: a conflict.
    record[SINCE + 1] = cell(2, SINCE + 1)
    assert settle_column({}, record, since_ms=SINCE, until=SINCE + 3, carried=set(),
                         written=set()) == CONFLICT
    # A deletion older than the side of record's change does not remove it: nothing late.
    assert settle_column({}, {SINCE + 5: cell(2, SINCE + 5)}, since_ms=SINCE, until=SINCE + 3,
                         carried=set(), written=set()) is None


@given(st.integers(1, 50), st.integers(0, 5), st.integers(0, 5))
def test_a_copy_of_a_version_the_side_of_record_replaced_since_is_nothing_late(gap, old, new):
    # Capture copied the side of record's version at SINCE + 1 to the watched side; the side of
    # record replaced it since (a table keeping one version): capture's lag, not a late write.
    watched = {SINCE + 1: cell(old, SINCE + 1)}
    record = {SINCE + 1 + gap: cell(new, SINCE + 1 + gap)}
    assert settle_column(watched, record, since_ms=SINCE, until=SINCE + 1, carried=set(),
                         written={SINCE + 1}) is None
