"""The primary-key rewrite's backfill against the naive loop and the server's ceiling.

A local server runs in its own process (`tsmigrate local serve --memory`). The source is the
seeds' first SERP table, keyed by request_id alone; the rewrite keys it by (keyword, day,
request_id), so keyword and day leave the attributes (rows of about 200 bytes, five cells).
Measured side by side in one run, on the same rows and the same server:

- rewrite: split ranges + the backfill (`run_backfill`, `--workers` in-process workers), with
  checkpoints; run in a forked child process whose peak RSS (with its workers) is reported;
- naive: the seeds' loop, page through get_range and put_row each transformed row (SDK);
- ceiling: the same target rows, pre-encoded and pre-signed into BatchWriteRow requests of 200
  rows, replayed from `--workers` parallel connections: what the server itself can take;
- apply: the whole rewrite as a user runs it, `tsmigrate apply` on a model that replaces the
  source (prepare, the backfill with change capture, catch-up and verification), then `rewrite
  switch` (fence, drain, verification, switch) and `rewrite finish --allow-destructive`, each
  command a process of its own as a deploy runs them, each rewrite on a server of its own holding
  only the source, printed before the last line as `apply_rows_per_s=X apply_vs_ceiling=Y
  client_cpu_us_per_row=C server_cpu_us_per_row=S apply_client_cpu_fixed_s=F
  apply_client_cpu_us_per_row_marginal=M flow_client_cpu_us_per_row=FC
  flow_server_cpu_us_per_row=FS flow_client_cpu_us_per_row_marginal=FM`: C and S are the apply's
  CPU over all its rows (fixed costs included); F is the client CPU of an apply of a small table
  (APPLY_SMALL_ROWS rows, same model: imports, prepare, plan, history, thread start-ups), and
  M = (cpu(N) - cpu(small)) / (N - small), what each further row costs; FC, FS and FM the same
  for apply, switch and finish together. The small and the full rewrite take turns, ``--repeat``
  times after one unmeasured warm-up, and the best of each counts;
- base (with `--base-python PY`): the same of another install of tsmigrate (the venv of an
  earlier commit: `git archive REV | tar -x -C DIR`, then `python -m venv DIR/.venv` and
  `DIR/.venv/bin/pip install -e 'DIR[test]'`), its server and its commands all run by PY, taking
  turns with this one on the same machine, printed as a line of `base_NAME=V` and
  `NAME_vs_base=R` for the figures above: the ratios are what the machine's speed does not
  change.

CPU per row: the client's is the rusage of the process doing the rewrite (its threads, and its
worker processes once ended); the server's is its process's utime + stime from /proc over the
same run. On the real service the client's decides how many cores a rewrite needs. Every process
imports compiled modules, as from an install (``compiled_modules``: every module of tsmigrate,
and whatever the warm-up apply imports).

Threads and processes are compared side by side (`--executor both`, the default), and the
faster is the rewrite's figure. The machine may be shared: rewrite and ceiling take turns
(`--repeat`, 3 by default) and the best of each counts; peak RSS is the largest of all runs.
With `--latency-ms L`, a second server with L ms per request (headroom, as the service's
scale-out gives) measures the backfill with 1, 2 and 4 workers as threads, processes and a Dask
LocalCluster (one single-threaded worker process each), printed as the latency line. The last
line is the backfill's (one line):

rows=N rewrite_rows_per_s=X naive_rows_per_s=Y ceiling_rows_per_s=Z vs_naive=A vs_ceiling=B peak_rss_mb=M
client_cpu_us_per_row=C server_cpu_us_per_row=S

    python bench/rewrite.py --rows 200000 [--workers 2] [--latency-ms 20] [--base-python PY]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import logging
import multiprocessing
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

logging.getLogger("tablestore").addHandler(logging.NullHandler())

import tablestore as ts  # noqa: E402
from serve import INSTANCE, SAFE_PATH, cpu_s_of, start_server, use_bench_credentials  # noqa: E402
from tablestore.auth import RequestContext  # noqa: E402
from tablestore.protobuf import table_store_pb2 as pb  # noqa: E402

from tsmigrate.contract.transform import build  # noqa: E402
from tsmigrate.instance.rawclient import RawClient  # noqa: E402
from tsmigrate.instance.state import State  # noqa: E402
from tsmigrate.rewrite import splits  # noqa: E402
from tsmigrate.rewrite.copy import read_page, versions  # noqa: E402
from tsmigrate.rewrite.executors import DaskExecutor, InProcessExecutor, run_backfill  # noqa: E402
from tsmigrate.rewrite.job import ConnectionSpec, RewriteJob  # noqa: E402
from tsmigrate.rewrite.writer import BatchWriter  # noqa: E402
from tsmigrate.schema import PrimaryKeyColumn, Table  # noqa: E402
from tsmigrate.wire.plainbuffer import HEADER, assemble_row, encode_cell, encode_primary_key_cells  # noqa: E402

SOURCE = Table("serp_snapshots", [PrimaryKeyColumn("request_id", "STRING")])
NAIVE_ROWS = 10_000  # the naive loop's rate is flat: a sample of rows is enough


def target_table(name: str) -> Table:
    return Table(name, [PrimaryKeyColumn("keyword", "STRING"), PrimaryKeyColumn("day", "STRING"),
                        PrimaryKeyColumn("request_id", "STRING")])


def source_row(i: int, stamp: int) -> bytes:
    pk, crcs = encode_primary_key_cells([("request_id", f"{uuid.UUID(int=i * 7919 + 1).hex}")])
    cells = [
        ("credits", i % 7, stamp),
        ("day", f"2026-09-{i % 28 + 1:02d}", stamp),
        ("keyword", f"keyword {i % 5000:05d}", stamp),
        ("payload", f"response {i:012d} " + "lorem ipsum " * 8, stamp),
        ("status", "ok" if i % 10 else "failed", stamp),
    ]
    return HEADER + assemble_row(pk, crcs, [encode_cell(*c) for c in cells])


def create(client: ts.OTSClient, table: Table) -> None:
    meta = ts.TableMeta(table.name, [(c.name, c.type) for c in table.primary_key])
    options = ts.TableOptions(-1, 1, 86400 * 365)
    client.create_table(meta, options, ts.ReservedThroughput(ts.CapacityUnit(0, 0)))


def fill(spec: ConnectionSpec, rows: int) -> None:
    stamp = int(time.time() * 1000) - 3_600_000

    def part(start: int, stop: int) -> None:
        writer = BatchWriter(spec.client(), SOURCE.name)
        for low in range(start, stop, 5000):
            writer.put([source_row(i, stamp) for i in range(low, min(stop, low + 5000))])

    half = rows // 2
    threads = [threading.Thread(target=part, args=r) for r in [(0, half), (half, rows)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@contextlib.contextmanager
def filled_server(rows: int, *options: str, python: str = sys.executable,
                  state: bool = True) -> Iterator[tuple[subprocess.Popen[str], str, ConnectionSpec]]:
    """A server of its own (``options``: extra `local serve` flags; ``python``: the interpreter
    that runs it) holding ``rows`` source rows, and with ``state`` the rewrite's state table:
    its process, endpoint and connection."""
    proc, endpoint = start_server("--memory", *options, python=python)
    try:
        spec = ConnectionSpec(endpoint, INSTANCE)
        client = spec.client()
        if state:
            State(client).ensure_table()
        create(client, SOURCE)
        fill(spec, rows)
        yield proc, endpoint, spec
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def job_for(target: str) -> RewriteJob:
    return RewriteJob(f"bench-{target}", SOURCE, target_table(target))


# -- the rewrite, in a child process ----------------------------------------------------------


def _tree_rss_kb(pid: int) -> int:
    """RSS of a process and its descendants (Linux /proc)."""
    total = 0
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return total


def _executor(kind: str, workers: int) -> Any:
    if kind == "dask":
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        executor = DaskExecutor(Client(cluster))
        executor.cluster = cluster  # type: ignore[attr-defined]
        return executor
    return InProcessExecutor(workers, processes=kind == "processes")


def _close(executor: Any) -> None:
    executor.close()
    if hasattr(executor, "cluster"):
        executor.client.close()
        executor.cluster.close()


def rewrite_phase(endpoint: str, target: str, workers: int, kind: str, out: Any) -> None:
    spec = ConnectionSpec(endpoint, INSTANCE)
    client = spec.client()
    create(client, target_table(target))
    peak = [0]
    sampler_cpu = [0.0]
    running = threading.Event()
    running.set()

    def sample() -> None:
        while running.is_set():
            peak[0] = max(peak[0], _tree_rss_kb(os.getpid()))
            time.sleep(0.05)
        sampler_cpu[0] = time.thread_time()  # the bench's own work, not the rewrite's

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    job = job_for(target)
    executor = _executor(kind, workers)
    usage = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = sum(u.ru_utime + u.ru_stime for u in usage)
    start = time.perf_counter()
    ranges = splits.plan(client, job.id, SOURCE, workers)
    planned = time.perf_counter() - start
    result = run_backfill(spec, job, ranges, executor)
    elapsed = time.perf_counter() - start
    _close(executor)  # worker processes end here: their CPU time is counted once they have
    running.clear()
    sampler.join()
    usage = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = sum(u.ru_utime + u.ru_stime for u in usage) - cpu_before - sampler_cpu[0]
    out.send({"rows": result.rows, "rows_per_s": result.rows / elapsed, "splits": len(ranges),
              "peak_rss_mb": peak[0] / 1024, "cpu_us_per_row": cpu_s / result.rows * 1e6,
              "cpu_share": cpu_s / elapsed, "split_points_s": planned})


# Rewrites run in children forked from a server started at the beginning, with the modules
# loaded then: their memory is measured apart from this process's, and files changing under a
# long run (a rebase) do not change the code it measures.
FORKS = multiprocessing.get_context("forkserver")
FORKS.set_forkserver_preload(["tsmigrate.rewrite.executors", "tsmigrate.rewrite.copy",
                              "tsmigrate.instance.state"])


def rewrite(endpoint: str, target: str, workers: int, kind: str, server: int) -> dict:
    """The backfill in a child process, with the CPU per row the ``server`` process spent."""
    receive, send = FORKS.Pipe(duplex=False)
    child = FORKS.Process(target=rewrite_phase, args=(endpoint, target, workers, kind, send))
    server_before = cpu_s_of(server)
    child.start()
    send.close()
    try:
        result = receive.recv()
    except EOFError:
        result = None
    child.join()
    if result is None or child.exitcode != 0:
        raise SystemExit(f"the rewrite into {target} failed (exit code {child.exitcode})")
    result["server_cpu_us_per_row"] = (cpu_s_of(server) - server_before) / result["rows"] * 1e6
    return result


# -- the whole rewrite, as `tsmigrate apply` runs it ---------------------------------------------

MODELS = """
from tsmigrate import Column, Model, PrimaryKey


