"""Drift (`tsmigrate status`): the live schema against the one the last apply left, table by
table. Property tests over random catalog evolutions."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from strategies import catalog_changes, valid_catalogs

from tsmigrate.planning.drift import CHANGED, EXTRA, MISSING, TableDrift, drift
from tsmigrate.schema import Catalog, SecondaryIndex, StreamSpec, TableOptions, physical


@given(valid_catalogs())
@pytest.mark.slow
def test_a_catalog_has_no_drift_from_itself_nor_from_its_physical_form(catalog: Catalog):
    assert drift(catalog, catalog) == []
    assert drift(catalog, physical(catalog)) == []  # declarations are not live state


@given(catalog_changes())
@pytest.mark.slow
def test_every_table_that_differs_is_named_once_with_what_happened(change):
    before, after = change
    found = {d.table: d for d in drift(before, after)}
    was, now = {t.name: t for t in physical(before).tables}, {t.name: t for t in physical(after).tables}
    assert {n for n, d in found.items() if d.kind == MISSING} == was.keys() - now.keys()
    assert {n for n, d in found.items() if d.kind == EXTRA} == now.keys() - was.keys()
    changed = {n for n in was.keys() & now.keys() if was[n] != now[n]}
    assert {n for n, d in found.items() if d.kind == CHANGED} == changed
    assert all(d.details for d in found.values() if d.kind == CHANGED)


@given(valid_catalogs(min_tables=1))
@pytest.mark.slow
def test_details_say_what_changed(catalog: Catalog):
    table = catalog.tables[0]
    changed = attrs.evolve(
        table,
        options=TableOptions(time_to_live=7 * 86400, max_versions=table.options.max_versions,
                             max_time_deviation=table.options.max_time_deviation,
                             allow_update=table.options.allow_update),
        secondary_indexes=(*table.secondary_indexes, SecondaryIndex("zz_by_hand", ["x"])),
        stream=StreamSpec(True, 12),
    )
    live = Catalog(tables=[changed, *catalog.tables[1:]])
    (found,) = drift(catalog, live, gone_on_purpose=())
    assert found == TableDrift(table.name, CHANGED, found.details)
    assert "secondary index zz_by_hand added" in found.details
    assert any(d.startswith("stream ") and d.endswith("-> on (12h)") for d in found.details) or \
        table.stream == StreamSpec(True, 12)
    if table.options.time_to_live != 7 * 86400:
        assert any(d.startswith("TTL ") and d.endswith("-> 7d") for d in found.details)


@given(valid_catalogs(min_tables=1))
@pytest.mark.slow
def test_tables_dropped_on_purpose_are_not_drift(catalog: Catalog):
    gone = catalog.tables[0].name
    assert drift(catalog, Catalog(tables=catalog.tables[1:]), gone_on_purpose={gone}) == []
    assert drift(catalog, Catalog(tables=catalog.tables[1:])) == [TableDrift(gone, MISSING)]
