"""Primary-key design: hot partitions and concatenated keys that do not sort like their values.

Tablestore splits a table by ranges of the partition key (the first primary-key column), and all
rows of one partition-key value stay in one partition. So the first column decides how load
spreads: a value that grows with time puts every write on the last partition, and a value with a
handful of distinct values cannot be split at all. The derivations of ``tsmigrate.keys`` are the
documented cures, and count as such: a ``HashPrefix`` or ``TimeBucket`` spreads whatever it is
derived from.
"""

from __future__ import annotations

from collections.abc import Iterator

from tsmigrate.keys import Concat, Descending, HashPrefix, TimeBucket
from tsmigrate.lint.core import ERROR, INFO, WARNING, Context, Finding, rule
from tsmigrate.lint.names import has_few_values, is_id, is_sequence, is_time_like
from tsmigrate.planning import ops
from tsmigrate.schema import BOOLEAN, DOUBLE, INTEGER, PrimaryKeyColumn, Table
from tsmigrate.schema.render import duration

MIN_BUCKETS = 4  # with 2 or 3 buckets, each takes a third or more of all writes: still hot


def _partition_key(table: Table) -> PrimaryKeyColumn | None:
    return table.primary_key[0] if table.primary_key else None


def _ordering_value(column: PrimaryKeyColumn) -> str | None:
    """The value whose order is the partition key's order, or None when a derivation spreads it."""
    derivation = column.derivation
    if derivation is None:
        return column.name
    if isinstance(derivation, Descending):
        return derivation.source
    if isinstance(derivation, Concat):
        return derivation.fields[0]
    return None  # HashPrefix, TimeBucket


@rule("TS-PK303", WARNING, "monotonic partition key")
def monotonic_partition_key(context: Context) -> Iterator[Finding]:
    for table in context.target.tables:
        column = _partition_key(table)
        value = column and _ordering_value(column)
        if not value:
            continue
        if is_time_like(value):
            yield context.finding(
                table,
                f"primary_key.{column.name}",
                f"the partition key {column.name} is ordered by the time {value!r}: every new row "
                "lands on the last partition, which splitting cannot relieve",
                f"put a high-cardinality column the queries know (a device, user or card id) first "
                f"and {value} after it; if reads need global time order, lead with "
                f"PrimaryKey(int, derive=TimeBucket({value!r}, buckets=16)) and read every bucket",
            )
        elif is_sequence(value):
            yield context.finding(
                table,
                f"primary_key.{column.name}",
                f"the partition key {column.name} is ordered by the sequence {value!r}: every new "
                "row lands on the last partition, which splitting cannot relieve",
                f"derive it as PrimaryKey(str, derive=HashPrefix({value!r}, length=4)) (ranges over "
                f"{value} then need a search index), or put a high-cardinality column first",
            )


def _few_values(table: Table, column: PrimaryKeyColumn) -> str | None:
    """Why the partition key has few distinct values, or None."""
    derivation = column.derivation
    if isinstance(derivation, TimeBucket):
        if derivation.buckets < MIN_BUCKETS:
            return f"a TimeBucket of {derivation.buckets} buckets has {derivation.buckets} values"
        return None
    # A one-column key has one row per value (a lookup table of statuses, say): nothing to skew.
    if len(table.primary_key) < 2:
        return None
    if isinstance(derivation, Concat):
        sources = derivation.fields
    elif isinstance(derivation, (HashPrefix, Descending)):
        sources = derivation.sources  # a hash of a few values is a few values
    else:
        sources = (column.name,)
    if all(has_few_values(s) for s in sources):
        return f"{' + '.join(sources)} has a handful of distinct values"
    return None


@rule("TS-PK304", WARNING, "low-cardinality partition key")
def low_cardinality_partition_key(context: Context) -> Iterator[Finding]:
    for table in context.target.tables:
        column = _partition_key(table)
        why = column and _few_values(table, column)
        if why:
            yield context.finding(
                table,
                f"primary_key.{column.name}",
                f"the partition key {column.name} has few values ({why}): all rows of one value "
                "stay in one partition, which cannot be split, so the busiest value is a hot spot",
                "lead with a high-cardinality column (a user, device or card id) and move this one "
                f"after it; with a TimeBucket, use at least {MIN_BUCKETS} buckets (16 is usual)",
            )


