"""Adoption: model source written for live tables compiles back to the same schema."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

from hypothesis import given, settings
from strategies import valid_tables

from tsmigrate.adopt import class_name, table_source, write_models
from tsmigrate.model import Model, compile_models
from tsmigrate.schema import Catalog, PrimaryKeyColumn, Table, physical_table

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


@settings(max_examples=60)
@given(table=valid_tables(derive=False, attributes=False, access_patterns=False))
def test_written_models_compile_back_to_the_same_schema(tmp_path_factory, table):
    compiled = _compile_source(table_source(table), tmp_path_factory.mktemp("adopt"))
    assert physical_table(compiled) == physical_table(table)


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


def test_write_models_writes_a_package_and_never_overwrites(tmp_path):
    catalog = Catalog([Table(name="orders", primary_key=[PrimaryKeyColumn("id", "STRING")])])
    written = write_models(catalog, tmp_path / "adopted")
    assert [p.name for p in written] == ["orders.py"]
    assert (tmp_path / "adopted" / "__init__.py").exists()
    try:
        write_models(catalog, tmp_path / "adopted")
    except Exception as exc:
        assert "exists" in str(exc) and type(exc).__name__ == "ConfigError"
    else:
        raise AssertionError("overwrote an existing model file")
