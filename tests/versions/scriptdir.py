"""Helpers: write revision scripts into a temp migrations directory; random revision DAGs."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hypothesis import strategies as st


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


@st.composite
def dags(draw, max_size: int = 12) -> dict[str, tuple[str, ...]]:
    """A random DAG: revision i picks parents among revisions before it (0, 1 or 2 of them)."""
    size = draw(st.integers(0, max_size))
    ids = draw(st.lists(st.text("0123456789abcdef", min_size=4, max_size=8), min_size=size,
                        max_size=size, unique=True))
    parents: dict[str, tuple[str, ...]] = {}
    for i, rev in enumerate(ids):
        earlier = ids[:i]
        count = draw(st.integers(0, min(2, len(earlier))))
        chosen = draw(st.lists(st.sampled_from(earlier), min_size=count, max_size=count,
                               unique=True)) if earlier else []
        parents[rev] = tuple(chosen)
    return parents
