"""Issue 38: what a newcomer runs into, at the command they run (the CLI in process,
``clirun.run``, against the local server): each mistake is a clear error naming its cause and
the fix, exit non-zero, no traceback."""

from __future__ import annotations

from pathlib import Path

import clirun
import pytest

from tsmigrate.instance import retry
from tsmigrate.local.testing import local_tablestore

MODELS = """from tsmigrate import *


class Event(Model, table="events"{options}):
    id = PrimaryKey(str)
{fields}"""


def _project(root: Path, options: str = "", fields: str = "") -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(MODELS.format(options=options, fields=fields))
    return root


def _run(project: Path, *args: str, env: dict[str, str] | None = None):
    result = clirun.run(project, *args, extra_env=env)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _exported(output: str) -> dict[str, str]:
    """What `export $(tsmigrate local endpoint)` puts in the environment."""
    return dict(line.split("=", 1) for line in output.split())


# --- item 1: `export $(tsmigrate local endpoint)`, then any command ------------------------------


def test_commands_after_exporting_local_endpoint_reach_that_server(tmp_path: Path) -> None:
    project = _project(tmp_path)
    data = project / ".tsmigrate" / "local"
    with local_tablestore(memory=False, data_dir=str(data)) as server:
        shown = _run(project, "local", "endpoint")
        assert shown.returncode == 0, shown.stderr
        env = _exported(shown.stdout)
        assert env["TSMIGRATE_ENDPOINT"] == server.endpoint
        planned = _run(project, "plan", env=env)
        assert planned.returncode == 0, planned.stderr
        assert "create table events" in planned.stdout
        assert f"target: {server.endpoint} (instance 'local', from TSMIGRATE_ENDPOINT" in planned.stdout
        status = _run(project, "status", env=env)
        assert status.returncode == 0, status.stderr
        assert "lock:       free" in status.stdout
        # Another instance's keys in the environment do not get in the way: the server's
        # built-in key is what it takes, as for the embedded instance joining it.
        other = {**env, "ALIBABA_CLOUD_ACCESS_KEY_ID": "prod-key", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "x"}
        assert _run(project, "plan", env=other).returncode == 0
    # The variables outlive the server: the error names them and the way back.
    gone = _run(project, "plan", env=env)
    assert gone.returncode == 1
    assert (f"no credentials for {env['TSMIGRATE_ENDPOINT']} (instance 'local', from "
            "TSMIGRATE_ENDPOINT/TSMIGRATE_INSTANCE)") in gone.stderr
    assert "unset TSMIGRATE_ENDPOINT and TSMIGRATE_INSTANCE" in gone.stderr


def test_an_exported_endpoint_of_a_server_with_its_own_key_needs_that_key(tmp_path: Path) -> None:
    project = _project(tmp_path)
    data = project / ".tsmigrate" / "local"
    with local_tablestore(memory=False, data_dir=str(data), access_key_id="team",
                          access_key_secret="team-secret") as server:
        env = _exported(_run(project, "local", "endpoint").stdout)
        refused = _run(project, "plan", env=env)
        assert refused.returncode == 1
        assert "uses its own access key ('team')" in refused.stderr
        assert "ALIBABA_CLOUD_ACCESS_KEY_ID" in refused.stderr
        keyed = {**env, "ALIBABA_CLOUD_ACCESS_KEY_ID": "team",
                 "ALIBABA_CLOUD_ACCESS_KEY_SECRET": server.access_key_secret}
        assert _run(project, "plan", env=keyed).returncode == 0


# --- item 2: an endpoint nothing listens on ------------------------------------------------------




def test_a_refused_endpoint_is_named_with_what_to_check(tmp_path: Path, refused_endpoint: str,
                                                         monkeypatch) -> None:
    monkeypatch.setattr(retry.time, "sleep", lambda s: None)  # the first-contact retries' waits
    project = _project(tmp_path)
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "id", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret"}
    done = _run(project, "plan", "--endpoint", refused_endpoint, "--instance", "x", env=env)
    assert done.returncode == 1
    address = refused_endpoint.removeprefix("http://")
    assert done.stderr.startswith(
        f"error: cannot reach {refused_endpoint} (instance 'x'): cannot connect: connection "
        f"refused by {address}; check the endpoint's host and port, and that the server is "
        "running there"), done.stderr
    for internal in ("command line", "HTTPConnectionPool", "Max retries", "NewConnectionError",
                     "urllib3", "Errno"):
        assert internal not in done.stderr


def test_no_credentials_names_the_endpoint(tmp_path: Path, refused_endpoint: str) -> None:
    done = _run(_project(tmp_path), "plan", "--endpoint", refused_endpoint, "--instance", "x")
    assert done.returncode == 1
    assert f"no credentials for {refused_endpoint} (instance 'x'): set ALIBABA_CLOUD_ACCESS_KEY_ID" \
        in done.stderr


# --- item 3: misspelt model options and keywords -------------------------------------------------


MISTAKES = {
    "max_version": (", max_version=2", "",
                    ["unknown model option 'max_version' [model.option]",
                     "fix: did you mean 'max_versions'?"]),
    "tll": (', tll="30d"', "", ["unknown model option 'tll'", "fix: did you mean 'ttl'?"]),
    "defind": ("", "    payload = Column(str, defind=True)\n",
               ["app_models.Event (table 'events'), payload: Column() has no keyword 'defind' "
                "(", "app_models.py:6) [model.keyword]",
                "fix: did you mean 'defined'? known: type, defined, name, scale"]),
    "includ": ("", "    payload = Column(str, defined=True)\n"
                   "    by_payload = GlobalIndex(keys=['payload'], includ=['x'])\n",
               ["by_payload: GlobalIndex() has no keyword 'includ'", "did you mean 'include'?"]),
    "sortable": ("", "    s = SearchIndex([SearchField('id', 'keyword', sortable=True)])\n",
                 ["search index s: SearchField() has no keyword 'sortable'",
                  "did you mean 'sort'?"]),
    "ttl": (', ttl="30days"', "",
            ["ttl: '30days' is not a duration",
             "fix: did you mean ttl='30d'? write ttl= as a number with a unit ('30d', '12h', "
             "'30m', '45s', '2w') or a whole number of seconds (2592000), or None for no expiry"]),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_misspelt_model_option_says_what_was_meant(tmp_path: Path, mistake: str) -> None:
    options, fields, expected = MISTAKES[mistake]
    done = _run(_project(tmp_path, options, fields), "plan")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 schema problem" in done.stderr, done.stderr
    for text in expected:
        assert text in done.stderr, (text, done.stderr)
    assert "cannot import" not in done.stderr and "TypeError" not in done.stderr


# --- item 6: a bench talks to its own server, whatever keys the environment holds -----------------


@pytest.mark.slow  # a bench process with its server process and a rewrite's workers: about 4 s
def test_a_bench_uses_its_own_servers_keys_not_the_environments() -> None:
    import os
    import subprocess
    import sys

    bench = Path(__file__).resolve().parents[2] / "bench" / "model_api.py"
    others = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "wrong", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "wrong",
              "ALIBABA_CLOUD_SECURITY_TOKEN": "wrong", "TSMIGRATE_ENDPOINT": "http://127.0.0.1:9",
              "TSMIGRATE_INSTANCE": "elsewhere"}
    done = subprocess.run([sys.executable, str(bench), "--rows", "10", "--rounds", "1"],
                          env={**os.environ, **others}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "routing_batch=" in done.stdout and "Traceback" not in done.stderr
