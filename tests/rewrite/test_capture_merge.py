"""Capture merges cell by cell: a source change reaches the target per cell, with the source
cell's timestamp, and a target cell newer than the change stands. Through the local server and
the official SDK: services write the target directly after the rewrite is ready while capture
still brings the source's changes."""

from __future__ import annotations

import math
import random
import time
import types

import attrs
import pytest
import rewrite_tables as rt
import tablestore as ts
from tablestore.plainbuffer.plain_buffer_builder import PlainBufferBuilder

from tsmigrate.contract.rowbytes import cell_value
from tsmigrate.contract.transform import RowTransform
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.rewrite import capture, driver, machine, writer
from tsmigrate.rewrite.planned import RewriteSettings
from tsmigrate.wire.plainbuffer import decode_row, encode_cell

IDENTITY = "local:test"
TARGET = attrs.evolve(rt.TARGET, replaces=rt.SOURCE.name)
SETTINGS = RewriteSettings(options=driver.RunOptions(workers=2))
IGNORE = ts.Condition("IGNORE")
FUTURE_MS = 60_000  # a target cell this far ahead is newer than any change the test makes


def _now() -> int:
    return int(time.time() * 1000)


def _ready(ots_instance, target=TARGET, rows: int = 40):
    return rt.ready_capture(ots_instance, target, rows)


_drain = rt.drain


def _source_key(i: int) -> list:
    return rt.source_row(i, 0)[0]


def _region(i: int) -> str:
    return ["eu", "us", "ap"][i % 3]


def _target_key(i: int, region: str | None = None, target=TARGET) -> list:
    transform = RowTransform.build(rt.SOURCE, target)
    return transform.apply(_source_key(i), [("region", region or _region(i), 1)]).primary_key


def _cells(client, table: str, key, versions: int = 3) -> list[tuple] | None:
    _, row, _ = client.get_row(table, key, max_version=versions)
    return None if row is None else sorted(tuple(c) for c in row.attribute_columns)


def _transform_of(client, i: int, target=TARGET) -> tuple[list, list[tuple]] | None:
    """The target row the source row ``i`` is now: (key, sorted cells), None when it is gone."""
    _, source, _ = client.get_row(rt.SOURCE.name, _source_key(i), max_version=target.options.max_versions)
    if source is None:
        return None
    cells = [tuple(c) for c in source.attribute_columns]  # newest version first, as read
    row = RowTransform.build(rt.SOURCE, target).apply(_source_key(i), cells)
    return row.primary_key, sorted(tuple(c) for c in row.columns)


def _of(cells, name: str) -> list[tuple]:
    return [(value, stamp) for column, value, stamp in cells or () if column == name]


def _newest(cells, name: str):
    versions = sorted(_of(cells, name), key=lambda v: v[1], reverse=True)
    return versions[0][0] if versions else None


def _update(client, table: str, key, **changes) -> None:
    client.update_row(table, ts.Row(key, {k.upper(): v for k, v in changes.items()}), IGNORE)


# -- the writer's UpdateRow ---------------------------------------------------------------------


def test_update_rows_encodes_puts_and_version_deletes_as_the_sdk_does():
    key = [("key", "dev-001|00000001"), ("region", "eu")]
    note = encode_cell("note", "n", 1000)
    mine = writer.encode_update(key, [("put", "note", note, 1000), ("delete", "temp", None, 2000)])
    sdk = PlainBufferBuilder.serialize_for_update_row(
        key, {"PUT": [("note", "n", 1000)], "DELETE": [("temp", None, 2000)]})
    assert mine == bytes(sdk)
    decoded = decode_row(mine)
    assert [(c.name, c.op, c.timestamp) for c in decoded.cells] == [("note", None, 1000), ("temp", 3, 2000)]
    # A column at most once per UpdateRow (the service refuses it twice), in the order given.
    rounds = writer.update_rounds([("delete", "a", None, 1), ("put", "a", 1, 2), ("put", "b", 1, 2),
                                   ("put", "a", 3, 4)])
    assert rounds == [[("delete", "a", None, 1), ("put", "b", 1, 2)], [("put", "a", 1, 2)],
                      [("put", "a", 3, 4)]]
    many = [("put", f"c{i}", i, 1) for i in range(writer.MAX_CELLS_PER_UPDATE + 5)]
    assert [len(r) for r in writer.update_rounds(many)] == [writer.MAX_CELLS_PER_UPDATE, 5]


