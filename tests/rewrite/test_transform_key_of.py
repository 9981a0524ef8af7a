"""``RowTransform.key_of`` (capture's target key of a source key and the newest values of its
columns) against what it stands for, ``target_key(natural(...))``: the same key on any input,
or the same error, with keys whose columns are plain (its direct path) and derived or custom
(the general path)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tsmigrate.contract.transform import RowTransform, TransformError
from tsmigrate.keys import HashPrefix
from tsmigrate.schema import AttributeColumn, PrimaryKeyColumn, Table

SOURCE = Table("serp", [PrimaryKeyColumn("request_id", "STRING"), PrimaryKeyColumn("n", "INTEGER")],
               attributes=[AttributeColumn("keyword", "STRING"), AttributeColumn("day", "STRING")])
BY_KEYWORD = Table("serp_by_keyword",
                   [PrimaryKeyColumn("keyword", "STRING"), PrimaryKeyColumn("day", "STRING"),
                    PrimaryKeyColumn("request_id", "STRING"), PrimaryKeyColumn("n", "INTEGER")],
                   replaces="serp")
BY_HASHED_KEYWORD = Table("serp_by_hash",
                          [PrimaryKeyColumn("pk", "STRING", derivation=HashPrefix("keyword", 4, "|")),
                           PrimaryKeyColumn("request_id", "STRING"), PrimaryKeyColumn("n", "INTEGER")],
                          replaces="serp")
BY_KEYWORD_ONLY = Table("serp_keywords", [PrimaryKeyColumn("keyword", "STRING")],
                        attributes=[AttributeColumn("request_id", "STRING"), AttributeColumn("n", "INTEGER")],
                        replaces="serp")
SETTINGS = settings(max_examples=300, deadline=None)

_VALUE = st.one_of(st.text(max_size=6), st.integers(-5, 5), st.binary(max_size=3), st.none())
_NAME = st.sampled_from(["request_id", "n", "keyword", "day", "other"])
_PK = st.lists(st.tuples(_NAME, _VALUE), max_size=3)
_ATTRIBUTES = st.dictionaries(_NAME, _VALUE, max_size=4)


def _general(transform: RowTransform, pk, attributes, source_key) -> object:
    try:
        return tuple(transform.target_key(transform.natural(pk, list(attributes.items())), source_key))
    except TransformError as exc:
        return ("error", str(exc))


def _direct(transform: RowTransform, pk, attributes, source_key) -> object:
    try:
        return transform.key_of(pk, attributes, source_key)
    except TransformError as exc:
        return ("error", str(exc))


def _plausible_pk(draw: st.DrawFn) -> list:
    """A source key as capture reads them, mostly well formed, sometimes not."""
    if draw(st.booleans()):
        return [("request_id", draw(st.text(max_size=6))), ("n", draw(st.integers(-5, 5)))]
    return draw(_PK)


@SETTINGS
@given(st.data(), st.sampled_from([BY_KEYWORD, BY_HASHED_KEYWORD, BY_KEYWORD_ONLY]), st.booleans())
def test_the_key_of_a_source_key_and_its_values_is_the_general_paths(data, target, as_tuple) -> None:
    transform = RowTransform.build(SOURCE, target)
    pk = _plausible_pk(data.draw)
    attributes = data.draw(_ATTRIBUTES)
    if data.draw(st.booleans()):
        attributes.update(keyword=data.draw(st.text(max_size=4)), day=data.draw(st.text(max_size=4)))
    if as_tuple:
        pk = tuple(pk)
    source_key = data.draw(st.sampled_from([None, pk]))
    assert _direct(transform, pk, attributes, source_key) == _general(transform, pk, attributes, source_key)


def test_only_keys_without_derived_columns_or_custom_transform_take_the_direct_path() -> None:
    assert RowTransform.build(SOURCE, BY_KEYWORD)._plain is not None
    assert RowTransform.build(SOURCE, BY_KEYWORD_ONLY)._plain is not None
    assert RowTransform.build(SOURCE, BY_HASHED_KEYWORD)._plain is None
