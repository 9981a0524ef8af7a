"""Source and target tables for rewrite tests, filled through the official SDK."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tablestore as ts

from tsmigrate.instance.state import State
from tsmigrate.keys import Concat, HashPrefix
from tsmigrate.rewrite.job import ConnectionSpec, RewriteJob
from tsmigrate.schema import AttributeColumn, PrimaryKeyColumn, Table, TableOptions

YEAR_S = 366 * 86400
# Readings keyed by a hashed device id, rewritten to (device, zero-padded seq) concatenated.
SOURCE = Table(
    "readings",
    [PrimaryKeyColumn("pk", "STRING", derivation=HashPrefix("device", 4, "|")),
     PrimaryKeyColumn("seq", "INTEGER")],
    options=TableOptions(max_versions=3, max_time_deviation=YEAR_S),
)
TARGET = Table(
    "readings_by_seq",
    [PrimaryKeyColumn("key", "STRING", derivation=Concat(["device", "seq"], pad={"seq": 8})),
     PrimaryKeyColumn("region", "STRING")],
    options=TableOptions(max_versions=3, max_time_deviation=YEAR_S),
    attributes=[AttributeColumn("seq", "INTEGER")],
)

# The same two tables as model modules, for the tests that run the CLI on a project.
MODELS_V1 = '''
from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.keys import HashPrefix


class Reading(Model, table="readings", max_versions=3, max_time_deviation="366d"):
    pk = PrimaryKey(str, derive=HashPrefix("device", length=4, sep="|"))
    seq = PrimaryKey(int)
    device = Column(str)
'''
MODELS_V2 = '''
from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.keys import Concat


class ReadingV2(Model, table="readings_by_seq", replaces="readings", max_versions=3,
                max_time_deviation="366d"):
    device_seq = PrimaryKey(str, derive=Concat(["device", "seq"], pad={"seq": 8}), name="key")
    region = PrimaryKey(str)
    seq = Column(int)
    device = Column(str)
'''


def create(client: ts.OTSClient, table: Table) -> None:
    meta = ts.TableMeta(table.name, [(c.name, c.type) for c in table.primary_key])
    options = ts.TableOptions(-1, table.options.max_versions, table.options.max_time_deviation)
    client.create_table(meta, options, ts.ReservedThroughput(ts.CapacityUnit(0, 0)))


def source_row(i: int, now_ms: int) -> tuple[list[tuple[str, Any]], list[tuple[str, Any, int]]]:
    """Row ``i``: two versions of ``temp`` (the older one a day back), a region, a payload."""
    device = f"dev-{i % 37:03d}"
    key = [("pk", HashPrefix("device", 4, "|").derive({"device": device})), ("seq", i)]
    cells = [
        ("note", f"reading {i} " + "x" * (i % 50), now_ms - 3_600_000),
        ("region", ["eu", "us", "ap"][i % 3], now_ms - 7_200_000),
        ("temp", i * 0.25, now_ms - 60_000),
        ("temp", i * 0.5, now_ms - 86_400_000),
    ]
    return key, cells


def fill(client: ts.OTSClient, rows: int, table: str = SOURCE.name, first: int = 0) -> int:
    """Write source rows ``first`` to ``rows - 1`` with explicit timestamps; returns the base
    time used."""
    now_ms = int(time.time() * 1000)
    for start in range(first, rows, 200):
        request = ts.BatchWriteRowRequest()
        items = []
        for i in range(start, min(rows, start + 200)):
            key, cells = source_row(i, now_ms)
            items.append(ts.PutRowItem(ts.Row(key, cells), ts.Condition("IGNORE")))
        request.add(ts.TableInBatchWriteRowItem(table, items))
        assert client.batch_write_row(request).is_all_succeed()
    return now_ms


def read_all(client: ts.OTSClient, table: Table) -> list[tuple[list, list]]:
    """Every row with every version: (primary key, [(name, value, ts)]), in key order."""
    start = [(c.name, ts.INF_MIN) for c in table.primary_key]
    end = [(c.name, ts.INF_MAX) for c in table.primary_key]
    rows = []
    while start:
        _, start, page, _ = client.get_range(table.name, "FORWARD", start, end, max_version=100)
        rows += [(list(r.primary_key), [tuple(c) for c in r.attribute_columns]) for r in page]
    return rows


def setup(ots_instance, rows: int, job_id: str = "job1") -> tuple[ConnectionSpec, RewriteJob, ts.OTSClient]:
    client = ots_instance.client()
    State(client).ensure_table()
    create(client, SOURCE)
    create(client, TARGET)
    fill(client, rows)
    spec = ConnectionSpec(ots_instance.endpoint, ots_instance.instance, local_defaults=True)
    return spec, RewriteJob(job_id, SOURCE, TARGET), client


def hand_built_target(rows: int, now_ms: int, device: bool = False) -> list[tuple[list, list]]:
    """The target rows ``fill(client, rows)`` (base time ``now_ms``) should become, written out
    by hand rather than by the transform under test: the key is the device and the seq padded
    to 8 digits, joined by a comma, then the region; region leaves the cells, seq (and, with
    ``device``, the device: MODELS_V2 declares it a column) from the old key become cells
    stamped like the row's newest cell, every version keeps its timestamp. In key order, as
    ``read_all`` returns them."""
    out = []
    for i in range(rows):
        key = [("key", f"dev-{i % 37:03d},{i:08d}"), ("region", ["eu", "us", "ap"][i % 3])]
        cells = [
            *([("device", f"dev-{i % 37:03d}", now_ms - 60_000)] if device else []),
            ("note", f"reading {i} " + "x" * (i % 50), now_ms - 3_600_000),
            ("seq", i, now_ms - 60_000),
            ("temp", i * 0.25, now_ms - 60_000),
            ("temp", i * 0.5, now_ms - 86_400_000),
        ]
        out.append((key, cells))
    return sorted(out, key=lambda r: [v for _, v in r[0]])


class ReadCounter:
    """Rows the server answered GetRange requests for one table of one instance with."""

    def __init__(self, instance: str, table: str) -> None:
        self.instance, self.table = instance, table
        self.rows = 0
        self.requests = 0


@contextmanager
def rows_read(ots_instance, table: str) -> Iterator[ReadCounter]:
    """Count, on the (in-process) server, the rows of ``table`` GetRange answers meanwhile, to
    whomever asks: threads, worker processes and subprocesses all read through the server."""
    from tablestore.protobuf.table_store_pb2 import GetRangeResponse

    from tsmigrate.local import server as server_module
    from tsmigrate.wire.plainbuffer import decode_rows

    counter = ReadCounter(ots_instance.instance, table)
    request_cls, handler = server_module.HANDLERS["GetRange"]

    def counting(ctx, request):
        response = handler(ctx, request)
        if ctx.instance == counter.instance and request.table_name == counter.table:
            counter.requests += 1  # handlers run one at a time (the storage lock): no race
            rows = GetRangeResponse.FromString(response).rows  # the handler answers serialized
            counter.rows += len(decode_rows(rows)) if rows else 0
        return response

    server_module.HANDLERS["GetRange"] = (request_cls, counting)
    try:
        yield counter
    finally:
        server_module.HANDLERS["GetRange"] = (request_cls, handler)


def expected_target(client: ts.OTSClient, job: RewriteJob) -> list[tuple[list, list]]:
    """The target rows the source should become, from the transform's object path."""
    from tsmigrate.contract.transform import build

    transform = build(job)
    rows = []
    for key, cells in read_all(client, job.source):
        row = transform.apply(key, cells)
        rows.append((row.primary_key, [tuple(c) for c in row.columns]))
    return sorted(rows, key=lambda r: [v for _, v in r[0]])


