"""What a key-changing rewrite needs of its two tables, known from their declarations alone.

Pure: IR tables in, words out (no I/O, no SDK). ``plan`` and ``apply`` ask it before anything
moves, prepare asks again with the tables' live options, and ``switch`` asks ``revert_problem``.

- ``revert_problem``: whether the rows services write to the new table after the switch, through
  the new model, can be carried back to the old key (reverse capture, ``rewrite revert``). It asks
  the transform reverse capture runs (``RowTransform.build(target, source)``) which fields of the
  old key the new key does not give back, and which of those the new model does not declare: a
  row it writes has only its key and declared fields.
- ``problems``: options of the two tables that the copy, verification or the cut-over cannot
  work with, each with its fix. Found by running rewrites on the local server:

  * a TTL on the new table shorter than the old one's: the copy writes every cell with its own
    timestamp, and the service refuses a cell older than the table's TTL (``Invalid
    timestamp``), so the copy stops at the first old row;
  * a TTL longer than the old one's (or none where the old table has one): cells the old table
    expires stay in the new one, verification finds them for ever and the switch stays blocked;
  * a new model that writes with UpdateRow (``writes="update"``) while the old table takes none:
    its writes go to the old table until the switch (and after a revert), every update refused.

  Found to work, so not refused: fewer (or more) versions on the new table (the copy reads as
  many as the new table keeps; reverse capture leaves a column it writes with that many), a
  search index with a TTL, and either table with ``allow_update=False`` (capture writes whole
  rows there).
"""

from __future__ import annotations

from tsmigrate.errors import Problem, SchemaError
from tsmigrate.schema import BINARY, BOOLEAN, DOUBLE, INTEGER, NO_TTL, STRING, Table
from tsmigrate.schema.render import duration

_PYTHON_TYPES = {STRING: "str", INTEGER: "int", BINARY: "bytes", DOUBLE: "float", BOOLEAN: "bool"}


class RewriteShapeError(SchemaError):
    """The two tables of a rewrite, as declared, cannot be rewritten and cut over; each problem
    names the tables, the rule and the fix. Raised before anything is written."""


def model_name(table: Table) -> str:
    """The class that declares ``table`` (``source`` is its dotted path), or a phrase naming
    the table when the IR does not say (a live table, a migration script's table)."""
    if table.source:
        return table.source.rpartition(".")[2]
    return f"the model of {table.name}"


def _key_fields(table: Table) -> list[str]:
    """The fields a table's key is built from, in key order (a derived column's sources)."""
    fields = [f for c in table.primary_key for f in (c.derivation.sources if c.derivation else (c.name,))]
    return list(dict.fromkeys(fields))


def _declaration(field: str, source: Table) -> str:
    kind = _PYTHON_TYPES.get(source.column_type(field) or "")
    return f"{field} = Column({kind})" if kind else f"{field} as a Column"


def revert_problem(source: Table, target: Table, custom: str | None = None) -> str | None:
    """None when every row written to ``target`` through its model (target key fields,
    ``target.defined_columns`` and ``target.attributes``) gives the key of its ``source`` row;
    otherwise why not, and what to declare."""
    if custom:
        return (f"the new key is computed by a custom transform ({custom}) with no inverse: a row "
                f"written to {target.name} does not tell which {source.name} key it belongs to")
    from tsmigrate.contract.transform import RowTransform

    # The transform reverse capture runs: the fields of the old key that the new key does not
    # give back are read from the row's attributes (a time bucket is recomputed from its source,
    # so it needs that field too).
    backward = RowTransform.build(target, source)
    declared = {c.name for c in (*target.defined_columns, *target.attributes)}
    missing = [f for f in _key_fields(source) if f in backward.key_sources and f not in declared]
    if not missing:
        return None
    quoted = " or ".join(repr(f) for f in missing)
    what = "a field" if len(missing) == 1 else "fields"
    declare = " and ".join(_declaration(f, source) for f in missing)
    return (f"the new model's rows have no {quoted}, {what} of the old key (the key of {source.name} "
            f"is built from {', '.join(_key_fields(source))}): declare {declare} on "
            f"{model_name(target)} to keep revert possible")


def _ttl_option(seconds: int) -> str:
    return "ttl=None" if seconds == NO_TTL else f'ttl="{duration(seconds)}"'


def _longer(a: int, b: int) -> bool:
    """TTL ``a`` keeps cells longer than ``b`` (forever is the longest)."""
    if a == b:
        return False
    return b != NO_TTL and (a == NO_TTL or a > b)


def problems(source: Table, target: Table, custom: str | None = None) -> list[Problem]:
    """What the rewrite of ``source`` into ``target`` and its cut-over need of the two tables'
    options and models that does not hold, each with its fix (see the module docstring).
    ``custom`` (a custom key transform) changes none of them; it is taken for symmetry with
    ``revert_problem``."""
    del custom  # the rules below hold whatever computes the key
    found: list[Problem] = []
    model = model_name(target)
    old_ttl, new_ttl = source.options.time_to_live, target.options.time_to_live
    if _longer(old_ttl, new_ttl):
        found.append(Problem(
            table=target.name, field="ttl", rule="rewrite.ttl-shorter", model=target.source,
            message=f"{target.name} keeps cells {duration(new_ttl)} but {source.name}, which it "
            f"replaces, keeps them {duration(old_ttl)}: the copy writes every cell with its own "
            "timestamp, and the service refuses a cell older than the table's TTL (Invalid "
            "timestamp), so the rewrite would stop at the first such row",
            fix=f"declare {_ttl_option(old_ttl)} on {model} for the rewrite; lower it after "
            f"`tsmigrate rewrite finish {target.name}`, in a later apply (which deletes the older "
            "data and says so)",
        ))
    elif _longer(new_ttl, old_ttl):
        found.append(Problem(
            table=target.name, field="ttl", rule="rewrite.ttl-longer", model=target.source,
            message=f"{target.name} keeps cells {duration(new_ttl)} but {source.name}, which it "
            f"replaces, only {duration(old_ttl)}: cells that expire in {source.name} during the "
            f"rewrite stay in {target.name}, so verification finds them for ever and the switch "
            "stays blocked",
            fix=f"declare {_ttl_option(old_ttl)} on {model} for the rewrite; raise it after "
            f"`tsmigrate rewrite finish {target.name}`, in a later apply (an in-place change)",
        ))
    if target.writes == "update" and not source.options.allow_update:
        found.append(Problem(
            table=target.name, field="writes", rule="rewrite.updates-routed-to-source",
            model=target.source,
            message=f"{model} writes with UpdateRow (writes='update'), but until the switch (and "
            f"after a revert) its writes go to {source.name}, which has allow_update=False: every "
            "update would be refused",
            fix=f"have the services of {model} put whole rows (Rows.put) and declare "
            f"writes='put' on it (allow_update=True on {source.name} is the other way, which a "
            "table with a TTL and an index cannot have)",
        ))
    return found


def check(source: Table, target: Table, custom: str | None = None) -> None:
    """Raise RewriteShapeError with every problem of ``problems``."""
    found = problems(source, target, custom)
    if found:
        raise RewriteShapeError(found)
