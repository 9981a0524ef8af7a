"""Every table shape Tablestore allows can be rewritten and cut over through the commands, with
services on both models writing throughout: a TTL with a global index (so ``allow_update=False``)
on both tables, on the old one only, on the new one only (both keep the same TTL); a search index
with a TTL; a table keeping 3 versions; the README's example, with and without a way back. Every
acknowledged write is in the final table."""

from __future__ import annotations

import json
import time

import clirun
import pytest
import shape_flow as sf

from tsmigrate.rewrite import machine

OLD_PLAIN = '''
from tsmigrate import Column, GlobalIndex, Model, PrimaryKey, SearchField, SearchIndex


class Event(Model, table="{old}", max_versions={versions}{old_opts}):
    device = PrimaryKey(str)
    seq = PrimaryKey(int)
    kind = Column(str, defined=True)
    n = Column(int, defined=True)
{old_index}
'''

NEW_PLAIN = '''
from tsmigrate import Column, GlobalIndex, Model, PrimaryKey, SearchField, SearchIndex


class EventV2(Model, table="{new}", replaces="{old}", max_versions={versions}{new_opts}):
    seq = PrimaryKey(int)
    device = PrimaryKey(str)
    kind = Column(str, defined=True)
    n = Column(int, defined=True)
{new_index}
'''

NO_UPDATE = ', ttl="30d", allow_update=False'
TTL_ONLY = ', ttl="30d"'  # the same TTL (a rewrite keeps it), no index: updates allowed
GLOBAL = '    by_kind = GlobalIndex(keys=["kind"], include=["n"], name="{table}_kind")'
SEARCH = ('    find = SearchIndex(fields=[SearchField("kind", "keyword"), SearchField("n", "long")],'
          ' name="{table}_find")')

SHAPES = {
    "ttl-index-both": (NO_UPDATE, GLOBAL, NO_UPDATE, GLOBAL, 1),
    "ttl-index-old-only": (NO_UPDATE, GLOBAL, TTL_ONLY, "", 1),
    "ttl-index-new-only": (TTL_ONLY, "", NO_UPDATE, GLOBAL, 1),
    "search-index-ttl": (NO_UPDATE, SEARCH, NO_UPDATE, SEARCH, 1),
    "three-versions": ("", "", "", "", 3),
}


def _models(shape: str, old: str, new: str) -> tuple[str, str]:
    old_opts, old_index, new_opts, new_index, versions = SHAPES[shape]
    fill = {"old": old, "new": new, "versions": versions, "old_opts": old_opts,
            "new_opts": new_opts, "old_index": old_index.format(table=old),
            "new_index": new_index.format(table=new)}
    return OLD_PLAIN.format(**fill), NEW_PLAIN.format(**fill)


def _row(model: type, w: int, i: int, n: int):
    return model(device=f"w{w}", seq=i, kind=f"k{n % 3}", n=n)


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_shape_is_rewritten_and_cut_over_with_writers_on_both_models(shape, tmp_path, ots_instance):
    old, new = f"ev_{shape.replace('-', '_')}", f"ev_{shape.replace('-', '_')}_by_seq"
    v1, v2 = _models(shape, old, new)
    sf.fresh_routing()
    client = sf.writer_client(ots_instance)
    sf.project(tmp_path, v1)
    sf.command(tmp_path, ots_instance, "apply", "--yes")
    Event, EventV2 = sf.classes(v1)["Event"], sf.classes(v2)["EventV2"]
    # The old model's writers from the start (the old table has rows before the rewrite is
    # planned), the new model's from `ready` on (until the switch they write the old table).
    writers = sf.Writers(client, [Event, Event], _row, key_of=lambda r: (r.device, r.seq))
    writers.start()
    try:
        writers.more()
        sf.project(tmp_path, v2)
        sf.command(tmp_path, ots_instance, "apply", "--yes", "--workers", "2")
        assert sf.phase(client, new) == "ready"
        more = sf.Writers(client, [EventV2, EventV2], lambda m, w, i, n: _row(m, w + 2, i, n),
                          key_of=lambda r: (r.device, r.seq)).start()
        for step in (["switch", "--lease", "0.5"], ["revert"], ["switch"], ["finish"]):
            writers.more()
            more.more()
            sf.command(tmp_path, ots_instance, "rewrite", *step, new)
    finally:
        acknowledged = sf.stop_all(writers, locals().get("more"))
    assert sf.phase(client, new) == "done"
    final = sf.raw_rows(client, new, ["seq", "device"])
    assert len(acknowledged) == 4 * sf.KEYS_PER_WRITER
    missing = {key: n for key, n in acknowledged.items()
               if final.get((key[1], key[0]), {}).get("n") != n}
    assert not missing, {k: (n, final.get((k[1], k[0]))) for k, n in missing.items()}