# -- the cases ----------------------------------------------------------------------------------


def test_a_direct_target_write_survives_a_later_source_change_of_another_column(ots_instance):
    client, follower = _ready(ots_instance)
    target_key = _target_key(3)
    _update(client, TARGET.name, target_key, put=[("memo", "set on the new model")])
    time.sleep(0.005)
    _update(client, rt.SOURCE.name, _source_key(3), put=[("temp", 99.5)])  # later, another column
    _drain(follower)
    cells = _cells(client, TARGET.name, target_key)
    assert [v for v, _ in _of(cells, "memo")] == ["set on the new model"]
    assert _newest(cells, "temp") == 99.5
    # Everything else is exactly the transform of the source row, versions and timestamps.
    key, expected = _transform_of(client, 3)
    assert key == target_key
    assert [c for c in cells if c[0] != "memo"] == expected


def test_the_newer_write_of_a_column_wins_whichever_table_it_went_to(ots_instance):
    client, follower = _ready(ots_instance)
    now = _now()
    # Reading 4: the target is written first, then the source, newer: the source's value wins,
    # and the target's older version of that column goes (the target is the transform again).
    _update(client, TARGET.name, _target_key(4), put=[("note", "target", now + 1000)])
    _update(client, rt.SOURCE.name, _source_key(4), put=[("note", "source", now + 2000)])
    # Reading 5: the target's write is the newer one, though capture brings the source's after
    # it: it stays the newest, next to the source's version.
    _update(client, TARGET.name, _target_key(5), put=[("note", "target", now + 2000)])
    _update(client, rt.SOURCE.name, _source_key(5), put=[("note", "source", now + 1000)])
    _drain(follower)
    four = _cells(client, TARGET.name, _target_key(4))
    assert _newest(four, "note") == "source"
    assert four == _transform_of(client, 4)[1]
    five = _cells(client, TARGET.name, _target_key(5))
    assert _newest(five, "note") == "target"
    assert ("target", now + 2000) in _of(five, "note") and ("source", now + 1000) in _of(five, "note")


def test_a_source_column_delete_removes_only_target_cells_not_newer_than_it(ots_instance):
    client, follower = _ready(ots_instance)
    now = _now()
    # A delete that carries no time (DELETE_ALL alone) counts from when capture read it.
    _update(client, TARGET.name, _target_key(6), put=[("note", "newer", now + FUTURE_MS)])
    _update(client, TARGET.name, _target_key(7), put=[("note", "older", now - 1000)])
    # One that comes with a put has that put's time: a target cell of that very millisecond is
    # not newer (it goes), one a millisecond later is (it stays).
    change = now + 5000
    _update(client, TARGET.name, _target_key(8), put=[("note", "same time", change)])
    _update(client, TARGET.name, _target_key(9), put=[("note", "just after", change + 1)])
    for i in (6, 7):
        _update(client, rt.SOURCE.name, _source_key(i), delete_all=["note"])
    for i in (8, 9):
        _update(client, rt.SOURCE.name, _source_key(i), put=[("temp", 1.5, change)],
                delete_all=["note"])
    _drain(follower)
    assert _of(_cells(client, TARGET.name, _target_key(6)), "note") == [("newer", now + FUTURE_MS)]
    assert _of(_cells(client, TARGET.name, _target_key(7)), "note") == []
    assert _of(_cells(client, TARGET.name, _target_key(8)), "note") == []
    assert _of(_cells(client, TARGET.name, _target_key(9)), "note") == [("just after", change + 1)]
    # The rows nobody else wrote: exactly their transform (the note column gone from both).
    assert _cells(client, TARGET.name, _target_key(7)) == _transform_of(client, 7)[1]
    assert _cells(client, TARGET.name, _target_key(8)) == _transform_of(client, 8)[1]


