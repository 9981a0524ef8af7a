"""The byte-level row codec of the copy agrees with the PlainBuffer codec."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsmigrate.contract.rowbytes import (
    cell_value,
    key_cell,
    key_row,
    page_totals,
    row_cells,
    row_digest,
    scan_rows,
)
from tsmigrate.wire.plainbuffer import (
    HEADER,
    PlainBufferError,
    assemble_row,
    decode_rows,
    encode_cell,
    encode_primary_key,
    encode_primary_key_cells,
    join_rows,
)

SETTINGS = settings(max_examples=150, deadline=None)
_KEY_VALUE = st.one_of(st.text(max_size=40), st.integers(-(2**63), 2**63 - 1), st.binary(max_size=40))
_NAMES = st.sampled_from(["a", "bb", "ccc", "dd", "e"])
_CELL = st.tuples(_NAMES, st.one_of(st.integers(-5, 5), st.text(max_size=8), st.floats(allow_nan=False),
                                   st.booleans(), st.binary(max_size=5)), st.integers(0, 2**45))


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["k1", "k2", "key3"]), _KEY_VALUE), min_size=1, max_size=4))
def test_key_cells_are_encoded_as_the_plainbuffer_codec_does(key) -> None:
    cells, crcs = encode_primary_key_cells(key)
    for _ in range(2):  # the second time from the cache of recent cells
        ours = [key_cell(name, value) for name, value in key]
        assert b"".join(cell for cell, _ in ours) == cells
        assert bytes(crc for _, crc in ours) == bytes(crcs)


@SETTINGS
@given(st.lists(st.tuples(st.lists(st.tuples(st.just("id"), _KEY_VALUE), min_size=1, max_size=1),
                          st.lists(_CELL, max_size=6)), max_size=5),
       st.frozensets(_NAMES), st.frozensets(_NAMES))
@pytest.mark.slow
def test_a_scanned_page_gives_keys_values_and_the_kept_cells(rows, wanted, drop) -> None:
    rows = [(pk, sorted(cells, key=lambda c: (c[0], -c[2]))) for pk, cells in rows]
    encoded = []
    for pk, cells in rows:
        pk_bytes, pk_crcs = encode_primary_key_cells(pk)
        encoded.append(assemble_row(pk_bytes, pk_crcs, [encode_cell(*c) for c in cells]))
    page = join_rows(encoded)
    scanned = scan_rows(page, wanted, drop, with_cells=True)
    assert len(scanned) == len(rows) == len(decode_rows(page))
    for row, (pk, cells) in zip(scanned, rows, strict=True):
        assert row.primary_key == [(n, bytes(v) if isinstance(v, bytearray) else v) for n, v in pk]
        kept = [encode_cell(*c) for c in cells if c[0] not in drop]
        assert row.attributes == b"".join(c for c, _ in kept)
        assert row.crcs == bytes(crc for _, crc in kept)
        newest = {}
        for name, value, _ in cells:
            newest.setdefault(name, value)
        assert row.values == {n: v for n, v in newest.items() if n in wanted}
        assert [(c[0], c[4]) for c in row.cells] == [(c[0], c[2]) for c in cells]


@settings(max_examples=25, deadline=None)  # fast: capture's tests cover it through the server
@given(st.lists(st.tuples(st.just("id"), _KEY_VALUE), min_size=1, max_size=3), st.lists(_CELL, max_size=6),
       st.frozensets(_NAMES))
def test_one_row_gives_its_key_and_every_cell_as_bytes(key, cells, wanted) -> None:
    """Capture's reader: a row's cells as their encoding (what it writes on as they came)."""
    cells = sorted(cells, key=lambda c: (c[0], -c[2]))
    pk_bytes, pk_crcs = encode_primary_key_cells(key)
    encoded = [encode_cell(*c) for c in cells]
    got_key, got, values = row_cells(HEADER + assemble_row(pk_bytes, pk_crcs, encoded), wanted)
    assert got_key == tuple((n, bytes(v) if isinstance(v, bytearray) else v) for n, v in key)
    assert key_row(key) == encode_primary_key(key)
    assert got == [(c[0], c[2], cell, crc) for c, (cell, crc) in zip(cells, encoded, strict=True)]
    assert [cell_value(c[2]) for c in got] == [c[1] for c in cells]
    newest: dict = {}
    for name, value, _ in cells:
        newest.setdefault(name, value)
    assert values == {n: v for n, v in newest.items() if n in wanted}


def test_page_totals_count_and_hash_each_row_as_its_key_cells_0x02_and_attribute_cells() -> None:
    rows = [([("id", "a")], [encode_cell("x", 1, 5), encode_cell("y", "é", 6)]),
            ([("id", "b")], []),  # a key-only row hashes as if 0x02 ended it
            ([("id", "c")], [encode_cell("x", b"", 7)])]
    encoded = []
    expected = 0
    for key, cells in rows:
        pk, crcs = encode_primary_key_cells(key)
        encoded.append(assemble_row(pk, crcs, cells))
        expected += row_digest(pk, b"".join(cell for cell, _ in cells))
    page = join_rows(encoded)
    assert page_totals(page) == (3, expected)
    assert page_totals(b"") == (0, 0)
    corrupted = bytearray(page)
    corrupted[page.index("é".encode())] ^= 1
    assert page_totals(bytes(corrupted))[1] != expected
    with pytest.raises(PlainBufferError, match="truncated or malformed"):
        page_totals(page[:-3])
