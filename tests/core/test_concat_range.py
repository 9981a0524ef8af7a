"""Concat.prefix_range: the keys of one range are exactly the rows a brute-force filter keeps."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsmigrate.errors import KeyDerivationError
from tsmigrate.keys import ALPHABETS, Concat

# (device: zero-padded to 3 digits, seller, card), as in the student-card design of the seeds.
CONCAT = Concat(["device", "seller", "card"], sep=",", pad={"device": 3})
FIELDS = CONCAT.fields
TRICKY = ["", "a", "a1", "a10", "a100", "a1001", "a-", "a.", "a_", "b", "B", "-", "_", "0", "z"]
# Bounds may hold characters no value can (the separator, a space, one just above it).
BOUND_TEXT = st.one_of(st.sampled_from(TRICKY), st.text(ALPHABETS["identifier"][:6] + ", -+", max_size=4))
BOUND_INT = st.integers(-3, 1003)

ROWS = st.lists(
    st.tuples(st.sampled_from([0, 1, 9, 10, 54, 999]), st.sampled_from(TRICKY), st.sampled_from(TRICKY)),
    min_size=1, max_size=40, unique=True,
)


def _bound(kind):
    return st.one_of(st.none(), st.tuples(kind, st.booleans()))


def _within(value, lower, upper) -> bool:
    if lower is not None and (value < lower[0] if lower[1] else value <= lower[0]):
        return False
    return upper is None or (value <= upper[0] if upper[1] else value < upper[0])


@settings(max_examples=400, deadline=None)
@given(rows=ROWS, data=st.data())
@pytest.mark.slow
def test_a_prefix_range_holds_exactly_the_rows_a_filter_keeps(rows, data) -> None:
    k = data.draw(st.integers(0, len(FIELDS) - 1), label="fixed fields")
    source = data.draw(st.sampled_from(rows), label="fixed values from")
    fixed = dict(zip(FIELDS[:k], source[:k], strict=True))
    kind = BOUND_INT if FIELDS[k] == "device" else BOUND_TEXT
    lower, upper = data.draw(_bound(kind), label="lower"), data.draw(_bound(kind), label="upper")

    span = CONCAT.prefix_range(fixed, lower, upper)

    expected = {row for row in rows if row[:k] == source[:k] and _within(row[k], lower, upper)}
    keys = {CONCAT.derive(dict(zip(FIELDS, row, strict=True))): row for row in rows}
    if span is None:
        assert expected == set()
        return
    start, end = span
    got = {row for key, row in keys.items()
           if (start is None or key >= start) and (end is None or key < end)}
    assert got == expected
    assert start is None or end is None or start < end  # a GetRange refuses start >= end


def test_prefix_of_the_seeds_student_cards() -> None:
    # DeviceID 54, every seller and card: the keys '054,...'.
    assert CONCAT.prefix_range({"device": 54}) == ("054,", "054-")
    # Sellers from a100 up to and including a100 (so not a1001, which '000054:a100:' would mix in).
    assert CONCAT.prefix_range({"device": 54}, ("a100", True), ("a100", True)) == ("054,a100", "054,a100-")
    assert CONCAT.prefix_range({}, (10, True), (20, False)) == ("010", "019-")


def test_bounds_no_value_can_meet_give_no_range() -> None:
    assert CONCAT.prefix_range({}, (1000, True)) is None  # wider than the 3-digit pad
    assert CONCAT.prefix_range({}, None, (0, False)) is None
    assert CONCAT.prefix_range({"device": 1}, ("b", True), ("a", True)) is None
    assert CONCAT.prefix_range({}, (-5, True), (5000, True)) == (None, None)  # the whole column


def test_a_bound_of_the_wrong_type_or_a_misplaced_prefix_is_refused() -> None:
    with pytest.raises(KeyDerivationError, match="'device' is zero-padded and its bounds must be integers"):
        CONCAT.prefix_range({}, ("10", True))
    with pytest.raises(KeyDerivationError, match="fixes the first fields"):
        CONCAT.prefix_range({"seller": "a"})
    with pytest.raises(KeyDerivationError, match="leaves at least one open"):
        CONCAT.prefix_range({"device": 1, "seller": "a", "card": "c"})
