"""Change capture's client CPU per stream record, and its records/s with 1, 2, 4... workers.

Each round starts a local server in its own process (`tsmigrate local serve --memory`, with
``--latency-ms`` of service latency and streams of ``--shards`` shards); a child process running
the tree under test makes a source table (rows of about 370 bytes, six cells, three versions kept,
keyed by request_id), a rewrite of it keyed by (keyword, day, request_id) made ready by `apply`,
then writes the source as services do meanwhile: updates of one or two columns, whole-row puts,
column deletes, keyword changes (the row moves to another target key) and row deletes. Capture
then applies every record with its shards on ``K`` threads; the process's CPU
(``time.process_time``: the server is another process) over the records read is the CPU figure,
the records over the wall time the rate. Each ``K`` of ``--workers`` (default 1) runs
``--repeat`` rounds and the best counts (the machine may be shared). With ``--against DIR`` (an
earlier checkout, e.g. `git worktree add /tmp/base HEAD~1`) the rounds alternate between the two
trees (workers 1 only there, unless that tree has ``tsmigrate.rewrite.shards``):

records=N records_per_s_w1=R1 [records_per_s_w2=R2 ...] capture_cpu_us_per_record=X
    server_cpu_us_per_record=S server_cores_w1=C1 [server_cores_w2=C2 ...]
    [against_cpu_us_per_record=Y cpu_ratio=Y/X against_records_per_s_w1=R1 ...]

``server_cpu_us_per_record``: the local server's CPU (its process's utime + stime) over the same
records; ``server_cores_wK``: that CPU over the wall time of K's fastest round. The server is
one Python process: where its cores near 1.0, it, not capture, is the bound, and records/s stop
growing with K (compare a larger ``--latency-ms``).

The CPU figure is the best round of the fewest workers given (threads of one process contend
for the GIL, which adds CPU per record as K grows).

    python bench/capture.py [--rows 4000] [--records 4000] [--repeat 3] [--shards 4]
                            [--workers 1,2,4] [--latency-ms 30] [--against DIR]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

logging.getLogger("tablestore").addHandler(logging.NullHandler())

import attrs  # noqa: E402
import tablestore as ts  # noqa: E402
from serve import AK_ID, AK_SECRET, INSTANCE, cpu_s_of, start_server  # noqa: E402

YEAR_S = 366 * 86400
IGNORE = ts.Condition("IGNORE")


def _tables(round_id: str) -> tuple:
    from tsmigrate.schema import AttributeColumn, PrimaryKeyColumn, Table, TableOptions

    options = TableOptions(max_versions=3, max_time_deviation=YEAR_S)
    columns = [AttributeColumn("credits", "INTEGER"), AttributeColumn("payload", "STRING"),
               AttributeColumn("status", "STRING")]
    source = Table(f"serp_{round_id}", [PrimaryKeyColumn("request_id", "STRING")],
                   options=options, attributes=columns)
    target = Table(f"serp_by_keyword_{round_id}",
                   [PrimaryKeyColumn("keyword", "STRING"), PrimaryKeyColumn("day", "STRING"),
                    PrimaryKeyColumn("request_id", "STRING")],
                   options=options, attributes=columns, replaces=source.name)
    return source, target


def _key(i: int) -> list:
    return [("request_id", uuid.UUID(int=i * 7919 + 1).hex)]


def _row(i: int, version: int) -> dict:
    return {"credits": i % 7 + version, "day": f"2026-09-{i % 28 + 1:02d}",
            "keyword": f"keyword {i % 500:03d}", "payload": f"response {i:012d} v{version} " + "lorem " * 16,
            "status": "ok" if i % 10 else "failed", "blob": bytearray([i % 256]) * 24}


def _write(client: ts.OTSClient, table: str, items: list) -> None:
    for start in range(0, len(items), 200):
        request = ts.BatchWriteRowRequest()
        request.add(ts.TableInBatchWriteRowItem(table, items[start:start + 200]))
        client.batch_write_row(request)


def _service_writes(rows: int, records: int, rng: random.Random) -> list:
    """What services write to the source during the rewrite: mostly column updates. Rows are
    deleted in the last tenth of the keys only: an update after a delete would make a row
    without the new key's columns."""
    items = []
    for n in range(records):
        i = rng.randrange(rows * 9 // 10)
        kind = rng.random()
        if kind < 0.55:
            changes = {"put": [("status", f"s{n}"), *([("credits", n)] if n % 2 else [])]}
            items.append(ts.UpdateRowItem(ts.Row(_key(i), changes), IGNORE))
        elif kind < 0.75:
            items.append(ts.PutRowItem(ts.Row(_key(i), list(_row(i, n).items())), IGNORE))
        elif kind < 0.85:
            items.append(ts.UpdateRowItem(ts.Row(_key(i), {"delete_all": ["blob"]}), IGNORE))
        elif kind < 0.95:
            items.append(ts.UpdateRowItem(ts.Row(_key(i), {"put": [("keyword", f"moved {n % 50}")]}), IGNORE))
        else:
            items.append(ts.DeleteRowItem(ts.Row(_key(rows - 1 - n % (rows // 10))), IGNORE))
    return items


def child(endpoint: str, round_id: str, rows: int, records: int, workers: int) -> None:
    """One round in this process's tree: prints ``records``, ``cpu_s`` and ``wall_s``."""
    from tsmigrate.instance.apply import ApplyOptions, apply
    from tsmigrate.rewrite import driver, machine
    from tsmigrate.rewrite.job import ConnectionSpec
    from tsmigrate.rewrite.planned import RewriteSettings
    from tsmigrate.schema import Catalog

    client = ts.OTSClient(endpoint, AK_ID, AK_SECRET, INSTANCE)
    source, target = _tables(round_id)
    apply(client, Catalog([source]), target_identity="bench")
    _write(client, source.name, [ts.PutRowItem(ts.Row(_key(i), list(_row(i, 0).items())), IGNORE)
                                 for i in range(rows)])
    settings = RewriteSettings(ConnectionSpec(endpoint, INSTANCE), driver.RunOptions(workers=2))
    apply(client, Catalog([target]), ApplyOptions(rewrite=settings), target_identity="bench")
    _write(client, source.name, _service_writes(rows, records, random.Random(7)))
    rewrite = machine.load(client, target.name)
    if workers > 1:
        from tsmigrate.rewrite import shards

        follower = driver.make_capture(client, rewrite, shards.Threads(workers))
    else:
        follower = driver.make_capture(client, rewrite)
        if hasattr(follower, "runner"):
            from tsmigrate.rewrite import shards

            follower.runner = shards.Inline()
    read = 0
    server_pid = int(os.environ["BENCH_SERVER_PID"])
    server_start = cpu_s_of(server_pid)
    start, started = time.process_time(), time.monotonic()
    while True:
        read += follower.step()
        if follower.stats.caught_up:
            break
    cpu_s, wall_s = time.process_time() - start, time.monotonic() - started
    server_s = cpu_s_of(server_pid) - server_start
    print(f"records={read} cpu_s={cpu_s:.4f} wall_s={wall_s:.4f} server_cpu_s={server_s:.4f} "
          f"stats={attrs.asdict(follower.stats)}")


def _round(tree: Path, endpoint: str, server_pid: int, round_id: str, rows: int, records: int,
           workers: int) -> tuple[int, float, float, float]:
    # The rewrite's workers connect as the environment says: the bench server's own keys.
    env = {**os.environ, "PYTHONPATH": str(tree), "TSMIGRATE_ENDPOINT": endpoint,
           "TSMIGRATE_INSTANCE": INSTANCE, "ALIBABA_CLOUD_ACCESS_KEY_ID": AK_ID,
           "ALIBABA_CLOUD_ACCESS_KEY_SECRET": AK_SECRET, "BENCH_SERVER_PID": str(server_pid)}
    done = subprocess.run([sys.executable, __file__, "--child", endpoint, round_id, "--rows", str(rows),
                           "--records", str(records), "--workers", str(workers)],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"round in {tree} failed: {done.stderr[-3000:]}")
    fields = dict(f.split("=", 1) for f in done.stdout.split()[:4])
    return (int(fields["records"]), float(fields["cpu_s"]), float(fields["wall_s"]),
            float(fields["server_cpu_s"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, default=None, help="another checkout to compare with")
    parser.add_argument("--shards", type=int, default=1, help="shards of every stream")
    parser.add_argument("--workers", default="1", help="comma-separated worker counts, e.g. 1,2,4")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="the server's added latency")
    parser.add_argument("--child", nargs=2, metavar=("ENDPOINT", "ROUND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    counts = [int(k) for k in str(args.workers).split(",")]
    if args.child:
        child(*args.child, args.rows, args.records, counts[0])
        return
    here = Path(__file__).resolve().parent.parent
    trees = {"this": here, **({"against": args.against.resolve()} if args.against else {})}
    cpu: dict[tuple[str, int], float] = {}
    rate: dict[tuple[str, int], float] = {}
    server_cpu: dict[tuple[str, int], float] = {}
    server_cores: dict[tuple[str, int], float] = {}  # of the fastest round
    records = 0
    for turn in range(args.repeat):
        for workers in counts:
            for name, tree in trees.items():
                # A server of its own each round: one that kept every earlier round's tables and
                # streams spent more CPU a record round after round, against the later rounds.
                server, endpoint = start_server("--memory", "--stream-shards", str(args.shards),
                                                "--latency-ms", str(args.latency_ms))
                try:
                    records, cpu_s, wall_s, server_s = _round(tree, endpoint, server.pid,
                                                              f"{name}{turn}w{workers}", args.rows,
                                                              args.records, workers)
                finally:
                    server.terminate()
                    server.wait(timeout=10)
                key = (name, workers)
                cpu[key] = min(cpu.get(key, cpu_s), cpu_s)
                server_cpu[key] = min(server_cpu.get(key, server_s), server_s)
                if records / wall_s > rate.get(key, 0.0):
                    rate[key] = records / wall_s
                    server_cores[key] = server_s / wall_s
    fewest = min(counts)
    mine = cpu[("this", fewest)] / records * 1e6
    rates = " ".join(f"records_per_s_w{k}={rate[('this', k)]:.0f}" for k in counts)
    serving = server_cpu[("this", fewest)] / records * 1e6
    cores = " ".join(f"server_cores_w{k}={server_cores[('this', k)]:.2f}" for k in counts)
    line = (f"records={records} {rates} capture_cpu_us_per_record={mine:.1f} "
            f"server_cpu_us_per_record={serving:.1f} {cores}")
    if "against" in trees:
        theirs = cpu[("against", fewest)] / records * 1e6
        line += f" against_cpu_us_per_record={theirs:.1f} cpu_ratio={theirs / mine:.2f}"
        line += "".join(f" against_records_per_s_w{k}={rate[('against', k)]:.0f}"
                        for k in counts if ("against", k) in rate)
    print(line)


if __name__ == "__main__":
    main()
