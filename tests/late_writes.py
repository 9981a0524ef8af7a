"""The late-write tests' check: every acknowledged write is in the final table with its last
value, or named as a conflict (a request held in the network: ``local.testing.HeldRequest``)."""

from __future__ import annotations

from typing import Any

import cutover_tables as ct

from tsmigrate.rewrite import late


def newest(client: Any, table: str, key: list) -> dict[str, Any] | None:
    _, row, _ = client.get_row(table, key, max_version=1)
    return None if row is None else {c[0]: c[1] for c in row.attribute_columns}


def missing(client: Any, acked: dict[int, str], *, table: str = ct.TARGET) -> list[int]:
    """The acknowledged notes (seq -> note, device "late") neither in ``table`` with their last
    value nor named by a conflict of the rewrite."""
    named = {c["key"] for c in late.conflicts(client, ct.TARGET)}
    lost = []
    for seq, note in acked.items():
        key = [("seq", seq), ("device", "late")] if table == ct.TARGET else \
            [("device", "late"), ("seq", seq)]
        row = newest(client, table, key)
        if (row or {}).get("note") != note and f"(device='late', seq={seq})" not in named:
            lost.append(seq)
    return lost
