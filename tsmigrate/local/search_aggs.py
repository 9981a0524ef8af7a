"""Aggregations and group-bys of Search, over the documents a query matched.

Aggregations: max, min, sum, avg and percentiles on LONG, DOUBLE and DATE fields; count and
distinct count on any field but TEXT; top rows. They count values, not documents: an array field
contributes each element (`Count('la')` of 100 two-element arrays is 200), a NESTED sub-field
(`n.nl`) each object's value. A document without a value contributes the aggregation's `missing`
value when one is given. Percentiles interpolate linearly between the closest ranks, and come
back sorted by percentile, in the field's type (a LONG field's truncated toward zero).

Group-bys (each with sub-aggregations and sub-group-bys, evaluated on its buckets' documents):
field (keys as strings; default order row count descending then key ascending; size default 10,
at most 2000), range ([from, to) on numbers, a document counted once per range it has a value
in), filter (one bucket per query, in request order), geo distance (metres from an origin,
haversine), histogram (buckets of `interval` from 0 within `field_range`, which bounds them but
adds no empty ones beyond the data; `min_doc_count`, `missing_value`) and date histogram (fixed
units, and calendar months, quarters and years, in `time_zone`). Results are encoded exactly as
the SDK decodes them (`AggregationsResult`, `GroupBysResult`).
"""

from __future__ import annotations

import calendar
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tablestore.protobuf import search_pb2 as spb

from tsmigrate.local.errors import invalid
from tsmigrate.local.search_schema import FIELD_TYPE_NAMES, IndexSchemaInfo, SearchField
from tsmigrate.local.utf8 import parse_nested
from tsmigrate.wire.plainbuffer import PlainBufferError, decode_value, encode_value

MAX_TOP_ROWS = 100
DEFAULT_GROUP_SIZE = 10
MAX_GROUP_SIZE = 2000
MAX_HISTOGRAM_BUCKETS = 2000
EARTH_RADIUS_M = 6_371_008.7714
_NUMERIC = (spb.LONG, spb.DOUBLE, spb.DATE)
_FIXED_UNIT_MS = {spb.MILLISECOND: 1, spb.SECOND: 1000, spb.MINUTE: 60_000, spb.HOUR: 3_600_000,
                  spb.DAY: 86_400_000, spb.WEEK: 7 * 86_400_000}
_MONTHS = {spb.MONTH: 1, spb.QUARTER_YEAR: 3, spb.YEAR: 12}
_TZ = re.compile(r"^([+-])(\d{2}):(\d{2})$")

# What the caller supplies: a document's values of a top-level field, whether a query matches a
# document, and the encoded top rows of some documents.
Values = Callable[[Any, SearchField], list[Any]]
Matcher = Callable[[spb.Query], Callable[[Any], bool]]
TopRows = Callable[[list[Any], int, "spb.Sort | None"], list[bytes]]


@dataclass(frozen=True)
class Tools:
    schema: IndexSchemaInfo
    values: Values
    matcher: Matcher
    top_rows: TopRows


# --- fields ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Path:
    """A field an aggregation names: top-level, or a sub-field of a NESTED field (`n.nl`)."""

    name: str
    field: SearchField
    parent: SearchField | None

    @property
    def type(self) -> int:
        return self.field.type


def _resolve(schema: IndexSchemaInfo, name: str) -> _Path:
    field = schema.fields.get(name)
    if field is not None:
        return _Path(name, field, None)
    head, _, rest = name.partition(".")
    parent = schema.fields.get(head)
    if parent is not None and parent.type == spb.NESTED:
        sub = next((f for f in parent.sub_fields if f.name == rest), None)
        if sub is not None:
            return _Path(name, sub, parent)
    raise invalid(f"Field [{name}] does not exist in the schema of search index [{schema.index_name}].")


def _path_values(tools: Tools, doc: Any, path: _Path) -> list[Any]:
    if path.parent is None:
        return tools.values(doc, path.field)
    out: list[Any] = []
    for text in tools.values(doc, path.parent):
        for item in json.loads(text):
            out.extend(_sub_value(path.field, item.get(path.field.name)))
    return out


_SUB_TYPES = {spb.LONG: (int,), spb.DATE: (int,), spb.DOUBLE: (int, float), spb.BOOLEAN: (bool,),
              spb.KEYWORD: (str,), spb.TEXT: (str,)}


