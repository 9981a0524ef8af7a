"""Autogenerate: generated scripts replay to exactly the catalog they were generated for, and
their downgrade gives back the one before (or refuses, saying why)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from strategies import catalog_changes, valid_catalogs

from tsmigrate.planning import ops
from tsmigrate.planning.plan import make_plan
from tsmigrate.schema import Catalog, DefinedColumn, PrimaryKeyColumn, Table, TableOptions
from tsmigrate.versions import autogen
from tsmigrate.versions.errors import IrreversibleError
from tsmigrate.versions.replay import collect, replay
from tsmigrate.versions.scripts import ScriptDirectory


def _write(migrations: Path, revision: str, parents: list[str], before: Catalog, after: Catalog):
    steps = make_plan(before, after, prune=True).steps
    bodies = autogen.render_bodies(before, steps)
    text = autogen.render_script(revision=revision, parents=parents, message=f"to {revision}",
                                 bodies=bodies, migrations_dir=migrations)
    versions = migrations / "versions"
    versions.mkdir(parents=True, exist_ok=True)
    (versions / f"{revision}_{autogen.slug(f'to {revision}')}.py").write_text(text)
    return bodies


def _same_schema(replayed: Catalog, expected: Catalog) -> bool:
    keys = {t.name: t.primary_key for t in replayed.tables}
    return make_plan(replayed, expected, prune=True).steps == () and \
        keys == {t.name: t.primary_key for t in expected.tables}


@pytest.mark.slow
@settings(max_examples=60)
@given(pair=catalog_changes(max_tables=3))
def test_generated_scripts_replay_to_the_models_catalog_and_back(pair):
    before, after = pair
    with tempfile.TemporaryDirectory() as tmp:
        migrations = Path(tmp) / "migrations"
        _write(migrations, "aaa111", [], Catalog(), before)
        bodies = _write(migrations, "bbb222", ["aaa111"], before, after)
        directory = ScriptDirectory.load(str(migrations), Path(tmp))
        assert _same_schema(replay(directory, "aaa111"), before)
        head = replay(directory)
        assert _same_schema(head, after)
        script = directory.get("bbb222")
        if bodies.irreversible:
            with pytest.raises(IrreversibleError):
                collect(script, "downgrade", head)
        else:
            back = collect(script, "downgrade", head).catalog_after
            assert make_plan(back, replay(directory, "aaa111"), prune=True).steps == ()
        # The first revision's downgrade (drop every table) is always possible.
        assert collect(directory.get("aaa111"), "downgrade", replay(directory, "aaa111")
                       ).catalog_after == Catalog()


@given(valid_catalogs(max_tables=3))
@pytest.mark.slow
def test_rendered_values_evaluate_to_themselves(catalog):
    for table in catalog.tables:
        src = autogen.Source()
        text = src.value(autogen.script_table(table))
        namespace: dict = {}
        exec("\n".join(src.import_lines()), namespace)
        assert eval(text, namespace) == autogen.script_table(table)


T = Table("acct", [PrimaryKeyColumn("id", "STRING")], defined_columns=[DefinedColumn("a", "STRING")],
          options=TableOptions(time_to_live=30 * 86400, max_versions=3))


def test_a_lossy_step_makes_downgrade_raise_with_the_reason():
    lowered = Catalog(tables=[Table("acct", T.primary_key, defined_columns=T.defined_columns,
                                    options=TableOptions(time_to_live=7 * 86400, max_versions=3))])
    bodies = autogen.render_bodies(Catalog(tables=[T]), make_plan(Catalog(tables=[T]), lowered).steps)
    assert "# destructive: lowering TTL from 30d to 7d deletes cells older than 7d" in bodies.upgrade
    assert "op.update_options('acct', time_to_live='7d')" in bodies.upgrade
    first = bodies.downgrade.splitlines()[0]
    assert first.startswith("    op.irreversible(\"upgrade step 'update options of acct")
    assert "going back does not restore them" in first
    # The schema inverse is there for the author, after the refusal, commented out.
    assert "# op.update_options('acct', time_to_live='30d')" in bodies.downgrade


def test_a_dropped_table_downgrade_keeps_its_definition_commented():
    bodies = autogen.render_bodies(Catalog(tables=[T]), make_plan(Catalog(tables=[T]), Catalog(),
                                                                  prune=True).steps)
    assert bodies.upgrade.splitlines()[-1] == "    op.drop_table('acct')"
    assert "recreating it gives an empty table" in bodies.downgrade
    assert "    # op.create_table(Table(\n    #     'acct',\n" in bodies.downgrade


def test_a_rewrite_renders_one_rewrite_table_call():
    source = Table("acct", [PrimaryKeyColumn("id", "STRING")])
    target = Table("acct_v2", [PrimaryKeyColumn("region", "STRING"), PrimaryKeyColumn("id", "STRING")],
                   replaces="acct")
    steps = make_plan(Catalog(tables=[source]), Catalog(tables=[target])).steps
    assert [s.kind for s in steps] == ["create_table", "rewrite_table"]
    bodies = autogen.render_bodies(Catalog(tables=[source]), steps)
    assert " ".join(bodies.upgrade.split()).startswith(
        "# data-copy: Tablestore cannot change a primary key in place")
    assert "op.rewrite_table('acct', Table(\n        'acct_v2'," in bodies.upgrade
    assert "op.create_table" not in bodies.upgrade
    assert "services write acct_v2 once they cut over" in bodies.downgrade


def test_the_project_template_wins(tmp_path):
    (tmp_path / "script.py.j2").write_text("# custom {{ revision }} {{ down_revision }}\n")
    bodies = autogen.Bodies("    pass", "    pass", (), ())
    text = autogen.render_script(revision="abc", parents=["p1", "p2"], message="m", bodies=bodies,
                                 migrations_dir=tmp_path)
    assert text == "# custom abc ('p1', 'p2')\n"
    packaged = autogen.render_script(revision="abc", parents=[], message='say """hi"""',
                                     bodies=bodies, migrations_dir=tmp_path / "none")
    compile(packaged, "x.py", "exec")
    assert "down_revision = None" in packaged and "message = 'say \"\"\"hi\"\"\"'" in packaged


def test_every_step_kind_has_a_rendering():
    rendered = {"create_table", "drop_table", "retire_table", "update_options", "update_throughput",
                "add_defined_columns", "delete_defined_columns", "create_index", "drop_index",
                "create_search_index", "drop_search_index", "reindex_search_index",
                "update_search_index_ttl", "update_stream", "rewrite_table"}
    assert set(ops.STEP_TYPES) | {"retire_table"} == rendered
