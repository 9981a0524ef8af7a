"""Table families: writes routed to the month of the row, queries over months merged in key
order, months planned ahead, expired months archived (timestamps included), dropped, restored."""

import gzip
import json
from datetime import datetime, timedelta, timezone

import clirun
import pytest
from service_models import FAST
from tablestore import metadata as md

from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.errors import ApplyRefused
from tsmigrate.instance.apply import ApplyOptions, apply, live_catalog
from tsmigrate.planning.ops import DESTRUCTIVE, CreateTable, RetireTable
from tsmigrate.planning.plan import make_plan
from tsmigrate.schema.families import Monthly
from tsmigrate.schema.model import compile_models
from tsmigrate.service import Range, Rows, create_tables

SEP = datetime(2026, 9, 15, tzinfo=timezone.utc)


def at(month: int, day: int, year: int = 2026) -> datetime:
    return datetime(year, month, day, 12, tzinfo=timezone.utc)


@pytest.fixture
def family(tmp_path):
    archive = str(tmp_path / "archive")

    class SerpSnapshot(Model, table="serp_snapshots", max_time_deviation="400d", max_versions=2,
                       family=Monthly("captured_at", ahead=2, retain=3, archive=archive)):
        keyword = PrimaryKey(str)
        captured_at = PrimaryKey(datetime)
        rank = Column(int)
        url = Column(str)

    return SerpSnapshot


@pytest.fixture
def snapshots(ots_instance, family):
    client = ots_instance.client()
    create_tables(client, [family], now=SEP)
    return Rows(family, client, retry=FAST)


def test_plan_creates_the_current_and_coming_months(snapshots):
    names = set(snapshots.client.list_table())
    assert {"serp_snapshots_202609", "serp_snapshots_202610", "serp_snapshots_202611"} <= names
    assert "serp_snapshots" not in names  # the template is not a table


def test_writes_route_to_the_month_of_the_row(snapshots):
    snapshots.put(snapshots.model(keyword="shoes", captured_at=at(10, 3), rank=4))
    snapshots.batch_write(put=[snapshots.model(keyword="shoes", captured_at=at(m, 1), rank=m)
                               for m in (9, 11)]).raise_for_failures()
    client = snapshots.client
    ms = int(at(10, 3).timestamp() * 1000)
    _, row, _ = client.get_row("serp_snapshots_202610", [("keyword", "shoes"), ("captured_at", ms)],
                               None, None, 1)
    assert dict((c[0], c[1]) for c in row.attribute_columns)["rank"] == 4
    for month in (9, 11):
        _, rows, _ = client.get_row(f"serp_snapshots_2026{month:02d}", [
            ("keyword", "shoes"), ("captured_at", int(at(month, 1).timestamp() * 1000))], None, None, 1)
        assert rows is not None
    assert snapshots.get(keyword="shoes", captured_at=at(10, 3)).rank == 4


def test_a_query_over_three_months_returns_rows_in_order(snapshots):
    times = [at(9, 20) + timedelta(days=3 * i, hours=i) for i in range(22)]  # Sep 20 .. Nov 22
    assert {t.month for t in times} == {9, 10, 11}
    # Written out of order, and for two keywords, so that order comes from the merge.
    snapshots.batch_write(put=[snapshots.model(keyword=k, captured_at=t, rank=i)
                               for i, t in reversed(list(enumerate(times))) for k in ("a", "b")]
                          ).raise_for_failures()
    got = [r.captured_at for r in snapshots.query(keyword="a")]
    assert got == times
    window = [r.captured_at for r in snapshots.query(
        keyword="a", captured_at=Range(gte=at(9, 25), lt=at(11, 10)))]
    assert window == [t for t in times if at(9, 25) <= t < at(11, 10)]
    assert {t.month for t in window} == {9, 10, 11}
    backward = [r.captured_at for r in snapshots.query(
        keyword="b", captured_at=Range(gte=at(9, 25), lt=at(11, 10)), reverse=True, limit=5)]
    assert backward == sorted(window, reverse=True)[:5]
    every = [(r.keyword, r.captured_at) for r in snapshots.query()]
    assert every == sorted(every)  # no prefix: one key order across the month tables


