"""How status shows a capture's shards (``progress.captures_text``, ``shards_of``): a line of
rate and workers while it runs, then a line a shard (only with more than one), the laggiest
first, at most ``SHARDS_SHOWN`` and the count of the rest; short ids that stay unique."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tsmigrate.rewrite import progress


def _capture(stats: dict, state: str = "running") -> dict:
    running = state == "running"
    return {"name": "capture", "label": "capture", "direction": "a -> b", "state": state,
            "why": "no process runs it", "lag_s": 1.0 if running else None, "caught_up": False,
            "last_progress": None, "last_progress_age_s": None, "error": None, "restart": None,
            "stats": stats, "records_per_s": stats.get("records_per_s") if running else None,
            "workers": stats.get("workers") if running else None,
            "shards": progress.shards_of(stats, running)}


def _stats(n: int) -> dict:
    shards = {f"{i:04x}" + "abcdef0123456789"[:12]: {"records": 100 * i, "records_per_s": 10.0 * i,
                                                     "lag_s": (i * 7) % n / 2, "done": i == 0}
              for i in range(n)}
    return {"applied": 5, "records_per_s": 1234.5, "workers": 4, "shards": shards}


def test_a_line_a_shard_the_laggiest_first_and_no_more_than_shown():
    lines = progress.captures_text([_capture(_stats(20))])
    assert lines[1] == "  1,234 records/s, 4 workers, 20 shards"
    shard_lines = lines[2:-1]
    assert len(shard_lines) == progress.SHARDS_SHOWN and lines[-1] == "    … 4 more"
    lags = [float(line.rpartition("lag ")[2].split("s")[0]) for line in shard_lines]
    assert lags == sorted(lags, reverse=True)
    assert shard_lines[0].startswith("    shard ") and ": " in shard_lines[0]
    three = progress.captures_text([_capture(_stats(3))])
    assert three[2:] == ["    shard 0002abcd: 200 records, 20 records/s, lag 1.0s",
                         "    shard 0001abcd: 100 records, 10 records/s, lag 0.5s",
                         "    shard 0000abcd: 0 records, 0 records/s, lag 0.0s, done"]


def test_one_shard_shows_no_shard_lines_and_a_stopped_capture_no_rate():
    assert progress.captures_text([_capture(_stats(1))])[1:] == ["  1,234 records/s, 4 workers, 1 shard"]
    stopped = _capture(_stats(3), state="stopped")
    assert len(progress.captures_text([stopped])) == 1  # its rates and lags would be stale
    assert [s["lag_s"] for s in stopped["shards"]] == [None] * 3
    assert [s["records"] for s in stopped["shards"]] == [200, 100, 0]  # still counted
    assert progress.captures_text([_capture({})])[1:] == []  # stats of before: nothing new


@given(st.sets(st.text("0123456789abcdef", min_size=1, max_size=20), max_size=30))
def test_short_ids_are_unique_prefixes(ids):
    short = progress.short_ids(sorted(ids))
    assert set(short) == ids
    for one, prefix in short.items():
        assert one.startswith(prefix) and len(prefix) >= min(8, len(one))
        # No other id starts with it, unless it is the whole id (another id extends it).
        assert prefix == one or not any(o != one and o.startswith(prefix) for o in ids)
