"""bench/sdk_tests.py, run as a user runs it, on a stand-in for the SDK's tests folder (its layout
and conventions: `tests/lib/api_test_base.py`, `OTS_TEST_*` variables, `*_test.py` modules),
against a real `tsmigrate local serve`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BASE = '''
import os
import unittest
from tablestore import OTSClient


class APITestBase(unittest.TestCase):
    def setUp(self):
        env = os.environ
        self.client_test = OTSClient(env["OTS_TEST_ENDPOINT"], env["OTS_TEST_ACCESS_KEY_ID"],
                                     env["OTS_TEST_ACCESS_KEY_SECRET"], env["OTS_TEST_INSTANCE"])
'''
MODULE = '''
import time
import unittest
from lib.api_test_base import APITestBase


class ServerTest(APITestBase):
    def test_transaction_table_was_prepared(self):
        time.sleep(3600)  # the runner skips waits
        self.assertIn("TransactionTable", self.client_test.list_table())

    def test_a_failure_is_counted(self):
        self.assertEqual(self.client_test.list_table(), [])

    @unittest.skip("not here")
    def test_skipped(self):
        pass
'''


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The runner as a user starts it (its server and its pytest are processes of their own).

    Its pytest loads no plugins from entry points: in this virtualenv they are the test tools'
    (hypothesis alone costs a second or more to load), none of which the SDK's tests use."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, str(REPO / "bench" / "sdk_tests.py"), *args],
                          capture_output=True, text=True, timeout=600, check=False, env=env)


@pytest.mark.slow  # three interpreters: the runner, its `tsmigrate local serve` and its pytest
def test_it_prints_every_file_and_the_pass_rate(tmp_path: Path) -> None:
    lib = tmp_path / "tests" / "lib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "api_test_base.py").write_text(BASE)
    (tmp_path / "tests" / "server_test.py").write_text(MODULE)
    (tmp_path / "tests" / "sql_query_test.py").write_text("raise SystemExit('out of scope: never run')")

    result = run("--tests", str(tmp_path), "--failures")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["server_test.py", "1", "1", "0", "1"]
    assert "pass rate: 1/2 = 50.0%" in lines
    assert any(line.startswith("FAIL server_test.py::test_a_failure_is_counted") for line in lines)
    assert "sql_query_test.py" not in result.stdout


def test_without_the_sdk_tests_it_says_where_to_get_them(tmp_path: Path) -> None:
    result = run("--tests", str(tmp_path))
    assert result.returncode == 2
    assert "aliyun-tablestore-python-sdk" in result.stderr and str(tmp_path) in result.stderr
