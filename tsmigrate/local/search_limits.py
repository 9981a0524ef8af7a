"""Size limits of a search query tree, checked on the request's bytes before anything is parsed.

A ``Query`` carries its typed body as bytes (``Query{type, query}``), and a BoolQuery,
ConstScoreQuery, FunctionScoreQuery, DisMaxQuery, NestedQuery or KnnVectorQuery body holds
further ``Query`` messages. Parsing such a tree level by level copies the rest of the tree at
every level (memory grows with the square of the depth) and compiling it recurses once per level
(a deep tree ends in RecursionError). So the tree is walked first, iteratively, over memoryview
slices of the request (no copies), and refused as soon as it is deeper than MAX_QUERY_DEPTH or
holds more than MAX_QUERY_COUNT queries::

    check_query_tree(search_pb2.SearchQuery.DESCRIPTOR, request.search_query)  # OTSError 400

The service documents no number for either (the limits page, D-SRLIM in the reference, lists
only "nested levels: 5" for NESTED fields). The numbers are those of the Lucene / Elasticsearch
engine the service is built on: Elasticsearch's ``indices.query.bool.max_nested_depth`` default
(20) and Lucene's ``BooleanQuery.maxClauseCount`` default (1024).

Bytes that are not valid protobuf are left to the real parser, which answers them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tablestore.protobuf import search_pb2 as spb

from tsmigrate.local.errors import OTSError, invalid

__all__ = ["MAX_QUERY_COUNT", "MAX_QUERY_DEPTH", "check_query_tree"]

log = logging.getLogger(__name__)

MAX_QUERY_DEPTH = 20
MAX_QUERY_COUNT = 1024

_MAX_OTHER_MESSAGES = 8 * MAX_QUERY_COUNT
_QUERY = spb.Query.DESCRIPTOR
_LEN = 2  # wire type of length-delimited fields

# QueryType -> the message its `query` bytes hold (the ones that can hold further queries).
_BODIES: dict[int, Descriptor] = {
    spb.BOOL_QUERY: spb.BoolQuery.DESCRIPTOR,
    spb.CONST_SCORE_QUERY: spb.ConstScoreQuery.DESCRIPTOR,
    spb.FUNCTION_SCORE_QUERY: spb.FunctionScoreQuery.DESCRIPTOR,
    spb.DIS_MAX_QUERY: spb.DisMaxQuery.DESCRIPTOR,
    spb.NESTED_QUERY: spb.NestedQuery.DESCRIPTOR,
    spb.KNN_VECTOR_QUERY: spb.KnnVectorQuery.DESCRIPTOR,
}


class _Malformed(Exception):
    """Not protobuf: the walk stops and the real parser reports it."""


@functools.cache
def _links(message: Descriptor) -> dict[int, Descriptor]:
    """The message-typed fields of `message` through which a Query can be reached."""
    return {f.number: f.message_type for f in message.fields
            if f.type == FieldDescriptor.TYPE_MESSAGE and _reaches_query(f.message_type)}


@functools.cache
def _reaches_query(message: Descriptor, _seen: frozenset[str] = frozenset()) -> bool:
    if message is _QUERY:
        return True
    seen = _seen | {message.full_name}
    return any(f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.full_name not in seen
               and _reaches_query(f.message_type, seen) for f in message.fields)


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Malformed
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: memoryview) -> Iterator[tuple[int, memoryview | int]]:
    """(number, slice) of each length-delimited field, (number, value) of each varint; a
    generator, so a message of a million clauses is never held as a list."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == _LEN:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise _Malformed
            yield number, buf[pos:pos + size]
            pos += size
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:  # groups are not used by these protos
            raise _Malformed
    if pos != len(buf):
        raise _Malformed


def check_query_tree(message: Descriptor, data: bytes, what: str = "Search") -> None:
    """Refuse (400 OTSParameterInvalid, one log line) a query tree in `data` (a serialized
    `message`) deeper than MAX_QUERY_DEPTH or with more than MAX_QUERY_COUNT queries."""
    try:
        _walk(message, data)
    except _Malformed:
        return
    except OTSError as e:
        log.warning("refused %s: %s", what, e.message)
        raise


def _walk(message: Descriptor, data: bytes) -> None:
    # (bytes of a message, its type, the query depth of its nearest Query). Queries are counted
    # and their depth checked when found, so the stack never holds more than the limits allow.
    stack: list[tuple[memoryview, Descriptor, int]] = [(memoryview(data), message, 0)]
    count = others = 0
    while stack:
        buf, descriptor, depth = stack.pop()
        if descriptor is _QUERY:
            qtype: memoryview | int | None = None
            body: memoryview | int | None = None
            for number, value in _fields(buf):  # the last occurrence wins, as in protobuf
                if number == 1:
                    qtype = value
                elif number == 2:
                    body = value
            if isinstance(qtype, int) and isinstance(body, memoryview) and qtype in _BODIES:
                stack.append((body, _BODIES[qtype], depth))
            continue
        links = _links(descriptor)
        if not links:
            continue
        for number, value in _fields(buf):
            child = links.get(number)
            if child is None or not isinstance(value, memoryview):
                continue
            if child is _QUERY:
                count += 1
                if depth + 1 > MAX_QUERY_DEPTH:
                    raise invalid(f"The depth of nested queries exceeds the limit: "
                                  f"{MAX_QUERY_DEPTH}.")
                if count > MAX_QUERY_COUNT:
                    raise invalid(f"The number of queries exceeds the limit: {MAX_QUERY_COUNT}.")
                stack.append((value, child, depth + 1))
            else:
                others += 1  # e.g. sorters whose nested_filter is a Query: bounded as well
                if others > _MAX_OTHER_MESSAGES:
                    raise invalid(f"The number of queries exceeds the limit: {MAX_QUERY_COUNT}.")
                stack.append((value, child, depth))
