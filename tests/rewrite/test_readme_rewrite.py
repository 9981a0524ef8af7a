"""The README's rewrite example, copied from the README, plans a rewrite as the README says."""

import subprocess

import clirun
from shape_flow import readme_models


def test_the_readme_rewrite_example_validates_and_plans_a_rewrite(tmp_path):
    OLD, example = readme_models()
    assert "class Reading(" in OLD
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