def test_retention_archives_then_drops_expired_months_and_restore_loads_them_back(
        ots_instance, snapshots, family, tmp_path):
    client = snapshots.client
    rows = [snapshots.model(keyword="k", captured_at=at(9, d), rank=d) for d in (1, 2, 3)]
    snapshots.batch_write(put=rows).raise_for_failures()
    # A second version of one cell, with a timestamp of its own (an explicit one, so that it
    # cannot share the millisecond of the first).
    key = [("keyword", "k"), ("captured_at", int(at(9, 2).timestamp() * 1000))]
    earlier = int(datetime.now(timezone.utc).timestamp() * 1000) - 60_000
    client.update_row("serp_snapshots_202609", md.Row(key, {"PUT": [("rank", 20, earlier)]}),
                      md.Condition(md.RowExistenceExpectation.EXPECT_EXIST))
    _, before, _ = client.get_row("serp_snapshots_202609", [
        ("keyword", "k"), ("captured_at", int(at(9, 2).timestamp() * 1000))], None, None, 2)
    stamped = {(c[0], c[1], c[2]) for c in before.attribute_columns}
    assert {c[1] for c in stamped if c[0] == "rank"} == {2, 20}  # both versions

    catalog = compile_models([family])
    january = datetime(2027, 1, 10, tzinfo=timezone.utc)  # retain=3: Nov, Dec, Jan
    plan = make_plan(live_catalog(client), catalog, now=january)
    retired = [s for s in plan.steps if isinstance(s, RetireTable)]
    assert [s.table for s in retired] == ["serp_snapshots_202609", "serp_snapshots_202610"]
    assert all(s.risk == DESTRUCTIVE and "archived to" in s.reason for s in retired)
    created = {s.table for s in plan.steps if isinstance(s, CreateTable)}
    # The current month and two ahead; a past month that never had a table is not created.
    assert created == {"serp_snapshots_202701", "serp_snapshots_202702", "serp_snapshots_202703"}
    with pytest.raises(ApplyRefused, match="--allow-destructive"):
        apply(client, catalog, target_identity="t", now=january)
    assert "serp_snapshots_202609" in client.list_table()  # refused: nothing dropped

    apply(client, catalog, ApplyOptions(allow_destructive=True), target_identity="t", now=january)
    names = set(client.list_table())
    assert "serp_snapshots_202609" not in names and "serp_snapshots_202701" in names
    archive = tmp_path / "archive" / "serp_snapshots_202609.jsonl.gz"
    with gzip.open(archive, "rt") as stream:
        lines = [json.loads(line) for line in stream]
    assert lines[0]["table"] == "serp_snapshots_202609" and lines[-1] == {"end": True, "rows": 3}
    archived_cells = {(c[0], c[1], c[2]) for line in lines[1:-1] for c in line["cells"]}
    assert stamped <= archived_cells  # every version, with its timestamp

    # The restore command, at the user's entry point.
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": ots_instance.access_key_id,
           "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ots_instance.access_key_secret}
    done = clirun.run(tmp_path, "restore", str(archive), "--endpoint", ots_instance.endpoint,
                      "--instance", ots_instance.instance, extra_env=env)
    assert done.returncode == 0, done.stderr
    assert "Restored 3 row(s) into serp_snapshots_202609" in done.stdout
    assert "table created from the archived schema" in done.stdout
    _, after, _ = client.get_row("serp_snapshots_202609", [
        ("keyword", "k"), ("captured_at", int(at(9, 2).timestamp() * 1000))], None, None, 2)
    assert {(c[0], c[1], c[2]) for c in after.attribute_columns} == stamped
    again = clirun.run(tmp_path, "restore", str(archive), "--endpoint", ots_instance.endpoint,
                       "--instance", ots_instance.instance, extra_env=env)
    assert again.returncode == 0 and again.stdout.startswith("Restored 3 row(s)")  # idempotent
    client.create_table(md.TableMeta("other_key", [("id", "STRING")]), md.TableOptions(-1, 1),
                        md.ReservedThroughput(md.CapacityUnit(0, 0)))
    elsewhere = clirun.run(tmp_path, "restore", str(archive), "--table", "other_key",
                           "--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance,
                           extra_env=env)
    assert elsewhere.returncode == 1 and "Traceback" not in elsewhere.stderr
    assert ("table other_key exists with primary key (id STRING), the archive's rows have "
            "(keyword STRING, captured_at INTEGER)") in elsewhere.stderr


def test_restore_of_a_missing_or_broken_archive_is_a_clear_error(ots_instance, tmp_path):
    broken = tmp_path / "x.jsonl.gz"
    with gzip.open(broken, "wt") as stream:
        stream.write(json.dumps({"format": 1, "table": "t", "schema": {}}) + "\n")
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": ots_instance.access_key_id,
           "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ots_instance.access_key_secret}
    not_gzip = tmp_path / "y.jsonl.gz"
    not_gzip.write_text("garbage\n")
    for source, message in ((tmp_path / "missing.jsonl.gz", "no such archive"),
                            (broken, "cut short"),
                            (not_gzip, "y.jsonl.gz cannot be read as an archive: Not a gzipped"),
                            (tmp_path, "cannot be read as an archive: [Errno 21] Is a directory")):
        done = clirun.run(tmp_path, "restore", str(source), "--endpoint", ots_instance.endpoint,
                          "--instance", ots_instance.instance, extra_env=env)
        assert done.returncode == 1 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "cannot reach" not in done.stderr


def test_family_declaration_problems_are_reported():
    class Bad(Model, table="bad_family", family=Monthly("rank", retain=2)):
        keyword = PrimaryKey(str)
        rank = Column(float)

    _, problems = Bad.compile()
    messages = " ".join(p.message for p in problems)
    assert "the family's field 'rank' must be a date" in messages
    assert "archive= must say where their rows go" in messages


