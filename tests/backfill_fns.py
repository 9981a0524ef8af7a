"""Backfill functions for tests, importable by worker processes as ``backfill_fns:NAME``."""

from __future__ import annotations

import os
import time

# The kill -9 test's run stalls on this row (its n) until it is killed, so the kill always lands
# mid-job, however slow or fast the machine is.
HANG_AT = os.environ.get("BACKFILL_FNS_HANG_AT")


def fill_region(row: dict) -> dict:
    """region from the payload ("eu:..." -> "eu"), and the scratch column removed."""
    if HANG_AT is not None and row["n"] == int(HANG_AT):
        time.sleep(600)  # the process stalls here until the test kills it
    return {"region": row["payload"].split(":", 1)[0], "scratch": None}


def only_payload_seen(row: dict) -> dict:
    """Fails unless the row holds the key and at most the payload (columns=("payload",))."""
    extra = set(row) - {"id", "n", "payload"}
    if extra:
        raise AssertionError(f"saw {sorted(extra)}")
    return {"seen": len(row)}


def refuse_bad(row: dict) -> dict:
    if row["payload"].startswith("bad"):
        raise ValueError("unparseable payload")
    return {"region": row["payload"].split(":", 1)[0]}
