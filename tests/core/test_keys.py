"""Key derivations: the order properties Tablestore's key design relies on, and their IR form."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsmigrate.errors import KeyDerivationError
from tsmigrate.keys import (
    ALPHABETS,
    INT64_MAX,
    Concat,
    Descending,
    HashPrefix,
    TimeBucket,
    derivation_from_dict,
)

SETTINGS = settings(max_examples=100, deadline=None)


def cmp(a, b) -> int:
    return (a > b) - (a < b)


# --- Concat: zero padding and separators ---------------------------------------------------------


@SETTINGS
@given(
    st.integers(1, 19).flatmap(
        lambda w: st.tuples(st.just(w), st.integers(0, 10**w - 1), st.integers(0, 10**w - 1))
    )
)
def test_zero_padding_keeps_numeric_order(case: tuple[int, int, int]) -> None:
    width, a, b = case
    concat = Concat(["n", "s"], pad={"n": width})
    key_a, key_b = concat.part("n", a), concat.part("n", b)
    assert len(key_a) == len(key_b) == width
    assert cmp(key_a, key_b) == cmp(a, b)


def test_zero_padding_example_from_the_guide() -> None:
    assert Concat(["OrderNumber", "x"], pad={"OrderNumber": 8}).part("OrderNumber", 123) == "00000123"


# (fields, alphabet, separator) combinations whose derived keys must sort like the tuples.
LAYOUTS = [
    (("s", "n"), "identifier", ","),
    (("n", "s", "t"), "identifier", ","),
    (("s", "t"), "alnum", ","),
    (("d", "s"), "digits", "/"),
    (("s", "n", "t", "m"), "hex", ","),
    (("s", "t"), "printable", " "),
]
INT_FIELDS = {"n": 6, "m": 3}  # zero-padded integer fields and their widths


def _tuples(fields: tuple[str, ...], alphabet: str) -> st.SearchStrategy[tuple]:
    chars = ALPHABETS[alphabet]
    parts = [
        st.integers(0, 10 ** INT_FIELDS[f] - 1) if f in INT_FIELDS else st.text(chars, max_size=6)
        for f in fields
    ]
    return st.tuples(*parts)


def _concat(fields: tuple[str, ...], alphabet: str, sep: str) -> Concat:
    return Concat(
        list(fields), sep=sep, pad={f: w for f, w in INT_FIELDS.items() if f in fields}, alphabet=alphabet
    )


@pytest.mark.parametrize(("fields", "alphabet", "sep"), LAYOUTS, ids=lambda v: str(v))
def test_layouts_are_accepted(fields, alphabet, sep) -> None:
    assert _concat(fields, alphabet, sep).problems() == []


@pytest.mark.parametrize(("fields", "alphabet", "sep"), LAYOUTS, ids=[f"{a}-{len(f)}" for f, a, _ in LAYOUTS])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_concatenated_keys_sort_like_the_tuples(fields, alphabet, sep, data) -> None:
    concat = _concat(fields, alphabet, sep)
    rows = data.draw(st.lists(_tuples(fields, alphabet), min_size=2, max_size=12))
    keyed = {concat.derive(dict(zip(fields, row, strict=True))): row for row in rows}
    assert len(keyed) == len(set(rows))  # distinct rows get distinct keys
    assert [keyed[k] for k in sorted(keyed)] == sorted(set(rows))
    a, b = rows[0], rows[1]
    key_a = concat.derive(dict(zip(fields, a, strict=True)))
    key_b = concat.derive(dict(zip(fields, b, strict=True)))
    assert cmp(key_a, key_b) == cmp(a, b)


@SETTINGS
@given(
    st.tuples(
        st.text(ALPHABETS["identifier"], max_size=8),
        st.integers(0, 999_999),
        st.text(ALPHABETS["identifier"], max_size=8),
    )
)
def test_split_is_the_inverse_of_derive(row: tuple[str, int, str]) -> None:
    concat = Concat(["s", "n", "t"], pad={"n": 6})
    values = dict(zip(("s", "n", "t"), row, strict=True))
    assert concat.split(concat.derive(values)) == values


def test_split_rejects_a_key_with_the_wrong_number_of_parts() -> None:
    with pytest.raises(KeyDerivationError, match="does not have 2 parts"):
        Concat(["a", "b"]).split("a,b,c")


def test_colon_breaks_order_for_the_default_alphabet_and_comma_does_not() -> None:
    fields = ["DeviceID", "SellerID"]
    colon = Concat(fields, sep=":", pad={"DeviceID": 6})
    (message,) = colon.problems()
    assert "':'" in message and "does not sort below every data character" in message
    assert "','" in message  # the fix names a separator that works
    assert Concat(fields, sep=",", pad={"DeviceID": 6}).problems() == []


@pytest.mark.parametrize("alphabet", sorted(ALPHABETS))
def test_a_separator_must_sort_below_the_whole_alphabet(alphabet: str) -> None:
    lowest = min(ALPHABETS[alphabet])
    assert Concat(["a", "b"], sep=lowest, alphabet=alphabet).problems() != []
    assert Concat(["a", "b"], sep=chr(ord(lowest) + 1), alphabet=alphabet).problems() != []
    assert Concat(["a", "b"], sep=chr(ord(lowest) - 1), alphabet=alphabet).problems() == []


def test_a_custom_alphabet_is_a_string_of_characters() -> None:
    assert Concat(["a", "b"], sep="-", alphabet="xyz").problems() == []
    assert Concat(["a", "b"], sep="y", alphabet="xyz").problems() != []


def test_seed_example_comma_keeps_the_order_and_colon_does_not() -> None:
    """Seed 003: SellerID a100 sorts before a1001; with ':' the concatenated keys would not."""
    concat = Concat(["DeviceID", "SellerID", "CardID"], sep=",", pad={"DeviceID": 6})
    short = concat.derive({"DeviceID": 54, "SellerID": "a100", "CardID": "c1"})
    longer = concat.derive({"DeviceID": 54, "SellerID": "a1001", "CardID": "c1"})
    assert short == "000054,a100,c1" and longer == "000054,a1001,c1"
    assert short < longer
    rows = [{"DeviceID": d, "SellerID": s, "CardID": c}
            for d in (54, 7, 540) for s in ("a100", "a1001", "a10") for c in ("c1", "c", "c10")]
    by_key = sorted(rows, key=concat.derive)
    assert by_key == sorted(rows, key=lambda r: (r["DeviceID"], r["SellerID"], r["CardID"]))
    colon = Concat(["DeviceID", "SellerID", "CardID"], sep=":", pad={"DeviceID": 6})
    assert colon.problems() != []
    with pytest.raises(KeyDerivationError):  # its digits sort below ':', so derive refuses too
        colon.derive({"DeviceID": 54, "SellerID": "a100", "CardID": "c1"})


@SETTINGS
@given(st.text(max_size=6), st.characters(max_codepoint=ord(",")), st.text(max_size=6))
def test_a_value_with_a_character_at_or_below_the_separator_is_rejected(head, low, tail) -> None:
    concat = Concat(["a", "b"], sep=",")
    with pytest.raises(KeyDerivationError, match="at or below the separator"):
        concat.derive({"a": head + low + tail, "b": "x"})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"a": "x"}, "field 'b' is needed"),
        ({"a": "x", "b": None}, "field 'b' is None"),
        ({"a": 5, "b": "x"}, "needs a pad width"),
        ({"a": 1.5, "b": "x"}, "must be a string or an integer"),
        ({"a": True, "b": "x"}, "must be a string or an integer"),
    ],
)
def test_concat_refuses_values_it_cannot_order(values, message) -> None:
    with pytest.raises(KeyDerivationError, match=message):
        Concat(["a", "b"]).derive(values)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "does not fit"),
        (1000, "does not fit"),
        ("12", "must be an integer"),
        (True, "must be an integer"),
    ],
)
def test_padded_fields_refuse_values_that_break_numeric_order(value, message) -> None:
    with pytest.raises(KeyDerivationError, match=message):
        Concat(["n", "s"], pad={"n": 3}).derive({"n": value, "s": "x"})


@pytest.mark.parametrize(
    ("concat", "fragment"),
    [
        (Concat(["a"]), "at least two fields"),
        (Concat(["a", "a"]), "twice"),
        (Concat(["a", "b"], sep=""), "exactly one character"),
        (Concat(["a", "b"], sep=",,"), "exactly one character"),
        (Concat(["a", "b"], pad={"c": 3}), "not one of the fields"),
        (Concat(["a", "b"], pad={"a": 0}), "1 to 19 digits"),
        (Concat(["a", "b"], pad={"a": 20}), "1 to 19 digits"),
    ],
)
def test_concat_declaration_problems(concat: Concat, fragment: str) -> None:
    assert any(fragment in p for p in concat.problems()), concat.problems()


# --- Descending, TimeBucket, HashPrefix ----------------------------------------------------------


@SETTINGS
@given(
    st.integers(1, INT64_MAX).flatmap(lambda c: st.tuples(st.just(c), st.integers(0, c), st.integers(0, c)))
)
def test_descending_reverses_order(case: tuple[int, int, int]) -> None:
    ceiling, a, b = case
    d = Descending("ts", ceiling)
    key_a, key_b = d.derive({"ts": a}), d.derive({"ts": b})
    assert cmp(key_a, key_b) == -cmp(a, b)
    assert 0 <= key_a <= ceiling
    assert d.invert(key_a) == {"ts": a}


@pytest.mark.parametrize("value", [-1, INT64_MAX + 1, "5", 1.0, True])
def test_descending_refuses_values_outside_its_range(value) -> None:
    with pytest.raises(KeyDerivationError):
        Descending("ts").derive({"ts": value})


def test_descending_problems() -> None:
    assert Descending("ts").problems() == []
    assert Descending("ts", 0).problems() != []
    assert Descending("ts", INT64_MAX + 1).problems() != []


@SETTINGS
@given(st.integers(2, 4096), st.integers(-(2**63), 2**63 - 1))
def test_time_bucket_is_value_mod_buckets(buckets: int, value: int) -> None:
    bucket = TimeBucket("ts", buckets)
    key = bucket.derive({"ts": value})
    assert key in bucket.all_buckets()
    assert 0 <= key < buckets
    assert key == value % buckets
    assert bucket.derive({"ts": value + buckets}) == key


def test_time_bucket_guide_example() -> None:
    """16 buckets, timestamp % 16; a reader merges all 16."""
    bucket = TimeBucket("ts", 16)
    assert bucket.derive({"ts": 1718000003}) == 1718000003 % 16 == 3
    assert list(bucket.all_buckets()) == list(range(16))


@pytest.mark.parametrize("buckets", [1, 0, 4097])
def test_time_bucket_count_problems(buckets: int) -> None:
    assert TimeBucket("ts", buckets).problems() != []


@pytest.mark.parametrize("value", ["5", 1.5, None, False])
def test_time_bucket_refuses_non_integers(value) -> None:
    with pytest.raises(KeyDerivationError):
        TimeBucket("ts").derive({"ts": value})


@SETTINGS
@given(
    st.one_of(st.text(max_size=20), st.integers()), st.integers(1, 32), st.sampled_from(["|", ",", "", "#"])
)
def test_hash_prefix_is_md5_hex_then_separator_then_value(value, length: int, sep: str) -> None:
    key = HashPrefix("id", length, sep).derive({"id": value})
    text = str(value)
    digest = hashlib.md5(text.encode()).hexdigest()[:length]
    assert key == digest + sep + text
    assert re.fullmatch(f"[0-9a-f]{{{length}}}", key[:length])


def test_hash_prefix_default_format() -> None:
    key = HashPrefix("ip").derive({"ip": "10.10.0.1"})
    assert re.fullmatch(r"[0-9a-f]{4}\|10\.10\.0\.1", key)
    assert key[:4] == hashlib.md5(b"10.10.0.1").hexdigest()[:4]
    assert HashPrefix("ip", sep=",").derive({"ip": "10.10.0.1"}) == key[:4] + ",10.10.0.1"
    assert HashPrefix("raw").derive({"raw": b"abc"}) == hashlib.md5(b"abc").hexdigest()[:4] + "|abc"


@pytest.mark.parametrize(
    ("prefix", "fragment"),
    [
        (HashPrefix("x", 0), "1 to 32"),
        (HashPrefix("x", 33), "1 to 32"),
        (HashPrefix("x", sep="||"), "at most one character"),
    ],
)
def test_hash_prefix_problems(prefix: HashPrefix, fragment: str) -> None:
    assert any(fragment in p for p in prefix.problems())
    assert HashPrefix("x").problems() == []


# --- derivations as IR values --------------------------------------------------------------------

FIELD = st.text(ALPHABETS["identifier"], min_size=1, max_size=8)
DERIVATION_KINDS = (
    st.builds(HashPrefix, FIELD, st.integers(1, 32), st.sampled_from(["|", ",", ""])),
    st.builds(
        lambda fields, sep, widths, alphabet: Concat(
            fields, sep, dict(zip(fields, widths, strict=False)), alphabet
        ),
        st.lists(FIELD, min_size=2, max_size=4, unique=True),
        st.sampled_from([",", " ", "\x1f"]),
        st.lists(st.integers(1, 19), max_size=2),
        st.sampled_from([*ALPHABETS, "xyz"]),
    ),
    st.builds(TimeBucket, FIELD, st.integers(2, 4096)),
    st.builds(Descending, FIELD, st.integers(1, INT64_MAX)),
)
DERIVATIONS = st.one_of(*DERIVATION_KINDS)


@SETTINGS
@given(DERIVATIONS)
def test_derivation_dict_round_trip(derivation) -> None:
    assert derivation_from_dict(derivation.to_dict()) == derivation
    assert derivation_from_dict(json.loads(json.dumps(derivation.to_dict()))) == derivation
    assert derivation.to_dict()["kind"] == derivation.kind


# Pairs of one kind: drawing two kinds independently would mostly compare unlike ones.
SAME_KIND_PAIRS = st.sampled_from(DERIVATION_KINDS).flatmap(
    lambda kind: st.tuples(kind, kind)
)


@SETTINGS
@given(SAME_KIND_PAIRS)
def test_equal_derivations_have_equal_dicts(pair) -> None:
    a, b = pair
    assert (a == b) == (a.to_dict() == b.to_dict())


def test_concat_pad_order_does_not_matter() -> None:
    a = Concat(["x", "y"], pad={"x": 3, "y": 4})
    b = Concat(["x", "y"], pad=[("y", 4), ("x", 3)])
    assert a == b and a.to_dict() == b.to_dict()
    assert Concat(["y", "x"]) != Concat(["x", "y"])  # field order is key order


def test_unknown_derivation_kind_is_a_typed_error() -> None:
    with pytest.raises(KeyDerivationError, match="unknown key derivation kind 'reverse'"):
        derivation_from_dict({"kind": "reverse", "source": "x"})
    with pytest.raises(KeyDerivationError):
        derivation_from_dict({"source": "x"})


def test_output_types_and_sources() -> None:
    assert HashPrefix("a").output_type == Concat(["a", "b"]).output_type == "STRING"
    assert TimeBucket("a").output_type == Descending("a").output_type == "INTEGER"
    assert Concat(["a", "b"]).sources == ("a", "b")
    assert HashPrefix("a").sources == TimeBucket("a").sources == Descending("a").sources == ("a",)
