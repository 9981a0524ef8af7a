"""The key encoding orders exactly like Tablestore primary keys (column by column, INF bounds)."""

from hypothesis import given
from hypothesis import strategies as st

from tsmigrate.local.keycodec import encode_key
from tsmigrate.wire.plainbuffer import INF_MAX, INF_MIN

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
COLUMN_TYPES = [INT64, st.booleans(), st.text(max_size=12), st.binary(max_size=12)]


def rank(value: object) -> tuple[int, object]:
    """Tablestore order of one column: INF_MIN < every value < INF_MAX; strings by UTF-8 bytes."""
    if value is INF_MIN:
        return (0, b"")
    if value is INF_MAX:
        return (2, b"")
    return (1, value.encode() if isinstance(value, str) else value)


@st.composite
def key_pairs(draw: st.DrawFn) -> tuple[list[object], list[object]]:
    """Two keys of one schema (1-4 columns), with INF bounds mixed in."""
    schema = draw(st.lists(st.sampled_from(COLUMN_TYPES), min_size=1, max_size=4))

    def key() -> list[object]:
        return [draw(st.one_of(col, st.sampled_from([INF_MIN, INF_MAX]))) for col in schema]

    return key(), key()


@given(key_pairs())
def test_byte_order_is_primary_key_order(pair: tuple[list[object], list[object]]) -> None:
    a, b = pair
    expected = (tuple(map(rank, a)) > tuple(map(rank, b))) - (tuple(map(rank, a)) < tuple(map(rank, b)))
    ea, eb = encode_key(a), encode_key(b)
    assert ((ea > eb) - (ea < eb)) == expected


@given(st.lists(st.text(max_size=6), min_size=2, max_size=2), INT64)
def test_string_prefix_sorts_first_even_before_a_later_column(texts: list[str], number: int) -> None:
    short, long_ = sorted(texts, key=len)
    if long_.startswith(short) and long_ != short:
        assert encode_key([short, 2**63 - 1]) < encode_key([long_, -(2**63)])


def test_bounds_enclose_every_value() -> None:
    for value in (-(2**63), 0, 2**63 - 1, "", "\x00", "\U0010ffff", b"", b"\xff" * 10):
        assert encode_key([INF_MIN]) < encode_key([value]) < encode_key([INF_MAX])
        assert encode_key([value, INF_MIN]) < encode_key([value, 5]) < encode_key([value, INF_MAX])
