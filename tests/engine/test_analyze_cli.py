"""`tsmigrate analyze TABLE` and plan's key spread of a rewrite (issue #39), against the local
server: sequential device ids written in order (an append hotspot), the same rows under a hash
prefix (spread), a tenant holding 60% of the rows (named), a table too small, an empty and a
missing table, a sample beyond `--sample` (spread over the split points), and the plan of a
rewrite from the sequential key to the hash prefix (and back: a lint finding)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import clirun
import pytest
import tablestore as ts

from tsmigrate.keys import HashPrefix
from tsmigrate.lint.spread import HOT_VALUE, NARROW_WRITES, RANGES, WORSE_SPREAD
from tsmigrate.rewrite import keysample, splits

ROWS = 2000
_PREFIX = HashPrefix("device_id", 4)


def _cli(root: Path, ots, *args: str):
    return clirun.run_on(root, ots, *args)


def _project(root: Path, models: str = "") -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(models or "")
    return root


def _create(client: ts.OTSClient, name: str, key: list[tuple[str, str]]) -> None:
    client.create_table(ts.TableMeta(name, key), ts.TableOptions(-1, 1, 86400),
                        ts.ReservedThroughput(ts.CapacityUnit(0, 0)))


def _write(client: ts.OTSClient, name: str, rows: list[tuple[list, int]]) -> None:
    """Rows given as (key, write time in ms), written in that order, 200 a request."""
    for start in range(0, len(rows), 200):
        request = ts.BatchWriteRowRequest()
        items = [ts.PutRowItem(ts.Row(key, [("reading", i, stamp), ("note", f"row {i}", stamp)]),
                               ts.Condition("IGNORE"))
                 for i, (key, stamp) in enumerate(rows[start:start + 200], start)]
        request.add(ts.TableInBatchWriteRowItem(name, items))
        assert client.batch_write_row(request).is_all_succeed()


def _device_rows(hashed: bool = False) -> list[tuple[list, int]]:
    """Device ids 0, 1, 2, ... each written a second after the one before (the last a minute
    ago), keyed by the id itself or by its hash prefix."""
    first = int(time.time() * 1000) - (ROWS + 60) * 1000
    return [([("device_id", _PREFIX.derive({"device_id": i}) if hashed else i)], first + i * 1000)
            for i in range(ROWS)]


def _sequential(client: ts.OTSClient, name: str = "devices") -> None:
    _create(client, name, [("device_id", "INTEGER")])
    _write(client, name, _device_rows())


def _hashed(client: ts.OTSClient, name: str = "devices_hashed") -> None:
    _create(client, name, [("device_id", "STRING")])
    _write(client, name, _device_rows(hashed=True))


def _analyze(root: Path, ots, table: str, *more: str) -> tuple[str, dict]:
    text = _cli(root, ots, "analyze", table, *more)
    assert text.returncode == 0, text.stderr
    as_json = _cli(root, ots, "analyze", table, "--format", "json", *more)
    assert as_json.returncode == 0, as_json.stderr
    return text.stdout, json.loads(as_json.stdout)


def test_sequential_ids_written_in_order_are_an_append_hotspot(tmp_path, ots_instance):
    _sequential(ots_instance.client())
    text, data = _analyze(_project(tmp_path), ots_instance, "devices")
    assert data["rows_sampled"] == ROWS and data["partition_key"] == "device_id"
    assert data["partition_key_values"] == ROWS
    assert data["top_value_share"] == 1 / ROWS
    assert data["recent_span"] == 1 / RANGES and data["recent_ranges"] == 1
    assert data["sample"]["whole"] and data["sample"]["method"] == "the whole table"
    assert data["sample"]["requests"] >= 1 and data["sample"]["read_cu"] >= 1
    (finding,) = data["findings"]
    assert finding["code"] == NARROW_WRITES
    # The range named (past the end, from which id), and the fix.
    assert "past the end of the key range (device_id from 1800 on" in finding["message"]
    assert "HashPrefix('device_id', length=4)" in finding["fix"]
    assert "partition key device_id" in text
    assert "recent span:          2% (the newest 200 rows by write time fall in 1 of 64" in text
    assert f"! {NARROW_WRITES} new writes to devices span 2% of the key range" in text
    assert "sample:               2,000 rows, the whole table (" in text


def test_the_same_rows_under_a_hash_prefix_spread(tmp_path, ots_instance):
    _hashed(ots_instance.client())
    text, data = _analyze(_project(tmp_path), ots_instance, "devices_hashed")
    assert data["rows_sampled"] == ROWS and data["partition_key_values"] == ROWS
    assert data["recent_span"] > 0.9
    assert data["findings"] == []
    assert "findings:             none" in text


def test_a_tenant_holding_sixty_percent_of_the_rows_is_named(tmp_path, ots_instance):
    client = ots_instance.client()
    _create(client, "orders", [("tenant", "STRING"), ("order_id", "INTEGER")])
    rng = random.Random(39)
    tenants = ["acme"] * 1200 + [f"tenant-{i % 40:02d}" for i in range(800)]
    rng.shuffle(tenants)  # written as they come: every tenant writes all along
    first = int(time.time() * 1000) - (ROWS + 60) * 1000
    _write(client, "orders", [([("tenant", t), ("order_id", i)], first + i * 1000)
                              for i, t in enumerate(tenants)])
    text, data = _analyze(_project(tmp_path), ots_instance, "orders")
    assert data["top_value"] == "acme" and data["top_value_share"] == 0.6
    assert data["partition_key_values"] == 41
    codes = [f["code"] for f in data["findings"]]
    assert codes == [HOT_VALUE]
    assert "tenant = 'acme' holds 60% of the 2,000 sampled rows of orders" in data["findings"][0]["message"]
    assert "top value share:      60% (tenant = 'acme')" in text


def test_a_table_too_small_empty_or_missing_gets_one_line(tmp_path, ots_instance):
    client = ots_instance.client()
    root = _project(tmp_path)
    _create(client, "tiny", [("device_id", "INTEGER")])
    _write(client, "tiny", _device_rows()[:50])
    _create(client, "nothing", [("device_id", "INTEGER")])
    text, data = _analyze(root, ots_instance, "tiny")
    assert text.count("\n") == 1
    assert "table tiny on" in text and "holds 50 rows: too few to judge its key spread" in text
    assert data["judged"] is False and data["rows_sampled"] == 50 and data["recent_span"] is None
    assert data["findings"] == [] and "too few to judge" in data["note"]
    text, data = _analyze(root, ots_instance, "nothing")
    assert text.count("\n") == 1 and "is empty" in text
    assert data["rows_sampled"] == 0 and data["top_value_share"] is None
    missing = _cli(root, ots_instance, "analyze", "tinny")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1
    assert "table 'tinny' does not exist on" in missing.stderr
    assert "did you mean 'tiny'?" in missing.stderr
    as_json = _cli(root, ots_instance, "analyze", "tinny", "--format", "json")
    assert as_json.returncode == 1 and as_json.stdout == ""
    for few in ("10", "0"):
        too_few = _cli(root, ots_instance, "analyze", "tiny", "--sample", few)
        assert too_few.returncode == 2 and "give at least 1,000" in too_few.stderr


def test_a_table_beyond_the_sample_is_read_evenly_across_its_split_points(
        tmp_path, ots_instance, monkeypatch):
    client = ots_instance.client()
    _sequential(client, "devices_big")
    _hashed(client, "hashed_big")
    # Split points finer than the 64 KB floor: a table this small is cut as a large one is.
    monkeypatch.setattr(splits, "MIN_UNIT", 2048)
    root = _project(tmp_path)
    _, data = _analyze(root, ots_instance, "devices_big", "--sample", "1000")
    sample = data["sample"]
    assert not sample["whole"] and data["rows_sampled"] == 1000 == sample["limit"]
    assert sample["ranges"] > 8
    assert sample["method"].startswith(f"the first rows of each of {sample['ranges']} key ranges")
    assert "more rows than the sample's 1,000" in sample["method"]
    assert data["recent_span"] == 1 / RANGES  # still past the end
    _, data = _analyze(root, ots_instance, "hashed_big", "--sample", "1000")
    assert not data["sample"]["whole"] and data["rows_sampled"] == 1000
    assert data["recent_span"] > 0.5 and data["findings"] == []


def test_the_sample_spreads_over_every_range_and_reads_no_more_than_asked(ots_instance, monkeypatch):
    from tsmigrate.schema import PrimaryKeyColumn, Table

    client = ots_instance.client()
    _sequential(client, "devices_ranges")
    monkeypatch.setattr(splits, "MIN_UNIT", 2048)
    table = Table("devices_ranges", [PrimaryKeyColumn("device_id", "INTEGER")])
    ranges = splits.compute(client, table, 16)
    seen = []
    sampled = keysample.sample(client, table, 1000, ranges=ranges,
                               progress=lambda done, limit: seen.append((done, limit)))
    assert len(sampled.rows) == 1000 and not sampled.whole
    ids = [key[0][1] for key, _, _ in sampled.rows]
    locate = splits.locator(ranges)
    per_range = [sum(locate([("device_id", i)]) == r for i in ids) for r in range(len(ranges))]
    holds = [sum(locate([("device_id", i)]) == r for i in range(ROWS)) for r in range(len(ranges))]
    # Each range gives its first rows, as many as every other range not read to its end.
    shares = [n for n, held in zip(per_range, holds, strict=True) if n < held]
    assert shares and max(shares) - min(shares) <= 1, str(per_range)
    assert all(n == held for n, held in zip(per_range, holds, strict=True) if n > max(shares))
    assert all(ids[j] < ids[j + 1] for j in range(len(ids) - 1) if locate([("device_id", ids[j])])
               == locate([("device_id", ids[j + 1])]))  # the first rows of each range, in order
    assert seen[-1] == (1000, 1000)
    whole = keysample.sample(client, table, 5000, ranges=ranges)
    assert whole.whole and len(whole.rows) == ROWS


SEQUENTIAL_MODELS = '''
from tsmigrate import Column, Model, PrimaryKey


class Device(Model, table="devices"):
    device_id = PrimaryKey(int)
    reading = Column(int)
    note = Column(str)
'''
HASHED_MODELS = '''
from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.keys import HashPrefix


class Device(Model, table="devices_by_hash", replaces="devices"):
    pk = PrimaryKey(str, derive=HashPrefix("device_id", length=4))
    device_id = Column(int)
    reading = Column(int)
    note = Column(str)
'''


def _rewrite_step(document: dict) -> dict:
    (step,) = [s for s in document["steps"] if s["kind"] == "rewrite_table"]
    return step


def test_plan_shows_a_rewrites_key_spread_before_the_copy(tmp_path, ots_instance):
    root = _project(tmp_path, SEQUENTIAL_MODELS)
    assert _cli(root, ots_instance, "apply", "--yes").returncode == 0
    _write(ots_instance.client(), "devices", _device_rows())
    (root / "app_models.py").write_text(HASHED_MODELS)
    planned = _cli(root, ots_instance, "plan", "--format", "json")
    assert planned.returncode == 0, planned.stderr
    document = json.loads(planned.stdout)
    step = _rewrite_step(document)
    spread = step["key_spread"]
    assert step["args"]["key_spread"] == spread
    source, target = spread["source"], spread["target"]
    # The same keys as analyze's, for each side.
    _sequential(ots_instance.client(), "devices_again")
    _, analyzed = _analyze(root, ots_instance, "devices_again")
    assert set(source) == set(target) == set(analyzed)
    assert source["table"] == "devices" and source["partition_key"] == "device_id"
    assert target["table"] == "devices_by_hash" and target["partition_key"] == "pk"
    assert source["rows_sampled"] == target["rows_sampled"] == ROWS
    assert source["recent_span"] == 1 / RANGES and target["recent_span"] > 0.9
    assert [f["code"] for f in source["findings"]] == [NARROW_WRITES] and target["findings"] == []
    assert not [f for f in document["lint"] if f["code"].startswith("TS-SP")]
    text = _cli(root, ots_instance, "plan")
    assert text.returncode == 0, text.stderr
    line = next(line.strip() for line in text.stdout.splitlines() if "key spread:" in line)
    assert line.startswith("key spread: new writes span 2% -> 9")
    assert line.endswith("% of the key range; top value 0.05% -> 0.05%")
    markdown = _cli(root, ots_instance, "plan", "--format", "markdown")
    assert "key spread: new writes span 2% -> 9" in markdown.stdout
    # A plan file keeps it; apply compares the steps without it.
    out = tmp_path / "plan.json"
    assert _cli(root, ots_instance, "plan", "--out", str(out)).returncode == 0
    assert _rewrite_step(json.loads(out.read_text()))["args"]["key_spread"]["source"]["rows_sampled"] == ROWS
    from tsmigrate.planning.planfile import planned_steps

    (kept,) = [s for s in planned_steps(json.loads(out.read_text()), 0) if s["kind"] == "rewrite_table"]
    assert kept["args"]["key_spread"] is None and "key_spread" not in kept


def test_a_rewrite_that_spreads_worse_is_a_lint_finding(tmp_path, ots_instance, monkeypatch):
    root = _project(tmp_path, HASHED_MODELS.replace('table="devices_by_hash", replaces="devices"',
                                                    'table="devices"'))
    assert _cli(root, ots_instance, "apply", "--yes").returncode == 0
    first = int(time.time() * 1000) - (ROWS + 60) * 1000
    _write(ots_instance.client(), "devices", [([("pk", _PREFIX.derive({"device_id": i}))], first + i * 1000)
                                              for i in range(ROWS)])
    (root / "app_models.py").write_text(SEQUENTIAL_MODELS.replace(
        'table="devices"', 'table="devices_by_id", replaces="devices"'))
    monkeypatch.setattr(keysample, "PLAN_ROWS", 1500)  # plan's sample size is its own
    planned = _cli(root, ots_instance, "plan", "--format", "json")
    assert planned.returncode == 0, planned.stderr
    document = json.loads(planned.stdout)
    spread = _rewrite_step(document)["key_spread"]
    assert spread["source"]["rows_sampled"] == 1500 and not spread["source"]["sample"]["whole"]
    assert spread["target"]["recent_span"] == 1 / RANGES
    codes = {f["code"]: f for f in document["lint"]}
    assert WORSE_SPREAD in codes and NARROW_WRITES in codes
    worse = codes[WORSE_SPREAD]
    assert worse["severity"] == "warning" and worse["table"] == "devices_by_id"
    assert worse["step"] == document["steps"].index(_rewrite_step(document)) + 1
    assert "spreads the sampled rows worse than the key it replaces: new writes span" in worse["message"]
    assert "2% of the key range" in worse["message"]
    text = _cli(root, ots_instance, "plan")
    assert f"{WORSE_SPREAD}" in text.stdout


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_progress_of_a_long_sample_is_heard_on_a_pipe(tmp_path, ots_instance, monkeypatch, fmt):
    _sequential(ots_instance.client(), f"devices_{fmt}")
    monkeypatch.setenv("TSMIGRATE_PROGRESS_EVERY_S", "0.01")
    from tsmigrate.rewrite import copy

    real = copy.read_page

    def slow_read_page(*args, **kwargs):
        time.sleep(0.03)
        return real(*args, **kwargs)

    monkeypatch.setattr(copy, "read_page", slow_read_page)
    result = clirun.run_on(_project(tmp_path), ots_instance, "analyze", f"devices_{fmt}",
                           "--format", fmt, "--sample", "1000", TSMIGRATE_PROGRESS_EVERY_S="0.01")
    assert result.returncode == 0, result.stderr
    assert f"analyze devices_{fmt} sampling:" in result.stderr
    assert "of about 1,000 rows" in result.stderr
    if fmt == "json":
        json.loads(result.stdout)  # stdout stays JSON