class Serp(Model, table="serp_by_keyword", replaces="serp_snapshots", max_time_deviation="365d"):
    keyword = PrimaryKey(str)
    day = PrimaryKey(str)
    request_id = PrimaryKey(str)
    credits = Column(int)
    payload = Column(str)
    status = Column(str)
"""


# The rest of a rewrite after apply, each command in a process of its own as a deploy runs it.
AFTER_APPLY = {
    "switch": ["rewrite", "switch", "serp_by_keyword"],
    "finish": ["rewrite", "finish", "serp_by_keyword", "--allow-destructive"],
}
STEPS = ("apply", *AFTER_APPLY)


def end_to_end(endpoint: str, rows: int, workers: int, server: int,
               python: str = sys.executable) -> dict[str, tuple[float, float, float]]:
    """`tsmigrate apply` in a subprocess (run by ``python``) on a project whose model replaces
    the source: prepare, the backfill with change capture, catch-up and verification, up to
    phase ready; then `rewrite switch` (fence, drain, verification, switch) and `rewrite finish`.
    Per command: rows/s, and the client's (the subprocess's) and the ``server`` process's CPU
    seconds."""
    figures = {}
    with tempfile.TemporaryDirectory() as root:
        project = Path(root)
        (project / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["bench_models"]\n')
        (project / "bench_models.py").write_text(MODELS)
        env = {**os.environ, "TSMIGRATE_ENDPOINT": endpoint, "TSMIGRATE_INSTANCE": INSTANCE}
        commands = {"apply": ["apply", "--yes", "--workers", str(workers)], **AFTER_APPLY}
        for step, args in commands.items():
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            server_before = cpu_s_of(server)
            start = time.perf_counter()
            done = subprocess.run([python, "-m", "tsmigrate.cli", *args], cwd=project, env=env,
                                  capture_output=True, text=True)
            elapsed = time.perf_counter() - start
            server_s = cpu_s_of(server) - server_before
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0 or (step == "apply" and "ready" not in done.stdout):
                raise SystemExit(f"tsmigrate {' '.join(args)} failed ({done.returncode}): "
                                 f"{done.stderr[-2000:]}")
            client_s = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
            figures[step] = rows / elapsed, client_s, server_s
    return figures


APPLY_SMALL_ROWS = 2_000  # an apply of this many rows is mostly its fixed cost


def apply_on_own_server(rows: int, workers: int,
                        python: str = sys.executable) -> dict[str, tuple[float, float, float]]:
    """``end_to_end`` against a new server holding only ``rows`` source rows, both run by
    ``python`` (an instance applied once is ready: the next apply needs a fresh one). The apply
    creates the state table itself, as a first apply does."""
    with filled_server(rows, python=python, state=False) as (proc, endpoint, _):
        return end_to_end(endpoint, rows, workers, proc.pid, python)


def apply_figures(rows: int, workers: int, repeat: int,
                  pythons: dict[str, str]) -> dict[str, dict[str, float]]:
    """The apply line's figures of each install (label -> interpreter): an unmeasured warm-up
    each, then a small and a full rewrite of every install taking turns ``repeat`` times; the
    best of each (highest rate, lowest CPU) counts. ``flow_...``: apply, switch and finish."""
    small = min(APPLY_SMALL_ROWS, rows // 2)
    for python in pythons.values():
        apply_on_own_server(small, workers, python)  # the warm-up: every module it imports is compiled
    runs = {label: {small: [], rows: []} for label in pythons}
    for _ in range(repeat):
        for label, python in pythons.items():
            for size in (small, rows):
                steps = apply_on_own_server(size, workers, python)
                runs[label][size].append(steps)
                rate, client_s, server_s = steps["apply"]
                after = ", ".join(
                    f"{step} client {steps[step][1] / size * 1e6:.0f} / server "
                    f"{steps[step][2] / size * 1e6:.0f} us/row" for step in AFTER_APPLY
                )
                print(f"{label}: tsmigrate apply of {size:,} rows (prepare, backfill with capture, "
                      f"catch-up, verification), {workers} workers: {rate:,.0f} rows/s, client CPU "
                      f"{client_s:.2f} s ({client_s / size * 1e6:.0f} us/row), server CPU "
                      f"{server_s / size * 1e6:.0f} us/row; then {after}", flush=True)

    def least(label: str, size: int, steps: tuple[str, ...], kind: int) -> float:
        """The lowest CPU seconds (kind 1: client, 2: server) of ``steps`` added up, over runs."""
        return min(sum(run[step][kind] for step in steps) for run in runs[label][size])

    figures = {}
    for label in runs:
        fixed = least(label, small, ("apply",), 1)
        full = least(label, rows, ("apply",), 1)
        figures[label] = {
            "rows_per_s": max(run["apply"][0] for run in runs[label][rows]),
            "client_us_per_row": full / rows * 1e6,
            "server_us_per_row": least(label, rows, ("apply",), 2) / rows * 1e6,
            "fixed_s": fixed,
            "marginal_us_per_row": (full - fixed) / (rows - small) * 1e6,
            "flow_client_us_per_row": least(label, rows, STEPS, 1) / rows * 1e6,
            "flow_server_us_per_row": least(label, rows, STEPS, 2) / rows * 1e6,
            "flow_marginal_us_per_row": (least(label, rows, STEPS, 1) - least(label, small, STEPS, 1))
            / (rows - small) * 1e6,
        }
    return figures


# The apply line's figures compared with the base install's: (printed name, key in apply_figures).
BASE_FIGURES = (
    ("apply_rows_per_s", "rows_per_s"),
    ("client_cpu_us_per_row", "client_us_per_row"),
    ("server_cpu_us_per_row", "server_us_per_row"),
    ("apply_client_cpu_us_per_row_marginal", "marginal_us_per_row"),
    ("flow_client_cpu_us_per_row", "flow_client_us_per_row"),
    ("flow_server_cpu_us_per_row", "flow_server_us_per_row"),
    ("flow_client_cpu_us_per_row_marginal", "flow_marginal_us_per_row"),
)


# -- the naive loop and the ceiling -----------------------------------------------------------


def naive(client: ts.OTSClient, target: str, rows: int) -> float:
    """The seeds' loop: page through get_range, put_row each transformed row."""
    job = job_for(target)
    transform = build(job)
    create(client, job.target)
    start_key, end_key = [("request_id", ts.INF_MIN)], [("request_id", ts.INF_MAX)]
    done = 0
    start = time.perf_counter()
    while start_key is not None and done < rows:
        _, start_key, page, _ = client.get_range(SOURCE.name, "FORWARD", start_key, end_key, max_version=1,
                                                 limit=min(1000, rows - done))
        for row in page:
            new = transform.apply(row.primary_key, row.attribute_columns)
            client.put_row(target, ts.Row(new.primary_key, new.columns))
        done += len(page)
    return done / (time.perf_counter() - start)


