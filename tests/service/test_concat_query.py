"""Queries on a concatenated key column, through the local server, against a brute-force filter
over every row: equality on the leading fields, a range on the next, later fields filtered,
forward and backward, with limits, short pages and columns to get."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from service_models import FAST

from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.keys import Concat
from tsmigrate.service import Attr, QueryError, Range, Rows, RowValueError, create_tables


class Sale(Model, table="concat_sales"):
    """The seeds' student cards: DeviceID, SellerID, CardID in one partition key, then a sequence."""

    pk = PrimaryKey(str, derive=Concat(["device", "seller", "card"], pad={"device": 3}))
    seq = PrimaryKey(int)
    device = Column(int)
    seller = Column(str)
    card = Column(str)
    amount = Column(int)


class Code(Model, table="concat_codes"):
    """A concatenation as the only (so the last) key column."""

    code = PrimaryKey(str, derive=Concat(["n", "seller"], pad={"n": 2}))
    n = Column(int)
    seller = Column(str)


SELLERS = ["", "a", "a1", "a10", "a100", "a1001", "a-", "a.", "a_", "b", "B", "-", "z"]
DEVICES = [0, 1, 9, 54, 999]
CARDS = ["", "c", "c1", "x-y"]
SALES = [(d, s, c, q) for d in DEVICES for s in SELLERS for c in CARDS for q in (0, 1)]
CODES = [(n, s) for n in (0, 5, 99) for s in SELLERS]

TEXT_BOUND = st.one_of(st.sampled_from(SELLERS + CARDS), st.text("0aAbcz-._, +", max_size=3))
BOUND = {"device": st.integers(-2, 1001), "seller": TEXT_BOUND, "card": TEXT_BOUND,
         "n": st.integers(-2, 101)}


@pytest.fixture
def loaded(ots_instance):
    client = ots_instance.client()
    create_tables(client, [Sale, Code])
    sales, codes = Rows(Sale, client, retry=FAST), Rows(Code, client, retry=FAST)
    sales.batch_write(put=(Sale(device=d, seller=s, card=c, seq=q, amount=q * 10 + d)
                           for d, s, c, q in SALES)).raise_for_failures()
    codes.batch_write(put=(Code(n=n, seller=s) for n, s in CODES)).raise_for_failures()
    return sales, codes


@st.composite
def range_value(draw, field):
    bound = BOUND[field]
    lower = draw(st.sampled_from([None, "gte", "gt"]))
    upper = draw(st.sampled_from([None, "lte", "lt"]))
    spec = {}
    if lower:
        spec[lower] = draw(bound)
    if upper:
        spec[upper] = draw(bound)
    return Range(**spec)


def matches(value, spec) -> bool:
    if not isinstance(spec, Range):
        return value == spec
    checks = {"gte": value.__ge__, "gt": value.__gt__, "lte": value.__le__, "lt": value.__lt__}
    return all(checks[side](getattr(spec, side)) for side in checks if getattr(spec, side) is not None)


@st.composite
def concat_query(draw, fields, rows):
    """Equality on some leading fields (values from the rows, or not), a range or nothing on the
    next, maybe a condition on a later one."""
    k = draw(st.integers(0, len(fields) - 1))
    source = draw(st.sampled_from(rows))
    spec = {}
    for i in range(k):
        spec[fields[i]] = source[i] if draw(st.integers(0, 4)) else draw(BOUND[fields[i]].filter(
            lambda v: not isinstance(v, str) or all(ch > "," for ch in v)))
    if draw(st.booleans()):
        spec[fields[k]] = draw(range_value(fields[k]))
    later = fields[k + 1:]
    if later and draw(st.integers(0, 2)) == 0:
        name = draw(st.sampled_from(later))
        spec[name] = draw(st.one_of(st.just(source[fields.index(name)]), BOUND[name], range_value(name)))
    return spec


def _valid(spec, fields) -> bool:
    """Equality values a key can hold (padded integers in range, no separator in strings)."""
    for name, value in spec.items():
        if isinstance(value, Range):
            continue
        if isinstance(value, int) and not 0 <= value < (1000 if name == "device" else 100):
            return False
    return True


def expected_rows(rows, fields, spec, reverse, limit):
    kept = [row for row in sorted(rows, reverse=reverse)
            if all(matches(row[fields.index(name)], value) for name, value in spec.items())]
    return kept if limit is None else kept[:limit]


