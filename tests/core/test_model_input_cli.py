"""Model files that raise on import or declare wrong types: `tsmigrate validate` and `lint` name
the file, the line and what is wrong, exit 1, and print no traceback."""

from __future__ import annotations

from pathlib import Path

import clirun
import pytest

HEADER = "from tsmigrate import *\nfrom tsmigrate.keys import *\n\n\nclass A(Model, table='a'):\n"
CASES = {
    "order_by": ("    k = PrimaryKey(str)\n    p = AccessPattern(eq=['k'], order_by=5)\n",
                 "AccessPattern order_by must be one column name (a string), got 5"),
    "range": ("    k = PrimaryKey(str)\n    p = AccessPattern(eq=['k'], range=['k', 'x'])\n",
              "AccessPattern range must be one column name (a string), got ['k', 'x']"),
    "eq": ("    k = PrimaryKey(str)\n    p = AccessPattern(eq=[1])\n",
           "AccessPattern eq must list column names (strings), got 1"),
    "hash_length": ("    k = PrimaryKey(str, derive=HashPrefix('x', length='4'))\n",
                    "HashPrefix length must be a whole number, got '4'"),
    "concat_fields": ("    k = PrimaryKey(str, derive=Concat('ab'))\n",
                      "Concat fields must be a list of field names, got the string 'ab'"),
    "concat_pad": ("    k = PrimaryKey(str, derive=Concat(['a', 'b'], pad={'a': 'x'}))\n",
                   "Concat pad must map field names to widths (whole numbers)"),
    "buckets": ("    k = PrimaryKey(int, derive=TimeBucket('x', buckets=2.5))\n",
                "TimeBucket buckets must be a whole number, got 2.5"),
    "raises": ("    k = PrimaryKey(str)\n    raise RuntimeError('no database here')\n",
               "RuntimeError: no database here"),
    "exits": ("    k = PrimaryKey(str)\n    import sys; sys.exit(0)\n", "SystemExit: 0"),
}


@pytest.mark.parametrize("command", ["validate", "lint"])
@pytest.mark.slow
def test_a_bad_model_file_is_an_error_at_its_line(tmp_path: Path, command: str):
    for name, (body, message) in CASES.items():
        project = tmp_path / f"{command}_{name}"
        project.mkdir()
        (project / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
        (project / "app_models.py").write_text(HEADER + body)
        done = clirun.run(project, command)
        assert done.returncode == 1, (name, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, (name, done.stderr)
        assert message in done.stderr, (name, done.stderr)
        # The line of the model file, not of tsmigrate's code that refused it.
        assert f"app_models.py:{HEADER.count(chr(10)) + body.count(chr(10))}" in done.stderr, (
            name, done.stderr)
