"""Runs of the commands that change an instance outside apply (`rewrite switch`, `finish`,
`abort`, ...) in the history that apply writes (``tsmigrate.instance.state``): one run per command, one
step per action, each ``started`` then ``done``, ``failed`` or ``interrupted``, so that
`tsmigrate history` and `tsmigrate status` tell what was done to the instance and by whom."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import attrs

from tsmigrate.instance.state import State
from tsmigrate.planning import ops


@attrs.frozen
class Action:
    """One recorded action of a command: what ``State.record`` reads of an ``ops.Step``."""

    kind: str
    text: str
    table: str = ""
    risk: str = ops.SAFE

    def summary(self) -> str:
        return self.text


def drop(table: str) -> Action:
    return Action("drop_table", f"drop table {table}", table, ops.DESTRUCTIVE)


class CommandRun:
    """The history run of one command (``command``: as `history` names it, "rewrite finish")."""

    def __init__(self, client: Any, command: str):
        self.state = State(client)
        self.state.command = command

    @contextlib.contextmanager
    def step(self, action: Action) -> Iterator[None]:
        """Record ``action`` started, then how the block ended."""
        self.state.record(action, "started", plan_id="")
        try:
            yield
        except KeyboardInterrupt:
            self._end(action, "interrupted", "interrupted (Ctrl-C)")
            raise
        except BaseException as exc:
            self._end(action, "failed", str(exc)[:500] or type(exc).__name__)
            raise
        self._end(action, "done")

    def done(self, action: Action) -> None:
        """Record an action found done after the fact (a drop made inside another action)."""
        with contextlib.suppress(Exception):
            self.state.record(action, "started", plan_id="")
            self._end(action, "done")

    def _end(self, action: Action, status: str, error: str = "") -> None:
        # Best effort: the command's own outcome (or error) is what the user must see.
        with contextlib.suppress(Exception):
            self.state.record(action, status, plan_id="", error=error)


def exists(client: Any, table: str) -> bool | None:
    """Whether ``table`` exists now (None when that cannot be read: the caller's own error is the
    one to report)."""
    try:
        return table in client.list_table()
    except Exception:
        return None


@contextlib.contextmanager
def drop_seen(run: CommandRun, client: Any, table: str, watch: bool = True) -> Iterator[None]:
    """A command that may drop ``table`` inside a step (finish, abort): the drop is recorded as
    a step of ``run`` of its own once the table is seen gone, whatever the command did after."""
    had = watch and exists(client, table)
    try:
        yield
    finally:
        if had and exists(client, table) is False:
            run.done(drop(table))
