"""Relevance scores of Search, as the service's Lucene-based engine computes them (BM25).

A term of a field scores ``idf * tf``:

- ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))``: N the documents that have the field, n those that
  hold the term;
- ``tf = f * (k1 + 1) / (f + k1 * (1 - b + b * dl / avgdl))`` with k1 = 1.2, b = 0.75, f the
  term's frequency in the document, dl the field's length in the document and avgdl its mean over
  the N documents. The length is the number of token positions (words a dictionary analyzer
  finds at one position count once), stored lossily as Lucene stores norms (exact below 24).
  KEYWORD and BOOLEAN fields keep no lengths: ``tf = f * (k1 + 1) / (f + k1)``.

A phrase scores the sum of its words' idf times the tf of its occurrences. These reproduce the
scores the official SDK's full_text_search_test expects of the service (a function score on a
max_word field: 53, 11 and 9). How queries combine scores (bool sums, constant scores, function
scores, weights) is in search.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any, Generic, TypeVar

K1 = 1.2
B = 0.75

Doc = TypeVar("Doc")


def _long_to_int4(i: int) -> int:
    bits = i.bit_length()
    if bits < 4:
        return i
    shift = bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits, shift = i & 0x07, (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_FREE_VALUES = 255 - _long_to_int4(2**31 - 1)  # lengths below this are stored exactly


def stored_length(length: int) -> int:
    """A field length as Lucene's norm keeps it (SmallFloat.intToByte4, then back)."""
    if length < _FREE_VALUES:
        return length
    return _FREE_VALUES + _int4_to_long(_long_to_int4(length - _FREE_VALUES))


class Stats(Generic[Doc]):
    """The statistics BM25 needs, over the documents a query searches, computed on first use
    (a query without scored terms never computes them). ``terms(doc, field)`` is what a document
    holds for a field (tokens or values), ``length(doc, field)`` its length."""

    def __init__(self, docs: Callable[[], Sequence[Doc]],
                 terms: Callable[[Doc, Any], Collection[Any]],
                 length: Callable[[Doc, Any], int]) -> None:
        self._docs = docs
        self._terms = terms
        self._length = length
        self._fields: dict[str, tuple[int, float]] = {}
        self._freq: dict[tuple[str, Any], int] = {}
        self._nested: dict[str, Stats[Doc]] = {}

    def nested(self, path: str, objects: Callable[[Sequence[Doc]], Sequence[Doc]]) -> Stats[Doc]:
        """The statistics of the objects of a NESTED field: ``objects`` derives them from the
        documents (on first use)."""
        child = self._nested.get(path)
        if child is None:
            derived: list[Sequence[Doc]] = []

            def docs() -> Sequence[Doc]:
                if not derived:
                    derived.append(objects(self._docs()))
                return derived[0]

            child = self._nested[path] = Stats(docs, self._terms, self._length)
        return child

    def _field(self, field: Any) -> tuple[int, float]:
        """(documents with the field, their mean length)."""
        known = self._fields.get(field.name)
        if known is None:
            lengths = [self._length(d, field) for d in self._docs() if self._terms(d, field)]
            known = self._fields[field.name] = (len(lengths), sum(lengths) / len(lengths) if lengths else 0.0)
        return known

    def idf(self, field: Any, term: Any) -> float:
        key = (field.name, term)
        n = self._freq.get(key)
        if n is None:
            n = self._freq[key] = sum(1 for d in self._docs() if term in self._terms(d, field))
        docs, _ = self._field(field)
        return math.log(1 + (docs - n + 0.5) / (n + 0.5))

    def tf(self, field: Any, freq: int, length: int | None) -> float:
        """The term-frequency factor; `length` None: the field keeps no lengths."""
        if length is None:
            return freq * (K1 + 1) / (freq + K1)
        _, mean = self._field(field)
        norm = 1 - B + B * stored_length(length) / mean if mean else 1.0
        return freq * (K1 + 1) / (freq + K1 * norm)
