"""The net for late writes: the table that no longer takes writes stays watched until the cut-over
ends, and every change there that tsmigrate did not make is carried over or named.

Tablestore has no fence in the store: a write already on its way when ``switch`` raises its fence
(a paused process, a request held in the network, a client with a skewed clock, a script on the
raw SDK) still lands on the old side. Every write is in that table's stream, so each can be found:

- after ``switch`` the source is watched (from where capture drained under the fence) until
  ``finish``; after ``revert`` the target, until the next ``switch`` or ``abort``;
- a watched record whose cells the side of record already has (same column, timestamp and bytes)
  is tsmigrate's own write (reverse or forward capture copying the side of record) or one already
  carried: nothing to do. Own writes are recognised by what they are, not by when they came;
- otherwise, column by column (``settle_column``): a column the side of record did not change
  since the switch takes the late cells (with their timestamps) and loses the versions the late
  write removed; a column changed on both sides since the switch is a **conflict**: the side of
  record keeps its value, the watched side is given that value too (so the tables agree again),
  and the conflict (key, column, both values with their timestamps, which stands) is kept in
  ``tsmigrate_state`` (kind ``rewrite-late``) until accepted. Increments and conditional writes
  cannot be merged by any rule, which is why a conflict is named, never guessed;
- "changed since the switch" is read from cell timestamps, which the service stamps: a version of
  the side of record at or after ``since_ms`` (the service's time just before the switch was
  recorded) that the net did not carry there itself, or a version older than the switch that the
  side of record no longer has.

``finish`` (and ``abort`` after a revert, and the next ``switch``) waits until the net has read
past the fence by longer than a request can take to be acknowledged (``bound_s``: the routing
lease plus the acknowledgement bound ``routes.ACK_S``, or the longest request timeout a routing
process reported when that is shorter, plus a margin), drains it, and refuses while conflicts
are not accepted. The net never runs ahead of the capture that writes the side it watches (see
``settle``): what that capture has not copied yet is not late.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

import attrs

from tsmigrate.contract import routes
from tsmigrate.contract.rowbytes import cell_value
from tsmigrate.contract.transform import format_key
from tsmigrate.errors import TsmigrateError
from tsmigrate.instance import adapter, clock
from tsmigrate.instance.state import STATE_TABLE
from tsmigrate.rewrite import machine, shards
from tsmigrate.rewrite.capture import (
    COUNTS,
    Capture,
    Change,
    Encoded,
    Key,
    Record,
    Stats,
    _TargetRow,
)

LATE_KIND = "rewrite-late"
NET = "late_net"  # the doc key of the net's position (a capture position, plus what it watches)
ROW = "*"  # the column of a conflict about the whole row
KEY_TEXT_MAX = 900  # longer key texts are hashed in the state row's key (1 KB at most there)
# A routing process that reports no request timeout talks through an SDK client with its
# default socket_timeout (tablestore.OTSClient.DEFAULT_SOCKET_TIMEOUT).
SDK_REQUEST_TIMEOUT_S = routes.SDK_SOCKET_TIMEOUT_S
MARGIN_S = 0.5  # the stream shows a record a moment after its write is acknowledged
DRAIN_S = 60.0  # the most a pass waits for the net to reach its stream's end
POLL_S = 0.25
SAVE_EVERY_S = 1.0

Report = Callable[[str, dict[str, Any]], None]
CARRY, CONFLICT = "carry", "conflict"


class Conflicts(machine.RewriteError):
    """Late writes the net could not carry over are not accepted yet."""


# --- the rule, per column -------------------------------------------------------------------


def settle_column(watched: dict[int, Encoded], record: dict[int, Encoded], *, since_ms: int,
                  until: int, carried: set[int], written: set[int]) -> str | None:
    """What a late change of one column asks for: ``CARRY``, ``CONFLICT`` or None (nothing late:
    the side of record already has the watched side's versions).

    ``watched``/``record``: the column's versions on each side (timestamp -> encoded cell);
    ``until``: the late change's time (versions of the side of record not newer than it that the
    watched side lacks were removed by it); ``carried``: timestamps the net itself carried into
    the side of record; ``written``: timestamps the late records wrote."""
    # A watched version older than one the side of record wrote since the switch is taken as
    # superseded there: capture's copy of a version the side of record has since replaced looks
    # the same, and the timestamps order the two writes anyway. (One of the same timestamp but
    # other bytes is no copy.)
    newer = max((stamp for stamp in record if stamp >= since_ms and stamp not in carried), default=0)
    put = [stamp for stamp, cell in watched.items() if record.get(stamp) != cell and stamp >= newer]
    removed = [stamp for stamp in record if stamp not in watched and stamp <= until]
    if not put and not removed:
        return None
    if _newest(watched) is not None and _newest(watched) == _newest(record):
        return None  # the same newest value on both sides: nothing a reader could tell apart
    changed = any(stamp >= since_ms and stamp not in carried for stamp in record) or any(
        stamp < since_ms and stamp not in record and stamp not in written for stamp in watched)
    return CONFLICT if changed else CARRY


def _newest(versions: dict[int, Encoded]) -> Any:
    if not versions:
        return None
    return cell_value(versions[max(versions)][0])


def _columns(row: _TargetRow | dict[tuple[str, int], Encoded]) -> dict[str, dict[int, Encoded]]:
    cells = row.cells if isinstance(row, _TargetRow) else row
    out: dict[str, dict[int, Encoded]] = {}
    for (name, stamp), encoded in cells.items():
        out.setdefault(name, {})[stamp] = encoded
    return out


# --- the net --------------------------------------------------------------------------------


@attrs.define
class LateChange(Change):
    """``Change``, keeping the cells the records wrote (name, timestamp)."""

    written: set[tuple[str, int]] = attrs.field(factory=set)

    def add(self, record: Record, when: int, old: Key | None) -> None:
        super().add(record, when, old)
        self.written.update(cell for cell in record.cells if cell[1])


@attrs.define
class NetStats(Stats):
    """Capture's stats, and the net's counts over the whole cut-over (kept from net to net)."""

    late_writes: int = 0  # keys at which a late write was found
    carried: int = 0  # versions carried to the side of record (put, or removed)
    conflicts: int = 0


@attrs.define
class _KeyState:
    """What ``tsmigrate_state`` keeps of one watched key: the versions the net carried into the
    side of record, and the conflicts found there."""

    carried: set[tuple[str, int]] = attrs.field(factory=set)
    conflicts: list[dict[str, Any]] = attrs.field(factory=list)
    changed: bool = False


class LateWrites(Capture):
    """Reads the watched side's stream (``job.source``) into the side of record (``job.target``)
    by the net's rule (module docstring) instead of capture's."""

    change_type = LateChange

    def __init__(self, client: Any, job: Any, transform: Any, position: dict[str, Any], *,
                 rewrite: str, since_ms: int, writer: Any, stats: dict[str, Any] | None = None):
        super().__init__(client, job, transform, position, split_of=lambda _key: 0,
                         split_done=lambda _index: True, writer=writer, touched=None)
        self.rewrite = rewrite
        self.since_ms = since_ms
        kept = {k: v for k, v in (stats or {}).items() if k in ("late_writes", "carried", "conflicts")}
        self.stats = NetStats(**kept)

    def _counts(self) -> tuple[str, ...]:
        return (*COUNTS, "late_writes", "carried", "conflicts")

    def _sync_batch(self, batch: dict[Key, Change]) -> dict[Key, Change]:
        watched = self.job.source
        planned, rows = self._read_batch(batch)
        repairs: dict[Key, _TargetRow] = {}
        states: dict[Key, _KeyState] = {}
        for source_key, change, row, cells, new_key in planned:
            assert isinstance(change, LateChange)
            mapped = {(c[0], c[1]): (c[2], c[3]) for c in cells}
            outcome = self._settle_key(source_key, change, row, new_key, mapped, rows, states)
            if outcome is not None:
                repairs[source_key] = outcome
        for source_key, state in states.items():
            if state.changed:  # before the writes: a version carried is known as the net's own
                _save_key_state(self.client, self.rewrite, watched.name, source_key, state)
        refused = set(self._write(rows.values()))
        again: dict[Key, Change] = {}
        for source_key, change, _row, _cells, new_key in planned:
            if refused.intersection([new_key, *change.olds]):
                again[source_key] = change
            else:
                self._carried(source_key)
        for key in self._write([r for k, r in repairs.items() if k not in again], watched):
            again[key] = batch[key]
        return again

    def _settle_key(self, source_key: Key, change: LateChange, row: Any, new_key: Key | None,
                    mapped: dict[tuple[str, int], Encoded], rows: dict[Key, _TargetRow],
                    states: dict[Key, _KeyState]) -> _TargetRow | None:
        """Carry or name what is late at ``source_key``; the watched row as it must become when
        a conflict gives it the side of record's value (None: it stays)."""
        targets = [(new_key, mapped, self._touched(change, new_key), None)] if new_key else []
        for old, when in change.olds.items():
            if old != new_key and self._owned(rows[old], source_key):
                targets.append((old, {}, None, when))  # the row left that key: every column
        repair = _TargetRow.read(source_key, row)
        repaired = False
        for key, cells, names, until in targets:
            target = rows[key]
            sides = _columns(cells), _columns(target)
            columns = [n for n in dict.fromkeys([*sides[0], *sides[1]]) if names is None or n in names]
            found = {n: self._column(n, sides, change, until, states, source_key) for n in columns}
            found = {n: what for n, what in found.items() if what is not None}
            if not target.existed and cells and self._was_deleted(cells, change):
                found = {ROW: CONFLICT}
            elif not target.existed and key == new_key and row is not None and not cells:
                found = {ROW: CARRY}  # a late row of a key and no cells
            if not found:
                continue
            state = self._state(states, source_key)
            self.stats.late_writes += 1
            for name, what in found.items():
                if what == CARRY and name != ROW:
                    self._carry(target, name, sides[0].get(name, {}), sides[1].get(name, {}),
                                until if until is not None else change.time, state)
                elif what == CONFLICT:
                    self._conflict(source_key, key, name, sides, state)
                    repaired |= self._repair(repair, name, sides[1])
            if CARRY in found.values():
                target.exists = bool(target.cells) or (key == new_key and row is not None)
        return repair if repaired else None

    def _state(self, states: dict[Key, _KeyState], source_key: Key) -> _KeyState:
        """What ``tsmigrate_state`` keeps of ``source_key``, read once per batch."""
        if source_key not in states:
            states[source_key] = _load_key_state(self.client, self.rewrite, self.job.source.name,
                                                 source_key)
        return states[source_key]

    def _touched(self, change: LateChange, key: Key | None) -> set[str] | None:
        """The columns a change touched at its key (None: every one: a whole row was put or
        deleted, or the row arrived at the key)."""
        if change.row_time is not None or change.arrived or any(o != key for o in change.olds):
            return None
        return set(change.columns)

    def _column(self, name: str, sides: tuple[dict, dict], change: LateChange, until: int | None,
                states: dict[Key, _KeyState], source_key: Key) -> str | None:
        when = until if until is not None else change.column_time(name)
        if when is None:
            when = change.time
        watched, record = sides[0].get(name, {}), sides[1].get(name, {})
        quick = settle_column(watched, record, since_ms=self.since_ms, until=when, carried=set(),
                              written={s for n, s in change.written if n == name})
        if quick != CONFLICT:
            return quick
        # A version only the net put there is not a change of the side of record's own.
        state = self._state(states, source_key)
        return settle_column(watched, record, since_ms=self.since_ms, until=when,
                             carried={s for n, s in state.carried if n == name},
                             written={s for n, s in change.written if n == name})

    def _was_deleted(self, cells: dict[tuple[str, int], Encoded], change: LateChange) -> bool:
        """The side of record lacks a row the watched side has from before the switch: removed
        there since (the late write only added to it)."""
        return any(stamp < self.since_ms and (name, stamp) not in change.written
                   for name, stamp in cells)

    def _owned(self, row: _TargetRow, source_key: Key) -> bool:
        """Whether the row at a key the watched row left still belongs to it."""
        if not row.exists:
            return False
        try:
            owner = self.transform.source_key_of(list(row.key),
                                                 row.values_of(self.transform.recover_columns))
        except TsmigrateError:
            return False
        return tuple((n, v) for n, v in owner) == source_key

    def _carry(self, target: _TargetRow, name: str, watched: dict[int, Encoded],
               record: dict[int, Encoded], until: int, state: _KeyState) -> None:
        for stamp, encoded in watched.items():
            if record.get(stamp) != encoded:
                target.cells[(name, stamp)] = encoded
                state.carried.add((name, stamp))
                state.changed = True
                self.stats.carried += 1
        for stamp in record:
            if stamp not in watched and stamp <= until:
                target.cells.pop((name, stamp), None)
                self.stats.carried += 1

    def _conflict(self, source_key: Key, key: Key, name: str, sides: tuple[dict, dict],
                  state: _KeyState) -> None:
        watched = sides[0].get(name, {}) if name != ROW else {}
        record = sides[1].get(name, {}) if name != ROW else {}
        late = _cell_json(watched)
        kept = _cell_json(record)
        seen = {(c["column"], (c.get("late") or {}).get("ts")) for c in state.conflicts}
        if (name, (late or {}).get("ts")) in seen:
            return
        state.conflicts.append({
            "key": format_key(source_key), "record_key": format_key(key), "column": name,
            "late": {"table": self.job.source.name, **(late or {"deleted": True})},
            "record": {"table": self.job.target.name, **(kept or {"deleted": True})},
            "stands": self.job.target.name, "at_ms": machine.now_ms(), "accepted": False,
        })
        state.changed = True
        self.stats.conflicts += 1

    def _repair(self, repair: _TargetRow, name: str, record: dict[str, dict[int, Encoded]]) -> bool:
        """The watched row takes the side of record's versions of a conflicting column, so the
        two tables agree again (the late value is kept in the conflict). Columns that exist on
        one side only (fields of the old key) are left."""
        if name == ROW:
            repair.cells.clear()
            repair.exists = False
            return repair.existed
        if name in self.transform.dropped or name in self.transform.added:
            return False
        for version in [v for v in repair.cells if v[0] == name]:
            del repair.cells[version]
        for stamp, encoded in record.get(name, {}).items():
            repair.cells[(name, stamp)] = encoded
        repair.exists = repair.existed or bool(repair.cells)
        return True


