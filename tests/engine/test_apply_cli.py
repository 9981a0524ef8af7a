"""`tsmigrate apply` end to end, as the user runs it: the embedded instance, plan files, a kill
(the one test whose apply runs in a process of its own, to be SIGKILLed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cliproject import kill_apply_midway, run
from cliproject import project as make_project


def test_fresh_project_plan_apply_plan(tmp_path: Path):
    project = make_project(tmp_path)
    first = run(project, "plan", "--detailed-exitcode")
    assert first.returncode == 2, first.stderr
    assert "create table t0" in first.stdout
    refused = run(project, "apply")
    assert refused.returncode == 1
    assert "--yes" in refused.stderr
    applied = run(project, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    assert "Applied 4 step(s)." in applied.stdout
    again = run(project, "plan", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "No changes." in again.stdout


def test_plan_file_round_trip_and_tampering(tmp_path: Path):
    project = make_project(tmp_path)
    assert run(project, "plan", "--out", "plan.json").returncode == 0
    text = (project / "plan.json").read_text()
    (project / "edited.json").write_text(text.replace("t0_by_status", "t0_by_other"))
    edited = run(project, "apply", "--yes", "--plan", "edited.json")
    assert edited.returncode == 1
    assert "edited" in edited.stderr and "Traceback" not in edited.stderr
    applied = run(project, "apply", "--yes", "--plan", "plan.json")
    assert applied.returncode == 0, applied.stderr


def test_destructive_change_needs_the_flag(tmp_path: Path):
    project = make_project(tmp_path, tables=1)
    assert run(project, "apply", "--yes").returncode == 0
    models = (project / "app_models.py").read_text()
    without_index = models.replace("    t0_by_status = GlobalIndex(keys=['status'])\n", "")
    (project / "app_models.py").write_text(without_index)
    refused = run(project, "apply", "--yes")
    assert refused.returncode == 1
    assert "--allow-destructive" in refused.stderr
    assert run(project, "apply", "--yes", "--allow-destructive").returncode == 0
    assert run(project, "plan", "--detailed-exitcode").returncode == 0


@pytest.mark.slow
def test_apply_killed_midway_completes_when_run_again(tmp_path: Path, ots_instance, monkeypatch):
    """The apply in its own process, SIGKILLed while a table is being created after two others
    were; the rerun takes over its lock and finishes."""
    project = make_project(tmp_path, tables=6)
    creds = {"ALIBABA_CLOUD_ACCESS_KEY_ID": ots_instance.access_key_id,
             "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ots_instance.access_key_secret}
    target = ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]
    kill_apply_midway(project, ots_instance, monkeypatch, 6, creds)
    partial = run(project, "plan", "--detailed-exitcode", *target, extra_env=creds)
    assert partial.returncode == 2, partial.stdout + partial.stderr
    rerun = run(project, "apply", "--yes", *target, extra_env=creds)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "took over a stale lock" in rerun.stdout
    final = run(project, "plan", "--detailed-exitcode", *target, extra_env=creds)
    assert final.returncode == 0, final.stdout + final.stderr


@pytest.mark.slow
def test_written_models_of_a_live_instance_compile_back_to_it(tmp_path: Path):
    project = make_project(tmp_path, tables=2)
    applied = run(project, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    live = run(project, "inspect", "--format", "json")
    assert live.returncode == 0, live.stderr
    written = run(project, "inspect", "--write-models", "adopted")
    assert written.returncode == 0, written.stderr
    assert "adopted/t0.py" in written.stdout
    shown = run(project, "show", "--format", "json", "--models", "adopted")
    assert shown.returncode == 0, shown.stderr
    # Same schema, apart from where the tables were declared.
    adopted, inspected = json.loads(shown.stdout), json.loads(live.stdout)
    assert adopted == inspected
    again = run(project, "plan", "--detailed-exitcode", "--models", "adopted")
    assert again.returncode == 0, again.stdout


@pytest.mark.slow
def test_a_malformed_plan_file_is_named_with_what_is_wrong(tmp_path: Path):
    project = make_project(tmp_path, tables=1)
    planned = run(project, "plan", "--out", "good.json")
    assert planned.returncode == 0, planned.stderr
    good = json.loads((project / "good.json").read_text())

    def variant(change) -> str:
        document = json.loads(json.dumps(good))
        change(document)
        return json.dumps(document)

    cases = {
        "array.json": ("[]", "holds an array, not a plan"),
        "null.json": ("null", "holds null, not a plan"),
        "text.json": ('{"format": 1,', "is not JSON"),
        "binary.json": (b"\xff\xfe\x00plan", "is not text"),
        "empty.json": ("{}", "checksum is missing"),
        "types.json": (variant(lambda d: d.update(format="1", steps={})),
                       "format must be a whole number, not a string"),
        "steps.json": (variant(lambda d: d.update(steps={})), "steps must be an array, not an object"),
        "step.json": (variant(lambda d: d["steps"].append("drop everything")),
                      "steps[2] must be an object, not a string"),
        "kind.json": (variant(lambda d: d["steps"][0].update(kind="rename_table")),
                      "steps[0].kind 'rename_table' is not a step kind"),
        "args.json": (variant(lambda d: d["steps"][0].update(args={"table": "t0", "speed": 3})),
                      "steps[0].args do not fit a create_table step (missing definition; unknown speed)"),
        "table.json": (variant(lambda d: d["steps"][0]["args"].update(table=7)),
                       "steps[0].args.table must be a string, not a number"),
        "fingerprint.json": (variant(lambda d: d.update(source_fingerprint="sha1:abc")),
                             "source_fingerprint is not a fingerprint"),
        "options.json": (variant(lambda d: d.pop("options")), "options is missing"),
        "prune.json": (variant(lambda d: d["options"].update(prune="yes")),
                       "options.prune must be true or false, not a string"),
        "risk.json": (variant(lambda d: d["steps"][0].update(risk="harmless")),
                      "steps[0].risk 'harmless' is not one of safe, data-copy, destructive"),
    }
    for name, (content, message) in cases.items():
        path = project / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        done = run(project, "apply", "--plan", name, "--yes")
        assert done.returncode == 1, (name, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, (name, done.stderr)
        assert f"plan file {name}" in done.stderr, (name, done.stderr)
        assert message in done.stderr, (name, done.stderr)
    missing = run(project, "apply", "--plan", "nowhere.json", "--yes")
    assert missing.returncode == 1, missing.stderr
    assert "cannot read plan file nowhere.json" in missing.stderr
    # Nothing was applied by any of them.
    assert run(project, "plan", "--detailed-exitcode").returncode == 2


@pytest.mark.slow
def test_a_plan_file_carries_prune(tmp_path: Path):
    project = make_project(tmp_path, tables=2)
    applied = run(project, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    models = (project / "app_models.py").read_text()
    (project / "app_models.py").write_text(models[: models.index("class T1")])

    plain = run(project, "plan", "--out", "plain.json")
    assert plain.returncode == 0, plain.stderr
    conflict = run(project, "apply", "--plan", "plain.json", "--prune", "--yes", "--allow-destructive")
    assert conflict.returncode == 1
    assert "--prune conflicts with the plan file" in conflict.stderr

    pruning = run(project, "plan", "--prune", "--out", "prune.json")
    assert pruning.returncode == 0, pruning.stderr
    assert json.loads((project / "prune.json").read_text())["options"] == {"prune": True}
    done = run(project, "apply", "--plan", "prune.json", "--yes", "--allow-destructive")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "drop table t1" in done.stdout
    inspected = run(project, "inspect", "--format", "json")
    assert inspected.returncode == 0, inspected.stderr
    assert [t["name"] for t in json.loads(inspected.stdout)["tables"]] == ["t0"]