def test_backward_on_the_last_key_column_excludes_and_includes_string_bounds(loaded):
    _, codes = loaded
    # Sellers sort "a" < "a-" < "a." < "a1" < "a10" ("-" and "." sort below digits).
    got = [r.seller for r in codes.query(n=5, seller=Range(gte="a", lte="a1"), reverse=True)]
    assert got == ["a1", "a.", "a-", "a"]
    got = [r.seller for r in codes.query(n=5, seller=Range(gte="a", lt="a1"), reverse=True)]
    assert got == ["a.", "a-", "a"]  # the excluded bound is a key the range starts with


@st.composite
def options(draw):
    return {"reverse": draw(st.booleans()),
            "limit": draw(st.one_of(st.none(), st.integers(1, 30))),
            "page_size": draw(st.one_of(st.none(), st.integers(1, 7)))}


@pytest.mark.slow  # 150 generated queries, each against the server and a brute-force filter
def test_concat_ranges_return_what_a_brute_force_filter_keeps(loaded):
    sales, _ = loaded
    fields = ["device", "seller", "card"]

    @settings(max_examples=150, deadline=None)
    @given(spec=concat_query(fields, SALES).filter(lambda s: _valid(s, fields)), opts=options())
    def check(spec, opts):
        narrowed = any(name in spec for name in ("device",))
        later = [name for name in fields[1:] if name in spec]
        if later and not narrowed:
            with pytest.raises(QueryError, match="sorts by device first"):
                sales.query(**spec, **opts)
            return
        got = [(r.device, r.seller, r.card, r.seq) for r in sales.query(**spec, **opts)]
        assert got == expected_rows(SALES, fields, spec, opts["reverse"], opts["limit"])

    check()


@pytest.mark.slow
def test_a_concatenation_as_the_last_key_column_reads_backward_exactly(loaded):
    # Backward, a string bound on the last key column has no neighbouring key: the range starts
    # at an excluded upper bound and drops it, or reads an included lower bound's row last.
    _, codes = loaded
    fields = ["n", "seller"]

    @settings(max_examples=150, deadline=None)
    @given(spec=concat_query(fields, CODES).filter(lambda s: _valid(s, fields)), opts=options())
    def check(spec, opts):
        if "seller" in spec and "n" not in spec:
            with pytest.raises(QueryError, match="sorts by n first"):
                codes.query(**spec, **opts)
            return
        got = [(r.n, r.seller) for r in codes.query(**spec, **opts)]
        assert got == expected_rows(CODES, fields, spec, opts["reverse"], opts["limit"])

    check()


def test_seed_example_one_device_and_a_seller_range(loaded):
    sales, _ = loaded
    got = [(r.seller, r.card, r.seq) for r in sales.query(device=54, seller=Range(gte="a1", lte="a100"))]
    assert [s for s, _, _ in got] == ["a1"] * 8 + ["a10"] * 8 + ["a100"] * 8  # never a1001
    assert got == sorted(got)
    backward = [(r.seller, r.card, r.seq) for r in sales.query(
        device=54, seller=Range(gte="a1", lte="a100"), reverse=True)]
    assert backward == got[::-1]


def test_a_later_field_is_a_server_side_filter_within_the_leading_range(loaded):
    sales, _ = loaded
    rows = list(sales.query(device=Range(gte=9, lt=999), card="c1", columns=["device", "amount"]))
    assert {(r.device, r.card) for r in rows} == {(9, None), (54, None)}  # card: not asked for
    assert len(rows) == 2 * len(SELLERS) * 2
    # The caller's filter and the key's filter both hold.
    rows = list(sales.query(device=54, card="c1", filter=Attr("amount") == 64))
    assert {(r.device, r.card, r.seq) for r in rows} == {(54, "c1", 1)}


def test_queries_the_key_cannot_serve_say_why(loaded):
    sales, _ = loaded
    with pytest.raises(QueryError, match=r"card cannot narrow this query: .*sorts by device first"):
        sales.query(card="c")
    with pytest.raises(QueryError, match=r"seq cannot narrow .* is fixed only when all its fields"):
        sales.query(device=54, seq=1)
    with pytest.raises(RowValueError, match=r"Sale\.device is INTEGER, got str '054'"):
        sales.query(device=Range(gte="054"))
    with pytest.raises(QueryError, match="seq is a primary-key column"):
        sales.query(device=54, filter=Attr("seq") == 1)


class Shelf(Model, table="concat_shelves"):
    """A concatenation whose later field is also a key column of its own."""

    pk = PrimaryKey(str, derive=Concat(["aisle", "bin"]))
    bin = PrimaryKey(str)
    aisle = Column(str)


def test_a_later_field_that_is_a_key_column_cannot_be_filtered(ots_instance):
    shelves = Rows(Shelf, ots_instance.client())
    with pytest.raises(QueryError, match="a key column, which a server-side filter cannot read; give aisle"):
        shelves.query(aisle=Range(gte="a"), bin="x")
