"""`tsmigrate local serve`: prints the endpoint when ready, serves the SDK, stops on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from tablestore import (
    CapacityUnit,
    OTSClient,
    OTSServiceError,
    ReservedThroughput,
    Row,
    TableMeta,
    TableOptions,
)
from tablestore.retry import NoRetryPolicy


@pytest.mark.slow
def test_serve_prints_endpoint_and_stops_on_sigterm(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cmd = [sys.executable, "-c", "from tsmigrate.cli import main; main()", "local", "serve"]
    cmd += ["--port", "0", "--data", str(tmp_path), "--instance", "dev", "--access-key-id", "me"]
    # Every GetRow fails (and only GetRow): the fault option reaches the server's request path.
    cmd += ["--access-key-secret", "s3cret", "--fault", "capacity@GetRow=1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:")
        client = OTSClient(endpoint, "me", "s3cret", "dev", retry_policy=NoRetryPolicy())
        client.create_table(
            TableMeta("t", [("id", "INTEGER")]), TableOptions(), ReservedThroughput(CapacityUnit())
        )
        assert client.list_table() == ("t",)
        client.put_row("t", Row([("id", 1)], [("v", "x")]))
        with pytest.raises(OTSServiceError) as refused:
            client.get_row("t", [("id", 1)], max_version=1)
        assert (refused.value.http_status, refused.value.code) == (403, "OTSNotEnoughCapacityUnit")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (tmp_path / "tablestore.sqlite3").exists()
    assert "s3cret" not in proc.stderr.read()  # type: ignore[union-attr]


def test_serve_rejects_a_bad_fault_spec() -> None:
    from click.testing import CliRunner

    from tsmigrate.local.cli import local

    result = CliRunner().invoke(local, ["serve", "--fault", "meteor=0.5"])
    assert result.exit_code == 2 and "unknown kind 'meteor'" in result.output
