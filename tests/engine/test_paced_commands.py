"""plan, apply and inspect against a server that allows 10 table operations per second, run as
the user runs them, with the SDK's retries off: a single throttled call fails the command instead
of hiding behind a retry."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import tablestore
from cliproject import PacingClock
from cliproject import project as make_project
from cliproject import run as run_cli
from tablestore.retry import NoRetryPolicy

from tsmigrate.local.server import TABLE_OPS_WINDOW_S

TABLES = 12  # more than the limit: ListTable + 12 DescribeTable cannot fit one second unpaced


@pytest.mark.slow
def test_plan_apply_inspect_stay_within_the_table_operation_limit(
    tmp_path: Path, ots_instance, ots_server_options, monkeypatch
):
    ots_server_options.table_ops_per_s = 10
    # The server's own count of throttled calls, so that a retry inside tsmigrate (the state
    # table's creation retries by its own policy) cannot hide one either.
    server, throttled = ots_instance.server, []
    admit = server._admit

    def counting_admit(api: str, instance: str, now: float) -> None:
        try:
            admit(api, instance, now)
        except Exception as exc:
            if instance == ots_instance.instance and "Too frequent" in str(exc):
                throttled.append(api)
            raise

    monkeypatch.setattr(server, "_admit", counting_admit)
    # The CLI exactly as installed, except that every OTSClient it makes has the SDK's retries off.
    make = tablestore.OTSClient.__init__

    def no_retry(self, *args, **kwargs):
        kwargs["retry_policy"] = NoRetryPolicy()
        make(self, *args, **kwargs)

    monkeypatch.setattr(tablestore.OTSClient, "__init__", no_retry)
    # The pacer's waits pass on its clock and the server's at once, not in real time.
    PacingClock(server).install(monkeypatch)
    project = make_project(tmp_path, tables=TABLES)
    environ = {"ALIBABA_CLOUD_ACCESS_KEY_ID": ots_instance.access_key_id,
               "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ots_instance.access_key_secret}
    target = ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]

    def run(*args: str) -> subprocess.CompletedProcess:
        # Each command paces its own calls; the one before may have used the last second's
        # budget. The server's clock moves on by its whole rate window instead of the test
        # sleeping through it: to the server, the earlier calls are then a window old.
        server.clock_offset += TABLE_OPS_WINDOW_S
        done = run_cli(project, *args, *target, extra_env=environ)
        assert throttled == [], f"{args[0]}: the server throttled {throttled}"
        assert "Too frequent table operations" not in done.stdout + done.stderr
        return done

    applied = run("apply", "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert f"Applied {2 * TABLES} step(s)." in applied.stdout
    planned = run("plan", "--detailed-exitcode")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "No changes." in planned.stdout
    inspected = run("inspect", "--format", "json")
    assert inspected.returncode == 0, inspected.stderr
    tables = json.loads(inspected.stdout)["tables"]
    assert sorted(t["name"] for t in tables) == sorted(f"t{i}" for i in range(TABLES))
