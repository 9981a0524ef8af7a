"""The model layer (tsmigrate.service.Rows) against the same calls made directly with the SDK.

The server runs in its own process (`tsmigrate local serve --memory`), as a remote service
would. Four workloads, each done both ways on the same table, alternating, several rounds:
- put: PutRow of one row at a time (a Model instance vs a tablestore Row built from a dict);
- get: GetRow by key, decoded into a Model vs left as the SDK's row;
- query: GetRange scans of each of the 5 key prefixes, paging to the end, rows as Models;
- batch: BatchWriteRow of 200-row chunks (the model layer chunks and checks results itself).
The last line gives the ratios of time per row (model / SDK), medians of interleaved blocks,
then those of the model's put, get and batch while a rewrite of the table is ready (each call
routed by the rewrite's phase, ``tsmigrate.service.routing``) against the same with
``routing=False`` (target: at most 1.05), then the ratios of client CPU per row (model / SDK,
medians of the same blocks; the server's CPU is another process's, so not counted; CPU is
steadier than time on a shared machine; target: at most 1.10):

put_overhead=X get_overhead=Y query_overhead=Z batch_overhead=W routing_put=A routing_get=B \
routing_batch=C put_cpu_overhead=P get_cpu_overhead=G query_cpu_overhead=Q batch_cpu_overhead=D

    python bench/model_api.py [--rows 1000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable

logging.getLogger("tablestore").addHandler(logging.NullHandler())

import tablestore as ts  # noqa: E402
from serve import AK_ID, AK_SECRET, INSTANCE, start_server  # noqa: E402

from tsmigrate import Column, Model, PrimaryKey  # noqa: E402
from tsmigrate.service import Rows, create_tables  # noqa: E402

BATCH = 200


class BenchRow(Model, table="bench_rows"):
    user = PrimaryKey(str)
    seq = PrimaryKey(int)
    name = Column(str)
    age = Column(int)
    score = Column(float)
    active = Column(bool)
    note = Column(str)


def fields(i: int) -> dict:
    return {"user": f"user{i % 5:04d}", "seq": i, "name": f"name-{i:010d}", "age": i % 97,
            "score": i * 0.5, "active": i % 2 == 0, "note": f"note {i:020d} lorem ipsum"}


def sdk_row(values: dict) -> ts.Row:
    pk = [("user", values["user"]), ("seq", values["seq"])]
    return ts.Row(pk, [(k, v) for k, v in values.items() if k not in ("user", "seq")])


def timed(work: Callable[[], int]) -> tuple[float, float]:
    """(wall seconds, client CPU seconds) per row of one block of ``work``."""
    start, cpu = time.perf_counter(), time.process_time()
    count = work()
    return (time.perf_counter() - start) / count, (time.process_time() - cpu) / count


USERS = [f"user{u:04d}" for u in range(5)]  # the key prefixes fields() spreads rows over


def model_workloads(rows: Rows, n: int, singles: int) -> dict[str, Callable[[], int]]:
    """Blocks of calls through ``rows``, each returning its row count: ``singles`` puts, gets
    and updates one row at a time, a batch write and a batch get of ``n`` rows, and a query of
    every prefix (all rows written)."""

    def put() -> int:
        for i in range(singles):
            rows.put(BenchRow(**fields(i)))
        return singles

    def get() -> int:
        for i in range(singles):
            rows.get(user=f"user{i % 5:04d}", seq=i)
        return singles

    def update() -> int:
        for i in range(singles):
            rows.update({"user": f"user{i % 5:04d}", "seq": i}, set={"age": i % 7})
        return singles

    def query() -> int:
        count = 0
        for user in USERS:
            for _row in rows.query(user=user):  # touched as a service touches what it reads
                count += 1
        return count

    def batch() -> int:
        assert rows.batch_write(put=(BenchRow(**fields(i)) for i in range(n))).ok
        return n

    def batch_get() -> int:
        return len(rows.batch_get(BenchRow.key(user=f"user{i % 5:04d}", seq=i) for i in range(n)))

    return {"put": put, "get": get, "update": update, "query": query, "batch": batch,
            "batch_get": batch_get}


class BenchRowV2(Model, table="bench_rows_by_seq", replaces="bench_rows"):
    seq = PrimaryKey(int)
    user = PrimaryKey(str)
    name = Column(str)
    age = Column(int)
    score = Column(float)
    active = Column(bool)
    note = Column(str)


def _routing_ratios(client: ts.OTSClient, endpoint: str, rounds: int, singles: int,
                    n: int) -> dict[str, float]:
    """Rows with a rewrite of the table ready (routed: the lease check per call, a state read
    per lease) against Rows that never route, same table, interleaved blocks."""
    import os

    from tsmigrate.instance.apply import ApplyOptions, apply
    from tsmigrate.rewrite import driver
    from tsmigrate.rewrite.job import ConnectionSpec
    from tsmigrate.rewrite.planned import RewriteSettings
    from tsmigrate.schema.model import compile_models

    # The rewrite's split workers connect with the environment's keys: the bench server's
    # (start_server put them there, whatever the caller's environment had).
    assert os.environ["ALIBABA_CLOUD_ACCESS_KEY_ID"] == AK_ID
    spec = ConnectionSpec(endpoint, INSTANCE)
    apply(client, compile_models([BenchRowV2]),
          ApplyOptions(rewrite=RewriteSettings(options=driver.RunOptions(workers=2), spec=spec)),
          target_identity="bench")
    routed, plain = Rows(BenchRow, client), Rows(BenchRow, client, routing=False)

    routed_work = model_workloads(routed, n, singles)
    plain_work = model_workloads(plain, n, singles)
    ratios = {}
    for name in ("put", "get", "batch"):
        with_routing, without = [], []
        for pair in range(rounds):
            if pair % 2:
                with_routing.append(timed(routed_work[name])[0])
                without.append(timed(plain_work[name])[0])
            else:
                without.append(timed(plain_work[name])[0])
                with_routing.append(timed(routed_work[name])[0])
        ratios[f"routing_{name}"] = statistics.median(with_routing) / statistics.median(without)
        print(f"routing {name}: {statistics.median(with_routing) * 1e6:.1f} us/row routed, "
              f"{statistics.median(without) * 1e6:.1f} us/row not routed")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows per block (batch, query)")
    parser.add_argument("--rounds", type=int, default=40, help="pairs of blocks per workload")
    args = parser.parse_args()
    proc, endpoint = start_server("--memory")
    try:
        client = ts.OTSClient(endpoint, AK_ID, AK_SECRET, INSTANCE)
        create_tables(client, [BenchRow])
        rows = Rows(BenchRow, client)
        table = BenchRow.table_name()
        n = args.rows
        singles = max(1, n // 50)  # single-row calls are slower: small blocks, many of them
        condition = ts.Condition(ts.RowExistenceExpectation.IGNORE)

        def sdk_put() -> int:
            for i in range(singles):
                client.put_row(table, sdk_row(fields(i)), condition)
            return singles

        def sdk_get() -> int:
            for i in range(singles):
                client.get_row(table, [("user", f"user{i % 5:04d}"), ("seq", i)], None, None, 1)
            return singles

        def sdk_batch() -> int:
            for start in range(0, n, BATCH):
                request = ts.BatchWriteRowRequest()
                request.add(ts.TableInBatchWriteRowItem(table, [
                    ts.PutRowItem(sdk_row(fields(i)), condition)
                    for i in range(start, min(start + BATCH, n))]))
                response = client.batch_write_row(request)
                assert response.is_all_succeed()
            return n

        def sdk_query() -> int:
            count = 0
            for user in USERS:  # a block reads every prefix: all n rows
                start = [("user", user), ("seq", ts.INF_MIN)]
                end = [("user", user), ("seq", ts.INF_MAX)]
                while start is not None:
                    _, start, page, _ = client.get_range(table, ts.Direction.FORWARD, start, end,
                                                         None, None, None, 1)
                    for _row in page:  # a service touches every row it reads
                        count += 1
            return count

        model = model_workloads(rows, n, singles)
        model["batch"]()  # load the table for reads
        workloads = {name: (sdk, model[name]) for name, sdk in (
            ("put", sdk_put), ("get", sdk_get), ("query", sdk_query), ("batch", sdk_batch))}
        # Small blocks, alternating which side goes first; the median of each side's per-row
        # times, so a burst of load on the shared machine does not land on one side only.
        # Per workload: (SDK, model) lists of (wall, CPU) per row.
        blocks: dict[str, tuple[list[tuple[float, float]], list[tuple[float, float]]]] = {
            name: ([], []) for name in workloads}
        for pair in range(args.rounds):
            for name, (sdk, model) in workloads.items():
                if pair % 2:
                    m, s = timed(model), timed(sdk)
                else:
                    s, m = timed(sdk), timed(model)
                blocks[name][0].append(s)
                blocks[name][1].append(m)
        ratios = {}
        ratios.update(_routing_ratios(client, endpoint, args.rounds, singles, n))
        cpu_ratios = {}
        for name, (sdk_blocks, model_blocks) in blocks.items():
            s, m = [b[0] for b in sdk_blocks], [b[0] for b in model_blocks]
            s_cpu, m_cpu = [b[1] for b in sdk_blocks], [b[1] for b in model_blocks]
            ratios[f"{name}_overhead"] = statistics.median(m) / statistics.median(s)
            cpu_ratios[f"{name}_cpu_overhead"] = statistics.median(m_cpu) / statistics.median(s_cpu)
            # The fastest blocks too: load from other processes only ever adds time, so on a
            # shared machine their ratio is the steadier estimate of the quiet-machine one.
            print(f"{name}: SDK {statistics.median(s) * 1e6:.1f} us/row, "
                  f"model {statistics.median(m) * 1e6:.1f} us/row (medians of {args.rounds} blocks); "
                  f"fastest blocks: {min(m) / min(s):.3f}; CPU: SDK "
                  f"{statistics.median(s_cpu) * 1e6:.1f} us/row, model "
                  f"{statistics.median(m_cpu) * 1e6:.1f} us/row")
        print(" ".join(f"{name}={ratio:.3f}" for name, ratio in ratios.items()
                       if not name.startswith("routing_"))
              + "".join(f" {name}={ratio:.3f}" for name, ratio in ratios.items()
                        if name.startswith("routing_"))
              + "".join(f" {name}={ratio:.3f}" for name, ratio in cpu_ratios.items()))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