def _cell_json(versions: dict[int, Encoded]) -> dict[str, Any] | None:
    if not versions:
        return None
    stamp = max(versions)
    value = cell_value(versions[stamp][0])
    if isinstance(value, (bytes, bytearray)):
        value = {"base64": base64.b64encode(bytes(value)).decode()}
    return {"value": value, "ts": stamp}


# --- what tsmigrate_state keeps per key ------------------------------------------------------


def _state_key(rewrite: str, watched: str, source_key: Key) -> list[tuple[str, Any]]:
    text = format_key(source_key)
    if len(text.encode()) > KEY_TEXT_MAX:
        text = "sha1:" + hashlib.sha1(text.encode()).hexdigest()
    return [("kind", LATE_KIND), ("id", f"{rewrite}/{watched}/{text}")]


def _load_key_state(client: Any, rewrite: str, watched: str, source_key: Key) -> _KeyState:
    row = adapter.get_row(client, STATE_TABLE, _state_key(rewrite, watched, source_key))
    if not row:
        return _KeyState()
    return _KeyState({(n, int(s)) for n, s in json.loads(row.get("carried") or "[]")},
                     list(json.loads(row.get("conflicts") or "[]")))


def _save_key_state(client: Any, rewrite: str, watched: str, source_key: Key,
                    state: _KeyState) -> None:
    adapter.put_row(client, STATE_TABLE, _state_key(rewrite, watched, source_key), {
        "key": format_key(source_key),
        "carried": json.dumps(sorted(state.carried)),
        "conflicts": json.dumps(state.conflicts),
    })