def encoded_target_row(i: int) -> bytes:
    """Row ``i`` of the target table, encoded as BatchWriteRow takes it."""
    from tsmigrate.contract.transform import RowTransform, build

    key, cells = source_row(i, int(time.time() * 1000))
    return RowTransform.encode(build(RewriteJob("encode", SOURCE, TARGET)).apply(key, cells))[0]


# -- a `tsmigrate` process that stops where a test kills it ---------------------------------------

STALL_AFTER = "REWRITE_TABLES_STALL_AFTER_CHECKPOINTS"  # the run's Nth split checkpoint
STALL_MARKER = "REWRITE_TABLES_STALL_MARKER"  # file written once stalled: the test's event
PAGE_ROWS = "REWRITE_TABLES_PAGE_ROWS"  # smaller copy pages: more checkpoints to stop after

# `python -c STALLING_CLI ARGS...`: `tsmigrate ARGS` in a process of its own (tests/ on its path).
STALLING_CLI = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
    "import rewrite_tables; rewrite_tables.stalling_cli(sys.argv[1:])"
)


def stalling_cli(argv: list[str]) -> None:
    """Run `tsmigrate ARGV`; the split task that writes the run's ``$STALL_AFTER``th checkpoint
    then waits forever (its checkpoint written), after writing ``$STALL_MARKER``. The other
    workers go on, so a test that kills the process on the marker kills it mid-copy, every time,
    however fast or slow the machine is."""
    from tsmigrate.cli import main
    from tsmigrate.rewrite import capacity, checkpoints, copy

    capacity.SAMPLE_S = 0.05  # prepare's sample of the writes, as in the tests' own process
    if os.environ.get(PAGE_ROWS):
        copy.PAGE_ROWS = copy.FIRST_PAGE_ROWS = int(os.environ[PAGE_ROWS])
    after = int(os.environ[STALL_AFTER])
    marker = Path(os.environ[STALL_MARKER])
    save = checkpoints.save
    saved = [0]
    lock = threading.Lock()

    def save_then_stall(client, job_id, checkpoint):
        save(client, job_id, checkpoint)
        with lock:
            saved[0] += 1
            stall = saved[0] == after
        if stall:
            written = marker.with_name(marker.name + ".tmp")
            written.write_text(f"split {checkpoint.index} at {checkpoint.rows} rows")
            written.replace(marker)  # whole, or not there
            threading.Event().wait()  # until SIGKILL

    checkpoints.save = save_then_stall
    main(argv, prog_name="tsmigrate")  # exits with the command's status


