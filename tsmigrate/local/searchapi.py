"""Search-index APIs: CreateSearchIndex, DescribeSearchIndex, UpdateSearchIndex, ListSearchIndex,
DeleteSearchIndex, Search, ComputeSplits and ParallelScan; the checks DeleteTable and UpdateTable
make for search indexes.

Only metadata is stored (storage.SearchIndexRecord). Search and ParallelScan hand the engine
(search.py) the rows of the base table, read at query time, so the write path does no index work.
An index builds as on the service: for `ServerOptions.search_full_sync_s` after creation it is in
phase FULL and holds the first rows of the table in key order, in proportion to the time elapsed
(a search sees only those); then it is in INCR and holds every row, following writes at once.
DescribeSearchIndex reports the phase, the sync timestamp (the creation while in FULL, then the
current time, in ns) and `metering_info.row_count`, the rows indexed so far. A missing table is
`OTSParameterInvalid "table [x] does not exist"` for every API here, as the service answers
ComputeSplits.

Dynamic schema modification (reindex; the fields are in search_protocol, from the Java proto):
- CreateSearchIndex with `source_index_name` S creates R, whose name must end with `_reindex`,
  from a complete new schema; S and R become each other's `brother_index_name`. S must not
  already be in a reindex.
- UpdateSearchIndex `query_flow_weight` on S or R: the pair's two weights (0..100, sum 100).
  A Search on S is then served by R's schema with R's weight as probability (A/B traffic).
- UpdateSearchIndex `switch_index_name` (the brother of `index_name`): once R has left FULL, the
  two swap schemas and TTLs, so the source name serves the new schema; weights are cleared. The
  pair stays linked (switching again swaps back) until one of them is deleted.
- Indexes "in creating" (in FULL, or reindexes not yet switched) are limited to 10 an instance,
  and reindexes still rebuilding (in FULL, not switched) to 5, as the service documents ("You can
  rebuild up to five indexes at the same time").
`added_field_schemas` (in-place field addition) is refused.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tablestore.protobuf import search_pb2 as spb

from tsmigrate.local import keycodec, rowdata
from tsmigrate.local.errors import OTSError, invalid
from tsmigrate.local.model import TableInfo
from tsmigrate.local.search import Document, run_search
from tsmigrate.local.search_schema import (
    IndexSchemaInfo,
    check_table_options,
    delete_table_refused,
    describe_response,
    index_not_exist,
    load_schema,
    validate_create,
    validate_ttl_update,
)
from tsmigrate.local.storage import SearchIndexRecord
from tsmigrate.wire import search_protocol
from tsmigrate.wire.plainbuffer import INF_MAX

if TYPE_CHECKING:
    from tsmigrate.local.context import Context

REINDEX_SUFFIX = "_reindex"
MAX_CREATING = 10
MAX_REBUILDING = 5
_SCAN_BATCH = 1000
_END_KEY = keycodec.encode_key([INF_MAX])


# -- lookups -----------------------------------------------------------------------------------


def _table(ctx: Context, name: str) -> TableInfo:
    info = ctx.storage.table(ctx.instance, name)
    if info is None:
        raise invalid(f"table [{name}] does not exist")
    return info


def _record(ctx: Context, table: TableInfo, index_name: str) -> SearchIndexRecord:
    for record in ctx.storage.search_indexes(ctx.instance, table.name):
        if record.index_name == index_name:
            return record
    raise index_not_exist(index_name)


def _meta(record: SearchIndexRecord) -> dict[str, Any]:
    return json.loads(record.meta)  # type: ignore[no-any-return]


def _save(ctx: Context, record: SearchIndexRecord, meta: dict[str, Any]) -> None:
    ctx.storage.save_search_index(ctx.instance, record._replace(meta=json.dumps(meta)))


@functools.lru_cache(maxsize=256)
def _load(index_name: str, schema: bytes, ttl: int, pk_names: tuple[str, ...]) -> IndexSchemaInfo:
    # Keyed by the stored bytes: a changed schema or TTL is a new entry, never a stale one.
    return load_schema(index_name, schema, ttl, pk_names)


def _info(table: TableInfo, record: SearchIndexRecord) -> IndexSchemaInfo:
    return _load(record.index_name, record.schema, record.ttl, tuple(table.pk_names))


def _in_full_sync(ctx: Context, record: SearchIndexRecord) -> bool:
    return ctx.now_ms - record.create_time < ctx.server.options.search_full_sync_s * 1000


def _built_fraction(ctx: Context, record: SearchIndexRecord) -> float:
    """How much of the table the index holds: the time since creation over the full sync's."""
    full_ms = ctx.server.options.search_full_sync_s * 1000
    if full_ms <= 0:
        return 1.0
    return min(1.0, max(0.0, (ctx.now_ms - record.create_time) / full_ms))