def test_a_source_row_delete_keeps_newer_target_cells_and_removes_the_rest(ots_instance):
    client, follower = _ready(ots_instance)
    now = _now()
    _update(client, TARGET.name, _target_key(10), put=[("memo", "newer", now + FUTURE_MS)])
    _update(client, TARGET.name, _target_key(11), put=[("memo", "older", now - 1000)])
    for i in (10, 11, 12):
        client.delete_row(rt.SOURCE.name, ts.Row(_source_key(i)), None)
    _drain(follower)
    assert _cells(client, TARGET.name, _target_key(10)) == [("memo", "newer", now + FUTURE_MS)]
    assert _cells(client, TARGET.name, _target_key(11)) is None  # nothing newer: the row goes
    assert _cells(client, TARGET.name, _target_key(12)) is None


def test_a_source_put_row_replaces_the_row_as_of_its_time(ots_instance):
    client, follower = _ready(ots_instance)
    now = _now()
    _update(client, TARGET.name, _target_key(13), put=[("memo", "newer", now + FUTURE_MS)])
    _update(client, TARGET.name, _target_key(14), put=[("memo", "older", now - 1000)])
    for i in (13, 14):
        client.put_row(rt.SOURCE.name, ts.Row(_source_key(i), [("region", _region(i), now),
                                                               ("temp", -3.0, now)]))
    _drain(follower)
    thirteen = _cells(client, TARGET.name, _target_key(13))
    assert _of(thirteen, "memo") == [("newer", now + FUTURE_MS)]
    assert [c for c in thirteen if c[0] != "memo"] == _transform_of(client, 13)[1]
    # The older target cell and the source's former cells (note, older temps) are gone.
    assert _cells(client, TARGET.name, _target_key(14)) == _transform_of(client, 14)[1]
    assert _of(_cells(client, TARGET.name, _target_key(14)), "note") == []


def test_a_moved_row_leaves_only_newer_cells_at_its_old_target_key(ots_instance):
    client, follower = _ready(ots_instance)
    now = _now()
    _update(client, TARGET.name, _target_key(16), put=[("memo", "newer", now + FUTURE_MS)])
    for i in (16, 17):
        _update(client, rt.SOURCE.name, _source_key(i), put=[("region", "zz")])
    _drain(follower)
    assert follower.stats.moved >= 2
    # The old target rows: only the cell newer than the move is left (a row without it is gone).
    assert _cells(client, TARGET.name, _target_key(16)) == [("memo", "newer", now + FUTURE_MS)]
    assert _cells(client, TARGET.name, _target_key(17)) is None
    # The new target rows: exactly the transform, every version.
    for i in (16, 17):
        key, expected = _transform_of(client, i)
        assert key == _target_key(i, "zz")
        assert _cells(client, TARGET.name, key) == expected


def test_rows_nobody_wrote_directly_stay_exactly_their_transform(ots_instance):
    """Source-only changes of every kind: the target equals the transform of the source, row for
    row with versions and timestamps (what verification compares)."""
    client, follower = _ready(ots_instance)
    now = _now()
    _update(client, rt.SOURCE.name, _source_key(20), put=[("temp", 7.0)])
    _update(client, rt.SOURCE.name, _source_key(21), delete_all=["note"])
    _update(client, rt.SOURCE.name, _source_key(22), delete=[("temp", None, now - 60_000)])
    _update(client, rt.SOURCE.name, _source_key(23), put=[("region", "zz")])
    client.delete_row(rt.SOURCE.name, ts.Row(_source_key(24)), None)
    client.put_row(rt.SOURCE.name, ts.Row(_source_key(25), [("region", "eu", now)]))
    key, cells = rt.source_row(500, now)
    client.put_row(rt.SOURCE.name, ts.Row(key, cells))
    _update(client, rt.SOURCE.name, _source_key(501), put=[("region", "us"), ("temp", 2.0)])
    _drain(follower)
    job = driver.job_of(machine.load(client, TARGET.name))
    assert sorted(map(repr, rt.read_all(client, TARGET))) == sorted(
        map(repr, rt.expected_target(client, job)))


