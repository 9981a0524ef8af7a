"""Run the official Python SDK's own integration tests against `tsmigrate local serve`.

The tests (github.com/aliyun/aliyun-tablestore-python-sdk, folder `tests/`) were written against
the real service, so their pass rate measures how faithfully the local server behaves. They are
third-party code and are not vendored here: keep a copy outside the repository (a clone of the
SDK's repository, or any folder holding its `tests/` with `tests/lib/`) and point this script at
it with `--tests DIR` or `$TSMIGRATE_SDK_TESTS` (default: `~/.cache/tsmigrate/sdk-tests`).

    python bench/sdk_tests.py [--tests DIR] [--failures] [FILE ...]

FILE names test modules (`row_op_test.py`); without any, every module that talks to a server runs
(`*_test.py` and filter_and_condition_update_unitttest.py; the SDK's unit tests, which need no
server, and the modules of APIs the local server leaves out of scope are skipped: SQL, time
series, global tables).

How the tests are run, and why:

- one `tsmigrate local serve --memory` process on a free port, reached through the tests' own
  `OTS_TEST_*` variables;
- `time.sleep` does nothing: the tests wait (30 to 60 s per setUp) for the service to load
  partitions and build search indexes, which the local server does before it answers;
- `TransactionTable` (PK0 INTEGER, PK1 STRING) is created first: the SDK's transaction tests
  expect it to have been prepared on the instance in advance.

Prints passed / failed / errors / skipped per file and the pass rate (passed over everything
that ran); `--failures` adds the first line of every failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from serve import AK_ID, AK_SECRET, INSTANCE, start_server

DEFAULT_TESTS = Path(os.environ.get("TSMIGRATE_SDK_TESTS", "~/.cache/tsmigrate/sdk-tests")).expanduser()
OUT_OF_SCOPE = {
    "sql_query_test.py": "SQL (out of scope)",
    "timeseries_api_test.py": "time-series tables (out of scope)",
    "timeseries_meta_condition_test.py": "time-series tables (out of scope)",
    "global_table_test.py": "global tables (multi-region)",
    "enum_test.py": "an SDK unit test: it talks to no server",
}

# Named like the SDK's unit tests, but run against a server.
SERVER_UNITTESTS = ("filter_and_condition_update_unitttest.py",)

CONFTEST = '''
"""Written by tsmigrate's bench/sdk_tests.py: see its docstring."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "tests"))
sys.path.insert(0, os.path.dirname(__file__))
time.sleep = lambda seconds: None


def pytest_sessionstart(session):
    from tablestore import OTSClient, TableMeta, TableOptions, ReservedThroughput, CapacityUnit
    client = OTSClient(os.environ["OTS_TEST_ENDPOINT"], os.environ["OTS_TEST_ACCESS_KEY_ID"],
                       os.environ["OTS_TEST_ACCESS_KEY_SECRET"], os.environ["OTS_TEST_INSTANCE"])
    if "TransactionTable" not in client.list_table():
        client.create_table(TableMeta("TransactionTable", [("PK0", "INTEGER"), ("PK1", "STRING")]),
                            TableOptions(), ReservedThroughput(CapacityUnit(0, 0)))
'''


@dataclass
class FileResult:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ran(self) -> int:
        return self.passed + self.failed + self.errors


def _test_files(tests: Path, names: list[str]) -> list[Path]:
    if names:
        missing = [n for n in names if not (tests / n).is_file()]
        if missing:
            raise SystemExit(f"not in {tests}: {', '.join(missing)}")
        return [tests / n for n in names]
    found = [*tests.glob("*_test.py"), *(tests / n for n in SERVER_UNITTESTS if (tests / n).is_file())]
    return sorted(p for p in found if p.name not in OUT_OF_SCOPE)


def _results(junit: Path) -> dict[str, FileResult]:
    results: dict[str, FileResult] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        name = next((m for m in module if m.endswith(("_test", "_unitttest"))), module[0]) + ".py"
        result = results.setdefault(name, FileResult())
        outcome = next(iter(case), None)
        if outcome is None or outcome.tag in ("system-out", "system-err", "properties"):
            result.passed += 1
        elif outcome.tag == "skipped":
            result.skipped += 1
        else:
            if outcome.tag == "failure":
                result.failed += 1
            else:
                result.errors += 1
            message = (outcome.get("message") or "").strip().splitlines()
            result.failures.append(f"{case.get('name')}: {message[0][:200] if message else outcome.tag}")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="test modules to run (default: all in scope)")
    parser.add_argument("--tests", type=Path, default=DEFAULT_TESTS,
                        help="folder holding the SDK's tests/ (default: %(default)s)")
    parser.add_argument("--failures", action="store_true", help="list every failure")
    args = parser.parse_args()

    source = args.tests / "tests"
    if not (source / "lib" / "api_test_base.py").is_file():
        print(f"no SDK tests in {args.tests}: clone github.com/aliyun/aliyun-tablestore-python-sdk "
              "(or copy its tests/ folder) and pass --tests or set $TSMIGRATE_SDK_TESTS",
              file=sys.stderr)
        return 2
    files = _test_files(source, args.files)

    proc, endpoint = start_server("--memory")
    try:
        with tempfile.TemporaryDirectory(prefix="sdk-tests-") as tmp:
            work = Path(tmp)
            shutil.copytree(source, work / "tests")
            (work / "conftest.py").write_text(CONFTEST)
            junit = work / "junit.xml"
            env = {**os.environ, "OTS_TEST_ENDPOINT": endpoint, "OTS_TEST_ACCESS_KEY_ID": AK_ID,
                   "OTS_TEST_ACCESS_KEY_SECRET": AK_SECRET, "OTS_TEST_INSTANCE": INSTANCE}
            subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", tmp,
                 "-o", "python_files=*_test.py", f"--junitxml={junit}",
                 *[str(work / "tests" / f.name) for f in files]],
                cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
            )
            if not junit.is_file():
                print("pytest wrote no report (the test modules could not be collected)", file=sys.stderr)
                return 2
            results = _results(junit)
    finally:
        proc.terminate()
        proc.wait()

    print(f"{'file':38} {'passed':>6} {'failed':>6} {'errors':>6} {'skipped':>7}")
    total = FileResult()
    for name in sorted(results):
        r = results[name]
        print(f"{name:38} {r.passed:6} {r.failed:6} {r.errors:6} {r.skipped:7}")
        total.passed += r.passed
        total.failed += r.failed
        total.errors += r.errors
        total.skipped += r.skipped
    print(f"{'total':38} {total.passed:6} {total.failed:6} {total.errors:6} {total.skipped:7}")
    rate = 100.0 * total.passed / total.ran if total.ran else 0.0
    print(f"pass rate: {total.passed}/{total.ran} = {rate:.1f}%")
    if args.failures:
        for name in sorted(results):
            for line in results[name].failures:
                print(f"FAIL {name}::{line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
