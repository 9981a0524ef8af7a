"""The README's and docs/migrations.md's example revision scripts load and replay as shown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scriptdir import write_script

from tsmigrate.versions.op import Backfill
from tsmigrate.versions.replay import collect, replay
from tsmigrate.versions.scripts import ScriptDirectory

ROOT = Path(__file__).resolve().parents[2]
PARENT = """
from tsmigrate.schema import DefinedColumn, PrimaryKeyColumn, Table
T0 = Table('t0', [PrimaryKeyColumn('id', 'STRING')], defined_columns=[DefinedColumn('country', 'STRING')])
"""


def _example(document: str, heading: str) -> str:
    text = (ROOT / document).read_text()
    section = text[text.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.parametrize("document, heading", [
    ("README.md", "### Versioned migrations"),
    ("docs/migrations.md", "## A revision script"),
])
def test_the_example_script_replays(tmp_path, document, heading):
    migrations = tmp_path / "migrations"
    write_script(migrations, "3f2a9c1e5b7d", None, header=PARENT, upgrade="op.create_table(T0)",
                 downgrade="op.drop_table('t0')")
    (migrations / "versions" / "9b1c0d7e4a21_index_by_region.py").write_text(_example(document, heading))
    directory = ScriptDirectory.load("migrations", tmp_path)
    head = replay(directory)
    table = head.table("t0")
    assert [c.name for c in table.defined_columns] == ["country", "region"]
    assert [i.name for i in table.secondary_indexes] == ["t0_by_region"]
    up = collect(directory.get("9b1c"), "upgrade", replay(directory, "3f2a9c1e5b7d"))
    backfill = up.operations[-1]
    assert isinstance(backfill, Backfill) and backfill.columns == ("country",)
    assert backfill.fn({"id": "a", "country": "France"}) == {"region": "Fr"}
    assert backfill.fn({"id": "b"}) is None
    down = collect(directory.get("9b1c"), "downgrade", head)
    assert down.catalog_after == up.catalog_before
