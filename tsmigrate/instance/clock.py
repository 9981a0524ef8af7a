"""The instance's own clock: the timestamps Tablestore gives the cells it writes.

Clients' clocks disagree (a host 10 s behind is common enough); the service's does not, with
itself. What must be compared across hosts (how old a heartbeat is, when a fence went up, which
cells changed since a switch) is therefore read from cell timestamps the service wrote, and
"now" is the timestamp of a cell written now.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import tablestore as ts

from tsmigrate.instance import adapter
from tsmigrate.instance.state import STATE_TABLE

CLOCK_KIND = "clock"


def server_now_ms(client: Any) -> int:
    """The service's time now, in ms: a cell written to ``tsmigrate_state`` and read back."""
    key = [("kind", CLOCK_KIND), ("id", f"{socket.gethostname()}:{os.getpid()}")]
    client.put_row(STATE_TABLE, ts.Row(key, [("probe", 1)]),
                   ts.Condition(ts.RowExistenceExpectation.IGNORE))
    _consumed, row, _token = client.get_row(STATE_TABLE, key, ["probe"], max_version=1)
    return int(row.attribute_columns[0][2])


def scan_stamped(client: Any, table: str, first: tuple[str, Any],
                 second: str) -> list[tuple[Any, dict[str, Any], dict[str, int]]]:
    """Every row whose first key column equals ``first``: (second key value, attributes, the
    service's timestamp of each attribute's newest cell)."""
    return [(row.primary_key[1][1], {c[0]: c[1] for c in row.attribute_columns},
             {c[0]: int(c[2]) for c in row.attribute_columns})
            for row in adapter.scan_prefix_rows(client, table, first, second)]
