"""The compiled row walks (tsmigrate/wire/_rowwalk.c) against the Python loops they replace:
the same rows, digests and sizes on any page, the same errors on truncated ones, and no crash on
damaged bytes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsmigrate.contract import rekey, rowbytes
from tsmigrate.contract.rekey import NotRekeyable, Rekey
from tsmigrate.contract.rowbytes import page_totals, page_totals_in_python
from tsmigrate.wire.plainbuffer import (
    PlainBufferError,
    assemble_row,
    encode_cell,
    encode_primary_key_cells,
    join_rows,
)

# Keyed by (request_id, n); the new key is (keyword, day, request_id): day and keyword move.
REKEY = Rekey(parts=((b"keyword", 0x03), (b"day", 0x00), 0), moved=frozenset({b"keyword", b"day"}))

_KEY_VALUE = st.one_of(st.text(max_size=12), st.integers(-(2**63), 2**63 - 1), st.binary(max_size=12))
_VALUE = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=10), st.booleans(),
                   st.floats(allow_nan=False), st.binary(max_size=8))
_STAMP = st.one_of(st.none(), st.integers(0, 2**45))
# Attribute cells in any order (the walks take what the bytes hold): other columns, and versions
# of the columns that enter the key, now and then missing, without a value or of another type.
_OTHER = st.lists(st.tuples(st.sampled_from(["a", "payload", "z" * 40]), _VALUE, _STAMP), max_size=5)
_MOVED = st.tuples(
    st.lists(st.tuples(st.just("keyword"), st.text(max_size=12), _STAMP), min_size=1, max_size=2),
    st.lists(st.tuples(st.just("day"), st.integers(-(2**63), 2**63 - 1), _STAMP), min_size=1, max_size=2),
    st.sampled_from([None] * 8 + ["no keyword", "no value", "day of another type"]),
)


def _cells(other: list, moved: tuple) -> list:
    keyword, day, odd = moved
    if odd == "no keyword":
        keyword = []
    elif odd == "no value":
        keyword = [("keyword", None, stamp) for _, _, stamp in keyword]
    elif odd == "day of another type":
        day = [("day", str(value), stamp) for _, value, stamp in day]
    return other[: len(other) // 2] + keyword + other[len(other) // 2 :] + day


_ROW = st.tuples(st.lists(st.tuples(st.sampled_from(["request_id", "n", "k3", "k4"]), _KEY_VALUE),
                          min_size=1, max_size=4),
                 st.builds(_cells, _OTHER, _MOVED), st.booleans())


def _page(rows: list) -> bytes:
    encoded = []
    for key, cells, delete_marker in rows:
        pk, crcs = encode_primary_key_cells(key)
        encoded.append(assemble_row(pk, crcs, [encode_cell(*c) for c in cells], delete_marker))
    return join_rows(encoded)


def _outcome(call, buf: bytes):
    """What a walk gives: its result, or the kind of error it raised."""
    try:
        return call(buf)
    except NotRekeyable:
        return "not rekeyable"
    except PlainBufferError:
        return "malformed"


@settings(max_examples=300, deadline=None)
@pytest.mark.slow
@given(st.lists(_ROW, max_size=5))
def test_the_compiled_walks_give_the_rows_digests_and_sizes_of_the_python_loops(rows) -> None:
    buf = _page(rows)
    assert _outcome(REKEY.page, buf) == _outcome(REKEY.page_in_python, buf)
    assert page_totals(buf) == page_totals_in_python(buf)


@settings(max_examples=100, deadline=None)
@given(st.lists(_ROW, min_size=1, max_size=3), st.data())
def test_a_truncated_page_is_malformed_for_both(rows, data) -> None:
    buf = _page(rows)
    cut = data.draw(st.integers(5, len(buf) - 1))
    compiled, python = _outcome(REKEY.page, buf[:cut]), _outcome(REKEY.page_in_python, buf[:cut])
    assert compiled == python
    assert _outcome(page_totals, buf[:cut]) == _outcome(page_totals_in_python, buf[:cut])


@settings(max_examples=300, deadline=None)
@pytest.mark.slow
@given(st.lists(_ROW, min_size=1, max_size=3), st.data())
def test_damaged_bytes_give_a_result_or_a_typed_error_never_a_crash(rows, data) -> None:
    damaged = bytearray(_page(rows))
    for _ in range(data.draw(st.integers(1, 4))):
        damaged[data.draw(st.integers(4, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    for walk in (REKEY.page, page_totals):
        outcome = _outcome(walk, bytes(damaged))
        assert outcome in ("not rekeyable", "malformed") or isinstance(outcome, tuple)


def test_a_value_byte_changed_changes_the_digest_not_the_structure() -> None:
    rows = [([("request_id", "r1")], [("day", 20260901, 5), ("keyword", "kw", 5), ("payload", "hello", 7)],
             False)]
    buf = _page(rows)
    damaged = bytearray(buf)
    damaged[buf.index(b"hello")] ^= 0x20
    (rows_out, digest, size), (damaged_out, damaged_digest, damaged_size) = (
        REKEY.page(buf), REKEY.page(bytes(damaged)))
    assert size == damaged_size and len(rows_out) == len(damaged_out) == 1
    assert digest != damaged_digest
    assert page_totals(buf)[1] != page_totals(bytes(damaged))[1]


def test_digest_sums_carry_past_128_bits() -> None:
    """The sum is not masked: many rows' digests add up past 2**128 as Python ints do."""
    rows = [([("request_id", f"r{i}")], [("day", i, 5), ("keyword", "kw", 5)], False) for i in range(2000)]
    buf = _page(rows)
    compiled, python = REKEY.page(buf), REKEY.page_in_python(buf)
    assert compiled == python and compiled[1] > 2**128
    assert page_totals(buf) == page_totals_in_python(buf)


