"""Helpers: write revision scripts into a temp migrations directory."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_script(migrations: Path, revision: str, parents: str | tuple[str, ...] | None,
                 upgrade: str = "pass", downgrade: str = "pass", header: str = "",
                 message: str = "") -> Path:
    versions = migrations / "versions"
    versions.mkdir(parents=True, exist_ok=True)
    path = versions / f"{revision}_{message.replace(' ', '_') or 'rev'}.py"
    body = textwrap.dedent(header).strip()
    up = textwrap.indent(textwrap.dedent(upgrade).strip(), "    ")
    down = textwrap.indent(textwrap.dedent(downgrade).strip(), "    ")
    path.write_text(
        f"{body}\n\nrevision = {revision!r}\ndown_revision = {parents!r}\nmessage = {message!r}\n"
        f"tsmigrate_version = '0.1.0'\n\n\ndef upgrade(op):\n{up}\n\n\ndef downgrade(op):\n{down}\n"
    )
    return path
