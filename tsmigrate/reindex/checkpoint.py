"""The checkpoint of one search-index reindex: a row of ``tsmigrate_state``.

Keyed ``("reindex", "<table>/<index>")``, it holds the stage the reindex reached, the index
before and after (IR JSON), the traffic weights asked for and how many were applied. Each stage
writes it when it is done, so a process killed at any moment leaves a stage the next run
continues from (every stage can run again without harm; see ``flow``).

Stages, in order::

    create -> build -> verify -> shift -> switch -> drop -> done
"""

from __future__ import annotations

import json
import time
from typing import Any

import attrs

from tsmigrate.instance import adapter
from tsmigrate.instance.state import STATE_TABLE, StateRowError
from tsmigrate.schema import SearchIndex, search_index_from_dict, search_index_to_dict

KIND = "reindex"
SUFFIX = "_reindex"

CREATE, BUILD, VERIFY, SHIFT, SWITCH, DROP, DONE = (
    "create", "build", "verify", "shift", "switch", "drop", "done",
)
STAGES = (CREATE, BUILD, VERIFY, SHIFT, SWITCH, DROP, DONE)
# How long each traffic weight is held by default; also what a checkpoint saved before the hold
# was kept in it resumes with.
DEFAULT_HOLD_S = 60.0


def reindex_name(index: str) -> str:
    """The canary's name: the service requires reindex indexes to end with ``_reindex``."""
    return index + SUFFIX


@attrs.frozen
class Checkpoint:
    table: str
    index: str
    stage: str
    before: SearchIndex
    after: SearchIndex
    weights: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    weights_done: int = 0  # how many of ``weights`` were set
    started_ms: int = 0
    updated_ms: int = 0
    hold_s: float = DEFAULT_HOLD_S  # how long each weight is held (kept for a resume, like the weights)

    @property
    def reindex(self) -> str:
        return reindex_name(self.index)

    @property
    def active(self) -> bool:
        return self.stage != DONE

    def at(self, stage: str, **changes: Any) -> Checkpoint:
        return attrs.evolve(self, stage=stage, updated_ms=_now_ms(), **changes)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _key(table: str, index: str) -> list[tuple[str, Any]]:
    return [("kind", KIND), ("id", f"{table}/{index}")]


def save(client: Any, checkpoint: Checkpoint) -> None:
    adapter.put_row(client, STATE_TABLE, _key(checkpoint.table, checkpoint.index), {
        "stage": checkpoint.stage,
        "before": json.dumps(search_index_to_dict(checkpoint.before), sort_keys=True),
        "after": json.dumps(search_index_to_dict(checkpoint.after), sort_keys=True),
        "weights": json.dumps(list(checkpoint.weights)),
        "weights_done": checkpoint.weights_done,
        "started_ms": checkpoint.started_ms,
        "updated_ms": checkpoint.updated_ms,
        "hold_s": float(checkpoint.hold_s),
    })


def _parse(row_id: str, row: dict[str, Any]) -> Checkpoint:
    table, _, index = row_id.partition("/")
    try:
        stage = row["stage"]
        if stage not in STAGES:
            raise ValueError(f"stage {stage!r} is not one of {', '.join(STAGES)}")
        return Checkpoint(
            table=table, index=index, stage=stage,
            before=search_index_from_dict(json.loads(row["before"])),
            after=search_index_from_dict(json.loads(row["after"])),
            weights=tuple(int(w) for w in json.loads(row.get("weights", "[]"))),
            weights_done=int(row.get("weights_done", 0)),
            started_ms=int(row.get("started_ms", 0)), updated_ms=int(row.get("updated_ms", 0)),
            hold_s=float(row.get("hold_s", DEFAULT_HOLD_S)),
        )
    except Exception as exc:  # any shape of damage: a missing column, bad JSON, a bad IR
        raise StateRowError(
            f"the reindex checkpoint in {STATE_TABLE} (row kind='reindex', id={row_id!r}) is "
            f"malformed ({type(exc).__name__}: {exc}); delete that row, delete the search index "
            f"{reindex_name(index)} of {table} if it exists, and apply again"
        ) from None


def load(client: Any, table: str, index: str) -> Checkpoint | None:
    try:
        row = adapter.get_row(client, STATE_TABLE, _key(table, index))
    except Exception as exc:
        if getattr(exc, "code", "") == "OTSObjectNotExist":  # no state table yet
            return None
        raise
    return _parse(f"{table}/{index}", row) if row else None


def unfinished(client: Any) -> list[Checkpoint]:
    """Every reindex not done yet, in key order."""
    try:
        rows = adapter.scan_prefix(client, STATE_TABLE, ("kind", KIND), "id")
    except Exception as exc:
        if getattr(exc, "code", "") == "OTSObjectNotExist":
            return []
        raise
    checkpoints = [_parse(row_id, row) for row_id, row in rows]
    return [c for c in checkpoints if c.active]