def ceiling(client: ts.OTSClient, endpoint: str, target: str, workers: int,
            server: int) -> tuple[float, float]:
    """The same target rows as pre-signed BatchWriteRow requests, from parallel connections:
    rows/s, and the ``server`` process's CPU us per row (the writes' share of a copy's)."""
    job = job_for(target)
    transform = build(job)
    create(client, job.target)
    raw = RawClient(client)
    start, end = splits.ranges(SOURCE, [], 0)[0].start_bytes, splits.ranges(SOURCE, [], 0)[0].end_bytes
    bodies = []
    rows = 0
    while start is not None:
        buf, start = read_page(raw, SOURCE.name, start, end, max_versions=versions(job))
        encoded = transform.page(buf).rows
        rows += len(encoded)
        for low in range(0, len(encoded), 200):
            request = pb.BatchWriteRowRequest()
            table = request.tables.add(table_name=target)
            for row in encoded[low : low + 200]:
                table.rows.add(type=pb.PUT, row_change=row).condition.row_existence = pb.IGNORE
            bodies.append(request.SerializeToString())
    url = urlparse(endpoint)
    signed = []
    for body in bodies:
        context = RequestContext(client.credentials_provider.get_credentials())
        signed.append(client.protocol._make_request_headers(body, "/BatchWriteRow", client._signer, context))
    queue = list(zip(bodies, signed, strict=True))
    lock = threading.Lock()

    def replay() -> None:
        conn = http.client.HTTPConnection(url.hostname, url.port)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            with lock:
                if not queue:
                    return
                body, headers = queue.pop()
            conn.request("POST", "/BatchWriteRow", body, headers)
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                raise SystemExit(f"BatchWriteRow: HTTP {response.status}: {data[:200]!r}")

    threads = [threading.Thread(target=replay) for _ in range(workers)]
    server_before = cpu_s_of(server)
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    return rows / elapsed, (cpu_s_of(server) - server_before) / rows * 1e6