# --- the README's example, and the same rewrite without a way back ---------------------------------


def _readme_row(model: type, w: int, i: int, n: int):
    """Row ``i`` of writer ``w``: ts (where the model has it) equals seq, so either model's
    row gives the same key in each table."""
    fields = {"device": f"{model.__name__}-{w}", "seq": i, "region": "eu", "temp": float(n)}
    if "ts" in model.__dict__:
        fields["ts"] = i
    return model(**fields)


def _readme_final(client, acknowledged: dict) -> dict:
    final = sf.raw_rows(client, "readings_by_seq", ["key", "region"])
    return {key: n for key, n in acknowledged.items()
            if final.get((f"{key[0]},{key[1]:08d}", "eu"), {}).get("temp") != float(n)}


def _readme_start(tmp_path, ots_instance, new_code: str):
    old_code, _ = sf.readme_models()
    sf.fresh_routing()
    client = sf.writer_client(ots_instance)
    sf.project(tmp_path, old_code)
    sf.command(tmp_path, ots_instance, "apply", "--yes")
    Reading, ReadingV2 = sf.classes(old_code)["Reading"], sf.classes(new_code)["ReadingV2"]
    row = _readme_row
    key_of = lambda r: (r.device, r.seq)  # noqa: E731
    old_writers = sf.Writers(client, [Reading, Reading], row, key_of).start()
    old_writers.more()
    sf.project(tmp_path, new_code)
    return client, Reading, ReadingV2, row, key_of, old_writers


@pytest.mark.slow
def test_the_readme_example_cuts_over_and_back_with_writers_on_both_models(tmp_path, ots_instance):
    _, new_code = sf.readme_models()
    client, _Reading, ReadingV2, row, key_of, old_writers = _readme_start(tmp_path, ots_instance, new_code)
    try:
        planned = sf.command(tmp_path, ots_instance, "plan")
        assert "revert after switch is not possible" not in planned
        sf.command(tmp_path, ots_instance, "apply", "--yes", "--workers", "2")
        new_writers = sf.Writers(client, [ReadingV2, ReadingV2], row, key_of).start()
        for step in (["switch", "--lease", "0.5"], ["revert"], ["switch"], ["finish"]):
            old_writers.more()
            new_writers.more()
            sf.command(tmp_path, ots_instance, "rewrite", *step, "readings_by_seq")
    finally:
        acknowledged = sf.stop_all(old_writers, locals().get("new_writers"))
    assert len(acknowledged) == 4 * sf.KEYS_PER_WRITER
    assert not _readme_final(client, acknowledged)


