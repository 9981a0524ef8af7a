"""Writes through the model API while a rewrite's cut-over moves them: nothing lost, a short pause.

The server runs in its own process (`tsmigrate local serve --memory`). A table of counters is
rewritten into a new key order (apply, to ready); then 8 writer threads, half on the old model and
half on the new, increment random counters through ``Rows`` while `switch` and `revert` run in
turn (``--switches``, default 3: switch, revert, switch), then `finish`. Every acknowledged
increment must be in the new table at the end. A write that met a fence waited for it: its wait is
a pause. The last line:

writes=N lost=0 switch_pause_p50_ms=X switch_pause_p99_ms=Y switch_pause_max_ms=Z

    python bench/cutover.py [--rows 2000] [--writers 8] [--switches 3] [--lease 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import threading
import time

logging.getLogger("tablestore").addHandler(logging.NullHandler())

from serve import AK_ID, AK_SECRET, INSTANCE, start_server  # noqa: E402

from tsmigrate import Column, Model, PrimaryKey  # noqa: E402
from tsmigrate.instance.apply import ApplyOptions, apply  # noqa: E402
from tsmigrate.rewrite import cutover, driver, machine  # noqa: E402
from tsmigrate.rewrite.job import ConnectionSpec  # noqa: E402
from tsmigrate.rewrite.planned import RewriteSettings  # noqa: E402
from tsmigrate.schema.model import compile_models  # noqa: E402
from tsmigrate.service import Rows, routing  # noqa: E402


class Counter(Model, table="bench_counters", max_versions=1):
    device = PrimaryKey(str)
    seq = PrimaryKey(int)
    count = Column(int)


class CounterV2(Model, table="bench_counters_by_seq", replaces="bench_counters", max_versions=1):
    seq = PrimaryKey(int)
    device = PrimaryKey(str)
    count = Column(int)


def _key(i: int) -> dict:
    return {"device": f"dev-{i % 16:02d}", "seq": i}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--switches", type=int, default=3, help="switch, revert, switch, ...")
    parser.add_argument("--lease", type=float, default=routing.LEASE_S)
    parser.add_argument("--between-s", type=float, default=1.5, help="writing time between moves")
    args = parser.parse_args()
    # The split workers of the rewrite connect with the credentials of the environment.
    os.environ["ALIBABA_CLOUD_ACCESS_KEY_ID"] = AK_ID
    os.environ["ALIBABA_CLOUD_ACCESS_KEY_SECRET"] = AK_SECRET
    proc, endpoint = start_server("--memory")
    try:
        spec = ConnectionSpec(endpoint, INSTANCE)
        client = spec.client()
        apply(client, compile_models([Counter]), target_identity="bench")
        Rows(Counter, client).batch_write(put=(Counter(**_key(i), count=0) for i in range(args.rows)))
        apply(client, compile_models([CounterV2]),
              ApplyOptions(rewrite=RewriteSettings(options=driver.RunOptions(workers=2), spec=spec)),
              target_identity="bench")
        target = CounterV2.table_name()

        stop = threading.Event()
        acknowledged = [0] * args.rows
        lock = threading.Lock()
        failures: list[BaseException] = []

        def writer(n: int) -> None:
            rows = Rows(Counter if n % 2 else CounterV2, client)
            rng = random.Random(n)
            try:
                while not stop.is_set():
                    i = rng.randrange(args.rows)
                    rows.update(_key(i), increment={"count": 1})
                    with lock:
                        acknowledged[i] += 1
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(args.writers)]
        for thread in threads:
            thread.start()
        moves = []
        try:
            for move in range(args.switches):
                time.sleep(args.between_s)
                started = time.monotonic()
                with machine.Runner(client, target, handover=True) as runner:
                    if move % 2 == 0:
                        done = cutover.switch(client, spec, runner, lease_s=args.lease,
                                              report=driver.quiet)
                    else:
                        done = cutover.revert(client, runner, report=driver.quiet)
                moves.append((done.phase, time.monotonic() - started, done.get("fence")))
            time.sleep(args.between_s)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        if failures:
            raise failures[0]
        with machine.Runner(client, target, handover=True) as runner:
            if runner.rewrite.phase == machine.READY:
                cutover.switch(client, spec, runner, report=driver.quiet)
            driver.finish(client, spec, runner, allow_destructive=False)

        final = Rows(CounterV2, client).batch_get([_key(i) for i in range(args.rows)])
        counts = [row.count if row is not None else 0 for row in final.rows]
        lost = sum(max(0, a - c) for a, c in zip(acknowledged, counts, strict=True))
        extra = sum(max(0, c - a) for a, c in zip(acknowledged, counts, strict=True))
        pauses = sorted(s * 1000 for r in list(routing._ROUTERS.values()) for s in r.held_s)
        for phase, seconds, fence in moves:
            print(f"{phase}: {seconds:.2f}s, writes held {fence.get('held_ms')} ms by the fence, "
                  f"{fence.get('acknowledged')} client(s) acknowledged")
        print(f"held writes: {len(pauses)}; counted twice: {extra}")

        def pct(q: float) -> float:
            return pauses[min(len(pauses) - 1, int(q * len(pauses)))] if pauses else 0.0

        print(f"writes={sum(acknowledged)} lost={lost} switch_pause_p50_ms={pct(0.5):.0f} "
              f"switch_pause_p99_ms={pct(0.99):.0f} switch_pause_max_ms={max(pauses, default=0):.0f}")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
