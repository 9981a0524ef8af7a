"""Table families: one physical table per month (``serp_snapshots_202609``), declared on a model.

    class SerpSnapshot(Model, table="serp_snapshots",
                       family=Monthly("day", ahead=2, retain=12, archive="oss://b/serp/")):
        keyword = PrimaryKey(str)
        day = PrimaryKey(str)          # '2026-09-21'
        ...

Pure month arithmetic and naming, shared by the service layer (which routes rows and queries to
month tables) and by planning (which creates the coming months and retires expired ones).
Months are UTC calendar months. The family's field holds a date in one of these kinds:

- ``datetime``: an aware datetime (stored as epoch milliseconds); ``int`` without ``format=``:
  epoch milliseconds;
- ``date``: stored as ``'YYYY-MM-DD'``;
- ``str`` without ``format=``: ``'YYYY-MM-DD'``, ``'YYYYMMDD'`` or ``'YYYY-MM'``;
- ``str`` or ``int`` with ``format=``, a strftime format: ``'%d/%m/%Y'``, ``'%Y%m%d'`` for int
  days such as ``20260901``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from contextlib import suppress
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

import attrs

from tsmigrate.errors import QueryError, TsmigrateError

Month = tuple[int, int]  # (year, month)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MILLISECOND = timedelta(milliseconds=1)
_SUFFIX = re.compile(r"^(?P<year>\d{4})(?P<month>0[1-9]|1[0-2])$")
_ISO = re.compile(r"^(?P<year>\d{4})-(?P<month>\d{2})(?:-(?P<day>\d{2}))?$"
                  r"|^(?P<year8>\d{4})(?P<month8>\d{2})(?P<day8>\d{2})$")
_ISO_FORMS = "'YYYY-MM-DD', 'YYYYMMDD' or 'YYYY-MM'"
# A format whose directives come in this order (a prefix of it) writes zero-padded strings that
# sort like the dates they hold, so one string range is one range of dates.
_CHRONOLOGICAL = ("%Y", "%m", "%d", "%H", "%M", "%S", "%f")
_SAMPLES = (datetime(2026, 9, 21, 13, 4, 5), datetime(1999, 12, 3, 1, 2, 3))
_FIELD_KINDS = (datetime, date, str, int)


class FamilyValueError(TsmigrateError, ValueError):
    """A value of a family's field is not a date of the family's kind; the message names the
    value and the format it should have."""


def month_of_ms(epoch_ms: int) -> Month:
    try:
        moment = EPOCH + epoch_ms * MILLISECOND
    except OverflowError:
        raise FamilyValueError(f"{epoch_ms} is out of range for epoch milliseconds") from None
    return moment.year, moment.month


def add_months(month: Month, count: int) -> Month:
    index = month[0] * 12 + (month[1] - 1) + count
    return index // 12, index % 12 + 1


def sorts_by_date(format: str) -> bool:
    """Whether strings written with ``format`` sort in date order."""
    directives = [d for d in re.findall(r"%.", format) if d != "%%"]
    return tuple(directives) == _CHRONOLOGICAL[:len(directives)]


@attrs.frozen
class Monthly:
    """One table per UTC month of ``field`` (a date of one of the kinds the module lists).

    ``ahead``: how many months after the current one ``plan`` creates in advance.
    ``retain``: how many months (the current one included) are kept; older months are archived
    (rows and cell timestamps) to ``archive`` (a path or an fsspec URL) and dropped, as a
    destructive plan step. ``None`` keeps every month.
    ``format``: the strftime format of a str or int field's dates (``'%d/%m/%Y'``,
    ``'%Y%m%d'``); without it a str field holds ISO dates and an int field epoch milliseconds.
    """

    field: str
    ahead: int = 2
    retain: int | None = None
    archive: str | None = None
    format: str | None = None

    def problems(self, field_type: Any) -> list[tuple[str, str]]:
        """(message, fix) for each thing wrong with the declaration, given the Python type of
        the model's field (None: the model has no such field)."""
        out = []
        if field_type is None:
            out.append((f"the family's field {self.field!r} is not a field of the model",
                        f"declare {self.field} = PrimaryKey(str) for '2026-09-21' days"))
        elif field_type not in _FIELD_KINDS:
            out.append((
                f"the family's field {self.field!r} must be a date: a datetime, date, str "
                f"({_ISO_FORMS}, or format=) or int (epoch ms, or days with format='%Y%m%d') "
                f"field of the model, got {getattr(field_type, '__name__', field_type)}",
                f"declare {self.field} = PrimaryKey(str) for '2026-09-21' days, or "
                "PrimaryKey(datetime)",
            ))
        elif self.format is not None:
            out.extend(self._format_problems(field_type))
        if not isinstance(self.ahead, int) or self.ahead < 0:
            out.append((f"ahead must be a whole number of months >= 0, got {self.ahead!r}", ""))
        if self.retain is not None and (not isinstance(self.retain, int) or self.retain < 1):
            out.append((f"retain must be a number of months >= 1 or None, got {self.retain!r}", ""))
        if self.retain is not None and not self.archive:
            out.append((
                "retain= drops expired months, so archive= must say where their rows go "
                "(a directory or an fsspec URL such as 'oss://bucket/prefix/')", ""))
        if isinstance(self.archive, str) and (problem := archive_problem(self.archive)):
            out.append((problem, ""))
        return out

    def _format_problems(self, field_type: type) -> list[tuple[str, str]]:
        fmt = self.format
        if field_type not in (str, int):
            return [(f"format= applies to str and int fields; the month of a "
                     f"{field_type.__name__} field comes from its value", "drop format=")]
        if not isinstance(fmt, str):
            return [(f"format must be a strftime format such as '%Y-%m-%d', got {fmt!r}", "")]
        for sample in _SAMPLES:
            try:
                text = sample.strftime(fmt)
                parsed = datetime.strptime(text, fmt)
            except ValueError as exc:
                return [(f"format {fmt!r} is not a strftime format: {exc}", "")]
            if (parsed.year, parsed.month) != (sample.year, sample.month):
                return [(f"format {fmt!r} must hold the year (%Y) and the month (%m)",
                         "write format='%Y-%m-%d', '%d/%m/%Y' or '%Y%m%d'")]
            if field_type is int and not (text.isdigit() and str(int(text)) == text):
                return [(f"an int field's format must write digits only, got {fmt!r} "
                         f"({text!r})", "write format='%Y%m%d' for days such as 20260901")]
        return []

    # -- naming --------------------------------------------------------------------------------

    @staticmethod
    def table_name(base: str, month: Month) -> str:
        return f"{base}_{month[0]:04d}{month[1]:02d}"

    @staticmethod
    def month_of_table(base: str, name: str) -> Month | None:
        """The month of a table of this family, or None when ``name`` is not one."""
        prefix = base + "_"
        if not name.startswith(prefix):
            return None
        match = _SUFFIX.match(name[len(prefix):])
        return (int(match["year"]), int(match["month"])) if match else None

    # -- values --------------------------------------------------------------------------------

    def month_of(self, value: Any) -> Month:
        """The UTC month of a value of the field, as the model holds it or as it is stored
        (epoch ms for a datetime, 'YYYY-MM-DD' for a date); FamilyValueError if it is none."""
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise FamilyValueError(
                    "a naive datetime has no time zone; use datetime(..., tzinfo=timezone.utc)")
            moment = value.astimezone(timezone.utc)
            return moment.year, moment.month
        if isinstance(value, date):
            return value.year, value.month
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise FamilyValueError(
                f"{value!r} is not a date: give a datetime, a date, epoch milliseconds or a "
                "date string")
        if self.format is not None:
            return _month_of_text(str(value), self.format)
        if isinstance(value, int):
            return month_of_ms(value)
        return _month_of_text(value, None)

    def table_for(self, base: str, value: Any) -> str:
        """The month table of a row whose field holds ``value``."""
        return self.table_name(base, self.month_of(value))

    # The service layer's names for ``table_for`` and the value it passes (kept until
    # tsmigrate/service/codec.py calls ``table_for`` with the field's value).
    def tables_for_range(self, base: str, lower: Any, upper: Any,
                         existing: Iterable[str]) -> list[str]:
        """The existing tables a range of the field [lower, upper] touches, oldest first (a month
        with no table holds no rows). ``None`` leaves that end open. A bound that is not a date,
        or a range across months on strings that do not sort by date, is a QueryError."""
        try:
            low = None if lower is None else self.month_of(lower)
            high = None if upper is None else self.month_of(upper)
        except FamilyValueError as exc:
            raise QueryError(f"{base}.{self.field}, a bound of the range: {exc}") from None
        if (self.format is not None and not sorts_by_date(self.format)
                and (lower, upper) != (None, None) and (low is None or low != high)):
            raise QueryError(
                f"{base}.{self.field}: strings in the format {self.format!r} do not sort by date, "
                "so a range on them (which Tablestore compares as strings) cannot span months; "
                "query one month at a time, or store days in a year-first format such as "
                "'%Y-%m-%d'")
        months = sorted(m for m in (self.month_of_table(base, n) for n in existing) if m)
        if low is not None:
            months = [m for m in months if m >= low]
        if high is not None:
            months = [m for m in months if m <= high]
        return [self.table_name(base, m) for m in months]

    # -- planning ------------------------------------------------------------------------------

    def planned_months(self, now: datetime) -> list[Month]:
        """The current month and the ``ahead`` months after it."""
        current = (now.year, now.month)
        return [add_months(current, i) for i in range(self.ahead + 1)]

    def expired(self, month: Month, now: datetime) -> bool:
        if self.retain is None:
            return False
        oldest_kept = add_months((now.year, now.month), -(self.retain - 1))
        return month < oldest_kept