def _sub_value(field: SearchField, raw: object) -> list[Any]:
    """The values of a nested object's sub-field (a list for an array), of the field's type."""
    items = raw if isinstance(raw, list) else [raw]
    accepted = _SUB_TYPES.get(field.type, ())
    out = [v for v in items if type(v) in accepted]
    return [float(v) for v in out] if field.type == spb.DOUBLE else out


def _check_type(path: _Path, allowed: Iterable[int], what: str) -> None:
    if path.type not in allowed:
        raise invalid(f"{what} does not support field [{path.name}] of type "
                      f"{FIELD_TYPE_NAMES.get(path.type, path.type)}.")
    if path.field.sort_and_agg is False:
        raise invalid(f"Field [{path.name}] cannot be aggregated: enable_sort_and_agg is false.")


def _column_value(data: bytes, what: str) -> Any:
    try:
        return decode_value(data)
    except PlainBufferError as exc:
        raise invalid(f"Invalid {what}: {exc}") from None


def _field_values(tools: Tools, docs: Sequence[Any], path: _Path, missing: bytes | None) -> list[Any]:
    default = _column_value(missing, "missing value") if missing else None
    out: list[Any] = []
    for doc in docs:
        values = _path_values(tools, doc, path)
        if values:
            out.extend(values)
        elif default is not None:
            out.append(default)
    return out


def _numbers(values: list[Any], path: _Path) -> list[float]:
    try:
        return [float(v) for v in values if type(v) is not bool]
    except (TypeError, ValueError):
        raise invalid(f"The missing value of field [{path.name}] is not a number.") from None


# --- aggregations ----------------------------------------------------------------------------


def _stat(kind: int, message: Any, result: Any, what: str) -> Callable[[Tools, Sequence[Any], bytes], bytes]:
    def run(tools: Tools, docs: Sequence[Any], body: bytes) -> bytes:
        agg = parse_nested(message, body, what)
        path = _resolve(tools.schema, agg.field_name)
        _check_type(path, _NUMERIC, what)
        values = _numbers(_field_values(tools, docs, path, agg.missing or None), path)
        out = result()
        if kind == spb.AGG_SUM:
            out.value = math.fsum(values)
        elif values:
            if kind == spb.AGG_MAX:
                out.value = max(values)
            elif kind == spb.AGG_MIN:
                out.value = min(values)
            else:
                out.value = math.fsum(values) / len(values)
        return out.SerializeToString()  # type: ignore[no-any-return]

    return run


def _count(tools: Tools, docs: Sequence[Any], body: bytes) -> bytes:
    agg = parse_nested(spb.CountAggregation, body, "CountAggregation")
    path = _resolve(tools.schema, agg.field_name)
    _check_type(path, [t for t in FIELD_TYPE_NAMES if t != spb.TEXT], "CountAggregation")
    total = sum(len(_path_values(tools, d, path)) for d in docs)
    return spb.CountAggregationResult(value=total).SerializeToString()  # type: ignore[no-any-return]


def _distinct_count(tools: Tools, docs: Sequence[Any], body: bytes) -> bytes:
    agg = parse_nested(spb.DistinctCountAggregation, body, "DistinctCountAggregation")
    path = _resolve(tools.schema, agg.field_name)
    _check_type(path, [t for t in FIELD_TYPE_NAMES if t != spb.TEXT], "DistinctCountAggregation")
    distinct = {(type(v), v) for v in _field_values(tools, docs, path, agg.missing or None)}
    return spb.DistinctCountAggregationResult(value=len(distinct)).SerializeToString()  # type: ignore[no-any-return]


def _percentiles(tools: Tools, docs: Sequence[Any], body: bytes) -> bytes:
    agg = parse_nested(spb.PercentilesAggregation, body, "PercentilesAggregation")
    path = _resolve(tools.schema, agg.field_name)
    _check_type(path, _NUMERIC, "PercentilesAggregation")
    wanted = sorted(agg.percentiles) if agg.percentiles else [1, 5, 25, 50, 75, 95, 99]
    if any(not 0 <= p <= 100 for p in wanted):
        raise invalid("Percentiles must be in range [0, 100].")
    values = sorted(_numbers(_field_values(tools, docs, path, agg.missing_value or None), path))
    out = spb.PercentilesAggregationResult()
    for p in wanted:
        item = out.percentiles_aggregation_items.add(key=p)
        if values:
            rank = p / 100 * (len(values) - 1)
            low = math.floor(rank)
            high = min(low + 1, len(values) - 1)
            value = values[low] + (values[high] - values[low]) * (rank - low)
            item.value = encode_value(float(value) if path.type == spb.DOUBLE else int(value))
    return out.SerializeToString()  # type: ignore[no-any-return]


