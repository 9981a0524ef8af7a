"""One split task: copy a source key range into the target, resumable, with counts and digest.

``copy_split(spec, job, split)`` depends only on its arguments and the instance: it reads the
split's checkpoint, pages through the range from there (every version, timestamps kept),
transforms each page, writes it, and records the next key, rows, bytes and digest after each
page. Run it in a thread, a process or on a Dask worker: all checkpoint the same way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import attrs
from tablestore import OTSClient
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.contract.rowbytes import DIGEST_MASK
from tsmigrate.contract.transform import Page, build
from tsmigrate.instance import adapter
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.rewrite import checkpoints, splits
from tsmigrate.rewrite.checkpoints import DONE, RUNNING, SplitCheckpoint
from tsmigrate.rewrite.job import ConnectionSpec, RewriteJob
from tsmigrate.rewrite.writer import BatchWriter, RateLimiter

PAGE_ROWS = 5000
FIRST_PAGE_ROWS = 500  # a split's first page is small: its writes start sooner
WRITES_IN_FLIGHT = 2  # BatchWriteRow requests a split keeps open: the service never waits for it


@attrs.frozen
class SplitResult:
    index: int
    rows: int
    bytes: int
    digest: int
    resumed: bool  # started from a checkpoint a previous run left
    stopped: bool = False  # left before the split's end because the backfill was stopped
    changed: int = 0  # rows a data migration changed (a rewrite: 0, every row is written)


def versions(job: RewriteJob) -> int:
    """How many versions of each cell to copy: as many as the target keeps (it would drop any
    older ones itself), which also asks a table keeping one version for its stored newest row,
    the service's cheapest read."""
    return job.target.options.max_versions


def read_page(
    raw: RawClient, table: str, start: bytes, end: bytes, limit: int = PAGE_ROWS, max_versions: int = 1,
    columns: Sequence[str] = (),
) -> tuple[bytes, bytes | None]:
    """One GetRange page as PlainBuffer bytes (the newest ``max_versions`` of every cell, or of
    ``columns`` only), and the key the next page starts at (None at the end of the range); the
    client's retry policy retries throttling and lost connections."""
    request = pb.GetRangeRequest(
        table_name=table, direction=pb.FORWARD, max_versions=max_versions, limit=limit,
        inclusive_start_primary_key=start, exclusive_end_primary_key=end, columns_to_get=columns,
    )
    with adapter.service_errors(f"GetRange on {table!r}"):
        response = raw.call("GetRange", request, pb.GetRangeResponse)
    return response.rows, response.next_start_primary_key or None


def copy_split(
    spec: ConnectionSpec,
    job: RewriteJob,
    split: splits.Split,
    *,
    client: OTSClient | None = None,
    limiter: RateLimiter | None = None,
    on_page: Callable[[SplitCheckpoint], None] | None = None,
) -> SplitResult:
    """Copy ``split`` from its checkpoint to its end (or, when the backfill is stopped, to the
    end of the page being written); returns the split's totals."""
    client = client or spec.client()
    raw = RawClient(client)
    transform = build(job)
    state = checkpoints.load(client, job.id, split.index)
    resumed = state.status != checkpoints.PENDING
    if not state.done:
        writer = BatchWriter(client, job.target.name, limiter or RateLimiter(job.max_rows_per_s),
                             in_flight=WRITES_IN_FLIGHT)
        end = split.end_bytes

        def fetch(start: bytes, rows: int = PAGE_ROWS) -> tuple[Page, bytes | None]:
            buf, following = read_page(raw, job.source.name, start, end, rows, versions(job))
            return transform.page(buf), following

        def record(written: Callable[[], None], after: SplitCheckpoint) -> bool:
            """Once a page's rows are written, keep its checkpoint; whether to stop here."""
            written()
            checkpoints.save(client, job.id, after)
            if on_page is not None:
                on_page(after)
            return not after.done and checkpoints.stop_requested(client, job.id)

        # The next page is read and transformed while this one is written, and its writes are
        # queued before this page's checkpoint is kept: the target receives writes without
        # pauses, checkpoint round trips included. Two pages ahead at most bound the memory.
        with writer, ThreadPoolExecutor(1, thread_name_prefix="rewrite-read") as reader:
            first = min(FIRST_PAGE_ROWS, PAGE_ROWS)
            ahead = reader.submit(fetch, state.next_start or split.start_bytes, first)
            unrecorded: tuple[Callable[[], None], SplitCheckpoint] | None = None
            while True:
                page, following = ahead.result()
                if following is not None:
                    ahead = reader.submit(fetch, following)
                written = writer.put_async(page.rows)
                if unrecorded is not None and record(*unrecorded):
                    # Stopped: this page's writes finish, but only the pages before it count.
                    state = unrecorded[1]
                    return SplitResult(split.index, state.rows, state.bytes, state.digest, resumed, True)
                state = attrs.evolve(
                    state,
                    status=DONE if following is None else RUNNING,
                    next_start=following,
                    rows=state.rows + len(page.rows),
                    bytes=state.bytes + page.bytes,
                    digest=(state.digest + page.digest) & DIGEST_MASK,
                )
                unrecorded = written, state
                if following is None:
                    break
            record(*unrecorded)
    return SplitResult(split.index, state.rows, state.bytes, state.digest, resumed)


@attrs.frozen
class Sample:
    """What a sample read: rows transformed, their bytes as read, and the seconds reading and
    transforming them took (one range after another)."""

    rows: int
    bytes: int
    seconds: float
    ranges: int

    @property
    def bytes_per_s(self) -> float | None:
        """The sample's read-and-transform rate, None when it read nothing or took no time."""
        return self.bytes / self.seconds if self.rows and self.seconds > 0 else None


def sample(
    spec: ConnectionSpec, job: RewriteJob, n: int = 1000, client: OTSClient | None = None,
    ranges: Sequence[splits.Split] | None = None,
) -> Sample:
    """Transform about ``n`` source rows taken from the start of every key range (``ranges``,
    or ranges computed for four workers), writing nothing: a row the transform rejects raises
    TransformError (naming its key) before the copy begins. Returns the rows, bytes and time."""
    client = client or spec.client()
    raw = RawClient(client)
    transform = build(job)
    ranges = ranges or splits.compute(client, job.source, workers=4)
    per_range = max(1, math.ceil(n / len(ranges)))
    checked = read = 0
    started = time.perf_counter()
    for split in ranges:
        limit = min(per_range, PAGE_ROWS)
        buf, _ = read_page(raw, job.source.name, split.start_bytes, split.end_bytes, limit, versions(job))
        checked += len(transform.page(buf).rows)
        read += len(buf)
    return Sample(checked, read, time.perf_counter() - started, len(ranges))


def sample_check(
    spec: ConnectionSpec, job: RewriteJob, n: int = 1000, client: OTSClient | None = None,
    ranges: Sequence[splits.Split] | None = None,
) -> int:
    """``sample``, returning how many rows were checked."""
    return sample(spec, job, n, client, ranges).rows
