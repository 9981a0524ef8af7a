"""Capture into a table that takes no UpdateRow (``allow_update=False``): every merge reads the
target row and writes it whole, each cell with its timestamp, guarded by the row as read. A write
that lands on the target between that read and capture's write refuses capture's write, which
reads and merges again: nothing of it is lost. Interleaved here by running the service's write
inside capture's, between its read and its write."""

from __future__ import annotations

import time
import types

import attrs
import pytest
import rewrite_tables as rt
import tablestore as ts
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.contract import transform
from tsmigrate.rewrite import capture, driver, machine, writer
from tsmigrate.rewrite.planned import RewriteSettings

IDENTITY = "local:test"
NO_UPDATE = attrs.evolve(rt.TARGET.options, allow_update=False)
TARGET = attrs.evolve(rt.TARGET, replaces=rt.SOURCE.name, options=NO_UPDATE)
SETTINGS = RewriteSettings(options=driver.RunOptions(workers=2))
IGNORE = ts.Condition("IGNORE")


def _ready(ots_instance, target=TARGET, rows: int = 40):
    return rt.ready_capture(ots_instance, target, rows)


_drain = rt.drain


def _target_key(client, i: int) -> list:
    """The target key of source row ``i`` (its region, an attribute, is part of it)."""
    source_key, _ = rt.source_row(i, 0)
    row = capture.read_rows(client, rt.SOURCE.name, [tuple(source_key)], 3)[tuple(source_key)]
    job = driver.job_of(machine.load(client, TARGET.name))
    return transform.build(job).apply(source_key, row).primary_key


def _interleaving(follower: capture.Capture, service_write) -> list[int]:
    """Capture's writer, with ``service_write()`` run once between capture's read of the target
    row and its write; returns a list that counts capture's whole-row writes."""
    calls: list[int] = []

    def write_whole_rows(client, table, puts, deletes):
        calls.append(len(puts) + len(deletes))
        if len(calls) == 1:
            service_write()
        return writer.write_whole_rows(client, table, puts, deletes)

    follower.writer = types.SimpleNamespace(**{name: getattr(writer, name) for name in dir(writer)
                                               if not name.startswith("__")})
    follower.writer.write_whole_rows = write_whole_rows
    return calls


def _newest(client, key) -> dict:
    _, row, _ = client.get_row(TARGET.name, key, max_version=1)
    return {c[0]: c[1] for c in row.attribute_columns}


def test_a_service_write_between_captures_read_and_write_is_kept(ots_instance):
    client, follower = _ready(ots_instance)
    assert not follower.job.target.options.allow_update  # capture writes whole rows
    key = _target_key(client, 3)
    source_key, _ = rt.source_row(3, 0)
    client.update_row(rt.SOURCE.name, ts.Row(source_key, {"PUT": [("temp", 99.5)]}), IGNORE)
    time.sleep(0.005)  # the service's cells are newer than the source's change

    def service_write() -> None:
        client.put_row(TARGET.name, ts.Row(key, [("note", "written by a service"), ("temp", 1.5),
                                                 ("seq", 3)]), IGNORE)

    calls = _interleaving(follower, service_write)
    _drain(follower)
    assert len(calls) >= 2 and follower.stats.guard_retries >= 1  # refused once, merged again
    # The service's row stands (its cells are the newest); the source's change is merged in
    # below it.
    row = _newest(client, key)
    assert (row["note"], row["temp"]) == ("written by a service", 1.5)
    _, versions, _ = client.get_row(TARGET.name, key, max_version=3)
    temps = [c[1] for c in versions.attribute_columns if c[0] == "temp"]
    assert 99.5 in temps


def test_without_the_guard_the_same_interleaving_loses_the_service_write(ots_instance, monkeypatch):
    """The control: capture's whole-row write without its condition replaces the service's row."""
    client, follower = _ready(ots_instance)
    key = _target_key(client, 3)
    source_key, _ = rt.source_row(3, 0)
    client.update_row(rt.SOURCE.name, ts.Row(source_key, {"PUT": [("temp", 99.5)]}), IGNORE)

    def service_write() -> None:
        client.put_row(TARGET.name, ts.Row(key, [("note", "written by a service")]), IGNORE)

    _interleaving(follower, service_write)
    monkeypatch.setattr(follower, "_guard", lambda row, declared: writer.row_condition(pb.IGNORE))
    _drain(follower)
    assert _newest(client, key)["note"] != "written by a service"


@pytest.mark.parametrize("existed", [True, False])
def test_a_row_that_keeps_changing_is_set_aside_and_capture_goes_on(ots_instance, existed,
                                                                     monkeypatch):
    client, follower = _ready(ots_instance)
    i = 3 if existed else 500
    source_key, cells = rt.source_row(i, int(time.time() * 1000))
    client.put_row(rt.SOURCE.name, ts.Row(source_key, cells), IGNORE)
    client.update_row(rt.SOURCE.name, ts.Row(rt.source_row(4, 0)[0], {"PUT": [("note", "other")]}),
                      IGNORE)
    key = _target_key(client, i)
    n = [0]

    def busy_writer(client_, table, puts, deletes):
        n[0] += 1
        client.put_row(TARGET.name, ts.Row(key, [("note", f"busy {n[0]}")]), IGNORE)
        return writer.write_whole_rows(client_, table, puts, deletes)

    calls = _interleaving(follower, lambda: None)
    follower.writer.write_whole_rows = busy_writer
    monkeypatch.setattr(capture.time, "sleep", lambda s: None)
    _drain(follower)
    assert calls == [] and n[0] >= capture.GUARD_ATTEMPTS
    assert list(follower.set_aside) == [f"(pk={source_key[0][1]!r}, seq={i})"]
    assert "kept changing" in follower.set_aside[f"(pk={source_key[0][1]!r}, seq={i})"]["reason"]
    assert _newest(client, _target_key(client, 4))["note"] == "other"  # the other row went on
    assert follower.position()["set_aside"] == follower.set_aside  # kept with the position