# -- hooks of the table APIs -------------------------------------------------------------------


def check_delete_table(ctx: Context, table: TableInfo) -> None:
    """DeleteTable is refused while the table has a search index."""
    if ctx.storage.search_indexes(ctx.instance, table.name):
        raise delete_table_refused(table.name)


def check_update_table(ctx: Context, table: TableInfo) -> None:
    """UpdateTable's new options must keep every search index of the table valid."""
    records = ctx.storage.search_indexes(ctx.instance, table.name)
    check_table_options(table.ttl, table.max_versions, table.allow_update,
                        [_info(table, r) for r in records])


# -- CreateSearchIndex -------------------------------------------------------------------------


def create_search_index(ctx: Context, req: Any) -> spb.CreateSearchIndexResponse:
    ttl = req.time_to_live if req.HasField("time_to_live") else None
    source = req.source_index_name if req.HasField("source_index_name") else None
    with ctx.storage.transaction():
        table = _table(ctx, req.table_name)
        info = validate_create(req.index_name, req.schema, ttl, pk_names=table.pk_names,
                               table_ttl=table.ttl, max_versions=table.max_versions,
                               allow_update=table.allow_update)
        records = ctx.storage.search_indexes(ctx.instance)
        if any(r.table_name == table.name and r.index_name == info.index_name for r in records):
            raise OTSError(409, "OTSObjectAlreadyExist",
                           f"search index [{info.index_name}] already exists")
        creating = sum(1 for r in records if _in_full_sync(ctx, r)
                       or (_meta(r).get("source") and not _meta(r).get("switched")))
        if creating >= MAX_CREATING:
            raise OTSError(403, "OTSQuotaExhausted", "the number of index in creating has exceed "
                                                     f"the instance quota, limit: {MAX_CREATING}")
        rebuilding = sum(1 for r in records if _meta(r).get("source")
                         and not _meta(r).get("switched") and _in_full_sync(ctx, r))
        if source is not None and rebuilding >= MAX_REBUILDING:
            raise OTSError(403, "OTSQuotaExhausted", "the number of reindex in progress has exceed "
                                                     f"the instance quota, limit: {MAX_REBUILDING}")
        meta: dict[str, Any] = {}
        if source is not None:
            _link_reindex(ctx, table, info.index_name, source)
            meta = {"source": source, "brother": source}
        record = SearchIndexRecord(table.name, info.index_name, info.schema_bytes, info.time_to_live,
                                   ctx.now_ms, "")
        _save(ctx, record, meta)
    return spb.CreateSearchIndexResponse()


def _link_reindex(ctx: Context, table: TableInfo, name: str, source: str) -> None:
    if not name.endswith(REINDEX_SUFFIX):
        raise invalid(f"The name of a reindex index must end with {REINDEX_SUFFIX}: [{name}].")
    source_record = _record(ctx, table, source)
    source_meta = _meta(source_record)
    if "brother" in source_meta:
        raise invalid(f"Search index [{source}] is already in a reindex process with "
                      f"[{source_meta['brother']}].")
    _save(ctx, source_record, {"brother": name})


# -- DescribeSearchIndex / ListSearchIndex / DeleteSearchIndex ---------------------------------


def describe_search_index(ctx: Context, req: spb.DescribeSearchIndexRequest) -> Any:
    with ctx.storage.lock:
        table = _table(ctx, req.table_name)
        record = _record(ctx, table, req.index_name)
    full = _in_full_sync(ctx, record)
    indexed = _row_count(ctx, table, record)
    base = describe_response(
        _info(table, record),
        create_time_ms=record.create_time,
        sync_phase=spb.FULL if full else spb.INCR,
        # In FULL the sync has reached the creation; in INCR it is as fresh as the table.
        current_sync_timestamp_ns=(record.create_time if full else ctx.now_ms) * 1_000_000,
        include_sync_stat=req.include_sync_stat if req.HasField("include_sync_stat") else True,
    )
    resp = search_protocol.DescribeSearchIndexResponse.FromString(base.SerializeToString())
    meta = _meta(record)
    if "brother" in meta:
        resp.brother_index_name = meta["brother"]
    for name, weight in meta.get("weights", ()):
        resp.query_flow_weight.add(index_name=name, weight=weight)
    resp.index_status.status = search_protocol.RUNNING
    resp.metering_info.row_count = indexed
    resp.metering_info.timestamp = ctx.now_ms
    return resp


