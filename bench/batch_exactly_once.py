"""A batch write of 50,000 rows under injected throttling and per-row failures lands exactly once.

The server runs in its own process with faults injected (`--fault`): whole BatchWriteRow
requests answered OTSServerBusy, single rows of a batch failing, and requests carried out but
answered OTSTimeout (the answer lost: such a request is sent again whole, since nothing says
which rows landed; puts are safe to repeat). The model layer writes the rows; a counting client
records the service's answer for every row. Checked: every row was answered "succeeded" exactly
once (rows that failed were sent again, rows that succeeded never), and a scan finds exactly the
rows written, each with its own values. The suite runs the same check on 3,000 rows
(tests/service/test_batch.py); this is the full-size run.

    python bench/batch_exactly_once.py [--rows 50000] [--fault SPEC]

Last line: rows=N written=N succeeded_once=N resent=N seconds=S ok=True
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

logging.getLogger("tablestore").addHandler(logging.NullHandler())

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "service"))

from batching import AnswerCountingClient  # noqa: E402
from serve import AK_ID, AK_SECRET, INSTANCE, start_server  # noqa: E402

from tsmigrate import Column, Model, PrimaryKey  # noqa: E402
from tsmigrate.instance.retry import TsmigrateRetryPolicy  # noqa: E402
from tsmigrate.keys import HashPrefix  # noqa: E402
from tsmigrate.service import Rows, create_tables  # noqa: E402

FAULTS = "server_busy@BatchWriteRow=0.1,done_timeout@BatchWriteRow=0.05,batch_row=0.05,seed=13"


class Reading(Model, table="exactly_once"):
    pk = PrimaryKey(str, derive=HashPrefix("device_id", length=4))
    ts = PrimaryKey(int)
    device_id = Column(str)
    value = Column(int)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--fault", default=FAULTS)
    args = parser.parse_args()
    # The faults hit BatchWriteRow only, so creating the table is not disturbed.
    proc, endpoint = start_server("--memory", "--fault", args.fault)
    try:
        client = AnswerCountingClient(endpoint, AK_ID, AK_SECRET, INSTANCE,
                                      retry_policy=TsmigrateRetryPolicy(base_delay_s=0.005,
                                                                        throttled_delay_s=0.01))
        create_tables(client, [Reading])
        policy = TsmigrateRetryPolicy(max_retries=30, base_delay_s=0.005, throttled_delay_s=0.01,
                                      max_delay_s=0.5)
        rows = Rows(Reading, client, retry=policy)
        started = time.perf_counter()
        result = rows.batch_write(put=(Reading(device_id=f"dev-{i % 97}", ts=i, value=i * 7)
                                       for i in range(args.rows)))
        seconds = time.perf_counter() - started
        stored = {(r.device_id, r.ts): r.value for r in Rows(Reading, client).query()}
        expected = {(f"dev-{i % 97}", i): i * 7 for i in range(args.rows)}
        once = sum(1 for n in client.succeeded.values() if n == 1)
        resent = sum(client.sent.values()) - args.rows
        ok = (result.ok and result.written == args.rows and stored == expected
              and once == args.rows == len(client.succeeded))
        print(f"faults: {args.fault}")
        print(f"rows={args.rows} written={result.written} succeeded_once={once} resent={resent} "
              f"seconds={seconds:.1f} ok={ok}")
        if not ok:
            raise SystemExit(1)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
