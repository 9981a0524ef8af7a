"""SERP snapshots: one search-API response per row, read back by keyword over a range of days.

The first version keyed this table by request_id alone, so "rankings of a keyword over the last
30 days" was a full scan. The key order now serves that query; a global index serves the
point lookup by request_id that the first key used to give, another the failed requests of a day
(revision 2 of migrations/). ``result_count`` is parsed from the payload; revision 3 backfills it
into the rows written before services stored it.
"""

from tsmigrate import AccessPattern, Column, GlobalIndex, Model, PrimaryKey


class SerpSnapshot(
    Model,
    table="serp_snapshots",
    max_versions=1,
    lint_ignore={"TS-CL701": "the raw response is the only thing parsing can be replayed from"},
):
    keyword = PrimaryKey(str)
    day = PrimaryKey(str)  # "2026-09-21": ISO dates sort as text in date order
    request_id = PrimaryKey(str)

    status = Column(str, defined=True)
    credits = Column(int, defined=True)  # may be None: unknown, not zero
    payload = Column(str)  # the whole response, kept verbatim so parsing can be replayed
    result_count = Column(int)  # len(payload["results"]); None: not parsed yet

    by_request_id = GlobalIndex(keys=["request_id"], include=["status", "credits"])
    by_status = GlobalIndex(keys=["status", "day"], include=["credits"])

    keyword_over_days = AccessPattern(eq=["keyword"], range="day")
    one_request = AccessPattern(eq=["request_id"])
    failed_on_day = AccessPattern(eq=["status", "day"])
