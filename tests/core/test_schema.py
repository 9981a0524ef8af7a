"""The schema IR: canonical dict / JSON round trips and the fingerprint."""

from __future__ import annotations

import copy
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import strategies
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tsmigrate.keys import HashPrefix
from tsmigrate.schema import (
    FORMAT_VERSION,
    Catalog,
    DefinedColumn,
    PrimaryKeyColumn,
    SecondaryIndex,
    StreamSpec,
    Table,
    TableOptions,
    fingerprint,
)
from tsmigrate.schema.discover import import_models
from tsmigrate.schema.model import (
    Column,
    GlobalIndex,
    Model,
    PrimaryKey,
    SearchField,
    SearchIndex,
    compile_models,
)

REPO = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CATALOGS = strategies.valid_catalogs(max_tables=3)


@SETTINGS
@given(CATALOGS)
@pytest.mark.slow
def test_dict_and_json_round_trips(catalog: Catalog) -> None:
    data = catalog.to_dict()
    assert data["format"] == FORMAT_VERSION
    assert Catalog.from_dict(data) == catalog
    assert Catalog.from_dict(data).to_dict() == data
    text = catalog.to_json()
    again = Catalog.from_dict(json.loads(text))
    assert again == catalog
    assert again.to_json() == text
    assert again.fingerprint() == catalog.fingerprint()
    assert Catalog.from_dict(json.loads(catalog.to_json(indent=None))) == catalog


# --- declaration order does not matter -----------------------------------------------------------

# Lists that are sets in Tablestore; every other list (primary key, index keys, routing fields,
# index sort, a Concat's fields, date formats, an access pattern's columns) keeps its order.
ORDERLESS = ("defined_columns", "secondary_indexes", "search_indexes", "attributes", "access_patterns")


