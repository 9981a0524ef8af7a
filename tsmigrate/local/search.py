"""Search engine of the local server: Search, ComputeSplits and ParallelScan over documents.

The server scans its storage and hands every row of the base table to these functions as a
*document*: a tuple ``(primary_key, columns)`` or ``(primary_key, columns, timestamps)`` where
``primary_key`` is ``[(name, value), ...]`` in schema order, ``columns`` maps each attribute
column to its latest value and the optional ``timestamps`` maps it to that cell's timestamp (ms;
returned in the response rows when given). The index is always "in sync": a search sees the rows
as they are now.

API:
    run_search(schema, request, documents) -> search_pb2.SearchResponse
        ``schema`` is a search_schema.IndexSchemaInfo, ``request`` a parsed SearchRequest.
    ScanSessions(splits_size=1, clock=time.monotonic)      one per server (thread-safe)
        .compute_splits(table_name, index_name) -> search_pb2.ComputeSplitsResponse
        .parallel_scan(table_name, schema, request, documents) -> search_pb2.ParallelScanResponse
    Errors are OTSError (400 OTSParameterInvalid; 400 OTSSessionExpired for scan sessions).

Indexing (what a document contributes to a field; anything else is dirty data, not searchable):
    LONG, DATE <- int; DOUBLE <- float; BOOLEAN <- bool; KEYWORD, TEXT <- str;
    GEO_POINT <- "lat,lon" str; NESTED <- JSON array of objects; JSON, VECTOR <- str.
    is_array fields hold a JSON array string; the whole value is dirty if any element is.
    DATE strings are parsed with the field's date_formats (search_dates.py) into epoch ms;
    query values given as strings for LONG, DOUBLE and DATE fields are converted likewise.
    Virtual fields read their first source column. PK columns can be fields.
    TEXT is analysed by its analyzer (search_analyzers.py): single_word, split, fuzzy
    (n-grams), max_word / min_word (dictionary segmentation with jieba).

Queries: match_all, term, terms, range, prefix, wildcard, exists, match (OR/AND,
minimum_should_match), match_phrase (consecutive tokens), bool (must / must_not / filter /
should + minimum_should_match, ES semantics), const_score, function_score (field value factor),
dis_max (tie_breaker). Term-level queries on TEXT compare single tokens, unanalysed. A query on a field not in
the schema, or not indexed, is an error, as is a query value of the wrong type (ints and floats
are interchangeable on numeric fields). Geo distance / bounding box / polygon compare points
quantized as the index stores them; nested queries match when one object of the NESTED field
matches the whole inner query (its fields named `path.sub`); a KNN vector query (top level only)
is an exact search: the top_k (at least limit) most similar vectors passing its filter, scored as
the service scores (cosine (1+cos)/2, dot product (1+dot)/2, euclidean 1/(1+d^2)), ordered by
score unless sorted otherwise; a full page of it carries a next_token, as the service's (whose
partitions each return top_k) does.

Scores, as the service's Lucene-based engine computes them: BM25 for terms of TEXT, KEYWORD and
BOOLEAN fields, match (the sum of its tokens') and match_phrase (search_scoring.py); a constant
1.0 for match_all, terms, range, prefix, wildcard, exists, geo and numeric term queries, and
const_score; bool sums its must and should clauses (filter and must_not only filter, a bool of
filters alone scores 0); function_score multiplies by a numeric field's value (0 without one);
dis_max takes the best clause plus tie_breaker times the rest; nested combines its objects'
scores by score_mode (default none: 0). A query's weight multiplies its score. Every row has its
search_hit: its score and, when asked for, its highlights (search_highlight.py). Collapse is
refused.
Aggregations and group-bys: search_aggs.py.

Sorting: FieldSort (asc/desc, mode MIN/MAX/AVG for arrays; default MIN asc / MAX desc; missing
values last either way), PrimaryKeySort, DocSort (= PK order), ScoreSort (by score, descending
unless asked otherwise). Scores order hits only through a ScoreSort (and by default for KNN), as
on the service; without a sort the index_sort applies, else PK ascending.
Ties always break by PK ascending, which makes the order total and next_token exact.

Paging: limit default 10, at most 100 (1000 when only PK or index columns are returned),
offset + limit <= 100000. next_token is base64 JSON of the sort and the last row's sort values
+ PK; it is only returned when more rows follow, and not at all for a request without a sort
on an index with NESTED fields (which has no presort; the service documents that). A token
continues strictly after that row; a request with a token must use the token's sort (or none).
total_hits is -1 unless get_total_count. routing_values are accepted and ignored (one local
shard holds every row).

ParallelScan: rows of slice ``current_parallel_id`` (a stable hash of the PK modulo
max_parallel) in PK order; limit default and maximum 2000; max_parallel <= the session's
splits_size; next_token encodes the session, slice and last PK. As on the service, every page
with rows carries a next_token (the last rows too) and the end of the scan is an empty page
without one. A session lives ``alive_time``
seconds (SDK default 60) after its last use; a ParallelScan without a session_id is accepted.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tablestore.protobuf import search_pb2 as spb

from tsmigrate.local import search_aggs, search_highlight
from tsmigrate.local.errors import OTSError, invalid
from tsmigrate.local.search_analyzers import DICTIONARY_ANALYZERS, analyze_with_length, phrase_tokens
from tsmigrate.local.search_dates import parse_date
from tsmigrate.local.search_limits import check_query_tree
from tsmigrate.local.search_schema import FIELD_TYPE_NAMES, IndexSchemaInfo, SearchField
from tsmigrate.local.search_scoring import Stats
from tsmigrate.local.utf8 import parse_nested
from tsmigrate.wire.plainbuffer import (
    INF_MAX,
    INF_MIN,
    PlainBufferError,
    decode_value,
    encode_row,
    encode_value,
)

Document = tuple[Any, ...]  # (primary_key, columns[, timestamps]); see the module docstring

DEFAULT_LIMIT = 10
MAX_LIMIT = 100
MAX_LIMIT_INDEX_ONLY = 1000
MAX_OFFSET_PLUS_LIMIT = 100_000
MAX_SCAN_LIMIT = 2000
# Search's timeout (search index limits, D-SRLIM): the budget of one request's matching.
SEARCH_TIMEOUT_S = 10.0
# "Length of a query string for a wildcard query: 32" (search index limits, D-SRLIM).
MAX_WILDCARD_LENGTH = 32
DEFAULT_ALIVE_TIME = 60

_NUMERIC = (spb.LONG, spb.DATE, spb.DOUBLE)
_STRINGS = (spb.KEYWORD, spb.TEXT)
_DIRTY = object()
_Pred = Callable[["_Doc"], bool]
# A compiled query: a document's score when it matches, None when it does not.
_Scorer = Callable[["_Doc"], "float | None"]


# --- indexing: the values a document holds for a field ---------------------------------------


def _geo_point(text: str) -> bool:
    try:
        lat, lon = (float(p) for p in text.split(","))
    except ValueError:
        return False
    return -90 <= lat <= 90 and -180 <= lon <= 180


def _convert(ftype: int, value: object, in_array: bool, date_formats: tuple[str, ...] = ()) -> object:
    t = type(value)
    if ftype == spb.DATE and t is str and date_formats:
        ms = parse_date(value, date_formats)  # type: ignore[arg-type]
        return _DIRTY if ms is None else ms
    if ftype in (spb.LONG, spb.DATE):
        return value if t is int else _DIRTY
    if ftype == spb.DOUBLE:
        # JSON arrays cannot tell 1 from 1.0; table cells can (Integer is not Double).
        return float(value) if t is float or (in_array and t is int) else _DIRTY  # type: ignore[arg-type]
    if ftype == spb.BOOLEAN:
        return value if t is bool else _DIRTY
    if t is not str:
        return _DIRTY
    if ftype == spb.GEO_POINT:
        return value if _geo_point(value) else _DIRTY  # type: ignore[arg-type]
    if ftype == spb.NESTED:
        try:
            items = json.loads(value)  # type: ignore[arg-type]
        except ValueError:
            return _DIRTY
        ok = isinstance(items, list) and all(isinstance(i, dict) for i in items)
        return value if ok else _DIRTY
    return value


def _index_values(field: SearchField, raw: object) -> list[Any]:
    if raw is None:
        return []
    if field.is_array and field.type != spb.NESTED:
        if type(raw) is not str:
            return []
        try:
            items = json.loads(raw)
        except ValueError:
            return []
        if not isinstance(items, list):
            return []
        values = [_convert(field.type, item, True, field.date_formats) for item in items]
        return [] if any(v is _DIRTY for v in values) else values
    value = _convert(field.type, raw, False, field.date_formats)
    return [] if value is _DIRTY else [value]


def _analyze(field: SearchField, text: str) -> list[str]:
    return _analyze_with_length(field, text)[0]


def _analyze_with_length(field: SearchField, text: str) -> tuple[list[str], int]:
    return analyze_with_length(field.analyzer, text, case_sensitive=field.case_sensitive,
                               delimiter=field.delimiter, ngram=field.ngram)


def _substring(field: SearchField, text: str) -> _Pred:
    """Match and match-phrase on a fuzzy field: the n-grams find the text inside a value."""
    needle = text.lower()
    return lambda d: bool(needle) and any(needle in v.lower() for v in d.values(field))


class _Doc:
    """A document being evaluated, with its field values and tokens cached, and its score
    (the query's, see search_scoring.py)."""

    __slots__ = ("_lengths", "_tokens", "_values", "columns", "doc", "pk_pos", "score")

    def __init__(self, doc: Document, pk_pos: Mapping[str, int]) -> None:
        self.doc = doc
        self.columns: Mapping[str, object] = doc[1]
        self.pk_pos = pk_pos
        self.score = 1.0
        self._values: dict[str, list[Any]] = {}
        self._tokens: dict[str, tuple[list[str], set[str]]] = {}
        self._lengths: dict[str, int] = {}

    def values(self, field: SearchField) -> list[Any]:
        cached = self._values.get(field.name)
        if cached is None:
            raw = self.columns.get(field.source)
            if raw is None and field.source in self.pk_pos:
                raw = self.doc[0][self.pk_pos[field.source]][1]
            cached = self._values[field.name] = _index_values(field, raw)
        return cached

    def tokens(self, field: SearchField) -> tuple[list[str], set[str]]:
        cached = self._tokens.get(field.name)
        if cached is None:
            seq: list[str] = []
            length = 0
            for text in self.values(field):
                tokens, positions = _analyze_with_length(field, text)
                seq.extend(tokens)
                length += positions
            cached = self._tokens[field.name] = (seq, set(seq))
            self._lengths[field.name] = length
        return cached

    def length(self, field: SearchField) -> int:
        """The field's length for relevance scores: token positions of a TEXT field."""
        if field.type != spb.TEXT:
            return len(self.values(field))
        self.tokens(field)
        return self._lengths[field.name]

    def terms(self, field: SearchField) -> Sequence[Any] | set[Any]:
        """What a term query compares: the tokens of a TEXT field, else its values."""
        return self.tokens(field)[1] if field.type == spb.TEXT else self.values(field)


def _stats(docs: Callable[[], Sequence[_Doc]]) -> Stats[_Doc]:
    return Stats(docs, lambda d, field: d.terms(field), lambda d, field: d.length(field))


# --- queries ---------------------------------------------------------------------------------


def _unsupported(what: str) -> OTSError:
    return invalid(f"{what} is not supported by the local Tablestore server.")


def _field(schema: IndexSchemaInfo, name: str) -> SearchField:
    field = schema.fields.get(name)
    if field is None:
        raise invalid(f"Field [{name}] does not exist in the schema of search index "
                      f"[{schema.index_name}].")
    if field.type == spb.NESTED:
        raise _unsupported(f"Querying NESTED field [{name}]")
    if not field.index:
        raise invalid(f"Field [{name}] is not indexed (index=false) and cannot be queried.")
    return field


def _query_value(field: SearchField, value: object) -> Any:
    """A query value as the field's type compares it; OTSParameterInvalid if it cannot be."""
    t = type(value)
    ftype = field.type
    if ftype in _NUMERIC and t in (int, float):
        return value
    if ftype in _NUMERIC and t is str:
        # The service converts a string to the field's type (TermQuery('l', '900') on a LONG).
        converted = _number_text(field, value)  # type: ignore[arg-type]
        if converted is not None:
            return converted
    if ftype == spb.BOOLEAN and t is bool:
        return value
    if ftype in _STRINGS and t is str:
        return value
    if ftype in _NUMERIC or ftype in (spb.BOOLEAN, *_STRINGS):
        raise invalid(f"The query value {value!r} does not match the type "
                      f"{FIELD_TYPE_NAMES[ftype]} of field [{field.name}].")
    raise _unsupported(f"Term-level queries on {FIELD_TYPE_NAMES[ftype]} field [{field.name}]")


def _number_text(field: SearchField, text: str) -> int | float | None:
    if field.type == spb.DATE and field.date_formats:
        ms = parse_date(text, field.date_formats)
        if ms is not None:
            return ms
    try:
        return float(text) if field.type == spb.DOUBLE else int(text.strip())
    except ValueError:
        return None


def _decode_term(data: bytes) -> object:
    try:
        return decode_value(data)
    except PlainBufferError as exc:
        raise invalid(f"Invalid query value: {exc}") from None


def _text_value(field: SearchField, text: str) -> Any:
    """A match query's text as a term of a non-TEXT field."""
    ftype = field.type
    if ftype in _NUMERIC:
        number = _number_text(field, text)
        if number is None:
            raise invalid(f"The query text {text!r} does not match the type "
                          f"{FIELD_TYPE_NAMES[ftype]} of field [{field.name}].")
        return number
    if ftype == spb.BOOLEAN:
        return text.lower() == "true"
    return _query_value(field, text)


def _tokens_or_values(field: SearchField) -> Callable[[_Doc], Iterable[Any]]:
    if field.type == spb.TEXT:
        return lambda d: d.tokens(field)[0]
    return lambda d: d.values(field)


def _weight(q: Any) -> float:
    """A query's boost (its optional `weight`): its scores are multiplied by it."""
    return q.weight if q.HasField("weight") else 1.0


def _constant(predicate: _Pred, weight: float = 1.0) -> _Scorer:
    """A query that filters without relevance: every match scores the same (its weight)."""
    return lambda d: weight if predicate(d) else None


def _term_scorer(field: SearchField, value: Any, stats: Stats[_Doc], weight: float) -> _Scorer:
    """One term as Lucene scores it: BM25 on TEXT (with lengths), KEYWORD and BOOLEAN (without);
    numeric, DATE and other fields are matched by value at a constant score."""
    if field.type == spb.TEXT:
        def text(d: _Doc) -> float | None:
            seq, present = d.tokens(field)
            if value not in present:
                return None
            return weight * stats.idf(field, value) * stats.tf(field, seq.count(value), d.length(field))
        return text
    if field.type in (spb.KEYWORD, spb.BOOLEAN):
        def keyword(d: _Doc) -> float | None:
            values = d.values(field)
            if value not in values:
                return None
            return weight * stats.idf(field, value) * stats.tf(field, values.count(value), None)
        return keyword
    return _constant(lambda d: value in d.values(field), weight)


def _term(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    q = parse_nested(spb.TermQuery, body, "TermQuery")
    field = _field(schema, q.field_name)
    return _term_scorer(field, _query_value(field, _decode_term(q.term)), stats, _weight(q))


def _terms(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    q = parse_nested(spb.TermsQuery, body, "TermsQuery")
    field = _field(schema, q.field_name)
    wanted = {_query_value(field, _decode_term(t)) for t in q.terms}
    if field.type == spb.TEXT:
        return _constant(lambda d: not wanted.isdisjoint(d.tokens(field)[1]), _weight(q))
    return _constant(lambda d: any(v in wanted for v in d.values(field)), _weight(q))


def _range(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    q = parse_nested(spb.RangeQuery, body, "RangeQuery")
    field = _field(schema, q.field_name)
    lo = _decode_term(q.range_from) if q.HasField("range_from") else None
    hi = _decode_term(q.range_to) if q.HasField("range_to") else None
    lo = None if lo is INF_MIN else (lo if lo is None else _query_value(field, lo))
    hi = None if hi is INF_MAX else (hi if hi is None else _query_value(field, hi))
    inc_lo, inc_hi = q.include_lower, q.include_upper

    def within(v: Any) -> bool:
        if lo is not None and (v < lo or (not inc_lo and v == lo)):
            return False
        return hi is None or v < hi or (inc_hi and v == hi)

    values = _tokens_or_values(field)
    return _constant(lambda d: any(within(v) for v in values(d)))


def _prefix(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    q = parse_nested(spb.PrefixQuery, body, "PrefixQuery")
    field = _field(schema, q.field_name)
    prefix = _query_value(field, q.prefix)
    values = _tokens_or_values(field)
    return _constant(lambda d: any(v.startswith(prefix) for v in values(d)), _weight(q))


def _wildcard(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    q = parse_nested(spb.WildcardQuery, body, "WildcardQuery")
    field = _field(schema, q.field_name)
    pattern = _query_value(field, q.value)
    if not isinstance(pattern, str):
        raise _unsupported(f"WildcardQuery on {FIELD_TYPE_NAMES[field.type]} field [{field.name}]")
    if len(pattern) > MAX_WILDCARD_LENGTH:
        raise invalid(f"The length of the query string of WildcardQuery exceeds the limit: "
                      f"{MAX_WILDCARD_LENGTH}, length: {len(pattern)}.")
    values = _tokens_or_values(field)
    return _constant(lambda d: any(isinstance(v, str) and wildcard_match(pattern, v)
                                   for v in values(d)), _weight(q))


def wildcard_match(pattern: str, text: str) -> bool:
    """Whether `text` matches `pattern` as a whole (`*`: any run, `?`: one character).

    Greedy with one backtrack point, the last `*`: a later `*` makes every earlier choice
    final, so the work is at most len(pattern) * len(text) steps, never exponential (a regex
    translation backtracks through every `*` at once: `*a*a*...*c` on "aaaa..." never ends)."""
    p = t = 0
    star = -1  # the pattern position after the last `*` seen
    resume = 0  # the text position that `*` currently swallows up to
    while t < len(text):
        if p < len(pattern) and pattern[p] == "*":
            star, resume = p + 1, t
            p += 1
        elif p < len(pattern) and (pattern[p] == "?" or pattern[p] == text[t]):
            p += 1
            t += 1
        elif star >= 0:
            resume += 1  # let the last `*` swallow one more character and retry after it
            p, t = star, resume
        else:
            return False
    return all(c == "*" for c in pattern[p:])


def _exists(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    q = parse_nested(spb.ExistsQuery, body, "ExistsQuery")
    field = schema.fields.get(q.field_name)
    if field is None:
        raise invalid(f"Field [{q.field_name}] does not exist in the schema of search index "
                      f"[{schema.index_name}].")
    return _constant(lambda d: bool(d.values(field)))


def _minimum_should_match(proto: Any, count: int, default: int) -> int:
    if proto.HasField("new_minimum_should_match"):
        text = proto.new_minimum_should_match.strip()
        try:
            if text.endswith("%"):
                return count * int(text[:-1]) // 100
            return int(text)
        except ValueError:
            raise invalid(f"Invalid minimum_should_match: {text!r}.") from None
    if proto.HasField("minimum_should_match"):
        return proto.minimum_should_match
    return default


def _match(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    """The text's tokens as term queries, one clause each (all required with AND, else at least
    minimum_should_match); the score sums the matching tokens' scores."""
    q = parse_nested(spb.MatchQuery, body, "MatchQuery")
    field = _field(schema, q.field_name)
    weight = _weight(q)
    if field.type != spb.TEXT:
        return _term_scorer(field, _text_value(field, q.text), stats, weight)
    if field.analyzer == "fuzzy":
        return _constant(_substring(field, q.text), weight)
    wanted = list(dict.fromkeys(_analyze(field, q.text)))
    clauses = [_term_scorer(field, token, stats, weight) for token in wanted]
    need = len(wanted) if q.operator == spb.AND else max(_minimum_should_match(q, len(wanted), 1), 1)

    def score(d: _Doc) -> float | None:
        if not wanted or len(set(wanted) & d.tokens(field)[1]) < need:
            return None
        return sum(s for c in clauses if (s := c(d)) is not None)

    return score


def _match_phrase(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    """The words in order; scored as one term whose idf sums the words' and whose frequency is
    the phrase's number of occurrences."""
    q = parse_nested(spb.MatchPhraseQuery, body, "MatchPhraseQuery")
    field = _field(schema, q.field_name)
    weight = _weight(q)
    if field.type != spb.TEXT:
        return _term_scorer(field, _text_value(field, q.text), stats, weight)
    if field.analyzer == "fuzzy":
        return _constant(_substring(field, q.text), weight)
    options = {"case_sensitive": field.case_sensitive, "delimiter": field.delimiter}
    phrase = phrase_tokens(field.analyzer, q.text, **options)
    n = len(phrase)
    dictionary = field.analyzer in DICTIONARY_ANALYZERS

    def score(d: _Doc) -> float | None:
        seq, present = d.tokens(field)
        if not n or (not dictionary and not present.issuperset(phrase)):
            return None
        if dictionary:  # the doc's non-overlapping words
            seq = [t for v in d.values(field) for t in phrase_tokens(field.analyzer, v)]
        found = sum(1 for i in range(len(seq) - n + 1) if seq[i:i + n] == phrase)
        if not found:
            return None
        idf = sum(stats.idf(field, t) for t in phrase)
        return weight * idf * stats.tf(field, found, d.length(field))

    return score


def _bool(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    """ES semantics: must and should clauses add their scores; filter and must_not clauses only
    filter (a bool query of filters alone scores 0). Should clauses are optional next to
    must/filter clauses, else at least one must match (or minimum_should_match)."""
    q = parse_nested(spb.BoolQuery, body, "BoolQuery")
    must = [_compile(schema, s, stats) for s in q.must_queries]
    filters = [_predicate(_compile(schema, s, stats)) for s in q.filter_queries]
    excluded = [_predicate(_compile(schema, s, stats)) for s in q.must_not_queries]
    should = [_compile(schema, s, stats) for s in q.should_queries]
    need = _minimum_should_match(q, len(should), 0 if must or filters else min(len(should), 1))
    weight = _weight(q)

    def score(d: _Doc) -> float | None:
        total = 0.0
        for clause in must:
            s = clause(d)
            if s is None:
                return None
            total += s
        if not all(p(d) for p in filters) or any(p(d) for p in excluded):
            return None
        hits = 0
        for clause in should:
            s = clause(d)
            if s is not None:
                hits += 1
                total += s
        return weight * total if hits >= need else None

    return score


# Geo points are compared as the index stores them: latitude and longitude quantized to 32 bits
# (Lucene's LatLonPoint), so a point on a box's edge may fall just outside, as on the service.
_LAT_STEP = 180.0 / 2**32
_LON_STEP = 360.0 / 2**32


def _geo_field(schema: IndexSchemaInfo, name: str) -> SearchField:
    field = _field(schema, name)
    if field.type != spb.GEO_POINT:
        raise invalid(f"Field [{name}] of type {FIELD_TYPE_NAMES[field.type]} is not a GEO_POINT field.")
    return field


def _point(text: str, what: str) -> tuple[float, float]:
    try:
        lat, lon = (float(p) for p in text.split(","))
    except ValueError:
        raise invalid(f"Invalid geo point of {what}: {text!r}, expected \"lat,lon\".") from None
    if not (-90 <= lat <= 90 and -180 <= lon <= 180):
        raise invalid(f"Invalid geo point of {what}: {text!r}, out of range.")
    return lat, lon


def _geo_distance(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    q = parse_nested(spb.GeoDistanceQuery, body, "GeoDistanceQuery")
    field = _geo_field(schema, q.field_name)
    lat0, lon0 = _point(q.center_point, "center_point")
    if q.distance < 0:
        raise invalid(f"Invalid distance: {q.distance}, it must not be negative.")

    def near(text: str) -> bool:
        lat, lon = _quantized(text)
        return search_aggs.haversine_m(lat0, lon0, lat, lon) <= q.distance

    return _constant(lambda d: any(near(v) for v in d.values(field)))


def _quantized(text: str) -> tuple[float, float]:
    lat, lon = (float(p) for p in text.split(","))
    return math.floor(lat / _LAT_STEP) * _LAT_STEP, math.floor(lon / _LON_STEP) * _LON_STEP


def _geo_bounding_box(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    q = parse_nested(spb.GeoBoundingBoxQuery, body, "GeoBoundingBoxQuery")
    field = _geo_field(schema, q.field_name)
    top, left = _point(q.top_left, "top_left")
    bottom, right = _point(q.bottom_right, "bottom_right")
    if top < bottom:
        raise invalid("The top of the bounding box must not be below its bottom.")
    lat_lo, lat_hi = math.ceil(bottom / _LAT_STEP), math.floor(top / _LAT_STEP)
    lon_lo, lon_hi = math.ceil(left / _LON_STEP), math.floor(right / _LON_STEP)

    def inside(text: str) -> bool:
        lat, lon = (float(p) for p in text.split(","))
        y, x = math.floor(lat / _LAT_STEP), math.floor(lon / _LON_STEP)
        within_lon = lon_lo <= x <= lon_hi if lon_lo <= lon_hi else (x >= lon_lo or x <= lon_hi)
        return lat_lo <= y <= lat_hi and within_lon

    return _constant(lambda d: any(inside(v) for v in d.values(field)))


def _geo_polygon(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    q = parse_nested(spb.GeoPolygonQuery, body, "GeoPolygonQuery")
    field = _geo_field(schema, q.field_name)
    vertices = [_point(p, "the polygon") for p in q.points]
    if len(vertices) < 3:
        raise invalid("A geo polygon needs at least 3 points.")

    def inside(text: str) -> bool:
        lat, lon = _quantized(text)
        hit = False
        for (y1, x1), (y2, x2) in zip(vertices, vertices[1:] + vertices[:1], strict=True):
            if (y1 > lat) != (y2 > lat) and lon < x1 + (lat - y1) * (x2 - x1) / (y2 - y1):
                hit = not hit
        return hit

    return _constant(lambda d: any(inside(v) for v in d.values(field)))


def _nested_objects(parent: SearchField, d: _Doc) -> list[_Doc]:
    no_pk: dict[str, int] = {}
    objects = []
    for text in d.values(parent):
        for obj in json.loads(text):
            columns = {k: json.dumps(v) if isinstance(v, list) else v for k, v in obj.items()}
            objects.append(_Doc((d.doc[0], columns), no_pk))
    return objects


_NESTED_SCORES: dict[int, Callable[[list[float]], float]] = {
    spb.SCORE_MODE_NONE: lambda scores: 0.0,
    spb.SCORE_MODE_AVG: lambda scores: sum(scores) / len(scores),
    spb.SCORE_MODE_MAX: max,
    spb.SCORE_MODE_TOTAL: sum,
    spb.SCORE_MODE_MIN: min,
}


def _nested(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    """A query on the objects of a NESTED field: a document matches when one object matches
    the whole inner query; its score combines the matching objects' (score_mode, default none:
    0, as in ES), scored over all objects of the field."""
    q = parse_nested(spb.NestedQuery, body, "NestedQuery")
    parent = schema.fields.get(q.path)
    if parent is None or parent.type != spb.NESTED:
        raise invalid(f"Path [{q.path}] is not a NESTED field of search index [{schema.index_name}].")
    sub_fields = {f"{q.path}.{f.name}": dataclasses.replace(f, name=f"{q.path}.{f.name}", source=f.name)
                  for f in parent.sub_fields}
    objects = stats.nested(q.path, lambda docs: [o for d in docs for o in _nested_objects(parent, d)])
    inner = _compile(dataclasses.replace(schema, fields=sub_fields), q.query, objects)
    combine = _NESTED_SCORES.get(q.score_mode, _NESTED_SCORES[spb.SCORE_MODE_NONE])
    weight = _weight(q)

    def score(d: _Doc) -> float | None:
        scores = [s for o in _nested_objects(parent, d) if (s := inner(o)) is not None]
        return weight * combine(scores) if scores else None

    return score


MAX_KNN_TOP_K = 1000


@dataclass(frozen=True)
class _Knn:
    """A KNN vector query (exact search): the `k` documents most similar to `vector` that pass
    `filter`, scored as the service scores them."""

    field: SearchField
    vector: tuple[float, ...]
    top_k: int
    filter: _Pred
    min_score: float

    def score(self, d: _Doc) -> float | None:
        values = d.values(self.field)
        if not values:
            return None
        try:
            stored = json.loads(values[0])
            vector = [float(x) for x in stored]
        except (ValueError, TypeError):
            return None
        if len(vector) != len(self.vector):
            return None
        metric = self.field.vector_metric
        if metric == spb.VM_EUCLIDEAN:
            return 1 / (1 + sum((a - b) ** 2 for a, b in zip(vector, self.vector, strict=True)))
        dot = sum(a * b for a, b in zip(vector, self.vector, strict=True))
        if metric == spb.VM_DOT_PRODUCT:
            return (1 + dot) / 2
        norms = math.sqrt(sum(a * a for a in vector)) * math.sqrt(sum(b * b for b in self.vector))
        return (1 + dot / norms) / 2 if norms else None


def _knn(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Knn:
    q = parse_nested(spb.KnnVectorQuery, body, "KnnVectorQuery")
    field = _field(schema, q.field_name)
    if field.type != spb.VECTOR:
        raise invalid(f"Field [{q.field_name}] of type {FIELD_TYPE_NAMES[field.type]} is not a VECTOR field.")
    if not 0 < q.top_k <= MAX_KNN_TOP_K:
        raise invalid(f"[knn_vector_query.top_k] must be in range (0, {MAX_KNN_TOP_K}]: {q.top_k}.")
    if len(q.float32_query_vector) != field.vector_dimension:
        raise invalid(f"The dimension of the query vector ({len(q.float32_query_vector)}) does not match "
                      f"field [{field.name}] ({field.vector_dimension}).")
    filter_ = _predicate(_compile(schema, q.filter, stats)) if q.HasField("filter") else (lambda d: True)
    return _Knn(field, tuple(q.float32_query_vector), q.top_k, filter_, q.min_score)


def _refuse_nested_knn(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    raise invalid("KnnVectorQuery must be the top-level query of a Search.")


def _const_score(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    """Its filter's matches, every one scored 1.0 (ES constant_score)."""
    q = parse_nested(spb.ConstScoreQuery, body, "ConstScoreQuery")
    return _constant(_predicate(_compile(schema, q.filter, stats)))


def _function_score(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    """The query's score multiplied by the document's value of a numeric field (ES
    field_value_factor with its defaults: factor 1, no modifier, boost_mode multiply; the first
    value of an array). A document without the value scores 0."""
    q = parse_nested(spb.FunctionScoreQuery, body, "FunctionScoreQuery")
    inner = _compile(schema, q.query, stats)
    if not q.HasField("field_value_factor"):
        return inner
    name = q.field_value_factor.field_name
    field = _field(schema, name)
    if field.type not in _NUMERIC:
        raise invalid(f"Field [{name}] of a field_value_factor must be LONG, DOUBLE or DATE, not "
                      f"{FIELD_TYPE_NAMES[field.type]}.")

    def score(d: _Doc) -> float | None:
        s = inner(d)
        if s is None:
            return None
        values = d.values(field)
        return s * float(values[0]) if values else 0.0

    return score


def _dis_max(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    """The best matching clause's score, plus tie_breaker times the others'."""
    q = parse_nested(spb.DisMaxQuery, body, "DisMaxQuery")
    queries = [_compile(schema, s, stats) for s in q.queries]
    tie = q.tie_breaker if q.HasField("tie_breaker") else 0.0
    weight = _weight(q)

    def score(d: _Doc) -> float | None:
        scores = [s for c in queries if (s := c(d)) is not None]
        if not scores:
            return None
        best = max(scores)
        return weight * (best + tie * (sum(scores) - best))

    return score


def _match_all(schema: IndexSchemaInfo, body: bytes, stats: Stats[_Doc]) -> _Scorer:
    return lambda d: 1.0


_QUERIES: dict[int, Callable[[IndexSchemaInfo, bytes, Stats[_Doc]], _Scorer]] = {
    spb.MATCH_ALL_QUERY: _match_all,
    spb.TERM_QUERY: _term,
    spb.TERMS_QUERY: _terms,
    spb.RANGE_QUERY: _range,
    spb.PREFIX_QUERY: _prefix,
    spb.WILDCARD_QUERY: _wildcard,
    spb.EXISTS_QUERY: _exists,
    spb.MATCH_QUERY: _match,
    spb.MATCH_PHRASE_QUERY: _match_phrase,
    spb.BOOL_QUERY: _bool,
    spb.CONST_SCORE_QUERY: _const_score,
    spb.FUNCTION_SCORE_QUERY: _function_score,
    spb.DIS_MAX_QUERY: _dis_max,
    spb.GEO_DISTANCE_QUERY: _geo_distance,
    spb.GEO_BOUNDING_BOX_QUERY: _geo_bounding_box,
    spb.GEO_POLYGON_QUERY: _geo_polygon,
    spb.NESTED_QUERY: _nested,
    spb.KNN_VECTOR_QUERY: _refuse_nested_knn,
}


def _compile(schema: IndexSchemaInfo, query: spb.Query, stats: Stats[_Doc]) -> _Scorer:
    """The query as a scorer; `stats` are the statistics of the documents it searches."""
    if not query.HasField("type"):
        raise invalid("Query type is missing.")
    build = _QUERIES.get(query.type)
    if build is None:
        name = spb.QueryType.Name(query.type) if query.type in spb.QueryType.values() else query.type
        raise _unsupported(f"Query type {name}")
    return build(schema, query.query, stats)


def _predicate(scorer: _Scorer) -> _Pred:
    """Whether a document matches (a score of 0 matches too)."""
    return lambda d: scorer(d) is not None


# --- sorting ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SortKey:
    field: SearchField | None  # None: the primary key (or the score, with `score`)
    descending: bool
    mode: int | None
    score: bool = False

    @property
    def is_pk(self) -> bool:
        return self.field is None and not self.score

    def spec(self) -> list[Any]:
        if self.score:
            return ["score", self.descending]
        if self.field is None:
            return ["pk", self.descending]
        return ["field", self.field.name, self.descending, self.mode]

    def value(self, d: _Doc, pk: tuple[Any, ...]) -> Any:
        if self.score:
            return d.score
        if self.field is None:
            return pk
        values = d.values(self.field)
        if not values:
            return None
        mode = self.mode
        if mode is None:
            mode = spb.SORT_MODE_MAX if self.descending else spb.SORT_MODE_MIN
        if mode == spb.SORT_MODE_AVG and self.field.type in _NUMERIC:
            return sum(values) / len(values)
        return max(values) if mode == spb.SORT_MODE_MAX else min(values)


def _sort_field(schema: IndexSchemaInfo, name: str) -> SearchField:
    field = schema.fields.get(name)
    if field is None:
        raise invalid(f"Sort field [{name}] does not exist in the schema of search index "
                      f"[{schema.index_name}].")
    if field.type not in (*_NUMERIC, spb.BOOLEAN, spb.KEYWORD):
        raise invalid(f"Field [{name}] of type {FIELD_TYPE_NAMES[field.type]} cannot be sorted.")
    if field.sort_and_agg is False:
        raise invalid(f"Field [{name}] cannot be sorted: enable_sort_and_agg is false.")
    return field


def _sort_keys(schema: IndexSchemaInfo, sort: spb.Sort | None, scored: bool = False) -> list[_SortKey]:
    """The sort keys of a request; `scored`: a KNN query, whose scores order hits by default
    (other queries' scores order them only by a ScoreSort, as on the service)."""
    keys: list[_SortKey] = []
    if sort is not None and sort.sorter:
        for sorter in sort.sorter:
            if sorter.HasField("field_sort"):
                fs = sorter.field_sort
                if fs.HasField("nested_filter"):
                    raise _unsupported("Sorting with a nested_filter")
                keys.append(_SortKey(_sort_field(schema, fs.field_name),
                                     fs.order == spb.SORT_ORDER_DESC,
                                     fs.mode if fs.HasField("mode") else None))
            elif sorter.HasField("pk_sort") or sorter.HasField("doc_sort"):
                order = sorter.pk_sort.order if sorter.HasField("pk_sort") else sorter.doc_sort.order
                keys.append(_SortKey(None, order == spb.SORT_ORDER_DESC, None))
            elif sorter.HasField("geo_distance_sort"):
                raise _unsupported("GeoDistanceSort")
            elif sorter.HasField("score_sort"):
                keys.append(_SortKey(None, sorter.score_sort.order != spb.SORT_ORDER_ASC, None, True))
            else:
                raise invalid("Empty sorter.")
    elif scored:
        keys.append(_SortKey(None, True, None, True))
    else:
        for s in schema.index_sort:
            field = None if s.field is None else schema.fields[s.field]
            keys.append(_SortKey(field, s.descending, s.mode))
    pk_at = next((i for i, k in enumerate(keys) if k.is_pk), None)
    if pk_at is None:
        keys.append(_SortKey(None, False, None))
    else:
        del keys[pk_at + 1:]  # the PK is unique: later keys never decide anything
    return keys


def _order(hits: list[tuple[tuple[Any, ...], Document]], keys: Sequence[_SortKey]) -> None:
    """Sorts ``(key values, doc)`` hits: a stable sort per key, last key first."""
    for i in reversed(range(len(keys))):
        if keys[i].descending:
            # reverse=True keeps stability; (-1,) puts missing values after every present one.
            hits.sort(key=lambda h, i=i: (-1,) if h[0][i] is None else (0, h[0][i]), reverse=True)
        else:
            hits.sort(key=lambda h, i=i: (1,) if h[0][i] is None else (0, h[0][i]))


def _compare(a: Sequence[Any], b: Sequence[Any], keys: Sequence[_SortKey]) -> int:
    """-1 / 0 / 1 as ``a`` sorts before / with / after ``b`` (the order of _order)."""
    for x, y, key in zip(a, b, keys, strict=True):
        if x == y:
            continue
        if x is None:
            return 1
        if y is None:
            return -1
        c = -1 if x < y else 1
        return -c if key.descending else c
    return 0


# --- tokens ----------------------------------------------------------------------------------


def _encode_token(payload: dict[str, Any]) -> bytes:
    return base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode())


def _decode_token(token: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(base64.urlsafe_b64decode(token))
    except (binascii.Error, ValueError):
        raise invalid("Invalid token.") from None
    if not isinstance(payload, dict):
        raise invalid("Invalid token.")
    return payload


def _pack(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_pack(v) for v in value]
    return encode_value(value).hex()


def _unpack(value: Any) -> Any:
    try:
        if isinstance(value, list):
            return tuple(_unpack(v) for v in value)
        return decode_value(bytes.fromhex(value))
    except (PlainBufferError, ValueError, TypeError):
        raise invalid("Invalid token.") from None


# --- responses -------------------------------------------------------------------------------


def _return_columns(schema: IndexSchemaInfo, ctg: spb.ColumnsToGet | None,
                    scan: bool = False) -> Callable[[Mapping[str, object]], list[str]]:
    """Which attribute columns of a document a response row carries."""
    kind = ctg.return_type if ctg is not None and ctg.HasField("return_type") else spb.RETURN_NONE
    if kind == spb.RETURN_NONE:
        return lambda columns: []
    if kind == spb.RETURN_ALL:
        if scan:
            raise invalid("ParallelScan does not support RETURN_ALL; use RETURN_SPECIFIED, "
                          "RETURN_NONE or RETURN_ALL_FROM_INDEX.")
        return lambda columns: sorted(columns)
    if kind == spb.RETURN_ALL_FROM_INDEX:
        in_index = {f.name for f in schema.fields.values() if not f.virtual}
        return lambda columns: sorted(in_index.intersection(columns))
    if kind == spb.RETURN_SPECIFIED:
        wanted = set(ctg.column_names)  # type: ignore[union-attr]
        if scan:
            for name in sorted(wanted):
                if name not in schema.fields and name not in schema.pk_names:
                    raise invalid(f"Column [{name}] is not in search index [{schema.index_name}]; "
                                  "ParallelScan returns index columns only.")
        return lambda columns: sorted(wanted.intersection(columns))
    raise invalid(f"Invalid columns_to_get return type: {kind}.")


def _max_limit(schema: IndexSchemaInfo, ctg: spb.ColumnsToGet | None) -> int:
    kind = ctg.return_type if ctg is not None and ctg.HasField("return_type") else spb.RETURN_NONE
    stored = {f.name for f in schema.fields.values() if f.store is not False}
    if kind in (spb.RETURN_NONE, spb.RETURN_ALL_FROM_INDEX) or (
            kind == spb.RETURN_SPECIFIED and stored.issuperset(ctg.column_names)):  # type: ignore[union-attr]
        return MAX_LIMIT_INDEX_ONLY
    return MAX_LIMIT


def _encode_doc(doc: Document, names: list[str]) -> bytes:
    columns = doc[1]
    stamps = doc[2] if len(doc) > 2 else None
    if stamps:
        return encode_row(doc[0], [(n, columns[n], stamps.get(n)) for n in names])
    return encode_row(doc[0], [(n, columns[n]) for n in names])


def _pk_tuple(doc: Document) -> tuple[Any, ...]:
    return tuple(v for _, v in doc[0])


# --- Search ----------------------------------------------------------------------------------


def run_search(schema: IndexSchemaInfo, request: spb.SearchRequest,
               documents: Iterable[Document]) -> spb.SearchResponse:
    started = time.monotonic()
    # Before any parsing: a deep tree would cost memory quadratic in its depth (see search_limits).
    check_query_tree(spb.SearchQuery.DESCRIPTOR, request.search_query, "Search")
    query = parse_nested(spb.SearchQuery, request.search_query, "search_query")
    pk_pos = {name: i for i, name in enumerate(schema.pk_names)}
    if query.HasField("collapse"):
        raise _unsupported("SearchQuery.collapse")
    if query.HasField("highlight"):
        search_highlight.check(schema, query.highlight)
    ctg = request.columns_to_get if request.HasField("columns_to_get") else None
    offset = query.offset if query.HasField("offset") else 0
    limit = query.limit if query.HasField("limit") else DEFAULT_LIMIT
    max_limit = _max_limit(schema, ctg)
    if offset < 0:
        raise invalid(f"Invalid offset: {offset}, it must be non-negative.")
    if not 0 <= limit <= max_limit:
        raise invalid(f"Invalid limit: {limit}, it must be in range [0, {max_limit}].")
    if offset + limit > MAX_OFFSET_PLUS_LIMIT:
        raise invalid(f"The sum of offset and limit must be no more than {MAX_OFFSET_PLUS_LIMIT}: "
                      f"offset {offset}, limit {limit}.")
    docs = [_Doc(doc, pk_pos) for doc in documents]
    stats = _stats(lambda: docs)
    knn = _knn(schema, query.query.query, stats) if query.query.type == spb.KNN_VECTOR_QUERY else None
    keys = _sort_keys(schema, query.sort if query.HasField("sort") else None, scored=knn is not None)
    after = None
    if query.token:
        token = _decode_token(query.token)
        spec = [k.spec() for k in keys]
        if not query.HasField("sort") and isinstance(token.get("sort"), list):
            keys = _token_sort_keys(schema, token["sort"])
            spec = token["sort"]
        if token.get("sort") != spec or not isinstance(token.get("after"), list) \
                or len(token["after"]) != len(keys):
            raise invalid("Invalid token: it does not belong to this sort.")
        after = _unpack(token["after"])
        if any(k.is_pk and not isinstance(a, tuple) for k, a in zip(keys, after, strict=True)):
            raise invalid("Invalid token.")
    columns_for = _return_columns(schema, ctg)
    budgeted = _within_budget(docs, started + SEARCH_TIMEOUT_S)
    matched = _knn_matches(knn, budgeted, limit) if knn is not None else \
        _matches(_compile(schema, query.query, stats), budgeted)
    hits = [(tuple(k.value(d, _pk_tuple(d.doc)) for k in keys), d.doc) for d in matched]
    scores = {id(d.doc): d.score for d in matched}
    _order(hits, keys)
    start = 0
    if after is not None:
        lo, hi = 0, len(hits)  # first hit strictly after the token's row
        try:
            while lo < hi:
                mid = (lo + hi) // 2
                if _compare(hits[mid][0], after, keys) > 0:
                    hi = mid
                else:
                    lo = mid + 1
        except TypeError:  # a forged token whose values do not compare with the fields'
            raise invalid("Invalid token.") from None
        start = lo
    first = start + offset
    page = hits[first:first + limit]
    response = spb.SearchResponse()
    response.total_hits = len(hits) if query.get_total_count else -1
    response.is_all_succeed = True
    if query.HasField("aggs") or query.HasField("group_bys"):
        tools = _agg_tools(schema, columns_for, stats)
        if query.HasField("aggs"):
            response.aggs = search_aggs.run_aggs(tools, query.aggs, matched).SerializeToString()
        if query.HasField("group_bys"):
            groups = search_aggs.run_group_bys(tools, query.group_bys, matched)
            response.group_bys = groups.SerializeToString()
    terms = search_highlight.query_terms(schema, query.query, _analyze) \
        if query.HasField("highlight") else {}
    for _, doc in page:
        response.rows.append(_encode_doc(doc, columns_for(doc[1])))
        hit = response.search_hits.add(score=scores[id(doc)])
        if query.HasField("highlight"):
            hit.highlight_result.CopyFrom(
                search_highlight.highlight_row(query.highlight, terms, doc[1], schema))
    # An index with NESTED fields has no presort: without a sort in the request the service
    # returns no next_token, even when more rows match (documented).
    pageable = query.HasField("sort") or not any(f.type == spb.NESTED for f in schema.fields.values())
    # KNN: every search partition of the service returns its own top_k, so a full page carries
    # a token (the SDK's search_index_test expects one) even when the next page is empty here.
    more = first + limit < len(hits) or (knn is not None and len(page) == limit)
    if page and more and pageable:
        response.next_token = _encode_token({"sort": [k.spec() for k in keys],
                                             "after": _pack(page[-1][0])})
    return response


def _within_budget(docs: Iterable[_Doc], deadline: float) -> Iterator[_Doc]:
    """The documents, until the request's time is up: then 503 OTSTimeout, as the service
    answers a search that outlives its timeout (no query can occupy the server for longer)."""
    for d in docs:
        if time.monotonic() > deadline:
            raise OTSError(503, "OTSTimeout", "Operation timeout.")
        yield d


def _matches(scorer: _Scorer, docs: Iterable[_Doc]) -> list[_Doc]:
    """The documents the query matches, each with its score."""
    out = []
    for d in docs:
        score = scorer(d)
        if score is not None:
            d.score = score
            out.append(d)
    return out


def _knn_matches(knn: _Knn, docs: Iterable[_Doc], limit: int) -> list[_Doc]:
    """The top_k most similar documents (top_k raised to limit, as the service does)."""
    scored = []
    for d in docs:
        if not knn.filter(d):
            continue
        score = knn.score(d)
        if score is not None and score >= knn.min_score:
            d.score = score
            scored.append(d)
    scored.sort(key=lambda d: (-d.score, _pk_tuple(d.doc)))
    return scored[:max(knn.top_k, limit)]


def _agg_tools(schema: IndexSchemaInfo, columns_for: Callable[[Mapping[str, object]], list[str]],
               stats: Stats[_Doc]) -> search_aggs.Tools:
    """What aggregations need of the engine: field values, queries and top rows."""

    def top_rows(docs: list[_Doc], limit: int, sort: spb.Sort | None) -> list[bytes]:
        keys = _sort_keys(schema, sort)
        ranked = [(tuple(k.value(d, _pk_tuple(d.doc)) for k in keys), d.doc) for d in docs]
        _order(ranked, keys)
        return [_encode_doc(doc, columns_for(doc[1])) for _, doc in ranked[:limit]]

    return search_aggs.Tools(schema, lambda d, field: d.values(field),
                             lambda q: _predicate(_compile(schema, q, stats)), top_rows)


def _token_sort_keys(schema: IndexSchemaInfo, spec: list[Any]) -> list[_SortKey]:
    keys = []
    for item in spec:
        if item[:1] == ["pk"] and len(item) == 2:
            keys.append(_SortKey(None, bool(item[1]), None))
        elif item[:1] == ["score"] and len(item) == 2:
            keys.append(_SortKey(None, bool(item[1]), None, True))
        elif item[:1] == ["field"] and len(item) == 4 and isinstance(item[1], str):
            keys.append(_SortKey(_sort_field(schema, item[1]), bool(item[2]), item[3]))
        else:
            raise invalid("Invalid token.")
    return keys


# --- ComputeSplits and ParallelScan ----------------------------------------------------------


@dataclass
class _Session:
    table_name: str
    index_name: str
    splits_size: int
    expires: float


def _session_expired() -> OTSError:
    return OTSError(400, "OTSSessionExpired",
                    "ScanQuery'session is expired, please retry ComputeSplitsRequest and ScanQuery.")


class ScanSessions:
    """ComputeSplits sessions and the ParallelScans that use them."""

    def __init__(self, splits_size: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self._splits_size = splits_size
        self._clock = clock
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def compute_splits(self, table_name: str, index_name: str) -> spb.ComputeSplitsResponse:
        session_id = uuid.uuid4().hex
        now = self._clock()
        with self._lock:
            for sid in [s for s, v in self._sessions.items() if v.expires <= now]:
                del self._sessions[sid]
            self._sessions[session_id] = _Session(table_name, index_name, self._splits_size,
                                                  now + DEFAULT_ALIVE_TIME)
        response = spb.ComputeSplitsResponse()
        response.session_id = session_id.encode()
        response.splits_size = self._splits_size
        return response

    def _touch(self, session_id: str, table_name: str, index_name: str, alive: int) -> int:
        """Validates and extends a session; returns its splits_size."""
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session.expires <= now:
                self._sessions.pop(session_id, None)
                raise _session_expired()
            if (session.table_name, session.index_name) != (table_name, index_name):
                raise invalid(f"Session [{session_id}] does not belong to table [{table_name}] "
                              f"and search index [{index_name}].")
            session.expires = now + alive
            return session.splits_size

    def parallel_scan(self, table_name: str, schema: IndexSchemaInfo,
                      request: spb.ParallelScanRequest,
                      documents: Iterable[Document]) -> spb.ParallelScanResponse:
        check_query_tree(spb.ScanQuery.DESCRIPTOR, request.scan_query, "ParallelScan")
        scan = parse_nested(spb.ScanQuery, request.scan_query, "scan_query")
        limit = scan.limit if scan.HasField("limit") else MAX_SCAN_LIMIT
        if not 0 < limit <= MAX_SCAN_LIMIT:
            raise invalid(f"Invalid limit: {limit}, it must be in range [1, {MAX_SCAN_LIMIT}].")
        alive = scan.alive_time if scan.HasField("alive_time") else DEFAULT_ALIVE_TIME
        if alive <= 0:
            raise invalid(f"Invalid alive_time: {alive}, it must be positive.")
        session_id = request.session_id.decode("utf-8", "replace")
        max_splits = self._splits_size
        if session_id:
            max_splits = self._touch(session_id, table_name, schema.index_name, alive)
        parallel = scan.max_parallel if scan.HasField("max_parallel") else 1
        current = scan.current_parallel_id
        if not 1 <= parallel <= max_splits:
            raise invalid(f"[parallel_scan.max_parallel_id] must in (0 ,{max_splits}], "
                          f"current max_parallel_id is {parallel}")
        if not 0 <= current < parallel:
            raise invalid(f"[parallel_scan.current_parallel_id] must in [0, max_parallel), "
                          f"current max_parallel is {parallel}, current_parallel_id is {current}")
        after = None
        if scan.token:
            token = _decode_token(scan.token)
            if [token.get("session"), token.get("slice"), token.get("of")] != \
                    [session_id, current, parallel] or not isinstance(token.get("after"), list):
                raise invalid("Invalid token: it does not belong to this session and slice.")
            after = _unpack(token["after"])
            if len(after) != len(schema.pk_names):
                raise invalid("Invalid token.")
        ctg = request.columns_to_get if request.HasField("columns_to_get") else None
        columns_for = _return_columns(schema, ctg, scan=True)
        pk_pos = {name: i for i, name in enumerate(schema.pk_names)}
        docs = [_Doc(doc, pk_pos) for doc in documents]
        predicate = _predicate(_compile(schema, scan.query, _stats(lambda: docs)))
        hits = []
        for d in docs:
            doc = d.doc
            pk = _pk_tuple(doc)
            try:
                if after is not None and pk <= after:
                    continue
            except TypeError:  # a forged token whose PK types differ from the table's
                raise invalid("Invalid token.") from None
            if parallel > 1 and _slice(pk, parallel) != current:
                continue
            if predicate(d):
                hits.append((pk, doc))
        hits.sort(key=lambda h: h[0])
        response = spb.ParallelScanResponse()
        for _, doc in hits[:limit]:
            response.rows.append(_encode_doc(doc, columns_for(doc[1])))
        # As the service: every page with rows carries a token, the end is an empty page without.
        page = hits[:limit]
        if page:
            response.next_token = _encode_token({"session": session_id, "slice": current,
                                                 "of": parallel, "after": _pack(page[-1][0])})
        return response


def _slice(pk: tuple[Any, ...], parallel: int) -> int:
    return zlib.crc32(b"".join(encode_value(v) for v in pk)) % parallel
