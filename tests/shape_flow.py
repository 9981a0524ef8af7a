"""A key-changing rewrite of one table shape, cut over through the commands while services on
both models write: `apply`, `switch`, `revert`, `switch`, `finish`, then every acknowledged write
is looked for in the final table with the raw SDK.

A shape is a pair of model files (the old model, and the new one with ``replaces=``); the same
code is executed here for the services' classes. Writers put whole rows (the only write every
table takes), each on keys of its own, so the last value a writer had acknowledged for a key is
the one the table must hold.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import clirun

from tsmigrate.rewrite import machine
from tsmigrate.service import Rows, routing

KEYS_PER_WRITER = 6


@attrs.define
class Writers:
    """Threads putting rows through ``Rows`` of the given models, each writer on its own keys;
    ``row(model, writer, i, n)`` makes the row (``n``: the writer's counter, the value to find)."""

    client: Any
    models: list[type]
    row: Callable[[type, int, int, int], Any]
    key_of: Callable[[Any], tuple]
    acknowledged: dict[tuple, int] = attrs.field(factory=dict)
    errors: list[BaseException] = attrs.field(factory=list)
    writes: int = 0
    _stop: threading.Event = attrs.field(factory=threading.Event)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _threads: list[threading.Thread] = attrs.field(factory=list)

    def start(self) -> Writers:
        for w, model in enumerate(self.models):
            thread = threading.Thread(target=self._write, args=(w, model), daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def _write(self, w: int, model: type) -> None:
        rows = Rows(model, self.client)
        n = 0
        try:
            while not self._stop.is_set():
                n += 1
                row = self.row(model, w, n % KEYS_PER_WRITER, n)
                rows.put(row)
                with self._lock:
                    self.acknowledged[self.key_of(row)] = n
                    self.writes += 1
                time.sleep(0.002)
        except BaseException as exc:
            self.errors.append(exc)

    def more(self, count: int = 30, timeout: float = 60) -> None:
        """Wait until the writers made ``count`` more writes (whatever the machine's speed)."""
        with self._lock:
            start = self.writes
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.errors:
                raise AssertionError(f"a writer failed: {self.errors[0]!r}") from self.errors[0]
            with self._lock:
                if self.writes >= start + count:
                    return
            time.sleep(0.02)
        raise AssertionError(f"the writers made fewer than {count} writes in {timeout} s")

    def stop(self) -> dict[tuple, int]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        if self.errors:
            raise AssertionError(f"a writer failed: {self.errors[0]!r}") from self.errors[0]
        return dict(self.acknowledged)


def stop_all(*writers: Writers | None) -> dict[tuple, int]:
    """Stop every writer given (each is stopped even when another failed); their acknowledged
    writes together."""
    acknowledged: dict[tuple, int] = {}
    failures = []
    for group in writers:
        if group is None:
            continue
        try:
            acknowledged.update(group.stop())
        except AssertionError as exc:
            failures.append(exc)
    if failures:
        raise failures[0]
    return acknowledged


def classes(code: str) -> dict[str, type]:
    namespace: dict[str, Any] = {}
    exec(compile(code, "<shape models>", "exec"), namespace)  # the project's file, as services import it
    return {k: v for k, v in namespace.items() if isinstance(v, type)}


def project(tmp_path: Path, models: str) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["shape_models"]\n')
    (tmp_path / "shape_models.py").write_text(models)


def command(tmp_path: Path, ots: Any, *args: str, expect: int = 0) -> str:
    result = clirun.run_on(tmp_path, ots, *args)
    assert result.returncode == expect, f"tsmigrate {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def phase(client: Any, target: str) -> str:
    rewrite = machine.load(client, target)
    assert rewrite is not None
    return rewrite.phase


def raw_rows(client: Any, table: str, key_names: list[str], versions: int = 1) -> dict[tuple, dict]:
    """Every row of ``table`` through the SDK: key values -> {column: newest value}."""
    import tablestore as ts

    start = [(name, ts.INF_MIN) for name in key_names]
    end = [(name, ts.INF_MAX) for name in key_names]
    found: dict[tuple, dict] = {}
    while start:
        _, start, rows, _ = client.get_range(table, ts.Direction.FORWARD, start, end,
                                             max_version=versions)
        for row in rows:
            found[tuple(v for _, v in row.primary_key)] = {c[0]: c[1] for c in row.attribute_columns}
    return found


README = Path(__file__).resolve().parents[1] / "README.md"


def readme_models() -> tuple[str, str]:
    """The README's rewrite example: the old model and the new one."""
    section = README.read_text().split("### Changing a primary key: the rewrite", 1)[1]
    old, new = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    return old, new


def fresh_routing() -> None:
    routing.clear()


# The writers' SDK read timeout: `finish` (and a second `switch`) wait the lease + the longest
# request timeout the routing processes report (the SDK's default is 50 s; the rewrite's
# acknowledgement bound, 10 s, caps it). Their puts are retried when a timeout cuts one short.
WRITER_TIMEOUT_S = 1.0


def writer_client(ots: Any) -> Any:
    """An SDK client for the tests' writers (``WRITER_TIMEOUT_S``)."""
    return ots.client(socket_timeout=WRITER_TIMEOUT_S)