@lru_cache(maxsize=4096)  # rows of a batch share their days: parse each text once
def _month_of_text(text: str, format: str | None) -> Month:
    return _iso_month(text) if format is None else _month_in_format(text, format)


def _month_in_format(text: str, format: str) -> Month:
    try:
        parsed = datetime.strptime(text, format)
    except ValueError:
        parsed = None
    # Written back, the date must give the same text: '1/9/2026' parses with '%d/%m/%Y' but
    # would not sort among '01/09/2026' and its neighbours.
    if parsed is None or parsed.strftime(format) != text:
        raise FamilyValueError(
            f"{text!r} is not a date in the family's format {format!r} (such as "
            f"{_SAMPLES[0].strftime(format)!r})")
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(timezone.utc)
    return parsed.year, parsed.month


def _iso_month(text: str) -> Month:
    match = _ISO.match(text)
    if match is not None:
        year = int(match["year"] or match["year8"])
        month = int(match["month"] or match["month8"])
        with suppress(ValueError):
            date(year, month, int(match["day"] or match["day8"] or 1))  # a real day of a month
            return year, month
    raise FamilyValueError(
        f"{text!r} is not a date as {_ISO_FORMS}; declare the family's format= for another "
        "form, such as format='%d/%m/%Y'")


def epoch_ms(value: datetime) -> int:
    """An aware datetime as whole epoch milliseconds, exactly (``timestamp() * 1000`` goes
    through a float: 2038-06-23 04:29:04.615 becomes ...614), sub-milliseconds floored."""
    return (value - EPOCH) // MILLISECOND


def archive_problem(archive: str) -> str | None:
    """Why an archive URL cannot be written from here (fsspec, or the filesystem's package, is
    not installed), found when the model is checked rather than when an expired month's retire
    step has nowhere to write; None for a directory or a URL that can be opened."""
    if "://" not in archive or archive.startswith("file://"):
        return None
    protocol = archive.split("://", 1)[0]
    try:
        import fsspec
    except ImportError:
        return (f"archive={archive!r} is a URL, which needs fsspec: pip install "
                "'tsmigrate[archive]' plus the filesystem's package (ossfs for oss://), or "
                "archive to a directory")
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        return (f"archive={archive!r} cannot be written from here: fsspec has no {protocol}:// "
                f"filesystem ({exc}); install its package (pip install ossfs for oss://), or "
                "archive to a directory")
    except ValueError:
        return f"archive={archive!r}: {protocol}:// is not a filesystem fsspec knows"
    return None
