"""`tsmigrate apply` end to end, in subprocesses: the embedded instance, plan files, a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TSMIGRATE_", "ALIBABA_"))}
    environ.update(extra or {})
    return environ


def _run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tsmigrate.cli", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=300, env=_env(env), stdin=subprocess.DEVNULL)


def _project(root: Path, tables: int = 2) -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    body = ["from tsmigrate import Column, GlobalIndex, Model, PrimaryKey, SearchField, SearchIndex", ""]
    for i in range(tables):
        body += [
            f"class T{i}(Model, table='t{i}'):",
            "    user_id = PrimaryKey(str)",
            "    seq = PrimaryKey(int)",
            "    status = Column(str, defined=True)",
            f"    t{i}_by_status = GlobalIndex(keys=['status'])",
            "    search = SearchIndex(fields=[SearchField('status', 'keyword')])",
            "",
        ]
    (root / "app_models.py").write_text("\n".join(body))
    return root


def test_fresh_project_plan_apply_plan(tmp_path: Path):
    project = _project(tmp_path)
    first = _run(project, "plan", "--detailed-exitcode")
    assert first.returncode == 2, first.stderr
    assert "create table t0" in first.stdout
    refused = _run(project, "apply")
    assert refused.returncode == 1
    assert "--yes" in refused.stderr
    applied = _run(project, "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    assert "Applied 4 step(s)." in applied.stdout
    again = _run(project, "plan", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "No changes." in again.stdout


def test_plan_file_round_trip_and_tampering(tmp_path: Path):
    project = _project(tmp_path)
    assert _run(project, "plan", "--out", "plan.json").returncode == 0
    text = (project / "plan.json").read_text()
    (project / "edited.json").write_text(text.replace("t0_by_status", "t0_by_other"))
    edited = _run(project, "apply", "--yes", "--plan", "edited.json")
    assert edited.returncode == 1
    assert "edited" in edited.stderr and "Traceback" not in edited.stderr
    applied = _run(project, "apply", "--yes", "--plan", "plan.json")
    assert applied.returncode == 0, applied.stderr


def test_destructive_change_needs_the_flag(tmp_path: Path):
    project = _project(tmp_path, tables=1)
    assert _run(project, "apply", "--yes").returncode == 0
    models = (project / "app_models.py").read_text()
    without_index = models.replace("    t0_by_status = GlobalIndex(keys=['status'])\n", "")
    (project / "app_models.py").write_text(without_index)
    refused = _run(project, "apply", "--yes")
    assert refused.returncode == 1
    assert "--allow-destructive" in refused.stderr
    assert _run(project, "apply", "--yes", "--allow-destructive").returncode == 0
    assert _run(project, "plan", "--detailed-exitcode").returncode == 0


def test_apply_killed_midway_completes_when_run_again(tmp_path: Path):
    """A real server in its own process, slowed down; the apply is killed after a few steps."""
    project = _project(tmp_path, tables=6)
    server = subprocess.Popen(
        [sys.executable, "-m", "tsmigrate.cli", "local", "serve", "--memory", "--port", "0",
         "--latency-ms", "60", "--instance", "kill"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_env(),
    )
    try:
        endpoint = server.stdout.readline().strip()
        assert endpoint.startswith("http://")
        creds = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "local", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "local-secret"}
        target = ["--endpoint", endpoint, "--instance", "kill"]
        victim = subprocess.Popen(
            [sys.executable, "-m", "tsmigrate.cli", "apply", "--yes", *target], cwd=project,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(creds),
        )
        # Wait until some, not all, tables exist, then kill it without a chance to clean up.
        listing = textwrap.dedent(f"""
            import tablestore as ts
            print(len([t for t in ts.OTSClient({endpoint!r}, 'local', 'local-secret', 'kill').list_table()
                       if t.startswith('t')]))
        """)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            count = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True,
                                   env=_env()).stdout.strip()
            if count and int(count) >= 2:
                break
            time.sleep(0.2)
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        partial = _run(project, "plan", "--detailed-exitcode", *target, env=creds)
        assert partial.returncode == 2, partial.stdout + partial.stderr
        rerun = _run(project, "apply", "--yes", *target, env=creds)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert "took over a stale lock" in rerun.stdout
        final = _run(project, "plan", "--detailed-exitcode", *target, env=creds)
        assert final.returncode == 0, final.stdout + final.stderr
    finally:
        server.terminate()
        server.wait(10)


def test_written_models_of_a_live_instance_compile_back_to_it(tmp_path: Path):
    project = _project(tmp_path, tables=2)
    assert _run(project, "apply", "--yes").returncode == 0
    live = _run(project, "inspect", "--format", "json")
    written = _run(project, "inspect", "--write-models", "adopted")
    assert written.returncode == 0, written.stderr
    assert "adopted/t0.py" in written.stdout
    shown = _run(project, "show", "--format", "json", "--models", "adopted")
    assert shown.returncode == 0, shown.stderr
    # Same schema, apart from where the tables were declared.
    adopted, inspected = json.loads(shown.stdout), json.loads(live.stdout)
    assert adopted == inspected
    again = _run(project, "plan", "--detailed-exitcode", "--models", "adopted")
    assert again.returncode == 0, again.stdout