def test_a_target_keeping_fewer_versions_keeps_the_newest(ots_instance):
    fewer = attrs.evolve(TARGET, options=attrs.evolve(TARGET.options, max_versions=2))
    client, follower = _ready(ots_instance, fewer)
    now = _now()
    i = 30
    # An older version than both the target keeps: the source has three, the target the newest two.
    _update(client, rt.SOURCE.name, _source_key(i), put=[("temp", -1.0, now - 2 * 86_400_000)])
    _drain(follower)
    key, expected = _transform_of(client, i, fewer)
    got = _cells(client, fewer.name, key, versions=5)
    assert got == expected and len(_of(got, "temp")) == 2
    assert ("temp", -1.0, now - 2 * 86_400_000) not in got
    # The newest version deleted at the source: the one below the two comes back into the target.
    kept = sorted(stamp for _, stamp in _of(got, "temp"))
    _update(client, rt.SOURCE.name, _source_key(i), delete=[("temp", None, kept[1])])
    _drain(follower)
    key, expected = _transform_of(client, i, fewer)
    got = _cells(client, fewer.name, key, versions=5)
    assert got == expected
    assert sorted(stamp for _, stamp in _of(got, "temp")) == [now - 2 * 86_400_000, kept[0]]


# -- any interleaving ---------------------------------------------------------------------------

COLUMNS = ("c0", "c1", "c2")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_interleavings_keep_the_latest_write_of_every_column(ots_instance, seed):
    """Raw SDK writes to both tables of the same rows, in random order, with timestamps that do
    not follow the order the writes are made in (target writers whose clock is behind), capture
    stepping now and then and draining at the end: every column of every target row holds the
    value of its latest write by timestamp, across both tables; a source PutRow or column delete
    counts as a write of "absent" at its time."""
    rng = random.Random(seed)
    client, follower = _ready(ots_instance, rows=10)
    readings = (3000, 3001, 3002)  # rows that start out nowhere
    base = _now() - 600_000
    used: set[int] = set()
    writes: dict[tuple[int, str], list[tuple[int, str | None]]] = {}

    def stamp(op: int, behind: int = 0) -> int:
        while True:
            value = base + 100 * op - behind
            if value not in used:
                used.add(value)
                return value
            behind = rng.randrange(1, 250)

    for op in range(50):
        i = rng.choice(readings)
        column = rng.choice(COLUMNS)
        kind = rng.choices(["source", "target", "put_row", "delete", "step"], [6, 7, 2, 3, 2])[0]
        value = f"{kind}-{op}"
        if kind == "step":
            follower.step()
            continue
        if kind == "target":  # a service on the new model; its clock up to 0.25 s behind
            at = stamp(op, rng.randrange(0, 250))
            _update(client, TARGET.name, _target_key(i, "eu"), put=[(column, value, at)])
            writes.setdefault((i, column), []).append((at, value))
            continue
        at = stamp(op)  # the source's writes keep their table's order
        region = ("region", "eu", at)  # every source row keeps the key's source column
        if kind == "source":
            _update(client, rt.SOURCE.name, _source_key(i), put=[(column, value, at), region])
            writes.setdefault((i, column), []).append((at, value))
        elif kind == "put_row":
            kept = rng.sample(COLUMNS, rng.randrange(1, len(COLUMNS) + 1))
            client.put_row(rt.SOURCE.name, ts.Row(_source_key(i), [*((c, value, at) for c in kept), region]))
            for c in COLUMNS:
                writes.setdefault((i, c), []).append((at, value if c in kept else None))
        else:  # a column deleted, timed by a put of the same update
            _update(client, rt.SOURCE.name, _source_key(i), put=[region], delete_all=[column])
            writes.setdefault((i, column), []).append((at, None))
    _drain(follower)

    checked = 0
    for i in readings:
        cells = _cells(client, TARGET.name, _target_key(i, "eu"))
        for column in COLUMNS:
            history = writes.get((i, column))
            expected = max(history)[1] if history else None
            assert _newest(cells, column) == expected, (seed, i, column, history, cells)
            checked += expected is not None
    assert checked  # the test saw values, not only absences


# -- cells as bytes ------------------------------------------------------------------------------


def _raw_cells(client, table: str, key) -> dict[tuple[str, int], bytes] | None:
    """A row's attribute cells as the server encodes them, by (name, timestamp)."""
    key = tuple((name, value) for name, value in key)
    rows = capture.read_raw_rows(RawClient(client), table, [key], 3)
    return None if key not in rows else {(c[0], c[1]): c[2] for c in rows[key].cells}