def _row_count(ctx: Context, table: TableInfo, record: SearchIndexRecord) -> int:
    with ctx.storage.lock:
        total = sum(1 for _ in _documents(ctx, table))
    return int(total * _built_fraction(ctx, record))


def list_search_index(ctx: Context, req: spb.ListSearchIndexRequest) -> spb.ListSearchIndexResponse:
    with ctx.storage.lock:
        table_name = _table(ctx, req.table_name).name if req.HasField("table_name") else None
        records = ctx.storage.search_indexes(ctx.instance, table_name)
    resp = spb.ListSearchIndexResponse()
    for record in records:
        resp.indices.add(table_name=record.table_name, index_name=record.index_name)
    return resp


def delete_search_index(ctx: Context, req: spb.DeleteSearchIndexRequest) -> spb.DeleteSearchIndexResponse:
    with ctx.storage.transaction():
        table = _table(ctx, req.table_name)
        record = _record(ctx, table, req.index_name)
        brother = _meta(record).get("brother")
        if brother is not None:  # the other index of a reindex pair leaves the process
            _save(ctx, _record(ctx, table, brother), {})
        ctx.storage.drop_search_index(ctx.instance, table.name, record.index_name)
    return spb.DeleteSearchIndexResponse()


# -- UpdateSearchIndex -------------------------------------------------------------------------


def update_search_index(ctx: Context, req: Any) -> spb.UpdateSearchIndexResponse:
    switch = req.switch_index_name if req.HasField("switch_index_name") else None
    weights = [(w.index_name, w.weight) for w in req.query_flow_weight]
    ttl = req.time_to_live if req.HasField("time_to_live") else None
    if req.added_field_schemas:
        raise invalid("added_field_schemas is not supported: create a reindex index from the "
                      "source index with the complete new schema instead.")
    if switch is None and not weights and ttl is None:
        raise invalid("No parameter is specified while updating search index.")
    if switch is not None and weights:
        raise invalid("switch_index_name and query_flow_weight cannot be set at the same time.")
    with ctx.storage.transaction():
        table = _table(ctx, req.table_name)
        record = _record(ctx, table, req.index_name)
        if ttl is not None:
            ttl = validate_ttl_update(record.index_name, ttl, table_ttl=table.ttl,
                                      allow_update=table.allow_update)
            record = record._replace(ttl=ttl)
            ctx.storage.save_search_index(ctx.instance, record)
        if switch is not None:
            _switch(ctx, table, record, switch)
        elif weights:
            _set_weights(ctx, table, record, weights)
    return spb.UpdateSearchIndexResponse()


def _brother(ctx: Context, table: TableInfo, record: SearchIndexRecord) -> SearchIndexRecord:
    name = _meta(record).get("brother")
    if name is None:
        raise invalid(f"Search index [{record.index_name}] is not in a reindex process.")
    return _record(ctx, table, name)


def _switch(ctx: Context, table: TableInfo, record: SearchIndexRecord, switch: str) -> None:
    brother = _brother(ctx, table, record)
    if switch != brother.index_name:
        raise invalid(f"switch_index_name [{switch}] is not the reindex brother of search index "
                      f"[{record.index_name}]: [{brother.index_name}].")
    reindex = brother if "source" in _meta(brother) else record
    if _in_full_sync(ctx, reindex):
        raise invalid(f"Search index [{reindex.index_name}] is still in full sync and cannot be "
                      "switched yet.")
    for this, other in ((record, brother), (brother, record)):
        meta = _meta(this)
        meta.pop("weights", None)
        if "source" in meta:
            meta["switched"] = not meta.get("switched", False)
        _save(ctx, this._replace(schema=other.schema, ttl=other.ttl), meta)


def _set_weights(ctx: Context, table: TableInfo, record: SearchIndexRecord,
                 weights: list[tuple[str, int]]) -> None:
    brother = _brother(ctx, table, record)
    pair = {record.index_name, brother.index_name}
    if len(weights) != 2 or {name for name, _ in weights} != pair:
        raise invalid(f"query_flow_weight must give one weight to each of [{record.index_name}] "
                      f"and [{brother.index_name}].")
    if any(not 0 <= w <= 100 for _, w in weights) or sum(w for _, w in weights) != 100:
        raise invalid("The weights of query_flow_weight must be in range [0, 100] and sum to 100.")
    for this in (record, brother):
        meta = _meta(this)
        meta["weights"] = [list(w) for w in weights]
        _save(ctx, this, meta)


