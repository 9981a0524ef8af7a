"""Plan time at the instance's limit, against a sequential describe loop, on a "remote" server.

A local server in its own process adds 20 ms to every round trip and allows 10 table operations
per second per instance, as the service does. The instance holds 64 table objects: 21 tables
with two global indexes each, and two search indexes per table. Measured side by side:

- plan: tsmigrate's inspection (describes issued concurrently, table-level calls paced to the
  limit) and diff, with the SDK's retries turned OFF, so any throttling error would reach us;
- sequential: a plain loop of describe calls with the SDK's default retries;
- bound: the least time the round trips and the rate limit allow.

Last line: tables=N plan_s=X sequential_s=Y bound_s=Z vs_bound=W

    python bench/plan.py [--tables 21] [--latency-ms 20] [--ops-per-s 10]
"""

from __future__ import annotations

import argparse
import logging
import time

logging.getLogger("tablestore").addHandler(logging.NullHandler())

import tablestore as ts  # noqa: E402
from serve import AK_ID, AK_SECRET, INSTANCE, start_server  # noqa: E402
from tablestore.retry import NoRetryPolicy  # noqa: E402

from tsmigrate import adapter  # noqa: E402
from tsmigrate.pacing import Pacer  # noqa: E402
from tsmigrate.plan import make_plan  # noqa: E402
from tsmigrate.schema import (  # noqa: E402
    Catalog,
    DefinedColumn,
    PrimaryKeyColumn,
    SearchField,
    SearchIndex,
    SecondaryIndex,
    Table,
)


def catalog(tables: int) -> Catalog:
    return Catalog([
        Table(
            name=f"t{i:02d}",
            primary_key=[PrimaryKeyColumn("pk", "STRING"), PrimaryKeyColumn("ts", "INTEGER")],
            defined_columns=[DefinedColumn("a", "STRING"), DefinedColumn("b", "INTEGER")],
            secondary_indexes=[SecondaryIndex(f"t{i:02d}_by_a", ["a"]),
                               SecondaryIndex(f"t{i:02d}_by_b", ["b"], include=["a"])],
            search_indexes=[SearchIndex(f"s{i:02d}_one", [SearchField("a", "KEYWORD")]),
                            SearchIndex(f"s{i:02d}_two", [SearchField("b", "LONG", sort_and_agg=True)])],
        )
        for i in range(tables)
    ])


def populate(client: ts.OTSClient, models: Catalog, pacer: Pacer) -> None:
    for step in make_plan(Catalog(), models).steps:
        if step.kind == "create_table":
            pacer.acquire()
        adapter.execute(client, step)


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
        models = catalog(args.tables)
        retrying = ts.OTSClient(endpoint, AK_ID, AK_SECRET, INSTANCE)
        strict = ts.OTSClient(endpoint, AK_ID, AK_SECRET, INSTANCE, retry_policy=NoRetryPolicy())
        populate(retrying, models, Pacer(args.ops_per_s))
        objects = sum(1 + len(t.secondary_indexes) for t in models.tables)
        print(f"instance holds {objects} table objects ({args.tables} tables)", flush=True)
        time.sleep(1.1)  # let the rate window empty

        start = time.perf_counter()
        live = adapter.inspect(strict, pacer=Pacer(args.ops_per_s))
        plan = make_plan(live, models)
        plan_s = time.perf_counter() - start
        if plan.has_changes:
            raise SystemExit(f"unexpected changes: {[s.summary() for s in plan.steps]}")
        print(f"plan (concurrent, paced, no retries): {plan_s:.2f} s", flush=True)

        time.sleep(1.1)
        sequential_s = sequential(retrying)
        print(f"sequential describe loop (SDK retries): {sequential_s:.2f} s", flush=True)

        rtt = round_trip(retrying, models.tables[0].name)
        table_ops = 1 + args.tables  # ListTable + one DescribeTable per table
        # The k-th table operation cannot start before k // limit seconds; the last table's
        # describe is followed by its search-index list and describe round trips.
        bound_s = (table_ops - 1) // args.ops_per_s + 3 * rtt
        print(f"round trip {rtt * 1000:.1f} ms; {table_ops} table operations", flush=True)
        print(
            f"tables={args.tables} plan_s={plan_s:.2f} sequential_s={sequential_s:.2f} "
            f"bound_s={bound_s:.2f} vs_bound={plan_s / bound_s:.2f}"
        )
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
