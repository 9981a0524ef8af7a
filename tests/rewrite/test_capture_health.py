"""Capture health and fences in sight, through `tsmigrate rewrite status` and `tsmigrate status`
(text and JSON): a fence left up says since when and which run holds it; a `follow` that died
is shown stopped with its error and the age of its last progress, never with a stale lag; a
running capture shows its lag; reverse capture keeps its own lag; the late-write net is shown
like the others."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import clirun
import cutover_tables as ct
import pytest
from cutover_tables import Counter

from tsmigrate.instance.records import Action, CommandRun
from tsmigrate.rewrite import capture as capture_mod
from tsmigrate.rewrite import driver, machine, shards
from tsmigrate.service import Rows, routing

pytestmark = pytest.mark.slow  # each builds a rewrite at ready: about a second

T = ct.TARGET
_cli = clirun.run_on


@pytest.fixture
def ready(ots_instance, tmp_path):
    """A rewrite at ready (counters -> counters_by_seq) and a project whose commands reach it."""
    client = ct.ready(ots_instance)
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(ct.MODELS_V2)
    return client, tmp_path


def _shown(project: Path, ots) -> list[tuple[str, dict]]:
    """The rewrite as `rewrite status T` and as `status` show it: [(text, data)] for each."""
    out = []
    text = _cli(project, ots, "rewrite", "status", T)
    data = _cli(project, ots, "rewrite", "status", T, "--format", "json")
    assert text.returncode == 0 and data.returncode == 0, text.stderr + data.stderr
    out.append((text.stdout, json.loads(data.stdout)))
    text = _cli(project, ots, "status")
    data = _cli(project, ots, "status", "--format", "json")
    assert text.returncode == 0 and data.returncode == 0, text.stderr + data.stderr
    (one,) = json.loads(data.stdout)["rewrites"]
    out.append((text.stdout, one))
    return out


def _capture(data: dict, name: str) -> dict:
    (found,) = [c for c in data["captures"] if c["name"] == name]
    return found


def _line(text: str, start: str) -> str:
    (found,) = [line.strip() for line in text.splitlines() if line.strip().startswith(start)]
    return found


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_fence_left_up_shows_since_when_and_which_run_holds_it(ready, ots_instance):
    client, project = ready
    host = socket.gethostname()
    # A switch killed under its fence: phase switching, its short lease held by a dead process.
    rewrite = machine.request(client, T, machine.SWITCHING)
    fence_ms = machine.now_ms() - 5_000
    dead = _dead_pid()
    machine.save(client, rewrite, fence_ms=fence_ms, fence_version=rewrite.version + 1,
                 runner={"owner": f"0badc0de@{host}:{dead}", "expires_ms": machine.now_ms() + 15_000})
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(fence_ms / 1000))
    for text, data in _shown(project, ots_instance):
        fence = data["fence_up"]
        assert (fence["phase"], fence["since_ms"], fence["since"]) == ("switching", fence_ms, since)
        assert fence["age_s"] >= 5
        assert (fence["held_by"]["host"], fence["held_by"]["pid"]) == (host, dead)
        assert fence["held_by"]["process"] == "gone" and fence["held_by_live"] is False
        assert fence["write_wait_s"] == routing.HOLD_S and fence["writes_fail_with"] == "WritesHeld"
        shown = re.search(rf"fence: UP \(switching\) since {re.escape(since)} \((\d+)s ago", text)
        assert shown, text  # its age as the command saw it: 5 s, and what the machine took since
        assert 5 <= int(shown[1]) <= (machine.now_ms() - fence_ms) / 1000 + 1, text
        assert f"held by {host}:{dead} (its process is gone)" in text
        assert f"wait for it, each at most {routing.HOLD_S:.0f}s, then fail with WritesHeld" in text
        assert f"no live process holds it: `tsmigrate rewrite switch {T}` completes it, " \
               f"`tsmigrate rewrite revert {T}` lowers it back" in text
        # The switch ran forward capture under its fence: nothing runs it now.
        assert _capture(data, "capture")["state"] == "stopped"
        assert "its process is gone" in _capture(data, "capture")["why"]

    # Held by a live run of `rewrite switch` (this process): the history names the run.
    run = CommandRun(client, "rewrite switch")
    with run.step(Action("rewrite_switch", f"switch {T}", T, "safe")):
        current = machine.load(client, T)
        machine.save(client, current, runner={"owner": f"0badc0de@{host}:{os.getpid()}",
                                              "expires_ms": machine.now_ms() + 15_000})
        for text, data in _shown(project, ots_instance):
            held = data["fence_up"]["held_by"]
            assert (held["command"], held["run"]) == ("rewrite switch", run.state.owner.run_id)
            assert held["process"] == "alive" and data["fence_up"]["held_by_live"] is True
            assert (f"held by rewrite switch (run {held['run']}) on {host}:{os.getpid()} "
                    "(alive, lease until") in text
            assert "no live process holds it" not in text
            assert _capture(data, "capture")["state"] == "running"
        machine.save(client, machine.load(client, T), runner=None)

    assert ct.revert(client).phase == machine.READY  # lowers the killed switch's fence
    for text, data in _shown(project, ots_instance):
        assert data["fence_up"] is None and "fence: UP" not in text
        assert "last fence: to the source" in text


def _follow_dies(monkeypatch, project: Path, ots) -> None:
    """`rewrite follow` whose capture fails at its second stream read (the late-write net that
    follow runs beside it goes on until then)."""
    calls = []
    step = capture_mod.Capture.step

    def failing(self):
        if type(self) is capture_mod.Capture:  # forward or reverse capture, not the late-write net
            calls.append(1)
            if len(calls) > 1:
                raise RuntimeError("stream read failed: connection reset")
        return step(self)

    monkeypatch.setattr(capture_mod.Capture, "step", failing)
    # An error of no tsmigrate type: the command ends with its traceback.
    followed = clirun.run(project, "rewrite", "follow", T, "--for", "20",
                          extra_env=clirun.instance_env(ots))
    monkeypatch.setattr(capture_mod.Capture, "step", step)
    assert followed.returncode == 1
    assert "RuntimeError: stream read failed: connection reset" in followed.stderr


@pytest.mark.parametrize("direction", ["capture", "reverse_capture"])
def test_a_follow_that_died_is_stopped_with_its_error_never_a_stale_lag(
        ready, ots_instance, monkeypatch, direction):
    client, project = ready
    if direction == "reverse_capture":
        assert ct.switch(client).phase == machine.SWITCHED
    _follow_dies(monkeypatch, project, ots_instance)
    error_key, lag_key = (("capture_error", "capture_lag_s") if direction == "capture"
                          else ("reverse_error", "reverse_lag_s"))
    rewrite = machine.load(client, T)
    assert rewrite.get(error_key) == "RuntimeError: stream read failed: connection reset"
    assert rewrite.get(lag_key) is not None  # saved, and not to be shown
    label, arrow = (("capture", "counters -> counters_by_seq") if direction == "capture"
                    else ("reverse capture", "counters_by_seq -> counters"))
    for text, data in _shown(project, ots_instance):
        shown = _capture(data, direction)
        assert (shown["state"], shown["direction"]) == ("stopped", arrow)
        assert shown["error"] == "RuntimeError: stream read failed: connection reset"
        assert shown["lag_s"] is None and data["capture_lag_s"] is None
        assert shown["last_progress_ms"] >= ct_time_of(rewrite, direction)
        assert shown["last_progress_age_s"] is not None
        line = _line(text, f"{label} {arrow}:")
        assert line.startswith(f"{label} {arrow}: stopped (its last error stopped it); last progress ")
        assert " ago)" in line and "lag" not in line
        assert "last error: RuntimeError: stream read failed: connection reset" in text
        assert shown["restart"] == f"tsmigrate rewrite follow {T}"
        assert f"`tsmigrate rewrite follow {T}` starts it again from its saved position" in text
        # The other capture is not used in this phase.
        other = "reverse_capture" if direction == "capture" else "capture"
        if any(c["name"] == other for c in data["captures"]):
            assert _capture(data, other)["state"] == "idle"


def ct_time_of(rewrite: machine.Rewrite, direction: str) -> int:
    return int(rewrite.get("capture_at_ms" if direction == "capture" else "reverse_at_ms"))


def test_a_running_follow_shows_its_lag_and_progress_clears_an_old_error(ready, ots_instance):
    client, project = ready
    machine.save(client, machine.load(client, T), capture_error="RuntimeError: an old one")
    stop = threading.Event()
    failed: list[BaseException] = []

    def follow() -> None:
        try:
            with machine.Runner(client, T) as runner:
                driver.follow(client, runner, 30, stop=stop)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=follow)
    thread.start()
    try:
        Rows(Counter, client).update({"device": "d1", "seq": 1}, set={"note": "moved on"})
        deadline = time.monotonic() + 10
        while (machine.load(client, T).get("capture_stats") or {}).get("applied", 0) < 1:
            assert time.monotonic() < deadline and not failed, failed
            time.sleep(0.05)
        for text, data in _shown(project, ots_instance):
            shown = _capture(data, "capture")
            assert shown["state"] == "running" and shown["error"] is None
            assert isinstance(shown["lag_s"], float) and data["capture_lag_s"] == shown["lag_s"]
            assert shown["last_progress_age_s"] < 5 and shown["stats"]["applied"] >= 1
            line = _line(text, "capture counters -> counters_by_seq:")
            assert line.startswith("capture counters -> counters_by_seq: running, lag "), line
            assert "applied " in line and "last error" not in text
            assert f"run by: {data['runner']} (alive, lease until" in text
    finally:
        stop.set()
        thread.join()
    assert not failed, failed


def test_reverse_capture_keeps_its_own_lag_and_the_late_net_is_shown(ready, ots_instance):
    client, project = ready
    assert ct.switch(client).phase == machine.SWITCHED
    machine.save(client, machine.load(client, T), capture_lag_s=123.0)
    ct.catch_up(client)  # reverse capture drains: its own lag, not forward capture's
    rewrite = machine.load(client, T)
    assert rewrite.get("capture_lag_s") == 123.0
    assert rewrite.get("reverse_lag_s") is not None and rewrite.get("reverse_at_ms")
    now = machine.now_ms()
    machine.save(client, rewrite, late_net={"watched": "counters", "since_ms": now - 1000,
                                            "position": {"stream_id": "s", "shards": {},
                                                         "set_aside": {}}},
                 late_stats={"applied": 4, "last_record_ms": now, "caught_up": False,
                             "late_writes": 3, "carried": 2, "conflicts": 1},
                 late_lag_s=0.4, late_at_ms=now, late_error="OTSServerBusy: try again",
                 runner={"owner": f"x@{socket.gethostname()}:{os.getpid()}",
                         "expires_ms": now + 60_000})
    for text, data in _shown(project, ots_instance):
        assert _capture(data, "capture")["state"] == "idle"
        assert "capture counters -> counters_by_seq: idle (not used in phase switched)" in text
        reverse = _capture(data, "reverse_capture")
        assert reverse["state"] == "running" and reverse["lag_s"] == rewrite.get("reverse_lag_s")
        late = _capture(data, "late_net")
        assert (late["direction"], late["state"]) == ("counters -> counters_by_seq", "stopped")
        assert late["error"] == "OTSServerBusy: try again" and late["lag_s"] is None
        line = _line(text, "late writes counters -> counters_by_seq:")
        assert "stopped (its last error stopped it)" in line
        assert "3 late write(s), 2 version(s) carried, 1 conflict(s)" in line
        assert "last error: OTSServerBusy: try again" in text
    machine.save(client, machine.load(client, T), late_error=None)
    for text, data in _shown(project, ots_instance):
        late = _capture(data, "late_net")
        assert (late["state"], late["lag_s"]) == ("running", 0.4)
        assert "late writes counters -> counters_by_seq: running, lag 0.4s" in text


def test_a_running_capture_shows_its_rate_and_each_shards_records_and_lag(
        ots_instance, ots_server_options, tmp_path):
    """A source stream of 4 shards: status shows the running capture's records/s and workers,
    and a line per shard (short id, records, records/s, lag); the JSON every shard in full."""
    import attrs
    import rewrite_tables as rt

    ots_server_options.stream_shards = 4  # the source's stream, turned on by apply's prepare
    target = rt.TARGET.name
    client, _ = rt.ready_capture(ots_instance, attrs.evolve(rt.TARGET, replaces=rt.SOURCE.name))
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(rt.MODELS_V2)
    with machine.Runner(client, target) as runner:  # this process runs capture: "running"
        capture = driver.make_capture(client, runner.rewrite, shards.Threads(3))
        rt.fill(client, 400, first=40)  # 360 new rows: a record each, spread over the shards
        capture.step()
        driver._save_capture(runner, capture)
        shown = []
        for args in (("rewrite", "status", target), ("status",)):
            text = _cli(tmp_path, ots_instance, *args)
            data = _cli(tmp_path, ots_instance, *args, "--format", "json")
            assert text.returncode == 0 and data.returncode == 0, text.stderr + data.stderr
            data = json.loads(data.stdout)
            shown.append((text.stdout, data["rewrites"][0] if args == ("status",) else data))
    for text, data in shown:
        forward = _capture(data, "capture")
        assert forward["state"] == "running" and forward["workers"] == 3
        assert forward["records_per_s"] > 0
        per_shard = forward["shards"]
        assert sorted(s["id"] for s in per_shard) == sorted(capture.shards)
        assert all(s["records"] > 0 and s["records_per_s"] > 0 for s in per_shard)
        assert sum(s["records"] for s in per_shard) == 360
        lags = [s["lag_s"] for s in per_shard]
        assert lags == sorted(lags, reverse=True)
        head = _line(text, "capture readings -> readings_by_seq:")
        assert head.startswith("capture readings -> readings_by_seq: running, lag ")  # as before
        rate = _line(text, f"{forward['records_per_s']:,.0f} records/s,")
        assert rate.endswith(", 3 workers, 4 shards"), rate
        lines = [line.strip() for line in text.splitlines() if line.strip().startswith("shard ")]
        assert len(lines) == 4
        for shard, line in zip(per_shard, lines, strict=True):
            assert shard["id"].startswith(shard["short_id"]) and len(shard["short_id"]) >= 8
            assert line.startswith(f"shard {shard['short_id']}: {shard['records']:,} records, "), line
            assert line.endswith(f"records/s, lag {shard['lag_s']:.1f}s"), line
