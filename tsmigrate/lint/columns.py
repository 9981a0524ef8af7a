"""Attribute columns: values too large for a row, and money in floating point.

Both rules read the columns a model declares (predefined or not); Tablestore itself never sees
the undeclared ones, so these findings exist only because the model says what it writes.
"""

from __future__ import annotations

from collections.abc import Iterator

from tsmigrate.lint.core import WARNING, Context, Finding, rule
from tsmigrate.lint.names import is_money, is_payload
from tsmigrate.schema import BINARY, DOUBLE, STRING


@rule("TS-CL701", WARNING, "large payload in a row")
def large_payload(context: Context) -> Iterator[Finding]:
    for table in context.target.tables:
        for column in (*table.defined_columns, *table.attributes):
            if column.type in (STRING, BINARY) and is_payload(column.name):
                yield context.finding(
                    table,
                    column.name,
                    f"{column.name} holds a whole document or response: a cell may not exceed "
                    "2 MB, and every row read or written is billed per 4 KB, so each full-row "
                    "read pays for it even when the caller wanted one small column",
                    f"store it in OSS and keep the object key in {column.name}_key; or, if it "
                    "must stay in the row, compress it into a BINARY column and read it only by "
                    "naming it",
                )


@rule("TS-CL702", WARNING, "money in DOUBLE")
def money_in_double(context: Context) -> Iterator[Finding]:
    for table in context.target.tables:
        for column in (*table.defined_columns, *table.attributes):
            if column.type == DOUBLE and is_money(column.name):
                yield context.finding(
                    table,
                    column.name,
                    f"{column.name} looks like an amount of money stored as DOUBLE: binary "
                    "floating point cannot hold 0.1 exactly, so sums drift by fractions of a cent "
                    "(Tablestore has no decimal type)",
                    f"store integer minor units: Column(int, name={column.name + '_fen'!r}) "
                    "(or _cents): 5.32 yuan is 532 fen",
                )
