"""The fast path of a rewrite that only moves columns: byte-exact rows, found corruption."""

from __future__ import annotations

import pytest
import rewrite_tables as rt
import tablestore as ts
from hypothesis import given, settings
from hypothesis import strategies as st

from tsmigrate.contract import rekey, rowbytes
from tsmigrate.contract.transform import RowTransform, TransformError
from tsmigrate.rewrite import splits
from tsmigrate.rewrite.copy import copy_split
from tsmigrate.rewrite.job import RewriteJob
from tsmigrate.rewrite.verify import DIFFERENT, verify
from tsmigrate.schema import PrimaryKeyColumn, Table, TableOptions
from tsmigrate.wire.plainbuffer import assemble_row, encode_cell, encode_primary_key_cells, join_rows

OPTIONS = TableOptions(max_versions=3, max_time_deviation=rt.YEAR_S)
# Search results keyed by request id, rewritten to be keyed by (keyword, day, request id):
# keyword and day leave the attributes, the request id is copied from the old key.
SERP = Table("serp", [PrimaryKeyColumn("request_id", "STRING"), PrimaryKeyColumn("n", "INTEGER")],
             options=OPTIONS)
SERP_BY_KEYWORD = Table(
    "serp_by_keyword",
    [PrimaryKeyColumn("keyword", "STRING"), PrimaryKeyColumn("day", "INTEGER"),
     PrimaryKeyColumn("request_id", "STRING"), PrimaryKeyColumn("n", "INTEGER")],
    options=OPTIONS,
)

_VALUE = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=10), st.booleans(),
                   st.floats(allow_nan=False), st.binary(max_size=6))
_STAMP = st.integers(0, 2**40)
# Other cells, then one or two versions of each column of the new key (rarely none).
_CELLS = st.tuples(
    st.lists(st.tuples(st.sampled_from(["a", "payload", "zz"]), _VALUE, _STAMP), max_size=5),
    st.lists(st.tuples(st.just("keyword"), st.text(max_size=12), _STAMP), min_size=1, max_size=2),
    st.lists(st.tuples(st.just("day"), st.integers(-5, 10**6), _STAMP), min_size=1, max_size=2),
    st.sampled_from([(), (), (), (), ("day",), ("keyword",)]),
).map(lambda c: sorted([cell for cell in c[0] + c[1] + c[2] if cell[0] not in c[3]],
                       key=lambda cell: (cell[0], -cell[2])))


def _page(rows) -> bytes:
    return join_rows([assemble_row(*encode_primary_key_cells(pk), [encode_cell(*c) for c in cells])
                      for pk, cells in rows])


@settings(max_examples=150, deadline=None)
@pytest.mark.slow
@given(st.lists(st.tuples(st.tuples(st.text(max_size=6), st.integers(-5, 5)), _CELLS), max_size=4))
def test_the_fast_path_gives_the_rows_and_digest_of_the_general_one(rows) -> None:
    transform = RowTransform.build(SERP, SERP_BY_KEYWORD)
    assert transform._rekey is not None
    rows = [([("request_id", rid), ("n", n)], cells) for (rid, n), cells in rows]
    fits = all({"keyword", "day"} <= {c[0] for c in cells} for _, cells in rows)
    if not fits:  # a row without a column of the new key: the general path names it
        with pytest.raises(TransformError, match=r"source row \(request_id=.*the row has no"):
            transform.page(_page(rows))
        return
    expected = [RowTransform.encode(transform.apply(pk, cells)) for pk, cells in rows]
    page = transform.page(_page(rows))
    assert page.rows == [row for row, _ in expected]
    assert page.digest == sum(d for _, d in expected) % 2**128
    assert page.bytes == sum(len(row) - 4 for row, _ in expected)


def test_a_key_attribute_of_another_type_is_refused_naming_the_row() -> None:
    transform = RowTransform.build(SERP, SERP_BY_KEYWORD)
    cells = [("day", "monday", 5), ("keyword", "k", 5)]
    with pytest.raises(TransformError, match=r"\(request_id='r1', n=1\).*day"):
        transform.page(_page([([("request_id", "r1"), ("n", 1)], cells)]))


def _hand_built(i: int, stamp: int) -> tuple[list, list]:
    """Source row ``i``: every cell type, two versions of one column, an empty string, a 1.5 MB
    binary in one row; its target row, written out by hand."""
    cells = [
        ("blob", b"\x00\x01\xff" * (500_000 if i == 7 else i % 4), stamp - 10),
        ("day", 20260901 + i % 3, stamp),
        ("empty", "", stamp - 1),
        ("flag", i % 2 == 0, stamp),
        ("keyword", f"kw{i % 5}", stamp - 3),
        ("ratio", i / 7, stamp),
        ("score", i * 3, stamp),
        ("score", -i, stamp - 86_400_000),
    ]
    source = ([("request_id", f"r{i:04d}"), ("n", i % 2)], cells)
    target = ([("keyword", f"kw{i % 5}"), ("day", 20260901 + i % 3), ("request_id", f"r{i:04d}"),
               ("n", i % 2)], [c for c in cells if c[0] not in ("day", "keyword")])
    return source, target


@pytest.mark.slow
@pytest.mark.parametrize("walks", ["compiled where built", "python"])
def test_a_column_move_copies_rows_byte_exact_and_verification_finds_a_corrupted_cell(
        ots_instance, monkeypatch, walks) -> None:
    if walks == "python":  # as installed where no C compiler was found
        monkeypatch.setattr(rekey, "_rowwalk", None)
        monkeypatch.setattr(rowbytes, "_rowwalk", None)
    client = ots_instance.client()
    rt.State(client).ensure_table()
    rt.create(client, SERP)
    rt.create(client, SERP_BY_KEYWORD)
    stamp = 1_780_000_000_000
    rows = [_hand_built(i, stamp) for i in range(12)]
    for (key, cells), _ in rows:
        client.put_row(SERP.name, ts.Row(key, [(n, bytearray(v) if isinstance(v, bytes) else v, t)
                                               for n, v, t in cells]))
    job = RewriteJob("move", SERP, SERP_BY_KEYWORD)
    spec = rt.ConnectionSpec(ots_instance.endpoint, ots_instance.instance, local_defaults=True)
    ranges = splits.plan(client, job.id, SERP)
    assert sum(copy_split(spec, job, s).rows for s in ranges) == 12
    expected = sorted((target for _, target in rows), key=lambda r: [v for _, v in r[0]])
    got = [(key, [(n, bytes(v) if isinstance(v, bytearray) else v, t) for n, v, t in cells])
           for key, cells in rt.read_all(client, SERP_BY_KEYWORD)]
    assert got == expected
    assert verify(spec, job, ranges).ok
    # One cell changed in place (same name, type, timestamp): found, and named.
    key, cells = expected[3]
    client.update_row(SERP_BY_KEYWORD.name, ts.Row(key, {"put": [("score", 999, stamp)]}),
                      ts.Condition("IGNORE"))
    report = verify(spec, job, ranges)
    assert not report.ok
    assert [(d.kind, d.target_key) for d in report.differences] == [(DIFFERENT, key)]