def test_archive_to_an_fsspec_url_and_restore_with_old_timestamps(ots_instance, family):
    from tsmigrate.instance.adapter import inspect_table
    from tsmigrate.instance.archive import archive_table
    from tsmigrate.service.restore import restore_archive

    client = ots_instance.client()
    create_tables(client, [family], now=SEP)
    old = int((datetime.now(timezone.utc) - timedelta(days=60)).timestamp() * 1000)
    client.put_row("serp_snapshots_202609", md.Row(
        [("keyword", "k"), ("captured_at", 1)], [("rank", 7, old), ("url", "u", old + 1)]))
    location = "memory://archives/serp_snapshots_202609.jsonl.gz"
    assert archive_table(client, inspect_table(client, "serp_snapshots_202609"), location) == 1
    # Restore into a table whose max_time_deviation (1 day) does not reach the old cells.
    client.create_table(md.TableMeta("restored", [("keyword", "STRING"), ("captured_at", "INTEGER")]),
                        md.TableOptions(), md.ReservedThroughput(md.CapacityUnit(0, 0)))
    result = restore_archive(client, location, "restored")
    assert result.rows == 1 and not result.created and result.widened_s > 60 * 86400
    _, row, _ = client.get_row("restored", [("keyword", "k"), ("captured_at", 1)], None, None, 1)
    assert sorted((c[0], c[1], c[2]) for c in row.attribute_columns) == [
        ("rank", 7, old), ("url", "u", old + 1)]
    assert client.describe_table("restored").table_options.max_time_deviation == 86400  # set back


@pytest.mark.parametrize(("declaration", "family"), [
    ("captured_at = PrimaryKey(datetime)", "Monthly('captured_at', ahead=1)"),
    ("day = PrimaryKey(str)", "Monthly('day', ahead=1)"),  # 'YYYY-MM-DD' days
    ("day = PrimaryKey(int)", "Monthly('day', ahead=1, format='%Y%m%d')"),
    ("day = PrimaryKey(date)", "Monthly('day', ahead=1)"),
])
def test_plan_command_plans_the_coming_months(tmp_path, declaration, family):
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(
        "from datetime import date, datetime\n"
        "from tsmigrate import Column, Model, PrimaryKey\n"
        "from tsmigrate.schema.families import Monthly\n\n"
        f"class Snap(Model, table='snaps', family={family}):\n"
        "    keyword = PrimaryKey(str)\n"
        f"    {declaration}\n"
        "    rank = Column(int)\n")
    done = clirun.run(tmp_path, "plan")
    assert done.returncode == 0, done.stderr
    now = datetime.now(timezone.utc)
    this = f"snaps_{now.year:04d}{now.month:02d}"
    following = now.replace(day=1) + timedelta(days=32)
    assert f"create table {this}" in done.stdout
    assert f"create table snaps_{following.year:04d}{following.month:02d}" in done.stdout
    assert "create table snaps " not in done.stdout and "create table snaps (" not in done.stdout


def test_async_rows_route_and_merge_months_too(ots_instance, snapshots):
    import asyncio

    from tsmigrate.service import AsyncRows

    times = [at(9, 28), at(10, 2), at(11, 5), at(10, 30)]

    async def scenario():
        client = ots_instance.async_client()
        try:
            rows = AsyncRows(snapshots.model, client, retry=FAST)
            result = await rows.batch_write(put=[rows.model(keyword="a", captured_at=t, rank=1)
                                                 for t in times])
            assert result.ok
            return [r.captured_at async for r in rows.query(keyword="a", reverse=True)]
        finally:
            await client.close()

    assert asyncio.run(scenario()) == sorted(times, reverse=True)


def test_a_month_without_a_table(snapshots):
    from tsmigrate.service import RowError

    far = at(3, 1, year=2031)
    with pytest.raises(RowError, match="month table serp_snapshots_203103 does not exist"):
        snapshots.put(snapshots.model(keyword="k", captured_at=far, rank=1))
    assert snapshots.get(keyword="k", captured_at=far) is None
    result = snapshots.batch_write(put=[snapshots.model(keyword="k", captured_at=far, rank=1),
                                        snapshots.model(keyword="k", captured_at=at(10, 1), rank=2)])
    assert result.written == 1 and result.failures[0].error_code == "OTSObjectNotExist"


def test_a_model_key_finds_the_month_table(snapshots):
    model = snapshots.model
    snapshots.put(model(keyword="shoes", captured_at=at(10, 3), rank=4))
    key = model.key(keyword="shoes", captured_at=at(10, 3))
    assert snapshots.get(key).rank == 4
    snapshots.update(key, set={"rank": 5})
    assert snapshots.batch_get([key]).rows[0].rank == 5
    snapshots.delete(key)
    assert snapshots.get(keyword="shoes", captured_at=at(10, 3)) is None