def _late_rows(client: Any, rewrite: str) -> list[tuple[str, dict[str, Any]]]:
    with contextlib.suppress(Exception):
        return [(str(key), columns)
                for key, columns in adapter.scan_prefix(client, STATE_TABLE, ("kind", LATE_KIND), "id")
                if str(key).startswith(f"{rewrite}/")]
    return []


def conflicts(client: Any, rewrite: str) -> list[dict[str, Any]]:
    """Every conflict the nets of the rewrite into ``rewrite`` found, oldest first."""
    found = [c for _key, row in _late_rows(client, rewrite)
             for c in json.loads(row.get("conflicts") or "[]")]
    return sorted(found, key=lambda c: c.get("at_ms", 0))


def unaccepted(client: Any, rewrite: str) -> list[dict[str, Any]]:
    return [c for c in conflicts(client, rewrite) if not c.get("accepted")]


def accept(client: Any, rewrite: str) -> list[dict[str, Any]]:
    """Mark every conflict accepted; the ones that were not, as they were."""
    newly = []
    for key, row in _late_rows(client, rewrite):
        listed = json.loads(row.get("conflicts") or "[]")
        fresh = [c for c in listed if not c.get("accepted")]
        if not fresh:
            continue
        newly += fresh
        for c in listed:
            c["accepted"] = True
        adapter.put_row(client, STATE_TABLE, [("kind", LATE_KIND), ("id", key)],
                        {**row, "conflicts": json.dumps(listed)})
    return newly


