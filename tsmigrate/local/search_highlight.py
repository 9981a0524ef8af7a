"""Highlighting of Search results: the query's terms marked in TEXT fields.

A field may be highlighted only when its schema enables it (`enable_highlighting`); else
`highlighting is not supported for field[NAME]`. The terms are those the query looks for in the
field (match and match-phrase tokens, term and terms values), found in the stored text case-
insensitively (whole words for Latin letters and digits) and wrapped in `pre_tag` / `post_tag`
(default `<em>` / `</em>`). A text no longer than `fragment_size` (default 100) is one fragment;
a longer one gives up to `number_of_fragments` (default 5; 0: the whole text) passages of whole
sentences (never cut) holding matches, in text order or (SCORE) most matches first.
HTML_MODE escapes the text. A row gets a field only when its text holds a term.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf.message import DecodeError
from tablestore.protobuf import search_pb2 as spb

from tsmigrate.local.errors import invalid
from tsmigrate.local.search_schema import IndexSchemaInfo, SearchField
from tsmigrate.wire.plainbuffer import PlainBufferError, decode_value

DEFAULT_FRAGMENTS = 5
DEFAULT_FRAGMENT_SIZE = 100
Analyzer = Callable[[SearchField, str], list[str]]


def check(schema: IndexSchemaInfo, highlight: spb.Highlight) -> None:
    for param in highlight.highlight_parameters:
        field = schema.fields.get(param.field_name)
        if field is None or field.type != spb.TEXT or not field.highlighting:
            raise invalid(f"highlighting is not supported for field[{param.field_name}]")


def query_terms(schema: IndexSchemaInfo, query: spb.Query, analyze: Analyzer) -> dict[str, set[str]]:
    """Field name -> the terms the query searches that field for."""
    out: dict[str, set[str]] = {}
    _collect(schema, query, analyze, out)
    return out


def _parse(message: Any, data: bytes) -> Any:
    proto = message()
    try:
        proto.ParseFromString(data)
    except DecodeError:
        return None
    return proto


def _collect(schema: IndexSchemaInfo, query: spb.Query, analyze: Analyzer, out: dict[str, set[str]]) -> None:
    kind, body = query.type, query.query
    if kind in (spb.MATCH_QUERY, spb.MATCH_PHRASE_QUERY):
        q = _parse(spb.MatchQuery if kind == spb.MATCH_QUERY else spb.MatchPhraseQuery, body)
        field = schema.fields.get(q.field_name) if q else None
        if field is not None and field.type == spb.TEXT:
            out.setdefault(field.name, set()).update(analyze(field, q.text))
    elif kind in (spb.TERM_QUERY, spb.TERMS_QUERY):
        q = _parse(spb.TermQuery if kind == spb.TERM_QUERY else spb.TermsQuery, body)
        field = schema.fields.get(q.field_name) if q else None
        if field is not None and field.type == spb.TEXT:
            raw = [q.term] if kind == spb.TERM_QUERY else list(q.terms)
            out.setdefault(field.name, set()).update(t for t in map(_term, raw) if t)
    elif kind == spb.BOOL_QUERY:
        q = _parse(spb.BoolQuery, body)
        for sub in (*q.must_queries, *q.filter_queries, *q.should_queries) if q else ():
            _collect(schema, sub, analyze, out)
    elif kind == spb.FUNCTION_SCORE_QUERY:
        q = _parse(spb.FunctionScoreQuery, body)
        if q is not None:
            _collect(schema, q.query, analyze, out)
    elif kind == spb.CONST_SCORE_QUERY:
        q = _parse(spb.ConstScoreQuery, body)
        if q is not None:
            _collect(schema, q.filter, analyze, out)
    elif kind == spb.DIS_MAX_QUERY:
        q = _parse(spb.DisMaxQuery, body)
        for sub in q.queries if q else ():
            _collect(schema, sub, analyze, out)


def _term(data: bytes) -> str | None:
    try:
        value = decode_value(data)
    except PlainBufferError:
        return None
    return value.lower() if isinstance(value, str) else None


def _spans(text: str, terms: Iterable[str]) -> list[tuple[int, int]]:
    lowered = text.lower()
    spans: list[tuple[int, int]] = []
    for term in terms:
        if not term:
            continue
        word = term.isascii() and term.isalnum()
        pattern = rf"(?<![0-9A-Za-z]){re.escape(term)}(?![0-9A-Za-z])" if word else re.escape(term)
        spans += [(m.start(), m.end()) for m in re.finditer(pattern, lowered)]
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _mark(text: str, spans: list[tuple[int, int]], lo: int, hi: int, pre: str, post: str,
          escape: bool) -> str:
    out, pos = [], lo
    esc = html.escape if escape else (lambda s: s)
    for start, end in spans:
        if end <= lo or start >= hi:
            continue
        out += [esc(text[pos:start]), pre, esc(text[start:end]), post]
        pos = end
    out.append(esc(text[pos:hi]))
    return "".join(out)


_SENTENCE_END = re.compile(r"[。！？!?.;；\n]+")


def _sentences(text: str) -> list[tuple[int, int]]:
    bounds, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        bounds.append((start, m.end()))
        start = m.end()
    if start < len(text):
        bounds.append((start, len(text)))
    return bounds


def _fragments(text: str, spans: list[tuple[int, int]], param: spb.HighlightParameter,
               escape: bool) -> list[str]:
    """Passages of whole sentences (as the service's sentence boundaries: a sentence is never cut),
    joined while they stay within fragment_size, keeping those that hold a match."""
    pre = param.pre_tag if param.HasField("pre_tag") else "<em>"
    post = param.post_tag if param.HasField("post_tag") else "</em>"
    count = param.number_of_fragments if param.HasField("number_of_fragments") else DEFAULT_FRAGMENTS
    size = param.fragment_size if param.HasField("fragment_size") else DEFAULT_FRAGMENT_SIZE
    if count == 0 or len(text) <= size:
        return [_mark(text, spans, 0, len(text), pre, post, escape)]
    passages: list[tuple[int, int]] = []
    for lo, hi in _sentences(text):
        if passages and hi - passages[-1][0] <= size:
            passages[-1] = (passages[-1][0], hi)
        else:
            passages.append((lo, hi))
    hits = [(lo, hi, sum(1 for s, e in spans if lo <= s < hi)) for lo, hi in passages]
    hits = [h for h in hits if h[2]]
    if param.fragments_order == spb.SCORE:
        hits.sort(key=lambda h: -h[2])
    return [_mark(text, spans, lo, hi, pre, post, escape).strip() for lo, hi, _ in hits[:count]]


def highlight_row(highlight: spb.Highlight, terms: dict[str, set[str]], columns: dict[str, object],
                  schema: IndexSchemaInfo) -> spb.HighlightResult:
    result = spb.HighlightResult()
    escape = highlight.highlight_encoder == spb.HTML_MODE
    for param in highlight.highlight_parameters:
        field = schema.fields[param.field_name]
        text = columns.get(field.source)
        wanted = terms.get(field.name)
        if not isinstance(text, str) or not wanted:
            continue
        spans = _spans(text, wanted)
        if spans:
            result.highlight_fields.add(field_name=field.name,
                                        field_fragments=_fragments(text, spans, param, escape))
    return result
