"""Command-line interface: the ``tsmigrate`` group; each command lives in ``tsmigrate.commands``.

Exit codes: 0 success, 1 error (problems found, bad input), 2 reserved for "changes present"
(plan --detailed-exitcode).
"""

from __future__ import annotations

import logging
import os

# The SDK imports numpy (through flatbuffers) where it is installed, and OpenBLAS then starts a
# thread per core: about 0.1 s of CPU for every command (and every rewrite worker process),
# none of which does linear algebra. Set before anything imports the SDK; a value set stays.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click

from tsmigrate import __version__
from tsmigrate.commands.analyze import analyze_command
from tsmigrate.commands.apply import apply_command
from tsmigrate.commands.group import Group
from tsmigrate.commands.history import history_command
from tsmigrate.commands.init import init_command
from tsmigrate.commands.inspect import inspect_command
from tsmigrate.commands.plan import plan
from tsmigrate.commands.restore import restore
from tsmigrate.commands.revisions import (
    check_command,
    hash_command,
    heads_command,
    merge_command,
    revision_command,
)
from tsmigrate.commands.rewrite import rewrite
from tsmigrate.commands.schema import lint, show, validate
from tsmigrate.commands.state import state_group
from tsmigrate.commands.status import status_command
from tsmigrate.commands.unlock import unlock_command
from tsmigrate.commands.versioned import current, downgrade, stamp, upgrade
from tsmigrate.local.cli import local


@click.group(cls=Group)
@click.version_option(__version__, prog_name="tsmigrate")
def main() -> None:
    """Declarative schema-as-code and migrations for Alibaba Cloud Tablestore."""
    # The SDK warns on every start that its optional C++ codec is missing; that is noise here.
    logging.getLogger("tablestore").setLevel(logging.ERROR)


for command in (init_command, validate, show, lint, plan, apply_command, status_command,
                history_command, inspect_command, analyze_command, unlock_command, state_group,
                restore, rewrite, revision_command, merge_command, heads_command, hash_command,
                check_command, upgrade, downgrade, current, stamp, local):
    main.add_command(command)


if __name__ == "__main__":
    main()
