"""`op.reindex_search_index` under `tsmigrate upgrade`: the runner takes it through apply's
reindex flow (the index keeps serving, the new schema ends under the old name)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tablestore as ts
from scriptdir import write_script

from tsmigrate.reindex.flow import ReindexSettings
from tsmigrate.versions import runner
from tsmigrate.versions.scripts import ScriptDirectory

HEADER = """
from tsmigrate.schema import PrimaryKeyColumn, SearchField, SearchIndex, Table
"""
CREATE = """
op.create_table(Table("notes", [PrimaryKeyColumn("id", "STRING")]))
op.create_search_index("notes", SearchIndex("finder", fields=[SearchField("tag", "KEYWORD")]))
"""
REINDEX = """
op.reindex_search_index("notes", SearchIndex(
    "finder", fields=[SearchField("tag", "TEXT"), SearchField("title", "KEYWORD")]))
"""


@pytest.mark.slow
def test_upgrade_runs_a_reindex_to_the_switch(ots_instance, ots_server_options, tmp_path: Path):
    write_script(tmp_path / "migrations", "a1", None, header=HEADER, upgrade=CREATE)
    write_script(tmp_path / "migrations", "b2", "a1", header=HEADER, upgrade=REINDEX)
    directory = ScriptDirectory.load("migrations", tmp_path)
    client = ots_instance.client()
    # A new search index builds (sync phase FULL) for search_full_sync_s of the server's clock:
    # the reindex looks every 50 ms, not every second.
    builds: list[str] = []  # the sync phase the reindex index was in, each time it looked
    options = runner.MoveOptions(reindex=ReindexSettings(
        poll_s=0.05, report=lambda event, data: builds.append(data["phase"]) if event == "build" else None))

    def upgrade(spec: str) -> runner.Outcome:
        return runner.run(client, directory,
                          lambda last: runner.plan_upgrade(directory, last.revisions, spec),
                          options, package=runner.Package())

    upgrade("a1")
    client.put_row("notes", ts.Row([("id", "n1")], [("tag", "red fox"), ("title", "t1")]))
    ots_server_options.search_full_sync_s = 0.5  # the reindex index builds, then catches up
    assert upgrade("head").executed == 1
    assert builds[0] == "full" and builds[-1] == "incremental"  # it waited for the build
    described = client.list_search_index("notes")
    assert [name for _, name in described] == ["finder"]  # the reindex index is gone
    schema = client.describe_search_index("notes", "finder")[0]
    assert {(f.field_name, f.field_type.name) for f in schema.fields} == {
        ("tag", "TEXT"), ("title", "KEYWORD")}
    assert runner.read_applied(client).revisions == {"a1", "b2"}
