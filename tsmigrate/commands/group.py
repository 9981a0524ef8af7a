"""The command groups' help: each command's summary is its docstring's whole first sentence.

Click cuts summaries to the terminal's width with "..." mid-sentence; a summary that does not fit
is wrapped onto the next lines instead."""

from __future__ import annotations

import click

WHOLE = 10_000  # characters: longer than any first sentence


class Group(click.Group):
    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(WHOLE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
