"""Capture's compiled paths (tsmigrate/wire/_rowwalk.c) against the Python they stand in for:
the same records, rows, cells (in the same order), changes and request bytes on any input, and
the same kind of error on truncated input. Where the module is not built both sides are the
Python, and the tests pass trivially."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.contract import rowbytes
from tsmigrate.instance.rawclient import StreamPage
from tsmigrate.rewrite import capture, writer
from tsmigrate.rewrite.capture import BatchGetRows, Record
from tsmigrate.wire import table_protocol
from tsmigrate.wire.plainbuffer import (
    HEADER,
    PlainBufferError,
    assemble_row,
    encode_cell,
    encode_primary_key_cells,
    encode_row,
)

INT64 = st.integers(-(2**63), 2**63 - 1)
_KEY_VALUE = st.one_of(st.text(max_size=12), INT64, st.binary(max_size=12))
_VALUE = st.one_of(st.none(), INT64, st.text(max_size=10), st.booleans(), st.floats(allow_nan=False),
                   st.binary(max_size=8))
_STAMP = st.one_of(st.none(), st.integers(0, 2**45), INT64)
_NAME = st.sampled_from(["a", "status", "keyword", "é名", "z" * 40])
_KEY = st.lists(st.tuples(st.sampled_from(["request_id", "n", "k3", "k4"]), _KEY_VALUE),
                min_size=1, max_size=4)
_CELLS = st.lists(st.tuples(_NAME, _VALUE, _STAMP), max_size=8)
_WANTED = st.frozensets(_NAME)


def _row(key: list, cells: list, delete_marker: bool = False) -> bytes:
    pk, crcs = encode_primary_key_cells(key)
    return HEADER + assemble_row(pk, crcs, [encode_cell(*c) for c in cells], delete_marker)


def _outcome(call, *args):
    """What a walk gives: its result, or the kind of error it raised."""
    try:
        return call(*args)
    except PlainBufferError:
        return "malformed"
    except DecodeError:
        return "undecodable"


SETTINGS = settings(max_examples=200, deadline=None)


@SETTINGS
@given(_KEY, _CELLS, _WANTED, st.booleans())
def test_a_row_walks_to_the_same_key_cells_and_values(key, cells, wanted, delete_marker) -> None:
    buf = _row(key, cells, delete_marker)
    assert rowbytes.row_cells(buf, wanted) == rowbytes.row_cells_in_python(buf, wanted)
    assert list(rowbytes.row_versions(buf).items()) == list(rowbytes.row_versions_in_python(buf).items())
    found = {(("id", 1),): buf, (("id", 2),): _row(key, cells[:1])}
    assert capture.raw_rows(found, wanted) == capture.raw_rows_in_python(found, wanted)


@settings(max_examples=100, deadline=None)
@given(_KEY, st.lists(st.tuples(_NAME, _VALUE, _STAMP), min_size=1, max_size=4), st.data())
def test_a_truncated_row_is_malformed_for_both(key, cells, data) -> None:
    buf = _row(key, cells)
    cut = buf[:data.draw(st.integers(0, len(buf) - 1))]
    for compiled, python in ((rowbytes.row_cells, rowbytes.row_cells_in_python),
                             (rowbytes.row_versions, rowbytes.row_versions_in_python)):
        assert _outcome(compiled, cut) == _outcome(python, cut) == "malformed"
    records = [("put", cut, None)]
    assert (_outcome(capture.read_records, records, frozenset())
            == _outcome(capture.read_records_in_python, records, frozenset()) == "malformed")


@settings(max_examples=200, deadline=None)
@given(st.lists(_CELLS, min_size=1, max_size=2), st.data())
def test_damaged_rows_give_a_result_or_a_typed_error_never_a_crash(cells, data) -> None:
    damaged = bytearray(_row([("id", "r")], cells[0]))
    for _ in range(data.draw(st.integers(1, 4))):
        damaged[data.draw(st.integers(4, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    for walk in (rowbytes.row_cells, rowbytes.row_versions):
        outcome = _outcome(walk, bytes(damaged))
        assert outcome == "malformed" or isinstance(outcome, (tuple, dict))


_RECORD = st.tuples(st.sampled_from(["put", "update", "delete"]), _KEY, _CELLS,
                    st.one_of(st.none(), _CELLS))


@SETTINGS
@given(st.lists(_RECORD, max_size=6), _WANTED)
def test_a_page_of_records_reads_as_the_python_loop_reads_it(records, wanted) -> None:
    encoded = [(action, _row(key, cells), None if origin is None else _row(key, origin))
               for action, key, cells, origin in records]
    compiled, python = capture.read_records(encoded, wanted), capture.read_records_in_python(encoded, wanted)
    assert compiled == python
    assert all(type(r) is Record for r in compiled)


@SETTINGS
@given(_KEY)
def test_key_rows_are_the_python_encoding(key) -> None:
    assert rowbytes.key_row(key) == rowbytes.key_row_in_python(key)
    assert rowbytes.key_cells(key) == rowbytes.key_cells_in_python(key)
    assert writer.encode_delete(key) == HEADER + assemble_row(*encode_primary_key_cells(key), (),
                                                              delete_marker=True)


@pytest.mark.parametrize("key", [[("k", True)], [("k", 2**63)], [("k", 1.5)], [("k", bytearray(b"x"))]])
def test_keys_the_compiled_path_leaves_to_python_come_out_the_same(key) -> None:
    def outcome(call):
        try:
            return call(key)
        except Exception as exc:
            return type(exc)

    assert outcome(rowbytes.key_row) == outcome(rowbytes.key_row_in_python)
    assert outcome(rowbytes.key_cells) == outcome(rowbytes.key_cells_in_python)


# -- a target row's merge, its changes, their UpdateRows ----------------------------------------

_STAMPS = st.integers(0, 12)
_ENCODED = st.sampled_from([(b"one", 1), (b"two", 2), (b"three", 3)])
_VERSIONS = st.dictionaries(st.tuples(_NAME, _STAMPS), _ENCODED, max_size=10)
_SOURCE = st.lists(st.tuples(_NAME, _STAMPS, st.sampled_from([b"one", b"two", b"four"]),
                             st.sampled_from([1, 2, 3])), max_size=10)


@settings(max_examples=300, deadline=None)
@given(_VERSIONS, _SOURCE, st.dictionaries(_NAME, _STAMPS), st.one_of(st.none(), _STAMPS),
       st.booleans(), st.lists(_NAME, max_size=2, unique=True))
def test_a_merge_leaves_the_same_cells_in_the_same_order(cells, source, columns, row_time, arrived,
                                                         added) -> None:
    compiled, python = dict(cells), dict(cells)
    wrote = capture.merge_columns(compiled, source, columns, row_time, arrived, tuple(added))
    assert wrote == capture.merge_columns_in_python(python, source, columns, row_time, arrived, tuple(added))
    assert list(compiled.items()) == list(python.items())


@settings(max_examples=300, deadline=None)
@given(_VERSIONS, _VERSIONS, st.sets(st.integers(0, 9)), st.sampled_from([1, 2, 3, 5, 2**31 - 1]))
def test_a_row_changes_as_the_python_orders_them(before, after, gone, max_versions) -> None:
    """``cells`` as a merge leaves them: versions of ``before`` kept or replaced in place, some
    gone, new ones after them."""
    cells = {v: after.get(v, e) for i, (v, e) in enumerate(before.items()) if i not in gone}
    cells.update(after)
    assert capture.row_changes(before, cells, max_versions) == capture.row_changes_in_python(
        before, cells, max_versions)


def test_a_timestamp_out_of_int64_is_left_to_python() -> None:
    before, cells = {("a", 2**64): (b"x", 1)}, {("a", 1): (b"y", 2)}
    assert capture.row_changes(before, cells, 3) == capture.row_changes_in_python(before, cells, 3)


_CHANGE = st.one_of(
    st.builds(lambda name, value, stamp: ("put", name, encode_cell(name, value, stamp), stamp),
              _NAME, _VALUE, st.integers(0, 2**45)),
    st.builds(lambda name, stamp: ("delete", name, None, stamp), _NAME, INT64))


@SETTINGS
@given(_KEY, st.lists(_CHANGE, max_size=12), st.sampled_from([1, 2, 3, writer.MAX_CELLS_PER_UPDATE]))
def test_update_rows_encode_as_the_python_rounds(key, changes, max_cells) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer, "MAX_CELLS_PER_UPDATE", max_cells)
        assert writer.update_bodies(key, changes) == writer.update_bodies_in_python(key, changes)


@SETTINGS
@given(st.lists(st.integers(0, 5), max_size=450))
def test_update_requests_send_each_row_s_rounds_in_order_and_fill_requests(depths) -> None:
    rows = [[f"{i}.{depth}".encode() for depth in range(count)] for i, count in enumerate(depths)]
    requests = list(writer.update_requests(rows))
    assert all(0 < len(r) <= writer.MAX_BATCH_ROWS for r in requests)
    index_of = {body: i for i, request in enumerate(requests) for body in request}
    assert sorted(index_of) == sorted(b for bodies in rows for b in bodies)  # each body once
    for bodies in rows:  # a row's rounds in later and later requests
        assert [index_of[b] for b in bodies] == sorted({index_of[b] for b in bodies})
    entries = sum(depths)
    assert len(requests) == max(-(-entries // writer.MAX_BATCH_ROWS), max(depths, default=0))


@SETTINGS
@given(st.lists(st.integers(0, 5), max_size=450))
def test_update_waves_send_a_row_s_rounds_one_wave_after_the_other(depths) -> None:
    rows = [[f"{i}.{depth}".encode() for depth in range(count)] for i, count in enumerate(depths)]
    requests = list(writer.update_requests(rows))
    waves = writer.update_waves(rows, requests)
    sent = [request for wave in waves for request in wave]
    assert sorted(map(id, sent)) == sorted(map(id, requests))  # each request once
    wave_of = {body: w for w, wave in enumerate(waves) for request in wave for body in request}
    for bodies in rows:  # a round goes in a wave after the one before it
        assert [wave_of[b] for b in bodies] == sorted({wave_of[b] for b in bodies})
        assert len({wave_of[b] for b in bodies}) == len(bodies)
    assert len(waves) == max(depths, default=0)  # no more waves than the deepest row has rounds


# -- answers read without message objects -------------------------------------------------------

_ROW_RESULT = st.tuples(st.booleans(), st.one_of(st.none(), st.binary(max_size=30)), st.booleans())


def _batch_get_answer(tables: list) -> bytes:
    response = pb.BatchGetRowResponse()
    for rows in tables:
        table = response.tables.add(table_name="t")
        for ok, row, failed in rows:
            result = table.rows.add(is_ok=ok)
            if row is not None:
                result.row = row
            if failed:
                result.error.code = "OTSServerBusy"
    return response.SerializeToString()


@SETTINGS
@given(st.lists(st.lists(_ROW_RESULT, max_size=5), max_size=3), st.data())
def test_a_batch_get_answer_reads_as_the_message_does(tables, data) -> None:
    body = _batch_get_answer(tables)
    compiled, python = BatchGetRows(), BatchGetRows()
    compiled.ParseFromString(body)
    python.parse_in_python(body)
    if tables:
        assert compiled.rows == python.rows == [(ok, row or b"") for ok, row, _ in tables[0]]
    else:
        for answer in (compiled, python):
            with pytest.raises(IndexError):
                _ = answer.rows
    if body:
        cut = body[:data.draw(st.integers(0, len(body) - 1))]
        first, second = BatchGetRows(), BatchGetRows()
        got = _outcome(first.ParseFromString, cut), _outcome(second.parse_in_python, cut)
        assert got[0] == got[1]
        assert first._rows == second._rows


def _stream_answer(records: list, following: str | None) -> bytes:
    response = pb.GetStreamRecordResponse()
    for action, row, origin in records:
        record = response.stream_records.add(action_type=action, record=row)
        if origin is not None:
            record.MergeFromString(table_protocol.StreamRecordOrigin(origin_record=origin).SerializeToString())
    if following is not None:
        response.next_shard_iterator = following
    return response.SerializeToString()


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([pb.PUT_ROW, pb.UPDATE_ROW, pb.DELETE_ROW]), st.binary(max_size=20),
                          st.one_of(st.none(), st.binary(max_size=20))), max_size=6),
       st.one_of(st.none(), st.text(max_size=20)), st.data())
def test_a_stream_page_reads_as_the_messages_do(records, following, data) -> None:
    body = _stream_answer(records, following)
    compiled, python = StreamPage(), StreamPage()
    compiled.ParseFromString(body)
    python.parse_in_python(body)
    assert (compiled.records, compiled.following) == (python.records, python.following)
    assert (compiled.records, compiled.following) == (records, following)
    if body:
        cut = body[:data.draw(st.integers(0, len(body) - 1))]
        first, second = StreamPage(), StreamPage()
        got = _outcome(first.ParseFromString, cut), _outcome(second.parse_in_python, cut)
        assert got[0] == got[1]
        assert (first.records, first.following) == (second.records, second.following)


def test_a_record_of_an_encoded_row_and_no_origin_keeps_the_origin_none() -> None:
    row = encode_row([("id", "r")], [("a", 1, 5)])
    (record,) = capture.read_records([("update", row, None)], frozenset({"a"}))
    assert record == Record("update", (("id", "r"),), (("a", 5),), None)