@pytest.mark.slow
def test_a_rewrite_that_cannot_go_back_is_said_at_plan_and_switches_only_without_revert(
        tmp_path, ots_instance):
    from tsmigrate.service import Rows, RowValueError

    _, new_code = sf.readme_models()
    new_code = "\n".join(line for line in new_code.splitlines() if not line.strip().startswith("ts ="))
    client, _Reading, ReadingV2, row, key_of, old_writers = _readme_start(tmp_path, ots_instance, new_code)
    try:
        planned = sf.command(tmp_path, ots_instance, "plan")
        assert "revert after switch is not possible" in planned and "'ts'" in planned
        sf.command(tmp_path, ots_instance, "apply", "--yes", "--workers", "2")
        with pytest.raises(RowValueError):  # before the switch its row would go to readings
            Rows(ReadingV2, client).put(row(ReadingV2, 9, 1, 1))
        refused = sf.command(tmp_path, ots_instance, "rewrite", "switch", "readings_by_seq", expect=1)
        assert "revert after switch is not possible" in refused and "--no-revert" in refused
        assert sf.phase(client, "readings_by_seq") == "ready"
        old_writers.more()
        sf.command(tmp_path, ots_instance, "rewrite", "switch", "readings_by_seq", "--no-revert",
                   "--lease", "0.5")
        new_writers = sf.Writers(client, [ReadingV2, ReadingV2], row, key_of).start()
        new_writers.more()
        old_writers.more()
        refused = sf.command(tmp_path, ots_instance, "rewrite", "revert", "readings_by_seq",
                             expect=1)
        assert "revert is not possible" in refused and "'ts'" in refused
        status = sf.command(tmp_path, ots_instance, "rewrite", "status", "readings_by_seq")
        assert "revert: not possible" in status
        new_writers.more()
        sf.command(tmp_path, ots_instance, "rewrite", "finish", "readings_by_seq")
    finally:
        acknowledged = sf.stop_all(old_writers, locals().get("new_writers"))
    assert sf.phase(client, "readings_by_seq") == "done"
    assert not _readme_final(client, acknowledged)
    # The old table was left as it was at the switch: no new-model row went back to it.
    assert not any(device.startswith("ReadingV2") for device, _ in sf.raw_rows(client, "readings",
                                                                               ["device", "ts"]))


@pytest.mark.slow
def test_a_row_reverse_capture_cannot_carry_is_set_aside_named_and_blocks_until_fixed(
        tmp_path, ots_instance):
    import tablestore as ts
    _, new_code = sf.readme_models()
    client, *_, old_writers = _readme_start(tmp_path, ots_instance, new_code)
    old_writers.stop()
    sf.command(tmp_path, ots_instance, "apply", "--yes")
    sf.command(tmp_path, ots_instance, "rewrite", "switch", "readings_by_seq", "--lease", "0.5")
    # A write outside the model API without the old key's ts: it cannot go back to readings.
    bad = [("key", "raw,00000007"), ("region", "eu")]
    client.put_row("readings_by_seq", ts.Row(bad, [("device", "raw"), ("seq", 7)]), ts.Condition("IGNORE"))
    sf.command(tmp_path, ots_instance, "rewrite", "follow", "readings_by_seq", "--for", "1")
    named = "(key='raw,00000007', region='eu')"
    status = sf.command(tmp_path, ots_instance, "rewrite", "status", "readings_by_seq")
    assert "set aside by reverse capture: 1 row(s)" in status and named in status and "'ts'" in status
    as_json = clirun.run_on(tmp_path, ots_instance, "rewrite", "status", "readings_by_seq",
                            "--format", "json")
    data = json.loads(as_json.stdout)
    assert list(data["set_aside"]["reverse_capture"]) == [named] and not data["set_aside"]["capture"]
    assert data["revert"] == {"possible": True, "reason": None}
    for command in ("finish", "revert"):
        refused = sf.command(tmp_path, ots_instance, "rewrite", command, "readings_by_seq", expect=1)
        assert "set aside" in refused and named in refused, refused
    assert sf.phase(client, "readings_by_seq") == "switched"  # no fence left up
    # Fixed (here: deleted) in the table of record, the row leaves the list.
    client.delete_row("readings_by_seq", ts.Row(bad), ts.Condition("IGNORE"))
    sf.command(tmp_path, ots_instance, "rewrite", "finish", "readings_by_seq")
    assert sf.phase(client, "readings_by_seq") == "done"


