"""`tsmigrate revision`, `heads`, `merge`, `hash` and `check`, run as a user runs them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from cliproject import project, run

MODELS_ADD_INDEX = """
from tsmigrate import Column, GlobalIndex, Model, PrimaryKey, SearchField, SearchIndex

class T0(Model, table='t0'):
    user_id = PrimaryKey(str)
    seq = PrimaryKey(int)
    status = Column(str, defined=True)
    region = Column(str, defined=True)
    t0_by_status = GlobalIndex(keys=['status'])
    t0_by_region = GlobalIndex(keys=['region'])
    search = SearchIndex(fields=[SearchField('status', 'keyword')])
"""


def _ok(result, code: int = 0):
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result


def _scripts(root: Path) -> list[Path]:
    return sorted((root / "migrations" / "versions").glob("*.py"))


@pytest.fixture
def proj(tmp_path):
    return project(tmp_path, tables=1)


@pytest.mark.slow
def test_autogenerate_then_change_a_model_then_check(proj):
    out = _ok(run(proj, "revision", "-m", "create tables", "--autogenerate")).stdout
    first = _scripts(proj)
    assert len(first) == 1 and re.fullmatch(r"[0-9a-f]{12}_create_tables\.py", first[0].name)
    assert "wrote migrations/versions/" in out and "2 steps from an empty instance" in out
    text = first[0].read_text()
    assert "down_revision = None" in text and "tsmigrate_version = '0.1.0'" in text
    assert "op.create_table(Table(" in text and "op.create_search_index('t0'" in text
    sums = (proj / "migrations" / "tsmigrate.sum").read_text().splitlines()
    assert sums[0].startswith("h1:") and sums[1].startswith(first[0].name + " h1:")
    assert "ok: 1 revision" in _ok(run(proj, "check")).stdout
    assert "nothing written" in _ok(run(proj, "revision", "-m", "again", "--autogenerate")).stdout
    assert len(_scripts(proj)) == 1

    (proj / "app_models.py").write_text(MODELS_ADD_INDEX)
    failed = _ok(run(proj, "check"), 7)
    assert "2 change(s) no revision captures: add defined columns to t0: region STRING; " \
           "create global index t0_by_region on t0 (region)" in failed.stderr
    out = _ok(run(proj, "revision", "-m", "index by region", "--autogenerate")).stdout
    second = next(p for p in _scripts(proj) if p not in first)
    assert f"(parent: {first[0].name[:12]})" in out
    text = second.read_text()
    assert f"down_revision = '{first[0].name[:12]}'" in text
    assert "op.add_defined_columns('t0', DefinedColumn('region', type='STRING'))" in text
    assert "op.drop_index('t0', 't0_by_region')" in text  # the downgrade
    assert "ok: 2 revisions" in _ok(run(proj, "check")).stdout
    heads = _ok(run(proj, "heads")).stdout
    assert heads == f"{second.name[:12]} (head)  index by region\n"


def test_a_plain_revision_and_a_dropped_table_downgrade_that_refuses(proj):
    _ok(run(proj, "revision", "-m", "create tables", "--autogenerate"))
    out = _ok(run(proj, "revision", "-m", "by hand")).stdout
    assert "parent: " in out
    hand = next(p for p in _scripts(proj) if "by_hand" in p.name)
    assert "def upgrade(op):\n    pass" in hand.read_text()
    (proj / "app_models.py").write_text("from tsmigrate import Model, PrimaryKey\n\n"
                                        "class Other(Model, table='other'):\n    id = PrimaryKey(str)\n")
    out = _ok(run(proj, "revision", "-m", "replace t0", "--autogenerate")).stdout
    assert "- drop table t0  [destructive]" in out
    assert "downgrade() refuses until you write what to do instead:\n  - upgrade dropped table t0 " \
           "with its rows: recreating it gives an empty table" in out
    dropped = next(p for p in _scripts(proj) if "replace_t0" in p.name).read_text()
    assert "    op.irreversible('upgrade dropped table t0 with its rows" in dropped
    # check: an irreversible downgrade is a valid one; the drop's lint error (TS-DS101) is on a
    # destructive step, which the deploy acknowledges with --allow-destructive.
    assert "ok: 3 revisions" in _ok(run(proj, "check")).stdout


def test_an_edited_script_fails_check_on_the_sum_until_hash(proj):
    _ok(run(proj, "revision", "-m", "create tables", "--autogenerate"))
    script = _scripts(proj)[0]
    script.write_text(script.read_text() + "\n# edited\n")
    failed = _ok(run(proj, "check"), 4)
    assert f"tsmigrate.sum: {script.name} was edited after the sum was written" in failed.stderr
    refused = _ok(run(proj, "revision", "-m", "next"), 1)
    assert "does not match the scripts" in refused.stderr and len(_scripts(proj)) == 1
    assert "it did not match" in _ok(run(proj, "hash")).stdout
    _ok(run(proj, "check"))


@pytest.mark.slow
def test_parallel_branches_collide_and_merge_resolves_them(proj):
    """Two branches each add a revision on the same head: the sum files differ (git conflicts
    on them); once both scripts are in, check fails on the sum and on two heads; merge fixes it."""
    _ok(run(proj, "revision", "-m", "base", "--autogenerate"))
    base_sum = (proj / "migrations" / "tsmigrate.sum").read_text()
    _ok(run(proj, "revision", "-m", "branch a"))
    sum_a = (proj / "migrations" / "tsmigrate.sum").read_text()
    branch_a = next(p for p in _scripts(proj) if "branch_a" in p.name)
    stash = proj.parent / "stash"
    stash.mkdir()
    shutil.move(branch_a, stash / branch_a.name)
    (proj / "migrations" / "tsmigrate.sum").write_text(base_sum)
    _ok(run(proj, "revision", "-m", "branch b"))
    sum_b = (proj / "migrations" / "tsmigrate.sum").read_text()
    assert sum_a.splitlines()[0] != sum_b.splitlines()[0]  # both change the first line
    shutil.move(stash / branch_a.name, branch_a)  # "git merge": both scripts, b's sum
    failed = _ok(run(proj, "check"), 4)
    assert f"not in the sum (added without `tsmigrate revision`, or on another branch): " \
           f"{branch_a.name}" in failed.stderr
    assert "2 heads" in failed.stderr
    heads = [line.split()[0] for line in _ok(run(proj, "heads")).stdout.splitlines()[:2]]
    assert len(heads) == 2
    refused = _ok(run(proj, "revision", "-m", "more"), 1)  # the sum first: nothing blessed
    assert "tsmigrate.sum does not match the scripts" in refused.stderr
    out = _ok(run(proj, "merge", "-m", "join branches", *heads)).stdout
    assert f"merging {', '.join(sorted(heads))}" in out and "tsmigrate.sum rewritten" in out
    merged = next(p for p in _scripts(proj) if "join_branches" in p.name).read_text()
    assert f"down_revision = {tuple(sorted(heads))!r}" in merged
    _ok(run(proj, "check"))
    assert "(head)" in _ok(run(proj, "heads")).stdout


@pytest.mark.slow
def test_merge_bad_input(proj):
    _ok(run(proj, "revision", "-m", "one"))
    _ok(run(proj, "revision", "-m", "two"))
    scripts = _scripts(proj)
    revs = [p.name[:12] for p in scripts]
    failed = _ok(run(proj, "merge", revs[0]), 1)
    assert "merge joins two or more revisions" in failed.stderr
    failed = _ok(run(proj, "merge", *revs), 1)
    assert "is already an ancestor of" in failed.stderr
    failed = _ok(run(proj, "merge", "nope", revs[0]), 1)
    assert "unknown revision 'nope'" in failed.stderr
    failed = _ok(run(proj, "revision", "-m", "x", "--head", "zz"), 1)
    assert "unknown revision 'zz'" in failed.stderr
    assert _scripts(proj) == scripts


def test_check_fails_on_a_revision_that_does_not_replay(proj):
    _ok(run(proj, "revision", "-m", "create tables", "--autogenerate"))
    _ok(run(proj, "revision", "-m", "broken"))
    broken = next(p for p in _scripts(proj) if "broken" in p.name)
    broken.write_text(broken.read_text().replace(
        "def upgrade(op):\n    pass", "def upgrade(op):\n    op.drop_index('t0', 'no_such_index')"))
    _ok(run(proj, "hash"))
    failed = _ok(run(proj, "check"), 6)
    assert f"revision {broken.name[:12]} ({broken}): table 't0' has no secondary index " \
           "'no_such_index'" in failed.stderr
    # A downgrade that does not give back the parent's schema is caught too.
    broken.write_text(broken.read_text().replace(
        "op.drop_index('t0', 'no_such_index')", "op.update_stream('t0', enabled=True)"))
    _ok(run(proj, "hash"))
    failed = _ok(run(proj, "check"), 6)
    assert "downgrade() does not give back its parent's schema: still to undo: disable the " \
           "stream of t0" in failed.stderr


def test_check_reports_lint_errors_with_exit_3(proj):
    models = (proj / "app_models.py").read_text()
    (proj / "app_models.py").write_text(
        models.replace("from tsmigrate import ", "from tsmigrate import AccessPattern, ")
        + "    by_seq = AccessPattern(eq=['seq'])\n")
    _ok(run(proj, "revision", "-m", "create tables", "--autogenerate"))
    failed = _ok(run(proj, "check"), 3)
    assert "lint TS-AP501 (models, table t0)" in failed.stderr


@pytest.mark.parametrize("setup, args, expected", [
    ("", ["revision", "-m", "x", "--against", "dev"], "--against compares the models with a live"),
    ("", ["revision", "-m", "  "], "-m/--message must say what the revision does"),
    ('migrations = "no_such_pkg_q:migrations"\n', ["heads"],
     "cannot import package 'no_such_pkg_q'"),
    ("", ["revision", "-m", "x", "--autogenerate", "--against", "nowhere"], "unknown target 'nowhere'"),
])
def test_bad_input_is_one_clear_message(proj, setup, args, expected):
    if setup:
        with (proj / "pyproject.toml").open("a") as f:
            f.write(setup)
    failed = _ok(run(proj, *args), 1)
    assert expected in failed.stderr
    assert not (proj / "migrations" / "versions").exists() or not _scripts(proj)


def test_a_script_that_fails_to_import_is_named_by_every_command(proj):
    _ok(run(proj, "revision", "-m", "one"))
    script = _scripts(proj)[0]
    script.write_text("import no_such_module_qq\n" + script.read_text())
    for command in (["check"], ["heads"], ["revision", "-m", "two"], ["merge", "a", "b"]):
        failed = _ok(run(proj, *command), 1)
        assert f"revision script {script}:1 fails to import: ModuleNotFoundError" in failed.stderr


def test_the_projects_template_wins(proj):
    (proj / "migrations").mkdir()
    (proj / "migrations" / "script.py.j2").write_text(
        '# house style\n{% for line in imports %}{{ line }}\n{% endfor %}revision = {{ revision|pyrepr }}\n'
        "down_revision = {{ down_revision }}\n\ndef upgrade(op):\n{{ upgrade }}\n\n"
        "def downgrade(op):\n{{ downgrade }}\n")
    _ok(run(proj, "revision", "-m", "create", "--autogenerate"))
    assert _scripts(proj)[0].read_text().startswith("# house style\n")
    _ok(run(proj, "check"))
    # A template that writes no revision is refused, and nothing is kept.
    (proj / "migrations" / "script.py.j2").write_text("def upgrade(op): pass\n")
    failed = _ok(run(proj, "revision", "-m", "again"), 1)
    assert "the new revision script was not kept" in failed.stderr and len(_scripts(proj)) == 1


def test_autogenerate_against_a_live_instance(proj, target):
    endpoint, instance = target[1], target[3]
    with (proj / "pyproject.toml").open("a") as f:
        f.write(f'[tool.tsmigrate.targets.dev]\nendpoint = "{endpoint}"\ninstance = "{instance}"\n')
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "local", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "local-secret"}
    _ok(run(proj, "apply", "--target", "dev", "--yes", extra_env=env))
    (proj / "app_models.py").write_text(MODELS_ADD_INDEX)
    out = _ok(run(proj, "revision", "-m", "region", "--autogenerate", "--against", "dev",
                  extra_env=env)).stdout
    assert "2 steps from dev (" in out
    text = _scripts(proj)[0].read_text()
    # The live instance already has t0, so only the change is written (no create_table).
    assert "op.create_table" not in text and "op.create_index('t0', SecondaryIndex(" in text


def test_a_package_resource_holds_the_scripts(proj):
    package = proj / "billing_schema_cli"
    (package / "migrations").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    with (proj / "pyproject.toml").open("a") as f:
        f.write('migrations = "billing_schema_cli:migrations"\n')
    out = _ok(run(proj, "revision", "-m", "create tables", "--autogenerate")).stdout
    assert "wrote billing_schema_cli/migrations/versions/" in out
    assert (package / "migrations" / "tsmigrate.sum").is_file()
    assert "ok: 1 revision" in _ok(run(proj, "check")).stdout


def test_autogenerate_against_the_embedded_instance(proj):
    _ok(run(proj, "apply", "--yes"))
    assert "nothing written" in _ok(run(proj, "revision", "-m", "x", "--autogenerate",
                                        "--against", "local")).stdout
    (proj / "app_models.py").write_text(MODELS_ADD_INDEX)
    out = _ok(run(proj, "revision", "-m", "x", "--autogenerate", "--against", "local")).stdout
    assert "2 steps from embedded local instance" in out


@pytest.mark.slow
def test_history_lists_the_revisions_newest_first(proj):
    assert "no revisions yet" in _ok(run(proj, "history", "--revisions")).stdout
    _ok(run(proj, "revision", "-m", "base", "--autogenerate"))
    base = _scripts(proj)[0].name[:12]
    _ok(run(proj, "revision", "-m", "branch a"))
    _ok(run(proj, "revision", "-m", "branch b", "--head", base))
    a, b = (next(p.name[:12] for p in _scripts(proj) if name in p.name) for name in ("branch_a", "branch_b"))
    _ok(run(proj, "merge", "-m", "join", a, b))
    merge = next(p.name[:12] for p in _scripts(proj) if "join" in p.name)
    lines = _ok(run(proj, "history", "--revisions")).stdout.splitlines()
    assert lines[0] == f"{', '.join(sorted([a, b]))} -> {merge} (head, merge)  join"
    assert set(lines[1:3]) == {f"{base} -> {a}  branch a", f"{base} -> {b}  branch b"}
    assert lines[3] == f"<base> -> {base}  base"
    limited = _ok(run(proj, "history", "--revisions", "--limit", "1")).stdout.splitlines()
    assert limited == [lines[0], "(the 1 newest of 4 revisions; --limit N for more)"]
    data = json.loads(_ok(run(proj, "history", "--revisions", "--format", "json")).stdout)
    assert len(data) == 4 and data[0]["revision"] == merge and data[0]["head"] and data[-1]["parents"] == []


@pytest.mark.slow
def test_merge_warns_when_the_branches_do_not_replay_together(proj):
    _ok(run(proj, "revision", "-m", "base"))
    base = _scripts(proj)[0].name[:12]
    for name in ("left", "right"):
        _ok(run(proj, "revision", "-m", name, "--head", base))
        script = next(p for p in _scripts(proj) if name in p.name)
        script.write_text("from tsmigrate.schema import PrimaryKeyColumn, Table\n" + script.read_text()
                          .replace("def upgrade(op):\n    pass",
                                   "def upgrade(op):\n    op.create_table(Table('x', "
                                   "[PrimaryKeyColumn('id', 'STRING')]))"))
        _ok(run(proj, "hash"))
    heads = [p.name[:12] for p in _scripts(proj) if "left" in p.name or "right" in p.name]
    result = _ok(run(proj, "merge", *heads))
    assert "the merged branches do not replay together" in result.stderr
    assert "table 'x' already exists at this point of the chain" in result.stderr
    failed = _ok(run(proj, "check"), 6)
    assert "table 'x' already exists" in failed.stderr


def test_a_sum_file_with_conflict_markers_fails_check_on_the_sum(proj):
    _ok(run(proj, "revision", "-m", "one", "--autogenerate"))
    path = proj / "migrations" / "tsmigrate.sum"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(["<<<<<<< HEAD", *lines, "=======", ">>>>>>> other"]) + "\n")
    failed = _ok(run(proj, "check"), 4)
    assert "is not a sum file (its first line must be h1:...)" in failed.stderr
    _ok(run(proj, "hash"))
    _ok(run(proj, "check"))


FAMILY_MODELS = """
from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.schema.families import Monthly

