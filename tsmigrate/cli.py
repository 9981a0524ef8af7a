"""Command-line interface: thin verbs that call the library, render, and set the exit code."""

from __future__ import annotations

import click

from tsmigrate import __version__


@click.group()
@click.version_option(__version__, prog_name="tsmigrate")
def main() -> None:
    """Declarative schema-as-code and migrations for Alibaba Cloud Tablestore."""


def _mount_local() -> None:
    from tsmigrate.local.cli import local

    main.add_command(local)


_mount_local()
