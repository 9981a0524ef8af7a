"""Server timestamps of writes: taken when a write is applied, and what two writes of one cell in
the same millisecond make (one version, the later value; increments always count)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from tablestore import (
    BatchWriteRowRequest,
    CapacityUnit,
    Condition,
    OTSClient,
    ReservedThroughput,
    Row,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
    UpdateRowItem,
)

from tsmigrate.local.context import ServerOptions
from tsmigrate.local.testing import LocalTablestore

PK = [("k", "x")]
IGNORE = Condition("IGNORE")


def make_table(client: OTSClient, max_versions: int = 1) -> None:
    client.create_table(
        TableMeta("t", [("k", "STRING")]),
        TableOptions(max_version=max_versions),
        ReservedThroughput(CapacityUnit(0, 0)),
    )


def versions(client: OTSClient, column: str) -> list[tuple[object, int]]:
    _, row, _ = client.get_row("t", PK, max_version=10)
    assert row is not None
    return [(c[1], c[2]) for c in row.attribute_columns if c[0] == column]


def freeze(ots: LocalTablestore) -> float:
    """Stop the server's data clock (a whole second, so every write lands in one millisecond)."""
    frozen = float(int(ots.server.clock()))
    ots.server.clock = lambda: frozen
    return frozen


@pytest.mark.slow
def test_concurrent_increments_all_count(ots_instance: LocalTablestore) -> None:
    threads, steps = 16, 40
    client = ots_instance.client()
    make_table(client)
    client.update_row("t", Row(PK, {"put": [("n", 0)]}), IGNORE)
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def bump() -> None:
        own = ots_instance.client()
        start.wait()
        try:
            for _ in range(steps):
                own.update_row("t", Row(PK, {"increment": [("n", 1)]}), IGNORE)
        except BaseException as e:  # reported below: a thread's failure must fail the test
            errors.append(e)

    workers = [threading.Thread(target=bump) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert versions(client, "n")[0][0] == threads * steps


def test_same_millisecond_writes_make_one_version_holding_the_later_value(
    ots_instance: LocalTablestore, ots_server_options: ServerOptions
) -> None:
    client = ots_instance.client()
    make_table(client, max_versions=5)
    ms = int(freeze(ots_instance) * 1000)
    client.update_row("t", Row(PK, {"put": [("a", "first")]}), IGNORE)
    client.update_row("t", Row(PK, {"put": [("a", "second")]}), IGNORE)
    assert versions(client, "a") == [("second", ms)]
    # The clock moves on: the next write is a new version.
    ots_instance.server.clock_offset = 0.001
    client.update_row("t", Row(PK, {"put": [("a", "third")]}), IGNORE)
    assert versions(client, "a") == [("third", ms + 1), ("second", ms)]


def test_same_millisecond_increments_each_count(
    ots_instance: LocalTablestore, ots_server_options: ServerOptions
) -> None:
    client = ots_instance.client()
    make_table(client, max_versions=5)
    ms = int(freeze(ots_instance) * 1000)
    client.put_row("t", Row(PK, [("n", 10)]))
    for _ in range(3):
        client.update_row("t", Row(PK, {"increment": [("n", 1)]}), IGNORE)
    # A batch applies its rows in order; one increment per row, as the service requires.
    batch = BatchWriteRowRequest()
    batch.add(TableInBatchWriteRowItem("t", [UpdateRowItem(Row(PK, {"increment": [("n", 5)]}), IGNORE)]))
    assert client.batch_write_row(batch).is_all_succeed()
    assert versions(client, "n") == [(18, ms)]


def test_increment_is_stamped_no_older_than_the_version_it_adds_to(
    ots_instance: LocalTablestore,
) -> None:
    client = ots_instance.client()
    make_table(client, max_versions=3)
    future = int(ots_instance.server.now() * 1000) + 60_000  # within the table's deviation
    client.update_row("t", Row(PK, {"put": [("n", 100, future)]}), IGNORE)
    client.update_row("t", Row(PK, {"increment": [("n", 1)]}), IGNORE)
    assert versions(client, "n") == [(101, future)]


class WatchedLock:
    """A lock (the storage's) that says when a thread had to wait for it."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self.waited_for = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        self.waited_for.set()
        return bool(self._lock.acquire(True, timeout))

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> WatchedLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_write_is_stamped_when_it_is_applied_not_when_it_arrives(
    ots_instance: LocalTablestore, ots_server_options: ServerOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that waits for the storage is stamped after the one holding it, never before."""
    client = ots_instance.client()
    make_table(client, max_versions=5)
    storage = ots_instance.server.storage
    lock = WatchedLock(storage.lock)
    monkeypatch.setattr(storage, "lock", lock)  # only requests take it
    ms = int(freeze(ots_instance) * 1000)
    done = threading.Event()

    def late_put() -> None:
        ots_instance.client().update_row("t", Row(PK, {"put": [("a", "waited")]}), IGNORE)
        done.set()

    with lock:  # the storage is busy: the request arrives, then waits
        waiting = threading.Thread(target=late_put)
        waiting.start()
        assert lock.waited_for.wait(60)  # the request is at the storage, waiting for it...
        assert not done.is_set()  # ...and gets no answer without it
        ots_instance.server.clock_offset = 0.005  # time passes before the storage frees up
    waiting.join()
    assert versions(client, "a") == [("waited", ms + 5)]
