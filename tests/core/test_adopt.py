"""Adoption: model source written for live tables compiles back to the same schema, key
derivations included, with the attribute columns its search indexes and derivations need; and
writing is all or nothing. (The command itself: tests/engine/test_adoption_cli.py.)"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from strategies import valid_catalogs, valid_tables

from tsmigrate.errors import ConfigError
from tsmigrate.keys import Concat, Descending, HashPrefix, TimeBucket
from tsmigrate.schema import (
    Catalog,
    DefinedColumn,
    PrimaryKeyColumn,
    SearchField,
    SearchIndex,
    Table,
    physical_table,
)
from tsmigrate.schema.adopt import class_name, model_sources, table_source, write_models
from tsmigrate.schema.model import Model, compile_models, registered_models

_modules = itertools.count()


def _compile_source(source: str, directory: Path) -> Table:
    path = directory / f"adopted_{next(_modules)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    models = [v for v in vars(module).values()
              if isinstance(v, type) and issubclass(v, Model) and v is not Model]
    assert len(models) == 1
    return compile_models(models).tables[0]


def _inspected(table: Table) -> Table:
    """What inspection shows of a table: the physical schema and the recorded derivations."""
    return attrs.evolve(physical_table(table), primary_key=table.primary_key)


# Attribute columns, derivations and search indexes on: the cases adoption used to break (search
# fields without a Column, derivations dropped so the next plan wanted to change keys).
@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=valid_tables())
@pytest.mark.slow
def test_written_models_compile_back_to_the_same_schema_with_derivations(tmp_path_factory, table):
    compiled = _compile_source(table_source(table), tmp_path_factory.mktemp("adopt"))
    assert _inspected(compiled) == _inspected(table)
    # Every column a search index or a key derivation reads is declared (validation passed, and
    # says so): attributes the service cannot report are recreated where the schema needs them.
    needed = {f.name for i in table.search_indexes for f in i.fields}
    needed |= {s for c in table.primary_key if c.derivation for s in c.derivation.sources}
    assert needed <= {c.name for c in (*compiled.primary_key, *compiled.defined_columns,
                                       *compiled.attributes)}


def test_each_derivation_and_its_sources_are_written_as_the_model_api_reads_them(tmp_path):
    table = Table(
        name="readings",
        primary_key=[
            PrimaryKeyColumn("bucket", "INTEGER", derivation=TimeBucket("created", buckets=32)),
            PrimaryKeyColumn("pk", "STRING", derivation=HashPrefix("device", length=6, sep="#")),
            PrimaryKeyColumn("key", "STRING", derivation=Concat(["user", "seq"], pad={"seq": 10})),
            PrimaryKeyColumn("ts", "INTEGER", derivation=Descending("at")),
        ],
        defined_columns=[DefinedColumn("battery", "INTEGER")],
        search_indexes=[SearchIndex("finder", fields=[
            SearchField("battery", "LONG"), SearchField("note", "TEXT"), SearchField("temp", "DOUBLE"),
            SearchField("ok", "BOOLEAN"), SearchField("tags", "KEYWORD", is_array=True)])],
    )
    source = table_source(table)
    assert "from tsmigrate.keys import Concat, Descending, HashPrefix, TimeBucket" in source
    assert "bucket = PrimaryKey(int, derive=TimeBucket('created', buckets=32))" in source
    assert "pk = PrimaryKey(str, derive=HashPrefix('device', length=6, sep='#'))" in source
    assert ("key_col = PrimaryKey(str, derive=Concat(['user', 'seq'], pad={'seq': 10}), "
            "name='key')") in source
    assert "ts = PrimaryKey(int, derive=Descending('at'))" in source  # default ceiling left out
    for line in ("created = Column(int)", "device = Column(str)", "user = Column(str)",
                 "seq = Column(int)", "at = Column(int)", "note = Column(str)",
                 "temp = Column(float)", "ok = Column(bool)", "tags = Column(str)",
                 "battery = Column(int, defined=True)"):
        assert f"    {line}\n" in source, line
    assert _inspected(_compile_source(source, tmp_path)) == _inspected(table)
    assert not any(line.endswith(" ") for line in source.splitlines())


def test_awkward_names_become_valid_attributes(tmp_path):
    table = Table(
        name="class",
        primary_key=[PrimaryKeyColumn("from", "STRING"), PrimaryKeyColumn("key", "INTEGER"),
                     PrimaryKeyColumn("__x", "BINARY")],
    )
    source = table_source(table)
    assert "from_col = PrimaryKey(str, name='from')" in source
    assert "key_col = PrimaryKey(int, name='key')" in source
    assert physical_table(_compile_source(source, tmp_path)) == table
    assert class_name("class") == "Class" and class_name("_9lives") == "T9lives"


def _table(name: str) -> Table:
    return Table(name=name, primary_key=[PrimaryKeyColumn("id", "STRING")])


def test_write_models_writes_a_package_and_checking_it_leaves_no_models_behind(tmp_path):
    before = len(registered_models())
    written = write_models(Catalog([_table("orders"), _table("users")]), tmp_path / "adopted")
    assert [p.name for p in written] == ["orders.py", "users.py"]
    assert (tmp_path / "adopted" / "__init__.py").exists()
    assert len(registered_models()) == before  # the compile-back check forgets its classes
    assert [p.name for p in (tmp_path / "adopted").iterdir()] != []
    assert not [p for p in (tmp_path / "adopted").iterdir() if p.name.startswith(".adopting")]


def test_an_existing_file_means_nothing_is_written_unless_overwrite(tmp_path):
    package = tmp_path / "adopted"
    package.mkdir()
    (package / "users.py").write_text("# mine\n")
    catalog = Catalog([_table("orders"), _table("users")])
    with pytest.raises(ConfigError, match=r"1 model file\(s\) exist: .*users\.py; nothing was written"):
        write_models(catalog, package)
    assert sorted(p.name for p in package.iterdir()) == ["users.py"]  # not even orders.py
    assert (package / "users.py").read_text() == "# mine\n"
    written = write_models(catalog, package, overwrite=True)
    assert [p.name for p in written] == ["orders.py", "users.py"]
    assert "class Users(Model" in (package / "users.py").read_text()


def test_a_file_in_the_way_of_the_package_or_no_tables_is_an_error(tmp_path):
    (tmp_path / "adopted").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        write_models(Catalog([_table("orders")]), tmp_path / "adopted")
    with pytest.raises(ConfigError, match="no tables to write models for"):
        write_models(Catalog(), tmp_path / "empty")
    assert not (tmp_path / "empty").exists()


def test_module_names_never_collide_nor_replace_the_package(tmp_path):
    long = "t" * 255  # the longest table name: its module name must fit a file name
    catalog = Catalog([_table("Orders"), _table("orders"), _table("__init__"), _table("class"),
                       _table(long), _table(long[:-1] + "u")])
    sources = model_sources(catalog)
    assert len(sources) == 6 and "__init__" not in sources and "class" not in sources
    assert all(len(name) <= 101 for name in sources)
    written = write_models(catalog, tmp_path / "adopted")
    assert len(written) == 6
    assert '"""Models adopted' in (tmp_path / "adopted" / "__init__.py").read_text()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(catalog=valid_catalogs(max_tables=3, min_tables=1))
def test_a_written_package_imports_back_to_the_catalog(tmp_path_factory, catalog):
    from tsmigrate.schema.discover import import_models

    root = tmp_path_factory.mktemp("project")
    package = f"adopted_{next(_modules)}"
    write_models(catalog, root / package)
    back = compile_models(import_models([package], root))
    assert Catalog([_inspected(t) for t in back.tables]) == Catalog(
        [_inspected(t) for t in catalog.tables])