def _shuffled_keys(data: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    return dict(rnd.sample(list(data.items()), len(data)))


def _shuffled_fields(fields: list[dict[str, Any]], rnd: random.Random) -> list[dict[str, Any]]:
    fields = [
        _shuffled_keys({**f, "sub_fields": _shuffled_fields(f["sub_fields"], rnd)}, rnd) for f in fields
    ]
    return rnd.sample(fields, len(fields))


def shuffled(catalog_dict: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    """The same catalog declared in another order: sets shuffled, mapping keys reordered."""
    tables = []
    for table in copy.deepcopy(catalog_dict["tables"]):
        for key in ORDERLESS:
            table[key] = rnd.sample(table[key], len(table[key]))
        for index in table["secondary_indexes"]:
            index["include"] = rnd.sample(index["include"], len(index["include"]))
        for search in table["search_indexes"]:
            search["fields"] = _shuffled_fields(search["fields"], rnd)
        table["options"] = _shuffled_keys(table["options"], rnd)
        tables.append(_shuffled_keys(table, rnd))
    return _shuffled_keys({**catalog_dict, "tables": rnd.sample(tables, len(tables))}, rnd)


@pytest.mark.slow
@SETTINGS
@given(CATALOGS, st.randoms(use_true_random=False))
def test_fingerprint_ignores_declaration_order(catalog: Catalog, rnd: random.Random) -> None:
    # The canonical dict, declared in another order
    other = Catalog.from_dict(shuffled(catalog.to_dict(), rnd))
    assert other == catalog
    assert other.fingerprint() == catalog.fingerprint()
    assert other.to_json() == catalog.to_json()

    # IR values built from lists in another order
    def reordered(table: Table) -> Table:
        changes = {key: rnd.sample(list(getattr(table, key)), len(getattr(table, key))) for key in ORDERLESS}
        return attrs.evolve(table, **changes)

    tables = [reordered(t) for t in catalog.tables]
    built = Catalog(tables=rnd.sample(tables, len(tables)))
    assert built == catalog
    assert built.fingerprint() == catalog.fingerprint()


def test_models_declared_in_another_order_have_the_same_fingerprint() -> None:
    class First(Model, table="orders", ttl="30d", allow_update=False):
        shop = PrimaryKey(str)
        order_id = PrimaryKey(int)
        status = Column(str, defined=True)
        total = Column(int, defined=True)
        by_status = GlobalIndex(keys=["status"], include=["total"])
        search = SearchIndex(fields=[SearchField("status", "keyword"), SearchField("total", "long")])

    class Second(Model, table="orders", ttl=30 * 86400, allow_update=False):
        shop = PrimaryKey(str)
        search = SearchIndex(fields=[SearchField("total", "long"), SearchField("status", "keyword")])
        total = Column(int, defined=True)
        order_id = PrimaryKey(int)
        by_status = GlobalIndex(keys=["status"], include=["total"])
        status = Column(str, defined=True)

    first, second = compile_models([First]), compile_models([Second])
    assert first.tables[0].source != second.tables[0].source  # where it was declared: not schema
    assert first == second
    assert first.fingerprint() == second.fingerprint()


# --- anything physical changes the fingerprint ---------------------------------------------------

# Parts of the IR that describe the model rather than the physical schema: left out of the
# "must change the fingerprint" property (whether they should count is a design decision).
NOT_PHYSICAL = {"attributes", "access_patterns"}


def _leaves(data: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every scalar leaf of the canonical dict that a user can change."""
    if isinstance(data, dict):
        out = []
        for key, value in data.items():
            if key in NOT_PHYSICAL or (key == "kind" and "derivation" in path) or (*path, key) == ("format",):
                continue
            out += _leaves(value, (*path, key))
        return out
    if isinstance(data, list):
        return [leaf for i, value in enumerate(data) for leaf in _leaves(value, (*path, i))]
    return [path] if data is not None else []


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    raise AssertionError(f"unexpected leaf {value!r}")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.valid_catalogs(min_tables=1, max_tables=2), st.data())
@pytest.mark.slow
def test_changing_any_physical_value_changes_the_fingerprint(catalog: Catalog, data: st.DataObject) -> None:
    original = catalog.to_dict()
    path = data.draw(st.sampled_from(_leaves(original)))
    changed = copy.deepcopy(original)
    holder = changed
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = _changed(holder[path[-1]])
    other = Catalog.from_dict(changed)
    assert other != catalog, path
    assert other.fingerprint() != catalog.fingerprint(), path


DAY = 86400
BASE = Table(
    name="telemetry",
    primary_key=[
        PrimaryKeyColumn("pk", "STRING", derivation=HashPrefix("device_id", length=4)),
        PrimaryKeyColumn("ts", "INTEGER"),
    ],
    defined_columns=[DefinedColumn("device_id", "STRING"), DefinedColumn("serial", "STRING")],
    options=TableOptions(time_to_live=90 * DAY, allow_update=False),
    secondary_indexes=[SecondaryIndex("by_serial", ["serial", "device_id"])],
)


def _key(*columns: PrimaryKeyColumn) -> dict[str, Any]:
    return {"primary_key": list(columns)}


PK, TS = BASE.primary_key
PHYSICAL_CHANGES = {
    "ttl": {"options": TableOptions(time_to_live=30 * DAY, allow_update=False)},
    "allow-update": {"options": TableOptions(time_to_live=90 * DAY, allow_update=True)},
    "max-versions": {"options": TableOptions(time_to_live=90 * DAY, allow_update=False, max_versions=2)},
    "hash-length": _key(attrs.evolve(PK, derivation=HashPrefix("device_id", 5)), TS),
    "hash-separator": _key(attrs.evolve(PK, derivation=HashPrefix("device_id", 4, ",")), TS),
    "no-derivation": _key(attrs.evolve(PK, derivation=None), TS),
    "key-order": _key(TS, PK),
    "auto-increment": _key(PK, attrs.evolve(TS, auto_increment=True)),
    "index-key-order": {"secondary_indexes": [SecondaryIndex("by_serial", ["device_id", "serial"])]},
    "index-type": {"secondary_indexes": [SecondaryIndex("by_serial", ["serial", "device_id"], type="LOCAL")]},
    "index-include": {"secondary_indexes": [SecondaryIndex("by_serial", ["serial", "device_id"], ["x"])]},
    "defined-column-added": {"defined_columns": [*BASE.defined_columns, DefinedColumn("battery", "INTEGER")]},
    "defined-column-type": {
        "defined_columns": [DefinedColumn("device_id", "BINARY"), DefinedColumn("serial", "STRING")]
    },
    "stream": {"stream": StreamSpec(enabled=True)},
    "table-name": {"name": "telemetry_v2"},
}


@pytest.mark.parametrize("change", PHYSICAL_CHANGES.values(), ids=PHYSICAL_CHANGES.keys())
def test_examples_of_physical_changes(change: dict[str, Any]) -> None:
    changed = attrs.evolve(BASE, **change)
    assert Catalog(tables=[changed]).fingerprint() != Catalog(tables=[BASE]).fingerprint()


def test_where_a_table_was_declared_is_not_part_of_the_schema() -> None:
    moved = attrs.evolve(BASE, source="elsewhere.Telemetry")
    assert moved == BASE
    assert Catalog(tables=[moved]).fingerprint() == Catalog(tables=[BASE]).fingerprint()
    assert "source" not in Catalog(tables=[moved]).to_dict()["tables"][0]


def test_fingerprint_format() -> None:
    value = Catalog(tables=[BASE]).fingerprint()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", value)
    assert Catalog().fingerprint() == fingerprint({"format": FORMAT_VERSION, "tables": []})
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": [1, 2]}) != fingerprint({"a": [2, 1]})


# --- stable across processes ---------------------------------------------------------------------

FINGERPRINT_OF_EXAMPLES = """
from pathlib import Path
from tsmigrate.schema.discover import import_models
from tsmigrate.schema.model import compile_models
print(compile_models(import_models(["models"], Path.cwd())).fingerprint())
"""

FINGERPRINTS_OF_JSON = """
import json, sys
from tsmigrate.schema import Catalog
for line in sys.stdin:
    print(Catalog.from_dict(json.loads(line)).fingerprint())
"""


def _run(script: str, seed: str, stdin: str = "") -> str:
    # A process of its own: another hash seed is the point. No bytecode written into the checkout.
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_fingerprint_of_the_example_models_is_stable_across_processes() -> None:
    in_process = compile_models(import_models(["models"], REPO)).fingerprint()
    assert _run(FINGERPRINT_OF_EXAMPLES, "0").strip() == in_process
    assert _run(FINGERPRINT_OF_EXAMPLES, "4242").strip() == in_process


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CATALOGS, min_size=5, max_size=5))
def test_fingerprints_are_stable_across_processes(catalogs: list[Catalog]) -> None:
    lines = "".join(json.dumps(c.to_dict()) + "\n" for c in catalogs)
    assert _run(FINGERPRINTS_OF_JSON, "1", lines).split() == [c.fingerprint() for c in catalogs]


# --- the dict form -------------------------------------------------------------------------------


def test_from_dict_fills_defaults() -> None:
    minimal = {"tables": [{"name": "t", "primary_key": [{"name": "pk", "type": "STRING"}]}]}
    catalog = Catalog.from_dict(minimal)
    assert catalog == Catalog(tables=[Table("t", [PrimaryKeyColumn("pk", "STRING")])])
    assert catalog.tables[0].options == TableOptions(time_to_live=-1, max_versions=1)


def test_from_dict_refuses_another_format() -> None:
    with pytest.raises(ValueError, match="unsupported catalog format 2"):
        Catalog.from_dict({"format": 2, "tables": []})


def test_catalog_lookup_and_column_types() -> None:
    catalog = Catalog(tables=[BASE])
    assert catalog.table("telemetry") is BASE
    assert catalog.table("nope") is None
    assert BASE.column_type("ts") == "INTEGER"
    assert BASE.column_type("serial") == "STRING"
    assert BASE.column_type("nope") is None
    assert BASE.primary_key_names == ("pk", "ts")


def test_index_key_is_completed_with_the_missing_base_key_columns() -> None:
    """Tablestore appends the base primary-key columns an index lacks, in base order."""
    base = Table("t", [PrimaryKeyColumn("gid", "INTEGER"), PrimaryKeyColumn("uid", "STRING")])
    assert SecondaryIndex("i", ["gid", "s"]).primary_key(base) == ("gid", "s", "uid")
    assert SecondaryIndex("i", ["col1"]).primary_key(base) == ("col1", "gid", "uid")
    assert SecondaryIndex("i", ["uid"]).primary_key(base) == ("uid", "gid")


def test_a_single_string_is_one_key_not_characters() -> None:
    assert SecondaryIndex("i", "serial").keys == ("serial",)
    assert SecondaryIndex("i", ["a"], include="battery").include == ("battery",)


def test_a_presort_by_the_primary_key_ascending_is_the_default_presort():
    """The service presorts an index declared without presort by the primary key, ascending, and
    describes it so: a model saying presort=["pk"] and one saying nothing are one index."""
    from tsmigrate import schema

    field = schema.SearchField("k", "KEYWORD")
    default = schema.SearchIndex("i", [field])
    assert schema.SearchIndex("i", [field], index_sort=[schema.IndexSorter(None, "ASC")]) == default
    descending = schema.SearchIndex("i", [field], index_sort=[schema.IndexSorter(None, "DESC")])
    assert descending != default
    assert descending.index_sort == (schema.IndexSorter(None, "DESC"),)
    nested = schema.SearchField("n", "NESTED", sub_fields=[schema.SearchField("a", "LONG")])
    kept = schema.SearchIndex("i", [nested], index_sort=[schema.IndexSorter(None, "ASC")])
    assert kept.index_sort == (schema.IndexSorter(None, "ASC"),)  # invalid, and reported so
