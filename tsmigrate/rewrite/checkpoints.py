"""Per-split progress in the state table, written by the split task itself.

One row per split, ``("rewrite-split", "<job id>/<split index>")``, rewritten after every page
whose rows are all written: the next source key to read, the rows, bytes and digest so far, and
``running`` or ``done``. A task that dies loses at most the page it was writing; the next run of
the split (in this process, another, or a Dask worker) starts at the recorded key, so nothing is
lost and, since the counts only ever cover whole pages, nothing is counted twice. Rewriting a
page's rows again is harmless: a put of the same cells with the same timestamps.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import attrs
from tablestore import OTSClient

from tsmigrate.instance import adapter
from tsmigrate.instance.state import STATE_TABLE, StateRowError

KIND = "rewrite-split"
STOP_KIND = "rewrite-stop"  # ("rewrite-stop", job id): split tasks stop at their next page
RUNNING, DONE = "running", "done"
PENDING = "pending"  # no row yet


@attrs.frozen
class SplitCheckpoint:
    index: int
    status: str = PENDING
    next_start: bytes | None = None  # PlainBuffer key to read from; None: from the split's start
    rows: int = 0
    bytes: int = 0
    digest: int = 0
    updated_ms: int = 0
    worker: str = ""
    changed: int = 0  # a data migration's rows changed (the rows it read are ``rows``)

    @property
    def done(self) -> bool:
        return self.status == DONE


def split_id(job_id: str, index: int) -> str:
    return f"{job_id}/{index:06d}"


def _key(job_id: str, index: int) -> list[tuple[str, Any]]:
    return [("kind", KIND), ("id", split_id(job_id, index))]


_COUNTS = ("rows", "bytes", "updated_ms", "changed")


def _problems(columns: dict[str, Any]) -> list[str]:
    problems = []
    if columns.get("status", PENDING) not in (RUNNING, DONE, PENDING):
        problems.append(f"column 'status' is {columns['status']!r}, not {RUNNING} or {DONE}")
    for name in _COUNTS:
        value = columns.get(name, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"column {name!r} is {value!r}, not a count")
    digest = columns.get("digest", "0")
    try:
        int(digest, 16)
    except (TypeError, ValueError):
        problems.append(f"column 'digest' is {digest!r}, not a hexadecimal number")
    start = columns.get("next_start")
    if start is not None and not isinstance(start, (bytes, bytearray)):
        problems.append(f"column 'next_start' is {start!r}, not a binary key")
    if not isinstance(columns.get("worker", ""), str):
        problems.append(f"column 'worker' is {columns['worker']!r}, not a string")
    return problems


def _from_columns(job_id: str, index: int, columns: dict[str, Any]) -> SplitCheckpoint:
    problems = _problems(columns)
    if problems:
        row_id = split_id(job_id, index)
        raise StateRowError(
            f"the split checkpoint (kind={KIND!r}, id={row_id!r}) of {STATE_TABLE} is malformed: "
            f"{'; '.join(problems)}. Remove it with `tsmigrate state remove {KIND} {row_id} --force` "
            "(no rewrite may be running): the split is then copied again from its start"
        )
    start = columns.get("next_start")
    return SplitCheckpoint(
        index=index,
        status=columns.get("status", PENDING),
        next_start=bytes(start) if start else None,
        rows=columns.get("rows", 0),
        bytes=columns.get("bytes", 0),
        digest=int(columns.get("digest", "0"), 16),
        updated_ms=columns.get("updated_ms", 0),
        worker=columns.get("worker", ""),
        changed=columns.get("changed", 0),
    )


def load(client: OTSClient, job_id: str, index: int) -> SplitCheckpoint:
    columns = adapter.get_row(client, STATE_TABLE, _key(job_id, index))
    return _from_columns(job_id, index, columns) if columns else SplitCheckpoint(index)


def save(client: OTSClient, job_id: str, checkpoint: SplitCheckpoint) -> None:
    columns: dict[str, Any] = {
        "status": checkpoint.status,
        "rows": checkpoint.rows,
        "bytes": checkpoint.bytes,
        "digest": f"{checkpoint.digest:032x}",
        "updated_ms": int(time.time() * 1000),
        "worker": f"{socket.gethostname()}:{os.getpid()}",
    }
    if checkpoint.changed:
        columns["changed"] = checkpoint.changed
    if checkpoint.next_start is not None:
        columns["next_start"] = bytearray(checkpoint.next_start)  # BINARY
    adapter.put_row(client, STATE_TABLE, _key(job_id, index=checkpoint.index), columns)


def list_splits(client: OTSClient, job_id: str) -> list[SplitCheckpoint]:
    """Every split checkpoint of the job (splits never started have none)."""
    out = []
    start = [("kind", KIND), ("id", job_id + "/")]
    end = [("kind", KIND), ("id", job_id + "0")]  # "0" follows "/": the job's rows only
    while start:
        _, start, rows, _ = client.get_range(STATE_TABLE, "FORWARD", start, end, max_version=1)
        for row in rows:
            row_id = row.primary_key[1][1]
            suffix = row_id.rpartition("/")[2]
            if not suffix.isdigit():
                raise StateRowError(
                    f"the split checkpoint (kind={KIND!r}, id={row_id!r}) of {STATE_TABLE} has no "
                    f"split number after its job id; remove it with "
                    f"`tsmigrate state remove {KIND} {row_id} --force`")
            out.append(_from_columns(job_id, int(suffix),
                                     {n: v for n, v, *_ in row.attribute_columns}))
    return out


def split_done(client: OTSClient, job_id: str, index: int) -> bool:
    return load(client, job_id, index).done


def clear(client: OTSClient, job_id: str) -> None:
    """Forget the job's split checkpoints (abort)."""
    for checkpoint in list_splits(client, job_id):
        adapter.delete_row(client, STATE_TABLE, _key(job_id, checkpoint.index))
    clear_stop(client, job_id)


# -- stopping the split tasks -------------------------------------------------------------------


def request_stop(client: OTSClient, job_id: str) -> None:
    """Ask every running split task of the job (threads, processes, Dask workers) to stop after
    the page it is writing; their checkpoints keep where they were."""
    key = [("kind", STOP_KIND), ("id", job_id)]
    adapter.put_row(client, STATE_TABLE, key, {"at_ms": int(time.time() * 1000)})


def clear_stop(client: OTSClient, job_id: str) -> None:
    adapter.delete_row(client, STATE_TABLE, [("kind", STOP_KIND), ("id", job_id)])


def stop_requested(client: OTSClient, job_id: str) -> bool:
    return adapter.get_row(client, STATE_TABLE, [("kind", STOP_KIND), ("id", job_id)]) is not None
