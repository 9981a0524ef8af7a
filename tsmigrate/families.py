"""Table families: one physical table per month (``serp_snapshots_202609``), declared on a model.

    class SerpSnapshot(Model, table="serp_snapshots",
                       family=Monthly("captured_at", ahead=2, retain=12, archive="oss://b/serp/")):
        ...

Pure month arithmetic and naming, shared by the service layer (which routes rows and queries to
month tables) and by planning (which creates the coming months and retires expired ones).
Months are UTC calendar months; the partition field holds epoch milliseconds (or a ``datetime``
the model stores as epoch milliseconds).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs

Month = tuple[int, int]  # (year, month)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MILLISECOND = timedelta(milliseconds=1)
_SUFFIX = re.compile(r"^(?P<year>\d{4})(?P<month>0[1-9]|1[0-2])$")


def month_of_ms(epoch_ms: int) -> Month:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)
    return moment.year, moment.month


def month_start_ms(month: Month) -> int:
    """Epoch milliseconds of the first instant of ``month`` (UTC)."""
    year, number = month
    return int(datetime(year, number, 1, tzinfo=timezone.utc).timestamp() * 1000)


def add_months(month: Month, count: int) -> Month:
    index = month[0] * 12 + (month[1] - 1) + count
    return index // 12, index % 12 + 1


def months_between(first: Month, last: Month) -> Iterator[Month]:
    """Every month from ``first`` to ``last``, both included."""
    month = first
    while month <= last:
        yield month
        month = add_months(month, 1)


@attrs.frozen
class Monthly:
    """One table per UTC month of ``field`` (epoch ms or a datetime field).

    ``ahead``: how many months after the current one ``plan`` creates in advance.
    ``retain``: how many months (the current one included) are kept; older months are archived
    (rows and cell timestamps) to ``archive`` (a path or an fsspec URL) and dropped, as a
    destructive plan step. ``None`` keeps every month.
    """

    field: str
    ahead: int = 2
    retain: int | None = None
    archive: str | None = None

    def problems(self) -> list[str]:
        out = []
        if not isinstance(self.ahead, int) or self.ahead < 0:
            out.append(f"ahead must be a whole number of months >= 0, got {self.ahead!r}")
        if self.retain is not None and (not isinstance(self.retain, int) or self.retain < 1):
            out.append(f"retain must be a number of months >= 1 or None, got {self.retain!r}")
        if self.retain is not None and not self.archive:
            out.append(
                "retain= drops expired months, so archive= must say where their rows go "
                "(a directory or an fsspec URL such as 'oss://bucket/prefix/')"
            )
        if isinstance(self.archive, str) and (problem := archive_problem(self.archive)):
            out.append(problem)
        return out

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

    def table_for_ms(self, base: str, epoch_ms: int) -> str:
        return self.table_name(base, month_of_ms(epoch_ms))

    def tables_for_range(self, base: str, lower_ms: int | None, upper_ms: int | None,
                         existing: Iterable[str]) -> list[str]:
        """The existing tables a time range [lower, upper] touches, oldest first (a month with
        no table holds no rows). ``None`` leaves that end open."""
        months = sorted(m for m in (self.month_of_table(base, n) for n in existing) if m)
        if lower_ms is not None:
            months = [m for m in months if m >= month_of_ms(lower_ms)]
        if upper_ms is not None:
            months = [m for m in months if m <= month_of_ms(upper_ms)]
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


def epoch_ms(value: datetime) -> int:
    """An aware datetime as whole epoch milliseconds, exactly (``timestamp() * 1000`` goes
    through a float: 2038-06-23 04:29:04.615 becomes ...614), sub-milliseconds floored."""
    return (value - EPOCH) // MILLISECOND


def partition_ms(value: Any) -> int:
    """The epoch milliseconds of a partition field's value (int ms or an aware datetime)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a naive datetime has no time zone; use datetime(..., tzinfo=timezone.utc)")
        return epoch_ms(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"the partition field must hold epoch milliseconds or a datetime, got {value!r}")
    return value


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