SCALING_KINDS = ("threads", "processes", "dask")


def scaling(rows: int, latency_ms: float) -> str:
    """Backfill rows/s with 1, 2, 4 workers of each kind against a server with ``latency_ms``."""
    with filled_server(rows, "--latency-ms", str(latency_ms)) as (proc, endpoint, _):
        figures = []
        for kind in SCALING_KINDS:
            for workers in (1, 2, 4):
                result = rewrite(endpoint, f"scale_{kind}_{workers}", workers, kind, proc.pid)
                figures.append(f"{kind}_{workers}_rows_per_s={result['rows_per_s']:.0f}")
                print(f"latency {latency_ms} ms, {workers} {kind}: {result['rows_per_s']:,.0f} rows/s "
                      f"({result['splits']} splits, client CPU {result['cpu_us_per_row']:.0f} us/row)",
                      flush=True)
        return f"latency_ms={latency_ms:g} rows={rows} " + " ".join(figures)


# Every module of the package is compiled and imported once: what each imports (the SDK, the
# standard library) is compiled along with it.
_COMPILE_ALL = """
import compileall, importlib, importlib.util, pkgutil, tsmigrate
compileall.compile_dir(tsmigrate.__path__[0], quiet=1)
for module in pkgutil.walk_packages(tsmigrate.__path__, "tsmigrate."):
    importlib.import_module(module.name)
if importlib.util.find_spec("distributed"):
    import distributed
"""


