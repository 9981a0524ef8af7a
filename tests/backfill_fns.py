"""Backfill functions for tests, importable by worker processes as ``backfill_fns:NAME``."""

from __future__ import annotations


def fill_region(row: dict) -> dict:
    """region from the payload ("eu:..." -> "eu"), and the scratch column removed."""
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