def test_capture_copies_every_cell_byte_for_byte_through_changes_made_during_the_copy(ots_instance):
    """Every value type, versions, explicit timestamps, an empty string, a large binary; then,
    while the split's backfill still runs (records kept as dirty keys), a value rewritten at the
    same timestamp with other bytes (-0.0 over 0.0: equal as numbers), a version, a column and a
    row deleted, a row moved. The target holds the source's cells as the same bytes."""
    client, follower = _ready(ots_instance)
    t0 = _now() - 10_000
    big = bytearray(random.Random(5).randbytes(128_000))
    cells = [("n", 7, t0), ("f", 1.5, t0), ("z", 0.0, t0), ("yes", True, t0), ("empty", "", t0),
             ("blob", big, t0), ("old", "x", t0), ("text", "é" * 3, t0 + 2)]
    _update(client, rt.SOURCE.name, _source_key(5), put=cells)
    _update(client, rt.SOURCE.name, _source_key(5), put=[("n", -1, t0 + 1)])  # a second version
    _drain(follower)
    done = {"yes": False}
    follower.split_done = lambda index: done["yes"]
    follower.finished_splits.clear()
    _update(client, rt.SOURCE.name, _source_key(5), put=[("z", -0.0, t0)],
            delete=[("n", None, t0)], delete_all=["old"])
    client.delete_row(rt.SOURCE.name, ts.Row(_source_key(6)), None)
    _update(client, rt.SOURCE.name, _source_key(7), put=[("region", "zz"), ("blob", big, t0)])
    follower.step()
    assert follower.dirty and _raw_cells(client, TARGET.name, _target_key(6)) is not None
    done["yes"] = True
    _drain(follower)
    assert follower.stats.resynced >= 3
    for i, region in ((5, None), (7, "zz")):
        source = _raw_cells(client, rt.SOURCE.name, _source_key(i))
        target = _raw_cells(client, TARGET.name, _target_key(i, region))
        assert source is not None and target is not None
        assert {k: v for k, v in target.items() if k[0] != "seq"} == {
            k: v for k, v in source.items() if k[0] != "region"}
        assert _cells(client, TARGET.name, _target_key(i, region)) == _transform_of(client, i)[1]
    five = _raw_cells(client, TARGET.name, _target_key(5))
    assert ("n", t0) not in five and ("old", t0) not in five and ("n", t0 + 1) in five
    assert math.copysign(1, cell_value(five[("z", t0)])) == -1  # -0.0 came, not 0.0 kept
    assert _raw_cells(client, TARGET.name, _target_key(6)) is None
    assert _raw_cells(client, TARGET.name, _target_key(7)) is None
    # Applied again, as a whole-row change: every cell compares equal by its bytes, nothing is written.
    writes = []
    follower.writer = types.SimpleNamespace(**{
        name: lambda *args, name=name: writes.append(name)
        for name in ("update_rows", "write_rows", "delete_keys")})
    follower.sync({tuple(_source_key(i)): capture.Change(row_time=_now(), arrived=True) for i in (5, 7)})
    assert writes == []


def test_a_new_value_lands_before_the_old_one_goes_unless_that_could_lose_a_kept_version():
    from tsmigrate.rewrite.capture import ordered_changes

    # One version kept: the new value first; the old one is pushed out by it (its delete finds
    # nothing), so a reader never sees the column missing.
    new, old = ("put", "note", "after", 20), ("delete", "note", None, 10)
    assert ordered_changes([new, old], {("note", 10): "before"}, 1) == [new, old]
    # Three kept, an older version stays: putting first would push out only the deleted oldest.
    keep = {("n", 1): "a", ("n", 2): "b", ("n", 3): "c"}
    assert ordered_changes([("put", "n", "d", 4), ("delete", "n", None, 1)], keep, 3) == [
        ("put", "n", "d", 4), ("delete", "n", None, 1)]
    # ...but when the version it would push out is one to keep, the deletes go first.
    changes = [("put", "n", "d", 4), ("delete", "n", None, 2), ("delete", "n", None, 3)]
    assert ordered_changes(changes, keep, 3) == [changes[1], changes[2], changes[0]]
    # A put older than what the column holds (a source version the target lacks): deletes first.
    older = [("put", "n", "z", 0), ("delete", "n", None, 3)]
    assert ordered_changes(older, keep, 3) == [older[1], older[0]]