# `python -c STALLING_CAPTURE_CLI ARGS...`: `tsmigrate ARGS`, its capture stalled mid-page.
STALLING_CAPTURE_CLI = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
    "import rewrite_tables; rewrite_tables.stalling_capture_cli(sys.argv[1:])"
)


def stalling_capture_cli(argv: list[str]) -> None:
    """Run `tsmigrate ARGV`; the capture worker whose batch of cell updates is the run's
    ``$STALL_AFTER``th writes half of its rows, writes ``$STALL_MARKER``, then waits forever:
    the other shards' workers go on, and a test that kills the process on the marker kills it
    in the middle of a page, its position not saved past it, every time."""
    from tsmigrate.cli import main
    from tsmigrate.rewrite import capacity, writer

    capacity.SAMPLE_S = 0.05  # prepare's sample of the writes, as in the tests' own process
    after = int(os.environ[STALL_AFTER])
    marker = Path(os.environ[STALL_MARKER])
    update = writer.update_rows
    calls = [0]
    lock = threading.Lock()

    def update_then_stall(client: Any, table: str, rows: Any) -> None:
        with lock:
            calls[0] += 1
            stall = calls[0] == after
        if not stall:
            update(client, table, rows)
            return
        half = list(rows)[:max(1, len(rows) // 2)]
        update(client, table, half)
        written = marker.with_name(marker.name + ".tmp")
        written.write_text(f"{len(half)} of {len(rows)} rows of a page written to {table}")
        written.replace(marker)
        threading.Event().wait()  # until SIGKILL

    writer.update_rows = update_then_stall
    main(argv, prog_name="tsmigrate")


# -- a split task that stops where a test kills its worker ----------------------------------------


def copy_split_stalling(marker: str, spec: ConnectionSpec, job: RewriteJob, split: Any) -> Any:
    """``copy.copy_split`` in pages of 100 rows, for an executor's workers (threads, processes,
    Dask; pass ``functools.partial(copy_split_stalling, marker)`` as ``run_backfill``'s task):
    the first task, in any process, to keep a checkpoint short of its split's end then waits
    there forever, its pid written to ``marker``: the event a test kills that worker on,
    mid-split, every time."""
    from tsmigrate.rewrite import copy

    copy.PAGE_ROWS = copy.FIRST_PAGE_ROWS = 100

    def stall_once(checkpoint: Any) -> None:
        if checkpoint.done:
            return
        try:
            os.close(os.open(marker + ".claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return  # another task stalled already (or this is the split's resumed run)
        written = Path(marker + ".tmp")
        written.write_text(str(os.getpid()))
        written.replace(marker)
        threading.Event().wait()  # until SIGKILL

    return copy.copy_split(spec, job, split, on_page=stall_once)


def stalled_pid(marker: Path) -> int | None:
    """The pid ``copy_split_stalling`` stalled in, once it has."""
    return int(marker.read_text()) if marker.exists() else None


def ready_capture(ots_instance: Any, target: Table, rows: int = 40) -> tuple[Any, Any]:
    """A rewrite of ``rows`` readings into ``target`` (which replaces ``readings``), ready: the
    instance's client and a capture from where the rewrite is."""
    from tsmigrate.instance.apply import ApplyOptions, apply
    from tsmigrate.rewrite import driver, machine
    from tsmigrate.rewrite.planned import RewriteSettings
    from tsmigrate.schema import Catalog

    client = ots_instance.client()
    apply(client, Catalog([SOURCE]), target_identity="local:test")
    fill(client, rows)
    settings = RewriteSettings(options=driver.RunOptions(workers=2))
    outcome = apply(client, Catalog([target]), ApplyOptions(rewrite=settings),
                    target_identity="local:test")
    assert [r.phase for r in outcome.rewrites] == [machine.READY]
    return client, driver.make_capture(client, machine.load(client, target.name))


def drain(follower: Any) -> None:
    """Step ``follower`` (a Capture) until it caught up."""
    for _ in range(200):
        follower.step()
        if follower.stats.caught_up:
            return
    raise AssertionError("capture did not catch up")
