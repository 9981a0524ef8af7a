"""Inverse key derivations: what the rewrite engine reads old keys with."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsmigrate.errors import KeyDerivationError
from tsmigrate.keys import ALPHABETS, INT64_MAX, Concat, Descending, HashPrefix, TimeBucket

SETTINGS = settings(max_examples=150, deadline=None)


@SETTINGS
@given(st.text(max_size=30), st.integers(1, 32), st.sampled_from(["|", ",", "", "#"]))
def test_hash_prefix_invert_of_derive_is_identity(value: str, length: int, sep: str) -> None:
    prefix = HashPrefix("device_id", length, sep)
    assert prefix.invert(prefix.derive({"device_id": value})) == {"device_id": value}


@SETTINGS
@given(st.integers(-(2**63), INT64_MAX))
def test_hash_prefix_of_an_integer_inverts_to_its_digits(value: int) -> None:
    prefix = HashPrefix("n")
    assert prefix.invert(prefix.derive({"n": value})) == {"n": str(value)}


def test_hash_prefix_example_from_the_issue() -> None:
    key = HashPrefix("device_id", 4, "|").derive({"device_id": "dev-1"})
    assert HashPrefix("device_id", 4, "|").invert(key) == {"device_id": "dev-1"}


@pytest.mark.parametrize("key", ["ab12|dev-1", "dev-1", "", 12, "xxxx|"])
def test_hash_prefix_refuses_keys_it_did_not_build(key) -> None:
    with pytest.raises(KeyDerivationError, match="HashPrefix"):
        HashPrefix("device_id").invert(key)


_PART = st.text(alphabet=ALPHABETS["identifier"], max_size=12)


@SETTINGS
@given(
    st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=2, max_size=4, unique=True).flatmap(
        lambda fields: st.tuples(
            st.just(fields),
            st.dictionaries(st.sampled_from(fields), st.integers(1, 19)),
        )
    ),
    st.data(),
)
@pytest.mark.slow
def test_concat_invert_of_derive_is_identity(case, data) -> None:
    fields, pad = case
    concat = Concat(fields, sep=",", pad=pad)
    values = {
        f: data.draw(st.integers(0, 10 ** pad[f] - 1)) if f in pad else data.draw(_PART) for f in fields
    }
    assert concat.invert(concat.derive(values)) == values


def test_concat_drops_the_padding() -> None:
    concat = Concat(["DeviceID", "SellerID", "CardID"], pad={"DeviceID": 6})
    assert concat.derive({"DeviceID": 42, "SellerID": "a100", "CardID": "c7"}) == "000042,a100,c7"
    assert concat.invert("000042,a100,c7") == {"DeviceID": 42, "SellerID": "a100", "CardID": "c7"}


@pytest.mark.parametrize("key", ["42,a100,c7", "0000x2,a100,c7", "000042,a100", 42, "000042,a,b,c"])
def test_concat_refuses_keys_it_did_not_build(key) -> None:
    with pytest.raises(KeyDerivationError, match="Concat"):
        Concat(["DeviceID", "SellerID", "CardID"], pad={"DeviceID": 6}).invert(key)


@SETTINGS
@given(st.integers(1, INT64_MAX).flatmap(lambda c: st.tuples(st.just(c), st.integers(0, c))))
def test_descending_invert_of_derive_is_identity(case) -> None:
    ceiling, value = case
    descending = Descending("ts", ceiling)
    assert descending.invert(descending.derive({"ts": value})) == {"ts": value}


@pytest.mark.parametrize("key", [-1, INT64_MAX + 1, "5", True])
def test_descending_refuses_keys_outside_its_range(key) -> None:
    with pytest.raises(KeyDerivationError, match="Descending"):
        Descending("ts").invert(key)


@SETTINGS
@given(st.integers(2, 4096), st.integers(-(2**63), INT64_MAX))
def test_time_bucket_is_not_invertible_but_recomputable(buckets: int, value: int) -> None:
    bucket = TimeBucket("ts", buckets)
    assert not bucket.invertible
    with pytest.raises(KeyDerivationError, match="does not tell"):
        bucket.invert(bucket.derive({"ts": value}))
    assert bucket.derive({"ts": value}) == value % buckets  # recomputed from the kept source
