"""`tsmigrate init`'s pure parts: appending [tool.tsmigrate] to any pyproject.toml keeps the rest
byte for byte, and a write that fails midway leaves nothing behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tsmigrate.commands.scaffold import Change, InitRefused, plan_init, write

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

names = st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True).filter(lambda n: n != "tool")
values = st.one_of(st.integers(-10**6, 10**6), st.text(alphabet="abc xyz-_.", max_size=8),
                   st.booleans())
tables = st.dictionaries(names, st.dictionaries(names, values, max_size=4), max_size=4)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, int) else f'"{value}"'


def _render(document: dict, tool_tables: dict, newline: str, trailing: bool) -> str:
    lines = []
    for table, keys in document.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in keys.items()]
    for table, keys in tool_tables.items():
        lines.append(f"[tool.{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in keys.items()]
    text = newline.join(lines)
    return text + newline if trailing and text else text


@pytest.mark.slow
@given(document=tables, tool_tables=tables.map(lambda t: {k: v for k, v in t.items() if k != "tsmigrate"}),
       newline=st.sampled_from(["\n", "\r\n"]), trailing=st.booleans())
def test_the_table_is_appended_and_the_rest_kept(tmp_path_factory, document, tool_tables, newline,
                                                 trailing):
    root = tmp_path_factory.mktemp("project")
    original = _render(document, tool_tables, newline, trailing)
    (root / "pyproject.toml").write_bytes(original.encode())
    changes = plan_init(root)
    pyproject = next(c for c in changes if c.path.name == "pyproject.toml")
    assert pyproject.content.startswith(original)
    parsed = tomllib.loads(pyproject.content)
    assert parsed["tool"]["tsmigrate"] == {"models": ["models"], "migrations": "migrations"}
    before = tomllib.loads(original)
    for table, keys in before.items():
        if table != "tool":
            assert parsed[table] == keys
    assert {k: v for k, v in parsed["tool"].items() if k != "tsmigrate"} == before.get("tool", {})
    if "\r\n" in original:  # the file keeps its line endings
        assert "\n" not in pyproject.content.replace("\r\n", "")


@pytest.mark.parametrize("text", [
    '[tool.tsmigrate]\nmodels = ["app"]\n',
    '[tool]\ntsmigrate = {models = ["app"]}\n',
    '[tool.tsmigrate.lint]\ndisable = []\n',
])
def test_an_existing_tsmigrate_table_in_any_form_is_refused(tmp_path: Path, text: str):
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(InitRefused, match=r"already has a \[tool.tsmigrate\] table"):
        plan_init(tmp_path)


def test_a_table_that_cannot_be_appended_is_refused_with_the_table_to_add(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('tool = {black = {line-length = 100}}\n')
    with pytest.raises(InitRefused, match=r"add this table by hand:\n\[tool.tsmigrate\]"):
        plan_init(tmp_path)


def test_gitignore_is_left_alone_when_it_ignores_the_local_data(tmp_path: Path):
    (tmp_path / ".gitignore").write_text("build/\n/.tsmigrate\n")
    assert not [c for c in plan_init(tmp_path) if c.path.name == ".gitignore"]
    (tmp_path / ".gitignore").write_text("build/")  # no trailing newline
    (change,) = [c for c in plan_init(tmp_path) if c.path.name == ".gitignore"]
    assert change.content == "build/\n.tsmigrate/\n"


def test_a_write_failing_midway_undoes_what_it_wrote(tmp_path: Path):
    (tmp_path / "kept.txt").write_text("before")
    changes = [
        Change(tmp_path / "new" / "a.txt", "a", "created"),
        Change(tmp_path / "kept.txt", "after", "added", existed=True),
        Change(tmp_path / "new" / "a.txt" / "b.txt", "b", "created"),  # a.txt is a file
    ]
    with pytest.raises(InitRefused, match="nothing was changed"):
        write(changes)
    assert not (tmp_path / "new").exists()
    assert (tmp_path / "kept.txt").read_text() == "before"
