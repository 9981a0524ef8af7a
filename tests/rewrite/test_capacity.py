"""Whether change capture keeps up with the source's writes (``tsmigrate.rewrite.capacity``):
the verdict and its text (table-driven and property tests), what a capture's saved stats say a
worker applies, the source's write rate sampled from its stream (live shards, and a backlog
out of reach), prepare's measurement as apply shows it and status keeps it, and plan's texts."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import clirun
import pytest
import rewrite_tables as rt
import tablestore as ts
from hypothesis import given
from hypothesis import strategies as st

from tsmigrate.instance.rawclient import RawClient
from tsmigrate.rewrite import capacity, machine
from tsmigrate.rewrite.capacity import Rate, decide

_run = clirun.run_on
P = "p"  # a per-worker rate's basis


def _decide(writes: float | None, per_worker: float, workers: int, shards: int | None):
    return decide("readings", Rate(writes, "w"), Rate(per_worker, P), workers, shards)


# -- the verdict ----------------------------------------------------------------------------------

TEXTS = [
    # writes, per worker, workers, shards: status, what the text says after the figures
    (2400, 1100, 4, 4, "ok", "(4 workers: 4,400/s) — ok (write rate: w; per worker: p)"),
    (5000, 1100, 4, 8, "short", "(4 workers: 4,400/s) — cannot keep up: give --workers 6 or more "
                                "(the stream has 8 shards: more workers than shards do not help) "
                                "(write rate: w; per worker: p)"),
    (4000, 1100, 4, 8, "tight", "(4 workers: 4,400/s) — barely keeps up (a lag drains slowly): give "
                                "--workers 5 or more (the stream has 8 shards: more workers than "
                                "shards do not help)"),
    (5000, 1100, 4, 4, "short", "(4 workers: 4,400/s) — cannot keep up even with a worker for each "
                                "of the stream's 4 shards (4,400/s; more workers than shards do not "
                                "help): expect capture's lag to grow while writes stay this high"),
    (5000, 1100, 2, 4, "short", "(2 workers: 2,200/s) — cannot keep up even with a worker for each "
                                "of the stream's 4 shards (4,400/s; more workers than shards do not "
                                "help): give --workers 4, and expect capture's lag to grow"),
    (1500, 1100, 8, 2, "ok", "(8 workers, 2 at once on the stream's 2 shards: 2,200/s) — ok"),
    (1000, 1100, 1, None, "tight", "(1 worker: 1,100/s) — barely keeps up (a lag drains slowly): "
                                  "give --workers 2 or more (write rate"),
    (40_000, 4000, 8, 8, "short", "even with a worker for each of the stream's 8 shards (32,000/s; "
                                  "more workers than shards do not help): expect capture's lag to "
                                  "grow while writes stay this high; on threads of one process "
                                  "capture's client CPU (about 50 µs a record) stops near 20,000 "
                                  "records/s: --dask spreads the shards over more processes"),
]


@pytest.mark.parametrize(("writes", "per_worker", "workers", "shards", "status", "said"), TEXTS)
def test_the_verdict_names_both_figures_and_the_workers(writes, per_worker, workers, shards,
                                                        status, said):
    check = _decide(writes, per_worker, workers, shards)
    assert check.status == status and check.warning == (status != "ok")
    assert check.text.startswith(f"readings is written at about {writes:,} records/s; capture "
                                 f"applies about {per_worker:,} records/s per worker "), check.text
    assert said in check.text, check.text
    assert check.to_dict()["text"] == check.text


def test_an_unknown_write_rate_is_said_and_never_warned():
    check = decide("readings", Rate(None, "its stream is off"), Rate(1100, P), 4, None)
    assert (check.status, check.warning, check.needed_workers) == ("unknown", False, None)
    assert check.text == ("the write rate of readings is unknown until prepare measures it (its "
                          "stream is off); capture applies about 1,100 records/s per worker "
                          "(4 workers: 4,400/s) (per worker: p)")


@given(writes=st.floats(0, 1e6), per_worker=st.floats(1, 1e5), workers=st.integers(1, 64),
       shards=st.none() | st.integers(1, 64))
def test_the_workers_it_asks_for_are_the_fewest_that_keep_up(writes, per_worker, workers, shards):
    check = _decide(writes, per_worker, workers, shards)
    at_once = min(workers, shards) if shards else workers
    assert check.capacity_per_s == pytest.approx(per_worker * at_once)
    keeps = per_worker * at_once >= writes * capacity.HEADROOM
    assert (check.status == "ok") == keeps and check.warning == (not keeps)
    assert f"{writes:,.0f} records/s" in check.text and f"{per_worker:,.0f} records/s" in check.text
    if keeps:
        return
    assert check.status == ("tight" if per_worker * at_once >= writes else "short")
    needed = check.needed_workers
    assert needed > at_once and check.enough_shards == (shards is None or needed <= shards)
    assert _decide(writes, per_worker, needed, None).status == "ok"  # enough, given the shards
    assert needed == 1 or _decide(writes, per_worker, needed - 1, None).status != "ok"  # the fewest
    if check.enough_shards:
        assert f"give --workers {needed} or more" in check.text
    else:
        assert ("even with a worker on the stream's only shard" if shards == 1 else
                f"even with a worker for each of the stream's {shards} shards") in check.text


# -- what a worker applies -------------------------------------------------------------------------


def _shard(records_per_s: float, lag_s: float, done: bool = False) -> dict:
    return {"records": 10, "records_per_s": records_per_s, "lag_s": lag_s, "done": done}


@pytest.mark.parametrize(("stats", "expected"), [
    (None, None),
    ({}, None),
    # The shards still behind read full pages: their mean rate is a worker's.
    ({"records_per_s": 9000, "workers": 4, "caught_up": False,
      "shards": {"a": _shard(1000, 5), "b": _shard(3000, 2), "c": _shard(800, 0), "d": _shard(0, 0)}},
     2000),
    # Caught up: the rate is the writes', not what capture can do.
    ({"records_per_s": 9000, "workers": 4, "caught_up": True,
      "shards": {"a": _shard(1000, 0), "b": _shard(3000, 0)}}, None),
    # Behind without per-shard lags: the round's rate over the shards applied at once.
    ({"records_per_s": 6000, "workers": 4, "caught_up": False,
      "shards": {"a": _shard(0, 0), "b": _shard(0, 0), "c": _shard(0, 0, done=True)}}, 3000),
    ({"records_per_s": 6000, "workers": 3, "caught_up": False}, 2000),
])
def test_a_captures_stats_say_what_a_worker_applies_only_when_it_was_behind(stats, expected):
    assert capacity.per_worker_from_stats(stats) == expected


def test_the_estimate_from_a_round_trip_is_capped_by_client_cpu():
    fast, slow = capacity.estimated_per_worker(0.0), capacity.estimated_per_worker(0.02)
    assert fast == pytest.approx(1 / capacity.CPU_S_PER_RECORD)
    assert slow < fast and slow == pytest.approx(500 / (4 * 0.02 + 500 * capacity.CPU_S_PER_RECORD))


# -- the write rate, sampled from the stream -------------------------------------------------------


def _stream(ots_instance, ots_server_options, shards: int) -> tuple[ts.OTSClient, RawClient]:
    ots_server_options.stream_shards = shards
    client = ots_instance.client()
    rt.create(client, rt.SOURCE)
    raw = RawClient(client)
    raw.update_stream(rt.SOURCE.name, True, 24)
    return client, raw


@contextmanager
def _writing(client: ts.OTSClient, batch: int = 20, pause_s: float = 0.02) -> Iterator[list[int]]:
    """A thread writing ``batch`` source rows every ``pause_s`` meanwhile; yields [rows written]."""
    written = [0]
    stop = threading.Event()
    failed: list[BaseException] = []

    def write() -> None:
        first = 100_000
        try:
            while not stop.is_set():
                rt.fill(client, first + batch, first=first)
                first += batch
                written[0] += batch
                stop.wait(pause_s)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        yield written
    finally:
        stop.set()
        thread.join()
    assert not failed, failed


def test_a_stream_that_is_off_or_missing_has_no_rate(ots_instance):
    client = ots_instance.client()
    rt.create(client, rt.SOURCE)
    raw = RawClient(client)
    assert capacity.sample_writes(raw, rt.SOURCE.name, 0.1) == Rate(None, "its stream is off")
    assert capacity.sample_writes(raw, "nosuch", 0.1) == Rate(None, "nosuch does not exist yet")
    assert capacity.round_trip_s(raw, "nosuch") > 0


@pytest.mark.slow  # a sample of half a second
def test_the_rate_counts_what_arrives_on_every_shard(ots_instance, ots_server_options):
    client, raw = _stream(ots_instance, ots_server_options, 4)
    rt.fill(client, 300)  # written before: not part of the rate
    with _writing(client) as written:
        time.sleep(0.1)
        started = time.monotonic()
        before = written[0]
        rate = capacity.sample_writes(raw, rt.SOURCE.name, 0.5)
        actual = (written[0] - before) / (time.monotonic() - started)
    assert rate.shards == 4 and rate.basis == "sampled from its stream for 0.5 s on 4 shards"
    # The rows written during the sample, give or take the batches at either end of the window.
    assert 0.3 * actual < rate.records_per_s < 2 * actual, (rate, actual)


def test_a_backlog_out_of_reach_is_rated_by_its_records_cell_times(ots_instance, ots_server_options,
                                                                    monkeypatch):
    client, raw = _stream(ots_instance, ots_server_options, 2)
    monkeypatch.setattr(capacity, "SAMPLE_PAGE", 20)
    monkeypatch.setattr(capacity, "SKIP_PAGES", 2)  # 40 records a shard: the backlog is longer
    base = int(time.time() * 1000) - 600_000
    for start in range(0, 400, 200):  # 400 rows stamped 10 ms apart: written at 100 a second
        request = ts.BatchWriteRowRequest()
        items = [ts.PutRowItem(ts.Row(rt.source_row(i, base)[0], [("temp", 1.0, base + 10 * i)]),
                               ts.Condition("IGNORE")) for i in range(start, start + 200)]
        request.add(ts.TableInBatchWriteRowItem(rt.SOURCE.name, items))
        assert client.batch_write_row(request).is_all_succeed()
    started = time.monotonic()
    rate = capacity.sample_writes(raw, rt.SOURCE.name, 5.0)
    assert time.monotonic() - started < 2  # no shard reached its end: nothing to wait for
    assert rate.basis == ("sampled from its stream for 5 s on 2 shards; 2 held over 40 records: their "
                          "rate from the cell times of the newest records reached")
    assert 70 < rate.records_per_s < 140, rate


# -- prepare, apply, status ------------------------------------------------------------------------


def _project(root: Path, ots) -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(rt.MODELS_V1)
    assert _run(root, ots, "apply", "--yes").returncode == 0
    rt.fill(ots.client(), 100)
    (root / "app_models.py").write_text(rt.MODELS_V2)
    return root


@pytest.mark.slow  # a rewrite to ready while the source is written
def test_prepare_measures_the_writes_apply_shows_it_and_status_keeps_it(
        tmp_path, ots_instance, ots_server_options, monkeypatch):
    monkeypatch.setattr(capacity, "SAMPLE_S", 0.5)
    ots_server_options.stream_shards = 2
    project = _project(tmp_path, ots_instance)
    with _writing(ots_instance.client()) as written:
        applied = _run(project, ots_instance, "apply", "--yes", "--workers", "2")
    assert applied.returncode == 0, applied.stderr
    assert written[0] > 0
    shown = re.search(r"capture against the writes: readings is written at about ([\d,]+) records/s; "
                      r"capture applies about ([\d,]+) records/s per worker \(2 workers: ([\d,]+)/s\) "
                      r"— ok \(write rate: sampled from its stream for 0.5 s on 2 shards; per worker: "
                      r"estimated from a [\d.]+ ms round trip \(4 a page of 500 records\)", applied.stderr)
    assert shown, applied.stderr
    rewrite = machine.load(ots_instance.client(), "readings_by_seq")
    saved = rewrite.get("source_writes")
    assert saved["records_per_s"] > 0 and saved["shards"] == 2
    assert int(shown.group(1).replace(",", "")) == round(saved["records_per_s"])
    check = rewrite.get("capture_capacity")
    assert (check["status"], check["workers"], check["shards"]) == ("ok", 2, 2)
    status = _run(project, ots_instance, "rewrite", "status", "readings_by_seq")
    assert f"capture against the writes (at prepare): {check['text']}" in status.stdout
    as_json = json.loads(_run(project, ots_instance, "rewrite", "status", "readings_by_seq",
                              "--format", "json").stdout)
    assert as_json["capture_capacity"] == check


# -- plan --------------------------------------------------------------------------------------------


def _plan(project: Path, ots) -> dict[str, tuple[str, dict]]:
    """Plan's text, Markdown and JSON; the JSON's rewrite step."""
    out = {}
    for fmt in ("text", "markdown", "json"):
        planned = _run(project, ots, "plan", "--format", fmt)
        assert planned.returncode == 0, planned.stderr
        out[fmt] = planned.stdout
    (step,) = [s for s in json.loads(out["json"])["steps"] if s["kind"] == "rewrite_table"]
    return out, step["args"]["capture"]


def test_plan_says_the_write_rate_is_unknown_while_the_stream_is_off(tmp_path, ots_instance):
    project = _project(tmp_path, ots_instance)
    shown, check = _plan(project, ots_instance)
    assert (check["status"], check["warning"], check["writes_per_s"]) == ("unknown", False, None)
    said = "capture: the write rate of readings is unknown until prepare measures it (its stream is off)"
    assert check["text"].startswith(said.removeprefix("capture: "))
    assert "(4 workers: " in check["text"] and "per worker: estimated from a" in check["text"]
    for fmt, text in shown.items():
        if fmt != "json":
            assert said in text, text
            assert "! capture:" not in text and "**capture:" not in text


@pytest.mark.slow  # plans of a project while its source is written
def test_plan_warns_when_capture_cannot_keep_up_with_the_writes(tmp_path, ots_instance, monkeypatch):
    project = _project(tmp_path, ots_instance)
    RawClient(ots_instance.client()).update_stream("readings", True, 24)
    monkeypatch.setattr(capacity, "SAMPLE_S", 0.6)  # plan samples for half of it
    monkeypatch.setattr(capacity, "PER_WORKER_RECORDS_S", 2.0)  # a very slow capture
    with _writing(ots_instance.client()):
        shown, check = _plan(project, ots_instance)
    assert (check["status"], check["warning"], check["shards"]) == ("short", True, 1)
    assert check["writes_per_s"] > 100 and check["per_worker_per_s"] == 2.0
    assert check["needed_workers"] == math.ceil(check["writes_per_s"] * capacity.HEADROOM / 2.0)
    said = (f"readings is written at about {check['writes_per_s']:,.0f} records/s; capture applies "
            "about 2 records/s per worker (4 workers, 1 at once on the stream's only shard: 2/s) — "
            "cannot keep up even with a worker on the stream's only shard (2/s; more workers than "
            "shards do not help): expect capture's lag to grow while writes stay this high")
    assert check["text"].startswith(said), check["text"]
    assert "(write rate: sampled from its stream for 0.3 s on 1 shard; per worker: stated)" in check["text"]
    # Each output is a plan of its own: a sample of its own.
    rest = said.partition(" records/s; ")[2]
    assert re.search(rf"! capture: readings is written at about [\d,]+ records/s; {re.escape(rest)}",
                     shown["text"]), shown["text"]
    assert re.search(rf"\*\*capture: readings is written at about [\d,]+ records/s; {re.escape(rest)}",
                     shown["markdown"]), shown["markdown"]


@pytest.mark.slow  # a rewrite to ready
def test_plan_takes_a_rewrite_in_progress_at_what_it_measured(ots_instance):
    """A rewrite apply continues: the write rate its prepare saved, capture's own per-worker
    rate from its stats (shards behind), and the warning in every format."""
    import attrs

    from tsmigrate.planning.plan import Plan, RewriteAhead
    from tsmigrate.planning.planrender import plan_json, plan_markdown, plan_text

    client, _ = rt.ready_capture(ots_instance, attrs.evolve(rt.TARGET, replaces=rt.SOURCE.name))
    rewrite = machine.load(client, rt.TARGET.name)
    assert rewrite.get("source_writes")["shards"] == 1  # prepare measured it
    behind = {"records": 5000, "records_per_s": 900.0, "lag_s": 12.0, "done": False}
    faster = {**behind, "records_per_s": 1100.0}
    machine.save(client, rewrite,
                 source_writes={"records_per_s": 5000.0, "basis": "sampled from its stream for 2 s "
                                "on 8 shards", "shards": 8, "at_ms": 1_800_000_000_000},
                 capture_stats={"applied": 9, "caught_up": False, "records_per_s": 1800.0,
                                "workers": 2, "shards": {"s1": behind, "s2": faster}})
    ahead = RewriteAhead(rt.TARGET.name, rt.SOURCE.name, "catch-up")
    plan = capacity.with_checks(client, Plan([], [], "", "", rewrites=[ahead]), 4)
    check = plan.rewrites[0].capture
    assert (check.status, check.per_worker_per_s, check.needed_workers) == ("short", 1000.0, 6)
    said = ("readings is written at about 5,000 records/s; capture applies about 1,000 records/s per "
            "worker (4 workers: 4,000/s) — cannot keep up: give --workers 6 or more (the stream has "
            "8 shards: more workers than shards do not help) (write rate: sampled from its stream "
            "for 2 s on 8 shards, by this rewrite's prepare at 2027-01-15 08:00 UTC; per worker: "
            "measured by capture of readings into readings_by_seq on this instance, while it was behind)")
    assert check.text == said
    assert f"! capture: {said}" in plan_text(plan, colour=False)
    assert f"**capture: {said}**" in plan_markdown(plan)
    assert json.loads(plan_json(plan))["rewrites"][0]["capture"] == check.to_dict()