def _top_rows(tools: Tools, docs: Sequence[Any], body: bytes) -> bytes:
    agg = parse_nested(spb.TopRowsAggregation, body, "TopRowsAggregation")
    limit = agg.limit if agg.HasField("limit") else 1
    if not 0 < limit <= MAX_TOP_ROWS:
        raise invalid(f"TopRowsAggregation limit must be in range (0, {MAX_TOP_ROWS}]: {limit}.")
    rows = tools.top_rows(list(docs), limit, agg.sort if agg.HasField("sort") else None)
    return spb.TopRowsAggregationResult(rows=rows).SerializeToString()  # type: ignore[no-any-return]


_AGGS: dict[int, Callable[[Tools, Sequence[Any], bytes], bytes]] = {
    spb.AGG_MAX: _stat(spb.AGG_MAX, spb.MaxAggregation, spb.MaxAggregationResult, "MaxAggregation"),
    spb.AGG_MIN: _stat(spb.AGG_MIN, spb.MinAggregation, spb.MinAggregationResult, "MinAggregation"),
    spb.AGG_SUM: _stat(spb.AGG_SUM, spb.SumAggregation, spb.SumAggregationResult, "SumAggregation"),
    spb.AGG_AVG: _stat(spb.AGG_AVG, spb.AvgAggregation, spb.AvgAggregationResult, "AvgAggregation"),
    spb.AGG_COUNT: _count,
    spb.AGG_DISTINCT_COUNT: _distinct_count,
    spb.AGG_PERCENTILES: _percentiles,
    spb.AGG_TOP_ROWS: _top_rows,
}


def run_aggs(tools: Tools, aggs: spb.Aggregations, docs: Sequence[Any]) -> spb.AggregationsResult:
    out = spb.AggregationsResult()
    _unique_names(a.name for a in aggs.aggs)
    for agg in aggs.aggs:
        run = _AGGS.get(agg.type)
        if run is None:
            raise invalid(f"Unknown aggregation type: {agg.type}.")
        out.agg_results.add(name=agg.name, type=agg.type, agg_result=run(tools, docs, agg.body))
    return out


