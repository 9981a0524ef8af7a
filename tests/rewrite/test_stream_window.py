"""Issue 22 item 8, the stream outlives the copy: `tsmigrate plan` and the rewrite's prepare
(inside `tsmigrate apply`) refuse a rewrite whose projected copy and verification could take
longer than the source's stream keeps its records, naming both figures and what to raise.

The local server, like the service, keeps stream records for whole hours (1 to 168), so the
copies here are made slow rather than the tables large: plan's stated rate is lowered, or
`--max-rows-per-s` throttles the copy, or prepare's sample is timed as if the service were slow.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import attrs
import clirun
import pytest
import rewrite_tables as rt
import tablestore as ts

from tsmigrate.instance.rawclient import RawClient
from tsmigrate.rewrite import copy, cost, machine
from tsmigrate.rewrite.cost import Projection, StreamTooShort, check_stream
from tsmigrate.schema import StreamSpec

# The replaced table's model of rewrite_tables.MODELS_V1, with its stream option as a parameter.
SOURCE_MODEL = '''
from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.keys import HashPrefix


class Reading(Model, table="readings", max_versions=3, max_time_deviation="366d"{stream}):
    pk = PrimaryKey(str, derive=HashPrefix("device", length=4, sep="|"))
    seq = PrimaryKey(int)
    device = Column(str)
'''


_run = clirun.run_on

def _source(root: Path, ots, rows: int, stream: str = "") -> Path:
    """A project whose `readings` (stream option ``stream``) holds ``rows`` rows, its models
    then changed to replace it by `readings_by_seq` (a new key): plan has a rewrite step."""
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(SOURCE_MODEL.format(stream=stream))
    created = _run(root, ots, "apply", "--yes")
    assert created.returncode == 0, created.stderr
    rt.fill(ots.client(), rows)
    (root / "app_models.py").write_text(rt.MODELS_V2)
    return root


def _stream(ots, table: str = "readings") -> tuple[bool, int]:
    details = RawClient(ots.client()).describe_table(table).stream_details
    return bool(details.enable_stream), int(details.expiration_time)


def _target_rows(ots) -> int:
    start = [("key", ts.INF_MIN), ("region", ts.INF_MIN)]
    end = [("key", ts.INF_MAX), ("region", ts.INF_MAX)]
    _, _, rows, _ = ots.client().get_range("readings_by_seq", ts.Direction.FORWARD, start, end,
                                             max_version=1)
    return len(rows)


@pytest.mark.slow  # whole rewrites
def test_a_rewrite_well_within_the_stream_is_not_refused(tmp_path, ots_instance) -> None:
    """A one-day stream (stream=True) and a small table: plan shows the cost, apply copies."""
    project = _source(tmp_path, ots_instance, 300, stream=", stream=True")
    for fmt in ("text", "markdown", "json"):
        planned = _run(project, ots_instance, "plan", "--format", fmt)
        assert planned.returncode == 0, planned.stderr
        assert "MB/s" in planned.stdout and "stream records" not in planned.stderr
    applied = _run(project, ots_instance, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    assert "rewrite readings -> readings_by_seq: ready" in applied.stdout
    assert _target_rows(ots_instance) == 300
    assert _stream(ots_instance) == (True, 24)  # an existing stream keeps its expiration


@pytest.mark.slow
def test_plan_refuses_in_every_format_and_the_named_setting_lets_it_through(
        tmp_path, ots_instance, monkeypatch) -> None:
    project = _source(tmp_path, ots_instance, 500, stream=', stream="1h"')
    # About 96 KB at about 21 bytes a second: about 2 h with verification, over half of 1 h.
    monkeypatch.setattr(cost, "RATE_MB_S", 0.00002)
    out = project / "plan.json"
    messages = set()
    for fmt in ("text", "markdown", "json"):
        planned = _run(project, ots_instance, "plan", "--format", fmt, "--out", str(out))
        assert planned.returncode == 1 and planned.stdout == "", planned.stdout
        message = " ".join(planned.stderr.split())  # the console wraps long lines
        assert message.startswith("error: the rewrite of readings into readings_by_seq could "
                                  "outlive the stream records it depends on"), message
        assert "at the stated 2e-05 MB/s" in message and "(the copy's time x 1.5)" in message
        assert "the stream of readings keeps records 1 h" in message
        assert "under 50% of that (0.5 h)" in message
        assert re.search(r"would take about \d+\.\d (min|h) ", message), message
        assert 'stream="' in message and "on the model of table readings" in message
        assert "168 h at most" in message and "then plan again" in message
        assert "--max-rows-per-s" not in message  # plan does not throttle
        assert not out.exists()  # refused before the plan file is written
        messages.add(message)
    assert len(messages) == 1  # the same message, whatever the format
    needed = int(re.search(r'stream="(\d+)h"', message).group(1))
    assert 2 <= needed <= 12

    # What the message says to do: the replaced table's model raises its stream, applied before
    # the model that replaces it (a project declares one of the two at a time).
    assert "applied before the model that replaces it" in message
    (project / "app_models.py").write_text(SOURCE_MODEL.format(stream=f', stream="{needed}h"'))
    raised = _run(project, ots_instance, "apply", "--yes")
    assert raised.returncode == 0, raised.stderr
    assert _stream(ots_instance) == (True, needed)
    (project / "app_models.py").write_text(rt.MODELS_V2)
    as_json = _run(project, ots_instance, "plan", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert "rewrite_table" in [s["kind"] for s in json.loads(as_json.stdout)["steps"]]


@pytest.mark.slow  # whole rewrites
def test_apply_refuses_in_prepare_when_max_rows_per_s_slows_the_copy(tmp_path, ots_instance) -> None:
    """Prepare projects at the throttle (about 2,250 rows at 1 row a second): refused before
    anything is written; the same apply without the throttle then runs the rewrite."""
    project = _source(tmp_path, ots_instance, 3000, stream=', stream="1h"')
    assert _run(project, ots_instance, "plan").returncode == 0  # at the stated rate it fits
    refused = _run(project, ots_instance, "apply", "--yes", "--max-rows-per-s", "1")
    assert refused.returncode == 1
    message = " ".join(refused.stderr.split())
    assert "error: the rewrite of readings into readings_by_seq could outlive the stream records" in message
    assert "at --max-rows-per-s 1 (about" in message and "bytes a row)" in message
    assert "the stream of readings keeps records 1 h" in message
    assert "raise --max-rows-per-s (at 1 rows/s it is what sets the copy's rate) or leave it out" in message
    assert 'stream="' in message and "then apply again (the rewrite continues from prepare)" in message
    rewrite = machine.load(ots_instance.client(), "readings_by_seq")
    assert rewrite.phase == machine.FAILED and "could outlive the stream records" in rewrite.error
    # Nothing was written: no target row, the source's stream and the target's deviation as they were.
    assert _target_rows(ots_instance) == 0
    assert _stream(ots_instance) == (True, 1)
    assert "stream_was" not in rewrite.doc and "declared_deviation" not in rewrite.doc

    applied = _run(project, ots_instance, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    assert "rewrite readings -> readings_by_seq: ready" in applied.stdout
    assert _target_rows(ots_instance) == 3000


@pytest.mark.slow  # whole rewrites
def test_apply_refuses_when_even_the_longest_stream_is_too_short(
        tmp_path, ots_instance, monkeypatch) -> None:
    """No stream on the source: prepare would turn it on for 168 h, the service's longest. A
    sample that reads as if the service gave a thousandth of a byte a second needs more."""
    project = _source(tmp_path, ots_instance, 300)
    measure = copy.sample

    def slow_sample(*args, **kwargs) -> copy.Sample:
        sampled = measure(*args, **kwargs)
        return attrs.evolve(sampled, seconds=sampled.bytes * 1000.0)

    monkeypatch.setattr(copy, "sample", slow_sample)
    refused = _run(project, ots_instance, "apply", "--yes")
    assert refused.returncode == 1
    message = " ".join(refused.stderr.split())
    assert "the stream prepare turns on for readings keeps records 168 h" in message
    assert "sample rows, read and transformed)" in message and "under 50% of that (84 h)" in message
    assert ("split readings into smaller tables and rewrite them one at a time (even the "
            "service's longest stream expiration, 168 h, is too short)") in message
    assert 'stream="' not in message and "--max-rows-per-s" not in message
    assert _stream(ots_instance) == (False, 0)  # not turned on
    assert _target_rows(ots_instance) == 0


def _projection(seconds: float, row_limit: float | None = None) -> Projection:
    """A projection of ``seconds`` with verification (the copy at 1 MB/s)."""
    size = int(seconds / cost.VERIFY_FACTOR * cost.MB)
    return Projection(size, cost.MB, "at 1 MB/s", row_limit)


@pytest.mark.parametrize(("stream", "allowed_h"), [
    (StreamSpec(True, 24), 12), (StreamSpec(True, 1), 0.5), (StreamSpec(), 84)])
def test_the_rule_refuses_past_half_the_stream_as_prepare_leaves_it(stream, allowed_h) -> None:
    check_stream("a", "b", _projection(allowed_h * 3600 - 1), stream, "then go on")
    with pytest.raises(StreamTooShort) as refused:
        check_stream("a", "b", _projection(allowed_h * 3600 + 60), stream, "then go on")
    assert str(refused.value).endswith("; then go on")
    assert isinstance(refused.value, machine.RewriteError)


def test_the_fixes_the_message_names() -> None:
    def message(hours: float, stream: StreamSpec, row_limit: float | None = None) -> str:
        with pytest.raises(StreamTooShort) as refused:
            check_stream("old", "new", _projection(hours * 3600, row_limit), stream, "then go on")
        return str(refused.value)

    # 13 h needs 26 h of records: the stream's setting, not the throttle (there is none).
    text = message(13, StreamSpec(True, 24))
    assert "would take about 13.0 h" in text and "keeps records 24 h" in text
    assert 'raise the stream expiration of old to 26 h or more: stream="26h"' in text
    assert "--max-rows-per-s" not in text and "split old" not in text
    # Throttled, over what even 168 h allows: the throttle, then splitting the table.
    text = message(100, StreamSpec(True, 168), row_limit=50)
    assert text.index("raise --max-rows-per-s (at 50 rows") < text.index("; or split old")
    assert 'stream="' not in text
