"""Capture lag under a steady write load: `rewrite follow --workers K` against a busy source.

A local server runs in its own process with service latency (``--latency-ms``, default 30) and
streams of ``--shards`` shards (default 4). A source of ``--rows`` rows (default 5,000) is
rewritten into a new key order (apply, to ready); then `follow` runs in a process of its own
with ``--workers`` (default 4) while writers in this process change ``--rate`` rows a second
(default 2,000: UpdateRows of random rows, in batches) for ``--seconds`` (default 30). Capture's
lag, as `rewrite status` reads it, is sampled every 2.5 s; once the writers stop, the time until
capture reaches the stream's end is the drain. Then `switch` (follow hands the rewrite over) and
`finish` run. The last line:

lag_max_s=X drain_s=Y switch_s=Z finish_s=W writes=N records_per_s_max=R

    python bench/follow_lag.py [--rows 5000] [--rate 2000] [--seconds 30] [--shards 4]
                               [--workers 4] [--latency-ms 30]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import subprocess
import sys
import threading
import time

logging.getLogger("tablestore").addHandler(logging.NullHandler())

import tablestore as ts  # noqa: E402
from serve import AK_ID, AK_SECRET, INSTANCE, start_server  # noqa: E402

SOURCE, TARGET = "bench_events", "bench_events_by_kind"
BATCH = 100


def _tables():
    from tsmigrate.schema import AttributeColumn, PrimaryKeyColumn, Table, TableOptions

    options = TableOptions(max_versions=1)
    columns = [AttributeColumn("kind", "STRING"), AttributeColumn("value", "INTEGER"),
               AttributeColumn("note", "STRING")]
    source = Table(SOURCE, [PrimaryKeyColumn("id", "STRING")], options=options, attributes=columns)
    target = Table(TARGET, [PrimaryKeyColumn("kind", "STRING"), PrimaryKeyColumn("id", "STRING")],
                   options=options, attributes=columns, replaces=SOURCE)
    return source, target


def _key(i: int) -> list:
    return [("id", f"{i * 2654435761 % 2**32:08x}-{i}")]


def _write(client: ts.OTSClient, items: list) -> None:
    request = ts.BatchWriteRowRequest()
    request.add(ts.TableInBatchWriteRowItem(SOURCE, items))
    client.batch_write_row(request)


def _ready(client: ts.OTSClient, endpoint: str, rows: int, workers: int) -> None:
    from tsmigrate.instance.apply import ApplyOptions, apply
    from tsmigrate.rewrite import driver
    from tsmigrate.rewrite.job import ConnectionSpec
    from tsmigrate.rewrite.planned import RewriteSettings
    from tsmigrate.schema import Catalog

    source, target = _tables()
    apply(client, Catalog([source]), target_identity="bench")
    for start in range(0, rows, 200):
        _write(client, [ts.PutRowItem(ts.Row(_key(i), [("kind", f"k{i % 16}"), ("value", 0),
                                                       ("note", "start " * 8)]), ts.Condition("IGNORE"))
                        for i in range(start, min(rows, start + 200))])
    settings = RewriteSettings(ConnectionSpec(endpoint, INSTANCE), driver.RunOptions(workers=workers))
    apply(client, Catalog([target]), ApplyOptions(rewrite=settings), target_identity="bench")


def follow_child(endpoint: str, workers: int) -> None:
    """`rewrite follow --workers K` as a process of its own, until the switch ends it."""
    from tsmigrate.rewrite import driver, machine, shards

    client = ts.OTSClient(endpoint, AK_ID, AK_SECRET, INSTANCE)
    with machine.Runner(client, TARGET) as runner:
        driver.follow(client, runner, None, shard_runner=shards.Threads(workers))


class Writers:
    """Changes ``rate`` random rows a second, in batches, until stopped."""

    def __init__(self, client: ts.OTSClient, rows: int, rate: float) -> None:
        self.client, self.rows, self.rate = client, rows, rate
        self.writes = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(4)]

    def _run(self, n: int) -> None:
        rng = random.Random(n)
        every = BATCH / (self.rate / len(self.threads))
        due = time.monotonic()
        while not self.stop.is_set():
            items = [ts.UpdateRowItem(ts.Row(_key(rng.randrange(self.rows)),
                                             {"put": [("value", rng.randrange(10**6))]}),
                                      ts.Condition("IGNORE")) for _ in range(BATCH)]
            _write(self.client, items)
            self.writes += BATCH
            due += every
            time.sleep(max(0.0, due - time.monotonic()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=30)
    parser.add_argument("--child-follow", metavar="ENDPOINT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_follow:
        follow_child(args.child_follow, args.workers)
        return
    from tsmigrate.rewrite import cutover, driver, machine

    server, endpoint = start_server("--memory", "--latency-ms", str(args.latency_ms),
                                    "--stream-shards", str(args.shards))
    # The rewrite's split workers and the follower connect as the environment says: the bench
    # server's own keys (start_server put them there, and dropped the caller's).
    follower = None
    try:
        client = ts.OTSClient(endpoint, AK_ID, AK_SECRET, INSTANCE)
        _ready(client, endpoint, args.rows, args.workers)
        follower = subprocess.Popen([sys.executable, __file__, "--child-follow", endpoint,
                                     "--workers", str(args.workers)],
                                    env=dict(os.environ))
        writers = Writers(client, args.rows, args.rate)
        for thread in writers.threads:
            thread.start()
        lags, rates = [], []
        started = time.monotonic()
        while time.monotonic() - started < args.seconds:
            time.sleep(2.5)
            rewrite = machine.load(client, TARGET)
            lags.append(float(rewrite.get("capture_lag_s") or 0))
            rates.append(float((rewrite.get("capture_stats") or {}).get("records_per_s") or 0))
            print(f"t={time.monotonic() - started:5.1f}s writes={writers.writes} lag_s={lags[-1]:.1f} "
                  f"records_per_s={rates[-1]:.0f}", flush=True)
        writers.stop.set()
        for thread in writers.threads:
            thread.join()
        written_s = time.monotonic() - started
        stopped = time.monotonic()
        while True:
            rewrite = machine.load(client, TARGET)
            stats = rewrite.get("capture_stats") or {}
            if stats.get("caught_up") and int(rewrite.get("capture_at_ms") or 0) > time.time() * 1000 - 1500:
                break
            if time.monotonic() - stopped > 120:
                raise SystemExit("capture did not drain within 120 s")
            time.sleep(0.25)
        drain_s = time.monotonic() - stopped
        spec = driver.spec_of(client, False)
        started = time.monotonic()
        with machine.Runner(client, TARGET, handover=True) as runner:
            cutover.switch(client, spec, runner, report=driver.quiet)
        switch_s = time.monotonic() - started
        started = time.monotonic()
        with machine.Runner(client, TARGET, handover=True) as runner:
            driver.finish(client, spec, runner, False, report=driver.quiet)
        finish_s = time.monotonic() - started
        print(f"lags_s={[round(x, 1) for x in lags]} write_rate={writers.writes / written_s:.0f}/s")
        print(f"lag_max_s={max(lags, default=0):.1f} drain_s={drain_s:.1f} switch_s={switch_s:.1f} "
              f"finish_s={finish_s:.1f} writes={writers.writes} "
              f"records_per_s_max={max(rates, default=0):.0f}")
    finally:
        if follower is not None:
            follower.terminate()
            follower.wait(30)
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
