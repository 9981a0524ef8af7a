"""Loading revision scripts from a directory or a package resource, and their errors."""

from __future__ import annotations

import sys

import pytest
from scriptdir import write_script

from tsmigrate.contract.functions import script_module_name
from tsmigrate.versions.errors import (
    DuplicateRevisionError,
    MissingParentError,
    ScriptImportError,
)
from tsmigrate.versions.scripts import ScriptDirectory, load_callable


def test_loads_a_directory_in_graph_order(tmp_path):
    migrations = tmp_path / "migrations"
    write_script(migrations, "bbb222", "aaa111", message="second")
    write_script(migrations, "aaa111", None, message="first")
    write_script(migrations, "ccc333", ("bbb222",), message="third")
    (migrations / "versions" / "__init__.py").write_text("")
    (migrations / "versions" / "notes.txt").write_text("not a script")
    directory = ScriptDirectory.load("migrations", tmp_path)
    assert [s.revision for s in directory.in_order()] == ["aaa111", "bbb222", "ccc333"]
    first = directory.get("aaa")
    assert (first.message, first.down_revisions, first.tsmigrate_version) == ("first", (), "0.1.0")
    assert directory.get("bbb").parents == ("aaa111",)
    assert first.path == str(migrations / "versions" / "aaa111_first.py")
    assert directory.location.writable() == migrations.resolve()


def test_an_empty_or_missing_versions_folder_has_no_revisions(tmp_path):
    directory = ScriptDirectory.load("migrations", tmp_path)
    assert directory.scripts == {} and directory.graph.heads == ()


def test_a_package_resource_loads_like_a_directory(tmp_path, monkeypatch):
    package = tmp_path / "src" / "billing_schema_t1"
    (package / "migrations").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    write_script(package / "migrations", "aaa111", None, message="first",
                 header="def helper(row):\n    return {'x': 1}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    directory = ScriptDirectory.load("billing_schema_t1:migrations", tmp_path)
    script = directory.get("aaa111")
    assert script.message == "first"
    assert directory.location.label == "package resource billing_schema_t1:migrations"
    # A function of a script is found again by its reference (as a worker process would).
    reference = script.reference(script.module.helper)
    assert reference.endswith("aaa111_first.py:helper")
    assert load_callable(reference)({}) == {"x": 1}


def test_load_callable_re_executes_a_script_not_loaded_in_this_process(tmp_path):
    migrations = tmp_path / "migrations"
    write_script(migrations, "aaa111", None, header="def fill(row):\n    return {'n': 2}\n")
    path = str(migrations / "versions" / "aaa111_rev.py")
    assert load_callable(f"{path}:fill")({}) == {"n": 2}


def test_a_package_that_does_not_import_is_one_clear_error(tmp_path):
    with pytest.raises(ScriptImportError, match=r"cannot import package 'no_such_schema_pkg'.*"
                       "ModuleNotFoundError"):
        ScriptDirectory.load("no_such_schema_pkg:migrations", tmp_path)


def test_a_package_without_the_resource_folder(tmp_path, monkeypatch):
    (tmp_path / "src" / "billing_schema_t2").mkdir(parents=True)
    (tmp_path / "src" / "billing_schema_t2" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    with pytest.raises(ScriptImportError, match=r"no resource folder 'migrations'"):
        ScriptDirectory.load("billing_schema_t2:migrations", tmp_path)


@pytest.mark.parametrize("upgrade, header, expected", [
    ("pass", "import no_such_module_x", r"_rev.py:1 fails to import: ModuleNotFoundError"),
    ("pass", "x = (", r"_rev.py:1 fails to import: SyntaxError"),
    ("pass", "raise SystemExit(3)", r"fails to import: SystemExit"),
])
def test_a_script_that_fails_to_import_names_file_and_line(tmp_path, upgrade, header, expected):
    write_script(tmp_path / "migrations", "aaa111", None, upgrade=upgrade, header=header)
    with pytest.raises(ScriptImportError, match=expected):
        ScriptDirectory.load("migrations", tmp_path)
    path = str(tmp_path / "migrations" / "versions" / "aaa111_rev.py")
    assert script_module_name(path) not in sys.modules


def test_malformed_scripts(tmp_path):
    versions = tmp_path / "migrations" / "versions"
    versions.mkdir(parents=True)
    (versions / "a.py").write_text("revision = 'has space'\ndef upgrade(op): pass\ndef downgrade(op): pass\n")
    with pytest.raises(ScriptImportError, match=r"`revision` must be an id"):
        ScriptDirectory.load("migrations", tmp_path)
    (versions / "a.py").write_text("revision = 'abc'\ndef upgrade(op): pass\n")
    with pytest.raises(ScriptImportError, match=r"defines no function downgrade"):
        ScriptDirectory.load("migrations", tmp_path)
    (versions / "a.py").write_text(
        "revision = 'abc'\ndown_revision = 5\ndef upgrade(op): pass\ndef downgrade(op): pass\n")
    with pytest.raises(ScriptImportError, match=r"down_revision must be None"):
        ScriptDirectory.load("migrations", tmp_path)


def test_duplicate_revision_and_missing_parent(tmp_path):
    migrations = tmp_path / "migrations"
    write_script(migrations, "aaa111", None, message="one")
    write_script(migrations, "aaa111", None, message="two")
    with pytest.raises(DuplicateRevisionError, match=r"aaa111 is declared by both"):
        ScriptDirectory.load("migrations", tmp_path)
    (migrations / "versions" / "aaa111_two.py").unlink()
    write_script(migrations, "bbb222", "aaa112")
    with pytest.raises(MissingParentError, match=r"bbb222 names parent 'aaa112'"):
        ScriptDirectory.load("migrations", tmp_path)


def test_load_callable_of_an_unreadable_reference_is_a_typed_error(tmp_path):
    with pytest.raises(ScriptImportError, match="cannot read revision script"):
        load_callable(f"{tmp_path}/gone.py:fill")
    with pytest.raises(ScriptImportError, match="cannot read revision script"):
        load_callable("no_such_pkg_zz:migrations/versions/a.py:fill")


def test_a_zipped_package_loads_read_only(tmp_path, monkeypatch):
    """An installed package need not be a directory on disk (a zipped wheel, a zipapp)."""
    import zipfile

    from scriptdir import write_script

    source = tmp_path / "src"
    package = source / "billing_schema_zip"
    (package / "migrations").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    write_script(package / "migrations", "aaa111", None, message="first",
                 header="def fill(row):\n    return {'z': 1}\n")
    write_script(package / "migrations", "bbb222", "aaa111", message="second")
    archive = tmp_path / "billing_schema_zip.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in package.rglob("*"):
            zf.write(path, path.relative_to(source))
    monkeypatch.syspath_prepend(str(archive))
    directory = ScriptDirectory.load("billing_schema_zip:migrations", tmp_path / "elsewhere")
    assert directory.graph.heads == ("bbb222",)
    assert directory.location.path is None
    with pytest.raises(ScriptImportError, match="inside an installed package"):
        directory.location.writable()
    reference = directory.get("aaa").reference(directory.get("aaa").module.fill)
    assert reference == "billing_schema_zip:migrations/versions/aaa111_first.py:fill"
    sys.modules.pop(script_module_name(reference.rpartition(":")[0]))  # as in a fresh worker process
    assert load_callable(reference)({}) == {"z": 1}