def forget(client: Any, rewrite: str) -> None:
    """The net's rows of an aborted rewrite (a finished one keeps its conflicts on record)."""
    for key, _row in _late_rows(client, rewrite):
        with contextlib.suppress(Exception):
            adapter.delete_row(client, STATE_TABLE, [("kind", LATE_KIND), ("id", key)])


def describe(conflict: dict[str, Any]) -> str:
    """One conflict as a line: key, column, both values, which stands."""
    late, kept = conflict.get("late") or {}, conflict.get("record") or {}

    def side(cell: dict[str, Any]) -> str:
        if cell.get("deleted"):
            return f"{cell.get('table')}: deleted"
        return f"{cell.get('table')}: {cell.get('value')!r} @ {cell.get('ts')}"

    what = "the row" if conflict.get("column") == ROW else f"column {conflict.get('column')}"
    return (f"{conflict.get('key')} {what}: late write {side(late)}; kept {side(kept)}"
            f"{' (accepted)' if conflict.get('accepted') else ''}")


# --- the net's life: started by a switch or revert, settled by the command after it ---------


def begin(client: Any, runner: machine.Runner, watched: str, position: dict[str, Any]) -> dict[str, Any]:
    """The net that watches ``watched`` from ``position`` (where capture drained under the
    fence), saved with the phase that starts it: the service's time now, before which the side
    of record took no write since the fence."""
    since = clock.server_now_ms(client)
    return {"stream_id": position["stream_id"], "shards": position["shards"], "set_aside": {},
            "watched": watched, "since_ms": since,
            "fence_server_ms": int(runner.rewrite.get("fence_server_ms") or since)}


