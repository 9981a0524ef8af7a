"""BatchWriteRow requests as the writer encodes them, and how rows are cut into requests."""

from __future__ import annotations

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.rewrite.writer import MAX_BATCH_BYTES, MAX_BATCH_ROWS, _batches, batch_write_request


def test_an_encoded_request_is_the_message_the_protobuf_classes_build() -> None:
    rows = [b"", b"\x75\x00\x00\x00\x01", b"r" * 127, b"s" * 128, b"t" * 20_000, b"u" * 3_000_000]
    for kind in (pb.PUT, pb.UPDATE, pb.DELETE):
        expected = pb.BatchWriteRowRequest()
        table = expected.tables.add(table_name="tàble")
        for row in rows:
            table.rows.add(type=kind, row_change=row).condition.row_existence = pb.IGNORE
        assert pb.BatchWriteRowRequest.FromString(batch_write_request("tàble", kind, rows)) == expected


def test_rows_are_cut_by_count_and_by_size() -> None:
    small = [bytes([i % 256]) * 100 for i in range(450)]
    assert [len(b) for b in _batches(small)] == [MAX_BATCH_ROWS, MAX_BATCH_ROWS, 50]
    assert [row for batch in _batches(small) for row in batch] == small
    large = [b"x" * (MAX_BATCH_BYTES // 3)] * 7 + [b"y" * (MAX_BATCH_BYTES + 1)]
    batches = list(_batches(large))
    assert [len(b) for b in batches] == [3, 3, 1, 1]  # an oversized row still goes alone
    assert [row for batch in batches for row in batch] == large
