"""Planning for table families: a family model's template table becomes its month tables.

The current month and the ``ahead`` months after it are declared (so ``plan`` creates them ahead
of time), months that exist and are still retained stay declared (so they follow the template's
changes), and months past the retention become ``RetireTable`` steps: archive the rows (cell
timestamps included), then drop the table. That step is destructive and needs the flag.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import attrs

from tsmigrate.planning import ops
from tsmigrate.schema import Catalog
from tsmigrate.schema.model import Model, registered_models


@attrs.frozen
class Expansion:
    catalog: Catalog
    retire: tuple[ops.RetireTable, ...] = attrs.field(default=(), converter=tuple)


def expand_families(
    catalog: Catalog, models: Iterable[type[Model]], live_names: Iterable[str], now: datetime
) -> Expansion:
    """The catalog with each family's template replaced by its month tables, and the steps that
    retire expired months."""
    live_names = sorted(live_names)
    tables = {t.name: t for t in catalog.tables}
    retire: list[ops.RetireTable] = []
    for model in models:
        family = model.table_family()
        template = tables.get(model.table_name())
        if family is None or template is None:
            continue
        del tables[template.name]
        months = set(family.planned_months(now))
        for name in live_names:
            month = family.month_of_table(template.name, name)
            if month is None:
                continue
            if family.expired(month, now):
                retire.append(ops.RetireTable(name, archive=str(family.archive)))
            else:
                months.add(month)
        for month in sorted(months):
            if family.expired(month, now):
                continue
            name = family.table_name(template.name, month)
            tables[name] = attrs.evolve(template, name=name)
    return Expansion(Catalog(tables=list(tables.values())), retire)


def expand_declared_families(target: Catalog, live: Catalog, now: datetime) -> Expansion:
    """``expand_families`` for the models the target's tables were compiled from."""
    sources = {t.source for t in target.tables}
    by_source: dict[str, type[Model]] = {}
    for model in registered_models():  # a class defined again replaces the earlier definition
        if model._qualname() in sources and model.table_family():
            by_source[model._qualname()] = model
    models = list(by_source.values())
    if not models:
        return Expansion(target)
    return expand_families(target, models, [t.name for t in live.tables], now)