@pytest.mark.slow
def test_reverse_capture_writes_a_whole_old_row_into_an_old_table_without_update(tmp_path, ots_instance):
    """The old table takes no UpdateRow: reverse capture writes its rows whole, old cells with
    their own timestamps, which its max_time_deviation (a day) would refuse: switch widens it for
    reverse capture, finish puts it back."""
    import tablestore as ts

    from tsmigrate.service import Rows

    old, new = "ev_old_cells", "ev_old_cells_by_seq"
    v1, v2 = _models("ttl-index-old-only", old, new)
    sf.fresh_routing()
    client = sf.writer_client(ots_instance)
    sf.project(tmp_path, v1)
    sf.command(tmp_path, ots_instance, "apply", "--yes")
    ten_days_ago = int(time.time() * 1000) - 10 * 86_400_000
    client.update_table(old, ts.TableOptions(30 * 86400, 1, 30 * 86400, allow_update=False))
    client.put_row(old, ts.Row([("device", "a"), ("seq", 1)], [("kind", "k", ten_days_ago),
                                                             ("n", 1, ten_days_ago)]),
                   ts.Condition("IGNORE"))
    client.update_table(old, ts.TableOptions(30 * 86400, 1, 86400, allow_update=False))
    sf.project(tmp_path, v2)
    sf.command(tmp_path, ots_instance, "apply", "--yes")
    sf.command(tmp_path, ots_instance, "rewrite", "switch", new, "--lease", "0.5")
    EventV2 = sf.classes(v2)["EventV2"]
    Rows(EventV2, client).update({"seq": 1, "device": "a"}, set={"n": 2})  # the new table allows it
    sf.command(tmp_path, ots_instance, "rewrite", "follow", new, "--for", "1")
    status = sf.command(tmp_path, ots_instance, "rewrite", "status", new)
    assert "set aside" not in status, status
    _, row, _ = client.get_row(old, [("device", "a"), ("seq", 1)], max_version=1)
    assert {c[0]: (c[1], c[2]) for c in row.attribute_columns}["kind"] == ("k", ten_days_ago)
    assert {c[0]: c[1] for c in row.attribute_columns}["n"] == 2
    sf.command(tmp_path, ots_instance, "rewrite", "finish", new)
    assert client.describe_table(old).table_options.max_time_deviation == 86400


@pytest.mark.slow
def test_a_row_capture_cannot_carry_refuses_the_switch_before_any_fence(tmp_path, ots_instance):
    """Forward capture's side: a row written to the old table outside the model API without the
    new key's seq is set aside; switch refuses, naming it, with no fence raised, until it is
    fixed."""
    import tablestore as ts

    _, new_code = sf.readme_models()
    client, *_, old_writers = _readme_start(tmp_path, ots_instance, new_code)
    old_writers.stop()
    sf.command(tmp_path, ots_instance, "apply", "--yes")
    bad = [("device", "raw"), ("ts", 7)]
    client.put_row("readings", ts.Row(bad, [("region", "eu")]), ts.Condition("IGNORE"))
    refused = sf.command(tmp_path, ots_instance, "rewrite", "switch", "readings_by_seq", expect=1)
    named = "(device='raw', ts=7)"
    assert "switch refused" in refused and "set aside" in refused and named in refused, refused
    rewrite = machine.load(client, "readings_by_seq")
    assert rewrite.phase == "ready" and rewrite.get("fence") is None  # no fence went up
    status = sf.command(tmp_path, ots_instance, "rewrite", "status", "readings_by_seq")
    assert "set aside by capture: 1 row(s)" in status and named in status
    client.update_row("readings", ts.Row(bad, {"PUT": [("seq", 7)]}), ts.Condition("IGNORE"))  # fixed
    sf.command(tmp_path, ots_instance, "rewrite", "switch", "readings_by_seq", "--lease", "0.5")
    assert sf.phase(client, "readings_by_seq") == "switched"