def compiled_modules(cache: str, python: str = sys.executable) -> None:
    """Every Python process of the bench (the rewrite's, its workers', apply's) imports compiled
    modules, as from an install (pip compiles them once): this machine may say not to write
    bytecode (PYTHONDONTWRITEBYTECODE), and compiling modules again in each process would count
    as the rewrite's CPU. Every module of tsmigrate is compiled, and imported with what it
    imports; the apply line's warm-up compiles what is imported later on. The bytecode is kept
    in ``cache``, out of the tree."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = cache
    subprocess.run([python, "-c", _COMPILE_ALL], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=2, help="rewrite workers and ceiling connections")
    parser.add_argument("--executor", choices=["threads", "processes", "both"], default="both")
    parser.add_argument("--latency-ms", type=float, default=None,
                        help="also measure 1, 2, 4 workers of each kind against a server with this latency")
    parser.add_argument("--scaling-rows", type=int, default=40_000)
    parser.add_argument("--repeat", type=int, default=3,
                        help="turns of rewrite and ceiling, and of the applies; the best counts")
    parser.add_argument("--base-python", default=None,
                        help="also measure the apply line with this interpreter's install of "
                             "tsmigrate (e.g. the venv of an earlier commit), taking turns")
    args = parser.parse_args()
    # Before the fork server starts: the workers it forks keep the environment it started with.
    use_bench_credentials()
    pycache = tempfile.TemporaryDirectory(prefix="bench-rewrite-pycache-")  # removed at exit
    os.environ.update(SAFE_PATH)  # each interpreter compiles and runs its own install
    pythons = {"this": sys.executable}
    if args.base_python:
        pythons["base"] = args.base_python
    for python in pythons.values():
        compiled_modules(pycache.name, python)
    first = FORKS.Process(target=int)  # the fork server starts now, with the files as they are
    first.start()
    first.join()
    with filled_server(args.rows) as (proc, endpoint, spec):
        client = spec.client()
        print(f"{args.rows:,} source rows written", flush=True)
        kinds = ["threads", "processes"] if args.executor == "both" else [args.executor]
        # The machine is shared: the rewrite and the ceiling take turns, --repeat times, and the
        # best of each counts, so a burst of someone else's load does not decide the ratio.
        results: dict[str, list[dict]] = {}
        ceilings = []
        for round_no in range(args.repeat):
            rate, server_us = ceiling(client, endpoint, f"ceiling_{round_no}", args.workers, proc.pid)
            ceilings.append(rate)
            print(f"ceiling (pre-encoded BatchWriteRow, {args.workers} connections): {rate:,.0f} rows/s, "
                  f"server CPU {server_us:.0f} us/row", flush=True)
            for label in kinds:
                run = rewrite(endpoint, f"rewrite_{label}_{round_no}", args.workers, label, proc.pid)
                if run["rows"] != args.rows:
                    raise SystemExit(f"the rewrite copied {run['rows']} rows of {args.rows}")
                results.setdefault(label, []).append(run)
                print(f"rewrite, {args.workers} {label}: {run['rows_per_s']:,.0f} rows/s, "
                      f"{run['splits']} splits ({run['split_points_s']:.1f} s for split points), "
                      f"peak RSS {run['peak_rss_mb']:.0f} MB, client CPU "
                      f"{run['cpu_us_per_row']:.0f} us/row ({run['cpu_share']:.0%} of a core), server CPU "
                      f"{run['server_cpu_us_per_row']:.0f} us/row", flush=True)
        best_of = {label: max(runs, key=lambda r: r["rows_per_s"]) for label, runs in results.items()}
        best_label = max(best_of, key=lambda k: best_of[k]["rows_per_s"])
        best = best_of[best_label]
        best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in results[best_label])
        ceiling_rate = max(ceilings)
        naive_rate = naive(client, "naive", min(args.rows, NAIVE_ROWS))
        print(f"naive get_range/put_row: {naive_rate:,.0f} rows/s", flush=True)
    figures = apply_figures(args.rows, args.workers, args.repeat, pythons)
    applied = figures["this"]
    if args.latency_ms is not None:
        print(scaling(args.scaling_rows, args.latency_ms), flush=True)
    rate = best["rows_per_s"]
    print(f"apply_rows_per_s={applied['rows_per_s']:.0f} "
          f"apply_vs_ceiling={applied['rows_per_s'] / ceiling_rate:.2f} "
          f"client_cpu_us_per_row={applied['client_us_per_row']:.0f} "
          f"server_cpu_us_per_row={applied['server_us_per_row']:.0f} "
          f"apply_client_cpu_fixed_s={applied['fixed_s']:.2f} "
          f"apply_client_cpu_us_per_row_marginal={applied['marginal_us_per_row']:.1f} "
          f"flow_client_cpu_us_per_row={applied['flow_client_us_per_row']:.0f} "
          f"flow_server_cpu_us_per_row={applied['flow_server_us_per_row']:.0f} "
          f"flow_client_cpu_us_per_row_marginal={applied['flow_marginal_us_per_row']:.1f}")
    if "base" in figures:
        base = figures["base"]
        print(" ".join(f"base_{name}={base[key]:.1f}" for name, key in BASE_FIGURES) + " " + " ".join(
            f"{name}_vs_base={applied[key] / base[key]:.2f}" for name, key in BASE_FIGURES
        ))
    print(
        f"rows={args.rows} rewrite_rows_per_s={rate:.0f} naive_rows_per_s={naive_rate:.0f} "
        f"ceiling_rows_per_s={ceiling_rate:.0f} vs_naive={rate / naive_rate:.2f} "
        f"vs_ceiling={rate / ceiling_rate:.2f} peak_rss_mb={best['peak_rss_mb']:.0f} "
        f"client_cpu_us_per_row={best['cpu_us_per_row']:.0f} "
        f"server_cpu_us_per_row={best['server_cpu_us_per_row']:.0f}"
    )


if __name__ == "__main__":
    main()
