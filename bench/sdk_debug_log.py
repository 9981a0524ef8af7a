"""What the SDK's debug-log formatting costs a service on the model layer (``tsmigrate.service.Rows``).

The SDK (tablestore 6.4.8) formats every request it encodes as protobuf text for its debug log
when its client's logger (``tablestore-client``, ``OTSClient.DEFAULT_LOGGER_NAME``, unless the
client was given ``logger_name=``) has no level of its own (``logger.level <= DEBUG``: the
logger's own level, NOTSET included, not the level it inherits), whether or not a handler would
print it. Setting that logger's level (INFO) skips it; a level on ``tablestore``, another
logger, does not.
``Rows.batch_write`` and ``query`` send requests tsmigrate encodes itself, which the SDK never
formats; put, get, update, delete and batch_get go through the SDK's encoder. The
server runs in its own process (`tsmigrate local serve --memory`); each workload (put, get,
update, query, batch_write, batch_get) alternates blocks with the logger left unset and set to
INFO, several rounds.
The last line gives, per workload, the client CPU per row with the level unset over the same with
INFO (medians of interleaved blocks; 1.0: the setting saves nothing):

put_unset_vs_info=X get_unset_vs_info=Y update_unset_vs_info=U query_unset_vs_info=Q batch_unset_vs_info=B \
batch_get_unset_vs_info=G

    python bench/sdk_debug_log.py [--rows 1000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable

logging.getLogger("tablestore").addHandler(logging.NullHandler())  # its import-time warnings

import tablestore as ts  # noqa: E402
from model_api import BenchRow, model_workloads  # noqa: E402
from serve import AK_ID, AK_SECRET, INSTANCE, start_server  # noqa: E402

from tsmigrate.service import Rows, create_tables  # noqa: E402

SDK_LOGGER = logging.getLogger(ts.OTSClient.DEFAULT_LOGGER_NAME)


def cpu_per_row(work: Callable[[], int], level: int) -> float:
    """Client CPU seconds per row of one block of ``work`` with the SDK's logger at ``level``."""
    SDK_LOGGER.setLevel(level)
    cpu = time.process_time()
    count = work()
    return (time.process_time() - cpu) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows per block (batch, query)")
    parser.add_argument("--rounds", type=int, default=20, help="pairs of blocks per workload")
    args = parser.parse_args()
    proc, endpoint = start_server("--memory")
    try:
        client = ts.OTSClient(endpoint, AK_ID, AK_SECRET, INSTANCE)
        create_tables(client, [BenchRow])
        rows = Rows(BenchRow, client)
        n = args.rows
        singles = max(1, n // 50)

        workloads = model_workloads(rows, n, singles)
        workloads["batch"]()  # load the table for reads
        blocks: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in workloads}
        for pair in range(args.rounds):
            for name, work in workloads.items():
                unset, info = blocks[name]
                if pair % 2:
                    info.append(cpu_per_row(work, logging.INFO))
                    unset.append(cpu_per_row(work, logging.NOTSET))
                else:
                    unset.append(cpu_per_row(work, logging.NOTSET))
                    info.append(cpu_per_row(work, logging.INFO))
        ratios = {}
        for name, (unset, info) in blocks.items():
            ratios[f"{name}_unset_vs_info"] = statistics.median(unset) / statistics.median(info)
            print(f"{name}: client CPU {statistics.median(unset) * 1e6:.1f} us/row with the level "
                  f"unset, {statistics.median(info) * 1e6:.1f} with INFO (medians of {args.rounds} "
                  "blocks)")
        print(" ".join(f"{name}={ratio:.3f}" for name, ratio in ratios.items()))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