def fence_raised(client: Any, runner: machine.Runner) -> None:
    """Record the service's time just after a fence was recorded: ``settle`` counts from it."""
    runner.save(fence_server_ms=clock.server_now_ms(client))


def watching(rewrite: machine.Rewrite) -> str | None:
    """The table the rewrite's net watches (None: none)."""
    net = rewrite.get(NET)
    return net.get("watched") if net else None


def make(client: Any, rewrite: machine.Rewrite,
         runner: shards.ShardRunner | None = None) -> LateWrites | None:
    from tsmigrate.contract import transform
    from tsmigrate.rewrite import writer
    from tsmigrate.rewrite.reverse import reverse_job

    net = rewrite.get(NET)
    if not net:
        return None
    job = machine.job_of(rewrite)
    if net["watched"] == job.source.name:
        rule = transform.build(job)
    else:
        job = reverse_job(job)
        rule = transform.RowTransform.build(job.source, job.target, default_timestamp=job.created_ms)
    found = LateWrites(client, job, rule, net, rewrite=rewrite.target, since_ms=int(net["since_ms"]),
                       writer=writer, stats=rewrite.get("late_stats"))
    stamp = f"{net['watched']}@{net['since_ms']}"  # a net of another fence is another rule
    return shards.attach(found, rewrite, "tsmigrate.rewrite.late:make", stamp, runner)


def save(runner: machine.Runner, net: LateWrites, *, stopped_by: str | None = None,
         **extra: Any) -> machine.Rewrite:
    """Save the net's position and counts (``late_at_ms``: when, as status ages it);
    ``stopped_by``: the error that stopped it (``late_error``; progress clears it)."""
    kept = runner.rewrite.get(NET) or {}
    return runner.save(**{NET: {**kept, **net.position()}, "late_stats": attrs.asdict(net.stats),
                          "late_lag_s": round(net.lag_s(), 3), "late_at_ms": machine.now_ms(),
                          "late_error": stopped_by}, **extra)


