"""Writes through the model API while a rewrite's cut-over moves them: nothing lost, a short pause.

The server runs in its own process (`tsmigrate local serve --memory`). A table of counters is
rewritten into a new key order (apply, to ready); then 8 writer threads, half on the old model and
half on the new, increment random counters through ``Rows`` while `switch` and `revert` run in
turn (``--switches``, default 3: switch, revert, switch), then `finish`. Every acknowledged
increment must be in the new table at the end. A write that met a fence waited for it: its wait is
a pause. The last line:

writes=N lost=0 switch_pause_p50_ms=X switch_pause_p99_ms=Y switch_pause_max_ms=Z

``--faults`` adds what a real fleet does (``bench/late_writer.py`` processes putting rows of their
own): one whose put is held in the network (``--hold-s``) across each `switch`, one SIGSTOPped
across each `switch` and continued after it, and one on the raw SDK writing the old table
throughout. Every put they were told was acknowledged must be in the new table at the end, or be
named as a conflict; the last line adds ``late_writes=N carried=N conflicts=N`` (the late-write
net's counts) and counts their losses in ``lost``.

    python bench/cutover.py [--rows 2000] [--writers 8] [--switches 3] [--lease 2] [--faults]
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

logging.getLogger("tablestore").addHandler(logging.NullHandler())

from serve import INSTANCE, start_server, use_bench_credentials  # noqa: E402

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
    note = Column(str)


class CounterV2(Model, table="bench_counters_by_seq", replaces="bench_counters", max_versions=1):
    seq = PrimaryKey(int)
    device = PrimaryKey(str)
    count = Column(int)
    note = Column(str)


class LateWriters:
    """The ``--faults`` processes: held (a put held in the network at each switch), paused
    (SIGSTOPped across each switch) and raw (raw SDK puts to the old table throughout)."""

    def __init__(self, endpoint: str, instance: str, hold_s: float):
        self.dir = Path(tempfile.mkdtemp(prefix="tsmigrate-bench-"))
        self.trigger = self.dir / "hold-now"
        script = str(Path(__file__).with_name("late_writer.py"))
        base = [sys.executable, script, endpoint, instance, Counter.table_name()]
        self.procs = {
            "late-held": [*base, "late-held", "--hold-one", str(hold_s), "--hold-when", str(self.trigger)],
            "late-paused": [*base, "late-paused"],
            "late-raw": [*base, "late-raw", "--raw"],
        }
        self.running = {name: subprocess.Popen(cmd, stdout=(self.dir / name).open("w"),
                                               stderr=subprocess.DEVNULL)
                        for name, cmd in self.procs.items()}

    def before_switch(self) -> None:
        self.trigger.touch()
        self.running["late-paused"].send_signal(signal.SIGSTOP)

    def after_switch(self) -> None:
        self.running["late-paused"].send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for proc in self.running.values():
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            proc.wait()

    def acknowledged(self) -> dict[tuple[str, int], str]:
        """(device, seq) -> the note of each acknowledged put."""
        acked = {}
        for name in self.procs:
            for line in (self.dir / name).read_text().splitlines():
                parts = line.split(" ", 2)
                if parts[0] == "ACK" and len(parts) == 3:
                    acked[(name, int(parts[1]))] = parts[2]
        return acked


def _key(i: int) -> dict:
    return {"device": f"dev-{i % 16:02d}", "seq": i}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--switches", type=int, default=3, help="switch, revert, switch, ...")
    parser.add_argument("--lease", type=float, default=routing.LEASE_S)
    parser.add_argument("--between-s", type=float, default=1.5, help="writing time between moves")
    parser.add_argument("--faults", action="store_true",
                        help="add a held, a paused and a raw-SDK writer process (see above)")
    parser.add_argument("--hold-s", type=float, default=3.0, help="--faults: how long the put is held")
    args = parser.parse_args()
    # The split workers of the rewrite and the writer processes connect with the credentials
    # of the environment: the bench server's only.
    use_bench_credentials()
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
        faults = LateWriters(endpoint, INSTANCE, args.hold_s) if args.faults else None
        moves = []
        try:
            for move in range(args.switches):
                time.sleep(args.between_s)
                started = time.monotonic()
                with machine.Runner(client, target, handover=True) as runner:
                    if move % 2 == 0:
                        if faults is not None:
                            faults.before_switch()
                        done = cutover.switch(client, spec, runner, lease_s=args.lease,
                                              report=driver.quiet)
                        if faults is not None:
                            faults.after_switch()
                    else:
                        done = cutover.revert(client, runner, report=driver.quiet)
                moves.append((done.phase, time.monotonic() - started, done.get("fence")))
            time.sleep(max(args.between_s, args.hold_s if faults else 0))
        finally:
            stop.set()
            for thread in threads:
                thread.join()
            if faults is not None:
                faults.stop()
        if failures:
            raise failures[0]
        with machine.Runner(client, target, handover=True) as runner:
            if runner.rewrite.phase == machine.READY:
                cutover.switch(client, spec, runner, report=driver.quiet)
            driver.finish(client, spec, runner, allow_destructive=False)

        final = Rows(CounterV2, client).batch_get([_key(i) for i in range(args.rows)])
        counts = [row.count if row is not None else 0 for row in final.rows]
        lost = sum(max(0, a - c) for a, c in zip(acknowledged, counts, strict=True))
        late_line = ""
        if faults is not None:
            lost_late, acked_late = _late_losses(client, target, faults.acknowledged())
            lost += lost_late
            stats = machine.load(client, target).get("late_stats") or {}
            print(f"late writers: {acked_late} put(s) acknowledged, {lost_late} missing")
            late_line = (f" late_writes={stats.get('late_writes', 0)} carried={stats.get('carried', 0)}"
                         f" conflicts={stats.get('conflicts', 0)}")
        extra = sum(max(0, c - a) for a, c in zip(acknowledged, counts, strict=True))
        pauses = sorted(s * 1000 for r in list(routing._ROUTERS.values()) for s in r.held_s)
        for phase, seconds, fence in moves:
            print(f"{phase}: {seconds:.2f}s, writes held {fence.get('held_ms')} ms by the fence, "
                  f"{fence.get('acknowledged')} client(s) acknowledged")
        print(f"held writes: {len(pauses)}; counted twice: {extra}")

        def pct(q: float) -> float:
            return pauses[min(len(pauses) - 1, int(q * len(pauses)))] if pauses else 0.0

        print(f"writes={sum(acknowledged)} lost={lost} switch_pause_p50_ms={pct(0.5):.0f} "
              f"switch_pause_p99_ms={pct(0.99):.0f} switch_pause_max_ms={max(pauses, default=0):.0f}"
              + late_line)
    finally:
        proc.terminate()
        proc.wait()


def _late_losses(client: object, target: str, acked: dict[tuple[str, int], str]) -> tuple[int, int]:
    """How many acknowledged late-writer puts are neither in the new table with their note nor
    named by a conflict; and how many there were."""
    from tsmigrate.rewrite import late

    named = {c["key"] for c in late.conflicts(client, target)}
    keys = list(acked)
    rows = Rows(CounterV2, client).batch_get([{"seq": seq, "device": device} for device, seq in keys])
    lost = 0
    for (device, seq), row in zip(keys, rows.rows, strict=True):
        if (row is None or row.note != acked[(device, seq)]) and \
                f"(device='{device}', seq={seq})" not in named:
            lost += 1
    return lost, len(keys)


if __name__ == "__main__":
    main()