# -- Search, ComputeSplits, ParallelScan -------------------------------------------------------


def _documents(ctx: Context, table: TableInfo) -> Iterator[Document]:
    """Every live row of the table in PK order: (pk, newest values, their timestamps)."""
    storage, now_ms, pk_names = ctx.storage, ctx.now_ms, table.pk_names
    start = b""
    while True:
        batch = storage.scan(table.table_id, start, _END_KEY, True, _SCAN_BATCH)
        for row in batch:
            pk_values, cells = row.data
            live = rowdata.live_cells(table, cells, now_ms)
            if cells and not live:
                continue  # every cell expired: the row is gone
            yield (list(zip(pk_names, pk_values, strict=True)),
                   {name: vs[0][1] for name, vs in live.items()},
                   {name: vs[0][0] for name, vs in live.items()})
        if len(batch) < _SCAN_BATCH:
            return
        start = batch[-1].key + b"\x00"  # the smallest key after the batch's last


def _served_by(ctx: Context, table: TableInfo, record: SearchIndexRecord) -> SearchIndexRecord:
    """A Search on a source index under A/B traffic goes to its reindex with that weight."""
    meta = _meta(record)
    weights = dict(meta.get("weights", ()))
    if "source" in meta or not weights:
        return record
    brother = meta["brother"]
    if random.randrange(100) < weights.get(brother, 0):
        return _record(ctx, table, brother)
    return record


def _indexed(ctx: Context, table: TableInfo, record: SearchIndexRecord) -> Iterator[Document]:
    """The documents the index holds: while it builds (FULL), the first rows in key order."""
    fraction = _built_fraction(ctx, record)
    if fraction >= 1.0:
        return _documents(ctx, table)
    total = sum(1 for _ in _documents(ctx, table))
    return itertools.islice(_documents(ctx, table), int(total * fraction))


def search(ctx: Context, req: spb.SearchRequest) -> spb.SearchResponse:
    # The server does not take the storage lock for Search (LOCKS_ITSELF): the rows are read
    # under it, the query runs outside it, so a costly query delays only its own caller.
    with ctx.storage.lock:
        table = _table(ctx, req.table_name)
        record = _served_by(ctx, table, _record(ctx, table, req.index_name))
        info = _info(table, record)
        documents = list(_indexed(ctx, table, record))
    return run_search(info, req, documents)


def compute_splits(ctx: Context, req: spb.ComputeSplitsRequest) -> spb.ComputeSplitsResponse:
    if not req.search_index_splits_options.index_name:
        raise invalid("[search index splits options] must not be null")
    index_name = req.search_index_splits_options.index_name
    with ctx.storage.lock:
        table = _table(ctx, req.table_name)
        _record(ctx, table, index_name)
    return ctx.server.scan_sessions.compute_splits(table.name, index_name)


def parallel_scan(ctx: Context, req: spb.ParallelScanRequest) -> spb.ParallelScanResponse:
    with ctx.storage.lock:
        table = _table(ctx, req.table_name)
        record = _record(ctx, table, req.index_name)
        return ctx.server.scan_sessions.parallel_scan(table.name, _info(table, record), req,
                                                      _indexed(ctx, table, record))


# Handlers that take the storage lock themselves, for their reads only (see `search`).
LOCKS_ITSELF = frozenset({"Search"})

HANDLERS: dict[str, tuple[type, Any]] = {
    "CreateSearchIndex": (search_protocol.CreateSearchIndexRequest, create_search_index),
    "DescribeSearchIndex": (spb.DescribeSearchIndexRequest, describe_search_index),
    "UpdateSearchIndex": (search_protocol.UpdateSearchIndexRequest, update_search_index),
    "ListSearchIndex": (spb.ListSearchIndexRequest, list_search_index),
    "DeleteSearchIndex": (spb.DeleteSearchIndexRequest, delete_search_index),
    "Search": (spb.SearchRequest, search),
    "ComputeSplits": (spb.ComputeSplitsRequest, compute_splits),
    "ParallelScan": (spb.ParallelScanRequest, parallel_scan),
}
