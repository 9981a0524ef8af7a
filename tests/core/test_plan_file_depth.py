"""A plan file nested absurdly deep (issue 23, item 7) gets one line naming the file, not the
RecursionError json.loads raises past ~1000 levels."""

from __future__ import annotations

import textwrap
from pathlib import Path

import clirun
import pytest

from tsmigrate.planning.planfile import MAX_NESTING, _nesting


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (tmp_path / "app_models.py").write_text(textwrap.dedent("""
        from tsmigrate import Model, PrimaryKey

        class Order(Model, table="orders"):
            order_id = PrimaryKey(int)
    """))
    return tmp_path


@pytest.mark.parametrize("text", [
    "[" * 200_000,  # the reported file: only opening brackets
    '{"steps": ' + "[" * 5000 + "]" * 5000 + "}",  # well-formed, still far too deep for a plan
])
def test_a_deeply_nested_plan_file_is_refused_in_one_line(project: Path, text: str) -> None:
    (project / "deep.json").write_text(text)
    result = clirun.run(project, "apply", "--plan", "deep.json", "--yes")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    output = result.stdout + result.stderr
    assert "plan file deep.json nests arrays/objects" in output
    assert f"(a plan nests at most {MAX_NESTING})" in output


def test_brackets_inside_strings_do_not_count() -> None:
    assert _nesting('{"a": [1, {"b": "[[[\\\\\\"[{{"}]}') == 3
    assert _nesting('"' + "[" * 1000 + '"') == 0
