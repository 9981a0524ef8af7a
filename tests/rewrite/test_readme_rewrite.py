"""The README's rewrite example, copied from the README, plans a rewrite as the README says."""

import re
import subprocess
from pathlib import Path

import clirun

README = Path(__file__).resolve().parents[2] / "README.md"

OLD = '''
from tsmigrate import Column, Model, PrimaryKey


class Reading(Model, table="readings", max_versions=3):
    device = PrimaryKey(str)
    ts = PrimaryKey(int)
    region = Column(str)
    seq = Column(int)
'''


def _readme_example() -> str:
    section = README.read_text().split("### Changing a primary key: the rewrite", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_rewrite_example_validates_and_plans_a_rewrite(tmp_path):
    example = _readme_example()
    assert "class ReadingV2" in example
    # The new model alone: replaces= names a table no model declares any more.
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["new"]\n')
    (tmp_path / "old.py").write_text(OLD)
    (tmp_path / "new.py").write_text(example)

    def run(*args: str) -> subprocess.CompletedProcess:
        return clirun.run(tmp_path, *args)  # no TSMIGRATE_ variable: the embedded instance

    validated = run("validate")
    assert validated.returncode == 0, validated.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["old"]\n')
    assert run("apply", "--yes").returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["new"]\n')
    planned = run("plan")
    assert planned.returncode == 0, planned.stderr
    assert "rewrite readings into readings_by_seq  [data-copy]" in planned.stdout
    assert "(key STRING, region STRING)" in planned.stdout