def bound_s(client: Any, rewrite: machine.Rewrite) -> tuple[float, str]:
    """How long after a fence went up a write acknowledged to a routing process can still land
    on the side it left, and where that figure comes from: a write is sent only within its
    route's lease (counted from when the state read was sent, checked again at each send), and
    acknowledged within its client's request timeout, or not at all."""
    from tsmigrate.rewrite.reverse import clients

    lease = max(float(rewrite.get("routing_lease_s") or routes.LEASE_S),
                float(rewrite.get("previous_lease_s") or 0))
    ack = float(rewrite.get("routing_ack_s") or routes.ACK_S)
    reported = [(float(c.get("request_timeout_s") or SDK_REQUEST_TIMEOUT_S), c)
                for c in clients(client, rewrite.target)]
    timeout, who = max(reported, key=lambda r: r[0], default=(0.0, None))
    if who is None:
        source = "no process routed writes"
    elif timeout >= ack:
        source = "a routed write answered later is not acknowledged"
        timeout = ack
    elif who.get("request_timeout_s"):
        source = f"the longest request timeout a process reported, {who.get('host')}:{who.get('pid')}'s"
    else:
        source = f"the SDK's default socket_timeout: {who.get('host')}:{who.get('pid')} reported none"
    total = lease + timeout + MARGIN_S
    return total, (f"{total:.1f}s: routing lease {lease:g}s + request {timeout:g}s ({source}) "
                   f"+ {MARGIN_S:g}s for the stream")


def _pass(runner: machine.Runner, net: LateWrites, within_s: float | None = None) -> None:
    """Apply the watched stream until it is drained: saved once a second meanwhile (a save
    rewrites the rewrite's row) and at the end. Not drained within ``within_s``: raises
    ``CaptureBehind``."""
    started = saved = time.monotonic()
    while True:
        net.step()
        if net.stats.caught_up:
            break
        if within_s is not None and time.monotonic() - started > within_s:
            save(runner, net)
            raise net.behind("the late-write net", within_s)
        if time.monotonic() - saved > SAVE_EVERY_S:
            save(runner, net)
            saved = time.monotonic()
    save(runner, net)


def settle(client: Any, runner: machine.Runner, report: Report,
           other: Callable[[], Any] | None = None, within_s: float | None = DRAIN_S) -> None:
    """Wait until the net has read past the fence by ``bound_s``, then drain it: after that no
    acknowledged write can still land on the watched side unseen. ``other`` drains the capture
    that writes the watched side (reverse capture after a switch, forward capture after a
    revert) before each pass: the net compares the watched side with the side of record, and
    must not take that capture's lag for late writes. A pass that does not reach the stream's
    end within ``within_s`` raises ``CaptureBehind``."""
    net = make(client, runner.rewrite)
    if net is None:
        return
    bound, why = bound_s(client, runner.rewrite)
    until = int(runner.rewrite.get(NET)["fence_server_ms"]) + int(bound * 1000)
    told = False
    while True:
        now = clock.server_now_ms(client)  # read before the pass: the drain covers up to it
        if other is not None:
            other()
        _pass(runner, net, within_s)
        if now >= until:
            report("late", {"lag_s": 0.0, **attrs.asdict(net.stats)})
            return
        if not told:
            report("late-wait", {"seconds": (until - now) / 1000, "why": why})
            told = True
        time.sleep(min(POLL_S, (until - now) / 1000))


def set_aside_error(rewrite: machine.Rewrite, refused: str) -> machine.RewriteError | None:
    """``machine.set_aside_error`` for the net: late writes it could not carry at all."""
    net = rewrite.get(NET) or {}
    rows = net.get("set_aside") or {}
    if not rows:
        return None
    named = "; ".join(f"{key}: {row.get('reason', '')}" for key, row in list(rows.items())[:5])
    return machine.RewriteError(
        f"{refused}: {len(rows)} late write(s) to {net.get('watched')} could not be carried to "
        f"the table of record and are set aside: {named}. Fix or delete each row in "
        f"{net.get('watched')}; `tsmigrate rewrite status {rewrite.target}` lists them"
    )


def refusal(client: Any, rewrite: machine.Rewrite, refused: str, flag: str) -> Conflicts | None:
    """The refusal of ``refused`` while conflicts are not accepted, naming them."""
    listed = unaccepted(client, rewrite.target)
    if not listed:
        return None
    named = "; ".join(describe(c) for c in listed[:5])
    more = f" (and {len(listed) - 5} more)" if len(listed) > 5 else ""
    return Conflicts(
        f"{refused}: {len(listed)} late write(s) conflict with the table of record{more}: {named}. "
        f"`tsmigrate rewrite conflicts {rewrite.target}` lists them; {flag} goes on, keeping the "
        "table of record's values (recorded in history)"
    )
