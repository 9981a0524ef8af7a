"""The rewrite's row in ``tsmigrate_state``, as the engine writes it and services read it.

One row per rewrite, keyed ``(kind="rewrite", id=<target table>)``, columns ``source``, ``phase``
(``tsmigrate.contract.phases``), ``version`` (every write is a compare-and-swap on it) and
``doc``: a JSON object holding the job (``RewriteJob.to_json``) and everything else the engine
keeps (``_DOC_TYPES``). Beside it, each process routing a table under rewrite keeps a heartbeat
row of kind ``rewrite-client`` (``CLIENT_KIND``), id ``<target>/<process>/<table>``.

The engine's reading and writing of the row (leases, compare-and-swap, transitions) is
``tsmigrate.rewrite.machine``; routing's is ``tsmigrate.service.routing``: both judge the row by
``row_problems``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import attrs

from tsmigrate.contract.phases import PHASES, RUNNING_PHASES
from tsmigrate.schema import Table, table_from_dict, table_to_dict

# tsmigrate.instance.state.STATE_TABLE (tests/service/test_service_loads_no_engine.py holds them
# equal), without importing the instance layer into services
STATE_TABLE = "tsmigrate_state"
KIND = "rewrite"  # the rewrite's row
CLIENT_KIND = "rewrite-client"  # a routing process's heartbeat row


def key(target: str) -> list[tuple[str, Any]]:
    """The primary key of the row of the rewrite into ``target``."""
    return [("kind", KIND), ("id", target)]


@attrs.frozen
class RewriteJob:
    """One rewrite: the source table as it is, the target table as declared (key derivations
    included), and the knobs of the copy.

    ``custom`` optionally names a function ``"module:function"`` that maps a row's natural field
    values (a dict) to the values the target key is built from; it is imported in each worker.
    ``created_ms`` is the timestamp given to cells that only existed as key columns in a
    source row that has no attribute cell to take a timestamp from.
    """

    id: str
    source: Table
    target: Table
    max_rows_per_s: float | None = None
    custom: str | None = None
    created_ms: int = attrs.field(factory=lambda: int(time.time() * 1000))

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "source": table_to_dict(self.source),
                "target": table_to_dict(self.target),
                "max_rows_per_s": self.max_rows_per_s,
                "custom": self.custom,
                "created_ms": self.created_ms,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> RewriteJob:
        data = json.loads(text)
        return cls(
            id=data["id"],
            source=table_from_dict(data["source"]),
            target=table_from_dict(data["target"]),
            max_rows_per_s=data.get("max_rows_per_s"),
            custom=data.get("custom"),
            created_ms=data["created_ms"],
        )


# The doc's fields and the JSON types tsmigrate writes them as (None, or absent, is always allowed):
# a hand-edited value of another type would fail far from here, as a KeyError or TypeError.
_NUMBER = (int, float)
_DOC_TYPES: dict[str, tuple[type, ...]] = {
    "job": (str,), "key_change": (str,), "error": (str,), "wants_runner": (str,),
    "resume_to": (str,), "finish_from": (str,), "no_revert": (str,),
    "runner": (dict,), "estimate": (dict,), "backfill": (dict,), "verification": (dict,),
    "capture": (dict,), "capture_stats": (dict,), "fence": (dict,), "stream_was": (dict,),
    "target_stream_was": (dict,), "reverse_capture": (dict,), "reverse_stats": (dict,),
    "capture_error": (str,), "reverse_error": (str,),
    "touched_splits": (list,),
    # The late-write net (``late``): what it watches and from where, its counts, what was accepted
    "late_net": (dict,), "late_stats": (dict,), "late_error": (str,), "conflicts_accepted": (list,),
    "late_lag_s": _NUMBER, "late_at_ms": _NUMBER, "fence_server_ms": _NUMBER, "routing_ack_s": _NUMBER,
    "created_server_ms": _NUMBER,
    "created_ms": _NUMBER, "updated_ms": _NUMBER, "fence_ms": _NUMBER, "fence_version": _NUMBER,
    "routing_lease_s": _NUMBER, "previous_lease_s": _NUMBER, "capture_lag_s": _NUMBER,
    "declared_deviation": _NUMBER, "source_declared_deviation": _NUMBER,
    "backfill_started_ms": _NUMBER, "reverse_lag_s": _NUMBER, "capture_at_ms": _NUMBER,
    "reverse_at_ms": _NUMBER,
}
_TYPE_NAMES = {str: "a string", dict: "an object", list: "a list", int: "a number"}


def row_problems(columns: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """What is wrong with a rewrite row's columns (none: as tsmigrate writes it), and its doc."""
    problems: list[str] = []
    source = columns.get("source")
    if not isinstance(source, str) or not source:
        problems.append("column 'source' is missing" if source is None
                        else f"column 'source' is {source!r}, not a table name")
    phase = columns.get("phase")
    if phase not in PHASES:
        problems.append("column 'phase' is missing" if phase is None
                        else f"column 'phase' is {phase!r}, not one of {', '.join(PHASES)}")
    version = columns.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        problems.append("column 'version' is missing" if version is None
                        else f"column 'version' is {version!r}, not an integer")
    doc: Any = {}
    text = columns.get("doc", "{}")
    try:
        doc = json.loads(text) if isinstance(text, str) else None
    except ValueError as exc:
        problems.append(f"column 'doc' is not JSON ({exc})")
        return problems, {}
    if not isinstance(doc, dict):
        problems.append(f"column 'doc' is {text!r}, not a JSON object")
        return problems, {}
    for name, kinds in _DOC_TYPES.items():
        value = doc.get(name)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            problems.append(f"doc field {name!r} is {value!r}, not {_TYPE_NAMES[kinds[0]]}")
    for name, allowed_phases in (("resume_to", RUNNING_PHASES), ("finish_from", PHASES)):
        if isinstance(doc.get(name), str) and doc[name] not in allowed_phases:
            problems.append(f"doc field {name!r} is {doc[name]!r}, not a phase")
    runner = doc.get("runner")
    if isinstance(runner, dict) and not (isinstance(runner.get("owner"), str)
                                         and isinstance(runner.get("expires_ms"), _NUMBER)):
        problems.append(f"doc field 'runner' is {runner!r}, not an owner and an expires_ms")
    if "job" not in doc:
        problems.append("doc field 'job' is missing")
    return problems, doc
