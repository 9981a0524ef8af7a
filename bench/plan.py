"""`tsmigrate plan` at the instance's limit, as a user runs it, against a "remote" server.

A local server in its own process adds 20 ms to every round trip and allows 10 table operations
per second per instance, as the service does. A project declares 21 tables with two global
indexes and two search indexes each (63 table objects: 21 tables and 42 index tables, plus 42
search indexes), and the instance already holds them. Measured side by side, in one run:

- plan: the command `tsmigrate plan --endpoint ... --detailed-exitcode` in its own process (start,
  model import and compilation, inspection with describes issued concurrently and table-level
  calls paced to the limit, the lookup of the state table, diff, rendering), with the SDK's
  retries turned OFF, so any throttling error fails the command instead of hiding in a retry;
- validate: `tsmigrate validate` on the same project, the command's work that needs no instance;
- sequential: a plain loop of describe calls with the SDK's default retries;
- bound: the least time the command can take: validate's time, plus what the round trips and the
  rate limit allow for its table operations.

Last line: tables=N plan_s=X validate_s=V sequential_s=Y bound_s=Z vs_bound=W

    python bench/plan.py [--tables 21] [--latency-ms 20] [--ops-per-s 10]
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

logging.getLogger("tablestore").addHandler(logging.NullHandler())

import tablestore as ts  # noqa: E402
from serve import AK_ID, AK_SECRET, INSTANCE, start_server  # noqa: E402

from tsmigrate.instance import adapter  # noqa: E402
from tsmigrate.instance.pacing import paced  # noqa: E402
from tsmigrate.planning.plan import make_plan  # noqa: E402
from tsmigrate.schema import Catalog  # noqa: E402
from tsmigrate.schema.discover import import_models  # noqa: E402
from tsmigrate.schema.model import compile_models  # noqa: E402

# The installed CLI, except that every OTSClient it makes has the SDK's retries off.
NO_RETRY_CLI = """
import sys
import tablestore
from tablestore.retry import NoRetryPolicy
make = tablestore.OTSClient.__init__
def no_retry(self, *args, **kwargs):
    kwargs["retry_policy"] = NoRetryPolicy()
    make(self, *args, **kwargs)
tablestore.OTSClient.__init__ = no_retry
from tsmigrate.cli import main
sys.argv[0] = "tsmigrate"
main()
"""


def write_project(root: Path, tables: int) -> None:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["bench_models"]\n')
    lines = ["from tsmigrate import Column, GlobalIndex, Model, PrimaryKey, SearchField, SearchIndex"]
    for i in range(tables):
        lines += [
            "",
            f"class T{i:02d}(Model, table='t{i:02d}'):",
            "    pk = PrimaryKey(str)",
            "    ts = PrimaryKey(int)",
            "    a = Column(str, defined=True)",
            "    b = Column(int, defined=True)",
            f"    t{i:02d}_by_a = GlobalIndex(keys=['a'])",
            f"    t{i:02d}_by_b = GlobalIndex(keys=['b'], include=['a'])",
            f"    s{i:02d}_one = SearchIndex(fields=[SearchField('a', 'keyword')])",
            f"    s{i:02d}_two = SearchIndex(fields=[SearchField('b', 'long', sort=True)])",
        ]
    (root / "bench_models.py").write_text("\n".join(lines) + "\n")


def populate(client: ts.OTSClient, models: Catalog) -> None:
    for step in make_plan(Catalog(), models).steps:
        adapter.execute(client, step)


def run_command(project: Path, environ: dict[str, str], *args: str) -> tuple[float, int, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", NO_RETRY_CLI, *args], cwd=project, env=environ,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    return time.perf_counter() - start, done.returncode, done.stdout + done.stderr


def sequential(client: ts.OTSClient) -> float:
    start = time.perf_counter()
    for name in client.list_table():
        client.describe_table(name)
        for _table, index in client.list_search_index(name):
            client.describe_search_index(name, index)
    return time.perf_counter() - start


def round_trip(client: ts.OTSClient, table: str) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        client.list_search_index(table)  # not a table-level operation: no rate limit
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=21)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--ops-per-s", type=int, default=10)
    args = parser.parse_args()

    proc, endpoint = start_server("--memory", "--latency-ms", str(args.latency_ms),
                                  "--table-ops-per-s", str(args.ops_per_s))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            project = Path(tmp)
            write_project(project, args.tables)
            models = compile_models(import_models(["bench_models"], project))
            client = ts.OTSClient(endpoint, AK_ID, AK_SECRET, INSTANCE)
            populate(paced(ts.OTSClient(endpoint, AK_ID, AK_SECRET, INSTANCE), args.ops_per_s), models)
            objects = sum(1 + len(t.secondary_indexes) for t in models.tables)
            searches = sum(len(t.search_indexes) for t in models.tables)
            print(f"instance holds {objects} table objects ({args.tables} tables) and "
                  f"{searches} search indexes", flush=True)

            environ = {k: v for k, v in os.environ.items() if not k.startswith(("TSMIGRATE_", "ALIBABA_"))}
            environ.update(ALIBABA_CLOUD_ACCESS_KEY_ID=AK_ID, ALIBABA_CLOUD_ACCESS_KEY_SECRET=AK_SECRET)
            validate_s, code, output = run_command(project, environ, "validate")
            if code != 0:
                raise SystemExit(f"validate failed:\n{output}")
            print(f"tsmigrate validate: {validate_s:.2f} s", flush=True)

            time.sleep(1.1)  # let the rate window empty
            plan_s, code, output = run_command(
                project, environ, "plan", "--endpoint", endpoint, "--instance", INSTANCE,
                "--detailed-exitcode",
            )
            if code != 0:  # 2: changes (the instance should match), 1: an error such as a throttle
                raise SystemExit(f"tsmigrate plan exited {code}:\n{output}")
            print(f"tsmigrate plan (paced, no retries, no changes): {plan_s:.2f} s", flush=True)

            time.sleep(1.1)
            sequential_s = sequential(client)
            print(f"sequential describe loop (SDK retries): {sequential_s:.2f} s", flush=True)

            rtt = round_trip(client, models.tables[0].name)
            table_ops = 1 + args.tables  # ListTable + one DescribeTable per table
            # The k-th table operation cannot start before k // limit seconds; ListTable comes
            # first, and the last table's describe is followed by its search-index list and
            # describe round trips, then the state lookup (a GetRow).
            bound_s = validate_s + (table_ops - 1) // args.ops_per_s + 4 * rtt
            print(f"round trip {rtt * 1000:.1f} ms; {table_ops} table operations", flush=True)
            print(
                f"tables={args.tables} plan_s={plan_s:.2f} validate_s={validate_s:.2f} "
                f"sequential_s={sequential_s:.2f} bound_s={bound_s:.2f} vs_bound={plan_s / bound_s:.2f}"
            )
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