def _compiler_and_headers() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "").split()
    return bool(compiler) and shutil.which(compiler[0]) is not None and Path(
        sysconfig.get_paths()["include"], "Python.h").exists()


def test_the_install_builds_the_compiled_walks_where_a_compiler_is_found() -> None:
    built = rekey._rowwalk is not None and rowbytes._rowwalk is not None
    assert built == _compiler_and_headers(), (
        "tsmigrate/wire/_rowwalk.c should be built where a C compiler and the Python headers are "
        f"(pip install -e . in {os.getcwd()}), and only there: built={built}")


@pytest.mark.parametrize(("parts", "moved", "message"), [
    ((-1,), (), "index is 0 to 3"),
    ((4,), (), "index is 0 to 3"),
    ((), (), "1 to 4 columns"),
    ((0, 1, 2, 3, 0), (), "1 to 4 columns"),
    (((b"a", 3),), (b"a", b"b", b"c", b"d", b"e"), "at most 4"),
    (("a",), (), "an int or a"),
])
def test_the_compiled_walk_refuses_arguments_no_plan_gives(parts, moved, message) -> None:
    if rekey._rowwalk is None:
        pytest.skip("the compiled walks are not built here (no C compiler): nothing to call")
    page = _page([([("request_id", "r")], [("day", 1, 5)], False)])
    with pytest.raises(TypeError, match=message):
        rekey._rowwalk.rekey_page(page, parts, moved)


@pytest.mark.slow
def test_an_install_without_a_compiler_goes_on_and_walks_in_python(tmp_path: Path) -> None:
    """The README's promise: no C compiler, the install still succeeds, and rewrites run."""
    root = Path(__file__).resolve().parents[2]
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(root / name, source / name)
    shutil.copytree(root / "tsmigrate", source / "tsmigrate",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    env = {**os.environ, "CC": "/bin/false", "PYTHONSAFEPATH": "1"}
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(tmp_path / "dist"), str(source)],
                           env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("tsmigrate-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert not [n for n in archive.namelist() if "_rowwalk" in n and not n.endswith(".c")]
    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                                "--target", str(site), str(wheel)], capture_output=True, text=True,
                               timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    code = (
        "import tsmigrate, tablestore\n"
        "from tsmigrate.contract import rekey, rowbytes\n"
        "from tsmigrate.wire.plainbuffer import encode_row\n"
        f"assert tsmigrate.__file__.startswith({str(site)!r}), tsmigrate.__file__\n"
        "plan = rekey.Rekey(parts=((b'day', 0x00), 0), moved=frozenset({b'day'}))\n"
        "page = encode_row([('id', 'r1')], [('day', 7, 5), ('x', 'y', 5)])\n"
        "rows, digest, size = plan.page(page)\n"
        "print(rekey._rowwalk, rowbytes._rowwalk, len(rows), rowbytes.page_totals(page)[0])\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(site)},
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["None", "None", "1", "1"]