@rule("TS-PK305", INFO, "sequential id as partition key")
def sequential_id_partition_key(context: Context) -> Iterator[Finding]:
    for table in context.target.tables:
        column = _partition_key(table)
        if column is None or column.derivation is not None or column.type != INTEGER:
            continue
        name = column.name
        # Sequences and times are TS-PK303's; a hash of a few values (region_id) stays a few.
        if is_id(name) and not (is_sequence(name) or is_time_like(name) or has_few_values(name)):
            yield context.finding(
                table,
                f"primary_key.{column.name}",
                f"the partition key {column.name} is an integer id: ids are usually handed out in "
                "order, so rows created together sit in one partition and the newest is the busiest",
                f"if ids are sequential, key by PrimaryKey(str, derive=HashPrefix({column.name!r}, "
                "length=4)); if they are random (snowflake, hashed), suppress with that reason",
            )


def _concat_problems(table: Table, concat: Concat) -> Iterator[str]:
    widths = dict(concat.pad)
    for field in concat.fields:
        kind = table.column_type(field)
        if kind == INTEGER and field not in widths:
            yield (
                f"integer field {field!r} has no zero padding: as text 10 sorts before 9, so "
                f"give it pad={{{field!r}: <digits of the largest value>}}"
            )
        elif field in widths and kind not in (INTEGER, None):
            yield f"pad is given for {field!r}, a {kind} column: only integers are padded"
        if kind in (DOUBLE, BOOLEAN):
            yield f"{field!r} is {kind}: only strings and integers keep their order in a key"
    if len(concat.sep) != 1:
        return  # validation reports the separator's length
    lowest = min(concat.data_characters)
    if concat.sep >= lowest:
        yield (
            f"separator {concat.sep!r} does not sort below {lowest!r}, which the parts may "
            f"contain: a shorter value would sort after a longer one it starts ('a100{concat.sep}' "
            "vs 'a1001'); use ',' for identifiers, or a separator below every data character"
        )


@rule("TS-PK306", ERROR, "concatenated key out of order")
def concatenated_key_order(context: Context) -> Iterator[Finding]:
    for table in context.target.tables:
        for column in table.primary_key:
            if isinstance(column.derivation, Concat):
                for problem in _concat_problems(table, column.derivation):
                    yield context.finding(
                        table,
                        f"primary_key.{column.name}",
                        f"Concat key {column.name} will not sort like its fields: {problem}",
                        "fix the Concat declaration before the first row is written: changing a "
                        "key later means rewriting the table",
                    )


@rule("TS-PK301", INFO, "key change rewrites the table")
def key_change_rewrite(context: Context) -> Iterator[Finding]:
    """What the rewrite does (tsmigrate.rewrite: copy.py, prepare.py), then what it cannot do
    for the user: versions the new table does not keep, new auto-increment ids. (Plan refuses a
    TTL that differs from the source's: rewrite.ttl-shorter, rewrite.ttl-longer.)"""
    if context.plan is None:
        return
    for number, step in enumerate(context.plan.steps, 1):
        if not isinstance(step, ops.RewriteTable):
            continue
        # The plan was made for this catalog, so the table it rewrites into is declared.
        table = context.target.table(step.table) or Table(step.table, ())
        source = context.live.table(step.source) if context.live is not None else None
        target, options = step.table, table.options
        versions = (f"the newest {options.max_versions} versions of each cell (as many as {target} "
                    "keeps)" if options.max_versions > 1 else "the newest version of each cell")
        done = (
            f"every row of {step.source} is copied into {target} ({step.key_change}): {versions}, "
            "each with its original timestamp, so TTL counts from the original write "
            f"(max_time_deviation of {target} is widened for the copy, so the service accepts "
            f"old timestamps, and set back to {duration(options.max_time_deviation)} by `rewrite "
            "finish`); writes made meanwhile are captured and the copy is verified before "
            "services cut over"
        )
        checks = []
        if source is not None and source.options.max_versions > options.max_versions:
            checks.append(f"{step.source} keeps {source.options.max_versions} versions and "
                          f"{target} {options.max_versions}: the older versions are not copied")
        auto = [c.name for c in table.primary_key if c.auto_increment]
        if auto:
            checks.append(f"auto-increment column {auto[0]} gets new values: those ids change")
        message = done + (f". To check: {'; '.join(checks)}" if checks else "")
        yield context.finding(
            step.table,
            "primary_key",
            message,
            f"apply copies, captures and verifies; then deploy services on the new model and run "
            f"`tsmigrate rewrite switch {target}`, and `tsmigrate rewrite finish {target}` once "
            f"they use it ({step.source} is kept until then)",
            step=number,
        )
