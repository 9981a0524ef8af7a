"""A data migration (op.backfill's engine) on N rows, killed with SIGKILL midway and resumed.

A local server runs in its own process (`tsmigrate local serve --memory`); the table holds N
rows with a payload ("eu:17"); the backfill sets ``region`` from it and deletes a scratch
column. A first run, in a child process, is killed with SIGKILL once about ``--kill-at`` of
the rows are done; a second run resumes the same job from its checkpoints. Then every row is
read back and checked. Printed: the rows each run read, the rows/s of each, and whether the
result is exact (every row right, none missing or extra, the checkpoints counting N).

    python bench/backfill_kill.py --rows 100000
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import backfill_rows as br  # noqa: E402
from serve import INSTANCE, start_server, use_bench_credentials  # noqa: E402

from tsmigrate.instance.state import State  # noqa: E402
from tsmigrate.rewrite import backfill, checkpoints  # noqa: E402
from tsmigrate.rewrite.job import ConnectionSpec  # noqa: E402

KEY = "bench/000"
FN = "backfill_fns:fill_region"
CHILD = """
import sys
from tsmigrate.rewrite import backfill
from tsmigrate.rewrite.job import ConnectionSpec
import backfill_rows as br
spec = ConnectionSpec(sys.argv[1], sys.argv[2])
client = spec.client()
job = backfill.start_or_resume(client, sys.argv[3], br.TABLE, sys.argv[4], None)
print(job.id, flush=True)
backfill.run(client, spec, job, backfill.RunOptions(workers=int(sys.argv[5])))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kill-at", type=float, default=0.4)
    args = parser.parse_args()
    use_bench_credentials()  # the child and its workers connect with the environment's keys
    server, endpoint = start_server("--memory")
    try:
        spec = ConnectionSpec(endpoint, INSTANCE)
        client = spec.client()
        State(client).ensure_table()
        started = time.monotonic()
        br.create_and_fill(client, args.rows)
        print(f"filled {args.rows:,} rows in {time.monotonic() - started:.1f} s", flush=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "tests"),
                                                          os.environ.get("PYTHONPATH", "")])}
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, "-c", CHILD, endpoint, INSTANCE, KEY, FN,
                                  str(args.workers)], stdout=subprocess.PIPE, text=True, env=env)
        assert child.stdout is not None
        job_id = child.stdout.readline().strip()
        while sum(c.rows for c in checkpoints.list_splits(client, job_id)) < args.rows * args.kill_at:
            if child.poll() is not None:
                raise SystemExit("the first run ended before it could be killed")
            time.sleep(0.1)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        first_s = time.monotonic() - started
        at_kill = sum(c.rows for c in checkpoints.list_splits(client, job_id))
        print(f"killed (SIGKILL) after {first_s:.1f} s with {at_kill:,} rows checkpointed "
              f"({at_kill / first_s:,.0f} rows/s)", flush=True)
        job = backfill.start_or_resume(client, KEY, br.TABLE, FN, None)
        assert job.id == job_id
        started = time.monotonic()
        result = backfill.run(client, spec, job, backfill.RunOptions(workers=args.workers))
        second_s = time.monotonic() - started
        print(f"resumed: {result.rows - at_kill:,} rows in {second_s:.1f} s "
              f"({(result.rows - at_kill) / second_s:,.0f} rows/s)", flush=True)
        counted = sum(c.rows for c in checkpoints.list_splits(client, job_id))
        stored = br.read_all(client)
        wrong = sum(1 for (_, n), cells in stored.items()
                    if cells != {"payload": cells["payload"], "region": br.REGIONS[n % 3]})
        exact = counted == args.rows == len(stored) and wrong == 0
        print(f"rows={args.rows} checkpointed={counted} stored={len(stored)} wrong={wrong} "
              f"exact={exact}")
        if not exact:
            raise SystemExit(1)
    finally:
        server.kill()


if __name__ == "__main__":
    main()