def _unique_names(names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if not name:
            raise invalid("The name of an aggregation or group-by must not be empty.")
        if name in seen:
            raise invalid(f"Duplicated aggregation or group-by name: [{name}].")
        seen.add(name)


# --- group-bys -------------------------------------------------------------------------------


@dataclass
class _Bucket:
    key: Any  # field value, range, ... (what the result item shows)
    docs: list[Any]


def _sub_results(tools: Tools, proto: Any, docs: list[Any], item: Any) -> None:
    if proto.HasField("sub_aggs"):
        item.sub_aggs_result.CopyFrom(run_aggs(tools, proto.sub_aggs, docs))
    if proto.HasField("sub_group_bys"):
        item.sub_group_bys_result.CopyFrom(run_group_bys(tools, proto.sub_group_bys, docs))


def _sub_agg_value(tools: Tools, proto: Any, docs: list[Any], name: str) -> float:
    """The value of sub-aggregation `name` of a bucket, for SubAggSort."""
    for agg in proto.sub_aggs.aggs if proto.HasField("sub_aggs") else ():
        if agg.name == name:
            result = run_aggs(tools, spb.Aggregations(aggs=[agg]), docs).agg_results[0]
            message = {spb.AGG_MAX: spb.MaxAggregationResult, spb.AGG_MIN: spb.MinAggregationResult,
                       spb.AGG_SUM: spb.SumAggregationResult, spb.AGG_AVG: spb.AvgAggregationResult,
                       spb.AGG_COUNT: spb.CountAggregationResult,
                       spb.AGG_DISTINCT_COUNT: spb.DistinctCountAggregationResult}.get(agg.type)
            if message is None:
                raise invalid(f"SubAggSort cannot sort by aggregation [{name}] of this type.")
            return float(message.FromString(result.agg_result).value)
    raise invalid(f"SubAggSort names no sub-aggregation of this group-by: [{name}].")


def _sort_buckets(tools: Tools, proto: Any, buckets: list[_Bucket], default: list[tuple[str, bool]]) -> None:
    """Order buckets by the group-by's sorters (last sorter first, stable), or by `default`:
    (`"count"` or `"key"`, descending)."""
    sorters: list[tuple[str, bool, str]] = []
    if proto.HasField("sort") and proto.sort.sorters:
        for s in proto.sort.sorters:
            if s.HasField("group_key_sort"):
                sorters.append(("key", s.group_key_sort.order == spb.SORT_ORDER_DESC, ""))
            elif s.HasField("row_count_sort"):
                sorters.append(("count", s.row_count_sort.order == spb.SORT_ORDER_DESC, ""))
            elif s.HasField("sub_agg_sort"):
                sorters.append(("agg", s.sub_agg_sort.order == spb.SORT_ORDER_DESC,
                                s.sub_agg_sort.sub_agg_name))
            else:
                raise invalid("Empty group-by sorter.")
    else:
        sorters = [(kind, desc, "") for kind, desc in default]
    for kind, desc, name in reversed(sorters):
        if kind == "count":
            buckets.sort(key=lambda b: len(b.docs), reverse=desc)
        elif kind == "key":
            buckets.sort(key=lambda b: b.key, reverse=desc)
        else:
            values = {id(b): _sub_agg_value(tools, proto, b.docs, name) for b in buckets}
            buckets.sort(key=lambda b: values[id(b)], reverse=desc)


def _key_text(value: Any) -> str:
    if type(value) is bool:
        return "true" if value else "false"
    return repr(value) if type(value) is float else str(value)


def _group_by_field(tools: Tools, docs: list[Any], body: bytes) -> bytes:
    proto = parse_nested(spb.GroupByField, body, "GroupByField")
    path = _resolve(tools.schema, proto.field_name)
    _check_type(path, (spb.LONG, spb.DOUBLE, spb.DATE, spb.KEYWORD, spb.BOOLEAN), "GroupByField")
    size = proto.size if proto.HasField("size") else DEFAULT_GROUP_SIZE
    if not 0 < size <= MAX_GROUP_SIZE:
        raise invalid(f"GroupByField size must be in range (0, {MAX_GROUP_SIZE}]: {size}.")
    groups: dict[Any, _Bucket] = {}
    for doc in docs:
        for value in set(_path_values(tools, doc, path)):
            groups.setdefault(value, _Bucket(value, [])).docs.append(doc)
    buckets = list(groups.values())
    _sort_buckets(tools, proto, buckets, [("count", True), ("key", False)])
    out = spb.GroupByFieldResult()
    for bucket in buckets[:size]:
        item = out.group_by_field_result_items.add(key=_key_text(bucket.key), row_count=len(bucket.docs))
        _sub_results(tools, proto, bucket.docs, item)
    return out.SerializeToString()  # type: ignore[no-any-return]


def _ranges(proto_ranges: Iterable[Any]) -> list[tuple[float, float]]:
    out = []
    for r in proto_ranges:
        begin = r.begin if r.HasField("begin") else -math.inf
        end = r.end if r.HasField("end") else math.inf
        out.append((begin, end))
    if not out:
        raise invalid("At least one range is required.")
    return out


def _group_by_range(tools: Tools, docs: list[Any], body: bytes) -> bytes:
    proto = parse_nested(spb.GroupByRange, body, "GroupByRange")
    path = _resolve(tools.schema, proto.field_name)
    _check_type(path, _NUMERIC, "GroupByRange")
    out = spb.GroupByRangeResult()
    for begin, end in _ranges(proto.ranges):
        inside = [d for d in docs if any(begin <= v < end for v in _path_values(tools, d, path))]
        item = out.group_by_range_result_items.add(range_from=begin, range_to=end, row_count=len(inside))
        _sub_results(tools, proto, inside, item)
    return out.SerializeToString()  # type: ignore[no-any-return]


def _group_by_filter(tools: Tools, docs: list[Any], body: bytes) -> bytes:
    proto = parse_nested(spb.GroupByFilter, body, "GroupByFilter")
    if not proto.filters:
        raise invalid("GroupByFilter needs at least one filter.")
    out = spb.GroupByFilterResult()
    for query in proto.filters:
        matches = tools.matcher(query)
        inside = [d for d in docs if matches(d)]
        item = out.group_by_filter_result_items.add(row_count=len(inside))
        _sub_results(tools, proto, inside, item)
    return out.SerializeToString()  # type: ignore[no-any-return]


def haversine_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in metres."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(a)))


def _lat_lon(text: str) -> tuple[float, float]:
    lat, lon = (float(p) for p in text.split(","))
    return lat, lon


def _group_by_geo_distance(tools: Tools, docs: list[Any], body: bytes) -> bytes:
    proto = parse_nested(spb.GroupByGeoDistance, body, "GroupByGeoDistance")
    path = _resolve(tools.schema, proto.field_name)
    _check_type(path, (spb.GEO_POINT,), "GroupByGeoDistance")
    if not proto.HasField("origin"):
        raise invalid("GroupByGeoDistance needs an origin.")
    lat0, lon0 = proto.origin.lat, proto.origin.lon
    distances = {id(d): [haversine_m(lat0, lon0, *_lat_lon(v)) for v in _path_values(tools, d, path)]
                 for d in docs}
    out = spb.GroupByGeoDistanceResult()
    for begin, end in _ranges(proto.ranges):
        inside = [d for d in docs if any(begin <= m < end for m in distances[id(d)])]
        item = out.group_by_geo_distance_result_items.add(range_from=begin, range_to=end,
                                                          row_count=len(inside))
        _sub_results(tools, proto, inside, item)
    return out.SerializeToString()  # type: ignore[no-any-return]


def _bucketed(tools: Tools, docs: list[Any], path: _Path, missing: bytes | None,
              bucket_of: Callable[[Any], Any]) -> dict[Any, list[Any]]:
    default = _column_value(missing, "missing value") if missing else None
    groups: dict[Any, list[Any]] = {}
    for doc in docs:
        values = _path_values(tools, doc, path) or ([default] if default is not None else [])
        for key in {bucket_of(v) for v in values}:
            groups.setdefault(key, []).append(doc)
    return groups


def _group_by_histogram(tools: Tools, docs: list[Any], body: bytes) -> bytes:
    proto = parse_nested(spb.GroupByHistogram, body, "GroupByHistogram")
    path = _resolve(tools.schema, proto.field_name)
    _check_type(path, (spb.LONG, spb.DOUBLE), "GroupByHistogram")
    if not proto.interval:
        raise invalid("GroupByHistogram needs an interval.")
    interval = _column_value(proto.interval, "interval")
    if type(interval) not in (int, float) or interval <= 0:
        raise invalid(f"GroupByHistogram interval must be a positive number: {interval!r}.")
    if not (proto.HasField("field_range") and proto.field_range.min and proto.field_range.max):
        raise invalid("GroupByHistogram needs a field_range (min, max).")
    low = _column_value(proto.field_range.min, "field_range min")
    high = _column_value(proto.field_range.max, "field_range max")
    if type(low) not in (int, float) or type(high) not in (int, float) or low > high:
        raise invalid(f"GroupByHistogram field_range is invalid: [{low!r}, {high!r}].")
    if (high - low) / interval > MAX_HISTOGRAM_BUCKETS:  # the documented limit on the request
        raise invalid(f"GroupByHistogram would return more than {MAX_HISTOGRAM_BUCKETS} buckets.")
    is_long = path.type == spb.LONG and type(interval) is int

    def bucket_of(v: Any) -> Any:
        key = math.floor(v / interval) * interval
        return int(key) if is_long else float(key)

    groups = _bucketed(tools, docs, path, proto.missing_value or None, bucket_of)
    groups = {k: v for k, v in groups.items() if low <= k <= high or bucket_of(low) == k}
    min_count = proto.min_doc_count if proto.HasField("min_doc_count") else 0
    keys = set(groups)
    if min_count == 0 and keys:
        # Empty buckets fill the gaps between the first and the last bucket, never beyond them:
        # field_range only bounds the buckets (the SDK's group_by_test.py::test_group_by_histogram).
        first, last = min(keys), max(keys)
        middles = (first + (n + 0.5) * interval for n in range(round((last - first) / interval)))
        keys.update(bucket_of(m) for m in middles)  # a middle, so float steps never round down
    buckets = [_Bucket(k, groups.get(k, [])) for k in keys]
    buckets = [b for b in buckets if len(b.docs) >= min_count]
    _sort_buckets(tools, proto, buckets, [("key", False)])
    out = spb.GroupByHistogramResult()
    for bucket in buckets:
        item = out.group_by_histogra_items.add(key=encode_value(bucket.key), value=len(bucket.docs))
        _sub_results(tools, proto, bucket.docs, item)
    return out.SerializeToString()  # type: ignore[no-any-return]


def _offset_ms(time_zone: str) -> int:
    if not time_zone:
        return 0
    m = _TZ.match(time_zone)
    if m is None:
        raise invalid(f"Invalid time_zone: {time_zone!r}, expected a form like +08:00.")
    sign = -1 if m.group(1) == "-" else 1
    return sign * (int(m.group(2)) * 3_600_000 + int(m.group(3)) * 60_000)


def _group_by_date_histogram(tools: Tools, docs: list[Any], body: bytes) -> bytes:
    proto = parse_nested(spb.GroupByDateHistogram, body, "GroupByDateHistogram")
    path = _resolve(tools.schema, proto.field_name)
    _check_type(path, (spb.DATE,), "GroupByDateHistogram")
    if not proto.HasField("interval") or proto.interval.value <= 0:
        raise invalid("GroupByDateHistogram needs a positive interval.")
    tz = _offset_ms(proto.time_zone)
    unit, count = proto.interval.unit, proto.interval.value

    def bucket_of(ms: int) -> int:
        if unit in _FIXED_UNIT_MS:
            size = _FIXED_UNIT_MS[unit] * count
            shift = 3 * 86_400_000 if unit == spb.WEEK else 0  # weeks start on Monday
            return (ms + tz - shift) // size * size + shift - tz
        if unit not in _MONTHS:
            raise invalid(f"Invalid interval unit: {unit}.")
        local = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms + tz)
        months = (local.year - 1970) * 12 + local.month - 1
        months -= months % (_MONTHS[unit] * count)
        start = dt.datetime(1970 + months // 12, months % 12 + 1, 1)
        return calendar.timegm(start.timetuple()) * 1000 - tz

    groups = _bucketed(tools, docs, path, proto.missing or None, bucket_of)
    if proto.HasField("field_range") and proto.field_range.min and proto.field_range.max:
        low = _column_value(proto.field_range.min, "field_range min")
        high = _column_value(proto.field_range.max, "field_range max")
        groups = {k: v for k, v in groups.items() if bucket_of(low) <= k <= high}
    min_count = proto.min_doc_count if proto.HasField("min_doc_count") else 0
    buckets = [_Bucket(k, v) for k, v in groups.items() if len(v) >= min_count]
    _sort_buckets(tools, proto, buckets, [("key", False)])
    out = spb.GroupByDateHistogramResult()
    for bucket in buckets:
        item = out.group_by_date_histogram_items.add(timestamp=bucket.key, row_count=len(bucket.docs))
        _sub_results(tools, proto, bucket.docs, item)
    return out.SerializeToString()  # type: ignore[no-any-return]


_GROUP_BYS: dict[int, Callable[[Tools, list[Any], bytes], bytes]] = {
    spb.GROUP_BY_FIELD: _group_by_field,
    spb.GROUP_BY_RANGE: _group_by_range,
    spb.GROUP_BY_FILTER: _group_by_filter,
    spb.GROUP_BY_GEO_DISTANCE: _group_by_geo_distance,
    spb.GROUP_BY_HISTOGRAM: _group_by_histogram,
    spb.GROUP_BY_DATE_HISTOGRAM: _group_by_date_histogram,
}


def run_group_bys(tools: Tools, group_bys: spb.GroupBys, docs: Sequence[Any]) -> spb.GroupBysResult:
    out = spb.GroupBysResult()
    _unique_names(g.name for g in group_bys.group_bys)
    for group_by in group_bys.group_bys:
        run = _GROUP_BYS.get(group_by.type)
        if run is None:
            name = spb.GroupByType.Name(group_by.type) if group_by.type in spb.GroupByType.values() \
                else group_by.type
            raise invalid(f"Group-by type {name} is not supported by the local Tablestore server.")
        out.group_by_results.add(name=group_by.name, type=group_by.type,
                                 group_by_result=run(tools, list(docs), group_by.body))
    return out