class Plain(Model, table='plain'):
    id = PrimaryKey(str)

class Snap(Model, table='snaps', family=Monthly('captured_at', ahead=1, retain=3, archive='unused')):
    keyword = PrimaryKey(str)
    captured_at = PrimaryKey(int)
    rank = Column(int)
"""


def test_table_families_stay_out_of_revisions(proj):
    (proj / "app_models.py").write_text(FAMILY_MODELS)
    out = _ok(run(proj, "revision", "-m", "first", "--autogenerate")).stdout
    assert "note: table family snaps: its month tables are planned by date" in out
    assert "1 step from an empty instance" in out and "create table plain" in out
    text = _scripts(proj)[0].read_text()
    assert "snaps" not in text
    # A month table a revision creates by hand is not "a change no revision captures" either.
    _ok(run(proj, "revision", "-m", "month"))
    month = next(p for p in _scripts(proj) if "month" in p.name)
    month.write_text("from tsmigrate.schema import PrimaryKeyColumn, Table\n" + month.read_text().replace(
        "def upgrade(op):\n    pass",
        "def upgrade(op):\n    op.create_table(Table('snaps_202601', [PrimaryKeyColumn('keyword', 'STRING'), "
        "PrimaryKeyColumn('captured_at', 'INTEGER')]))").replace(
        "def downgrade(op):\n    pass", "def downgrade(op):\n    op.drop_table('snaps_202601')"))
    _ok(run(proj, "hash"))
    assert "ok: 2 revisions" in _ok(run(proj, "check")).stdout


def test_check_as_json(proj):
    _ok(run(proj, "revision", "-m", "one", "--autogenerate"))
    data = json.loads(_ok(run(proj, "check", "--format", "json")).stdout)
    assert data == {"ok": True, "exit_code": 0, "revisions": 1, "heads": [_scripts(proj)[0].name[:12]],
                    "failures": []}
    script = _scripts(proj)[0]
    script.write_text(script.read_text() + "# [bold]edited[/bold]\n")
    (proj / "app_models.py").write_text(MODELS_ADD_INDEX)
    result = _ok(run(proj, "check", "--format", "json"), 4)
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["exit_code"] == 4
    assert [f["check"] for f in data["failures"]] == ["sum", "uncaptured"]
    assert data["failures"][1]["exit_code"] == 7
