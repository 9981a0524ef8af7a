"""`tsmigrate state remove KIND ID --force`: take away a malformed row of tsmigrate_state (a hand
edit, another tool) that commands refuse to read. A row tsmigrate can read is refused: the
command that owns it (unlock, rewrite abort) is the way to change it."""

from __future__ import annotations

from typing import Any

import click

from tsmigrate.commands.common import connected, project_option, reports_errors, with_target
from tsmigrate.commands.group import Group
from tsmigrate.errors import TsmigrateError

# The kinds whose rows this command checks, and what removing one means.
REMOVABLE = {
    "rewrite": "the rewrite is forgotten; its tables stay as they are (drop a half-built new table "
               "yourself, or declare it)",
    "rewrite-split": "the split is copied again from its start by the next run of the rewrite",
    "rewrite-splits": "the rewrite can no longer continue: abort it and apply again",
    "history": "one step's record is gone from `tsmigrate history`",
    "catalog": "the next apply uses the models' key derivations",
}


class StateRemoveRefused(TsmigrateError):
    """The row is not there, well-formed, or --force was not given."""


def _problem(client: Any, kind: str, row_id: str, columns: dict[str, Any]) -> str | None:
    """What is wrong with the row (None: tsmigrate reads it as it is)."""
    from tsmigrate.instance import state
    from tsmigrate.rewrite import checkpoints, machine, splits

    try:
        if kind == "rewrite":
            machine.job_of(machine._from_row(row_id, columns))
        elif kind == "rewrite-split":
            job_id, _, index = row_id.rpartition("/")
            if not index.isdigit():
                return "no split number after its job id"
            checkpoints._from_columns(job_id, int(index), columns)
        elif kind == "rewrite-splits":
            splits.load(client, row_id)
        elif kind == "history":
            problems = state._row_problems(columns, state._HISTORY_COLUMNS)
            if problems:
                return "; ".join(problems)
            if columns["status"] not in state.HISTORY_STATUSES:
                return f"status {columns['status']!r} is not one of {', '.join(state.HISTORY_STATUSES)}"
        elif kind == "catalog":
            state.State(client).applied_record()
    except state.StateRowError as exc:
        return str(exc)
    return None


@click.group(name="state", cls=Group)
def state_group() -> None:
    """Repair tsmigrate's own rows in the instance (tsmigrate_state)."""


@state_group.command(name="remove")
@click.argument("kind", type=click.Choice(sorted(REMOVABLE)))
@click.argument("row_id", metavar="ID")
@project_option
@with_target
@click.option("--force", is_flag=True, help="Remove it (without: say what removing it means).")
@reports_errors
def remove(kind, row_id, project, choice, force):
    """Remove a malformed row of tsmigrate_state (commands name the row and this command)."""
    from tsmigrate.instance import adapter
    from tsmigrate.instance.state import STATE_TABLE

    key = [("kind", kind), ("id", row_id)]
    with connected(project, choice) as (client, _target):
        columns = adapter.get_row(client, STATE_TABLE, key)
        if columns is None:
            raise StateRemoveRefused(f"no row kind={kind!r}, id={row_id!r} in {STATE_TABLE}")
        problem = _problem(client, kind, row_id, columns)
        if problem is None:
            raise StateRemoveRefused(
                f"the row kind={kind!r}, id={row_id!r} of {STATE_TABLE} is well-formed: not removed"
                + ("; `tsmigrate rewrite abort` ends a rewrite" if kind.startswith("rewrite") else "")
            )
        if not force:
            raise StateRemoveRefused(
                f"the row kind={kind!r}, id={row_id!r} is malformed; removing it means: "
                f"{REMOVABLE[kind]}. Pass --force to remove it"
            )
        adapter.delete_row(client, STATE_TABLE, key)
    click.echo(f"removed the malformed row kind={kind!r}, id={row_id!r} of {STATE_TABLE}")
