"""`tsmigrate local ...`: run the local Tablestore-compatible server (placeholder, being built)."""

import click


@click.group()
def local() -> None:
    """Run a local, Tablestore-compatible server."""
