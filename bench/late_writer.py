"""A service process of ``bench/cutover.py --faults``: puts rows of its own through ``Rows`` (or
the raw SDK, ``--raw``) and prints each acknowledged one as ``ACK seq note`` (flushed), so the
bench can check every one of them after `finish`, whatever was done to this process meanwhile
(SIGSTOP, a request held in the network: ``--hold-one SECONDS`` once ``--hold-when FILE`` exists).

    python bench/late_writer.py ENDPOINT INSTANCE TABLE DEVICE [--raw] [--every S]
                                [--hold-one S --hold-when FILE]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

logging.getLogger("tablestore").addHandler(logging.NullHandler())

import tablestore as ts  # noqa: E402
from cutover import Counter  # noqa: E402

from tsmigrate.local.testing import HeldRequest  # noqa: E402
from tsmigrate.rewrite.job import ConnectionSpec  # noqa: E402
from tsmigrate.service import Rows  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("endpoint")
    parser.add_argument("instance")
    parser.add_argument("table")
    parser.add_argument("device")
    parser.add_argument("--raw", action="store_true", help="raw SDK puts to TABLE, not Rows")
    parser.add_argument("--hold-one", type=float, default=0.0,
                        help="hold one put this long in the network: the first sent once --hold-when exists")
    parser.add_argument("--hold-when", default="", help="a file the bench creates when the put is to be held")
    parser.add_argument("--every", type=float, default=0.02)
    args = parser.parse_args()
    client = ConnectionSpec(args.endpoint, args.instance).client()
    held = HeldRequest(client, "PutRow", marker=b"hold-me", hold_s=args.hold_one) if args.hold_one else None
    rows = Rows(Counter, client)
    seq = 0
    holding = False
    while True:
        seq += 1
        hold = held is not None and not holding and os.path.exists(args.hold_when)
        holding = holding or hold
        note = f"hold-me {seq}" if hold else f"n{seq}"
        try:
            if args.raw:
                client.put_row(args.table, ts.Row([("device", args.device), ("seq", seq)],
                                                  [("count", seq), ("note", note)]),
                               ts.Condition(ts.RowExistenceExpectation.IGNORE))
            else:
                rows.put(Counter(device=args.device, seq=seq, count=seq, note=note))
        except Exception as exc:  # not acknowledged: not the bench's to check
            print(f"ERR {seq} {type(exc).__name__}", flush=True)
        else:
            print(f"ACK {seq} {note}", flush=True)
        time.sleep(args.every)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
