"""BINARY key and attribute columns through ``Rows``: bytes that are not UTF-8 are stored as
BINARY cells (the SDK writes a ``bytes`` value as a STRING cell; only a bytearray is BINARY)."""

from __future__ import annotations

import pytest

from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.service import Attr, Rows, create_tables
from tsmigrate.service.batch import Update

RAW = b"\xff\xfe\x00\x80"  # not UTF-8: a STRING cell of these is refused by the service


class Blob(Model, table="blobs"):
    owner = PrimaryKey(str)
    digest = PrimaryKey(bytes)
    data = Column(bytes)


@pytest.fixture
def blobs(ots_instance):
    client = ots_instance.client()
    create_tables(client, [Blob])
    return client, Rows(Blob, client)


def _cell(client, owner: str, digest: bytes):
    _, row, _ = client.get_row("blobs", [("owner", owner), ("digest", bytearray(digest))],
                               max_version=1)
    return None if row is None else row.attribute_columns[0][1]


def test_bytes_that_are_not_utf8_round_trip_through_every_write_and_read(blobs):
    client, rows = blobs
    rows.put(Blob(owner="a", digest=RAW, data=RAW))
    assert rows.get(owner="a", digest=RAW) == Blob(owner="a", digest=RAW, data=RAW)
    assert _cell(client, "a", RAW) == bytearray(RAW)  # a BINARY cell, as the SDK reads one
    assert rows.batch_write(put=[Blob(owner="b", digest=RAW[::-1], data=RAW * 2)]).ok
    assert [r.data for r in rows.query(owner="b")] == [RAW * 2]
    rows.update({"owner": "a", "digest": RAW}, set={"data": b"\x00"},
                condition=Attr("data") == RAW)
    assert _cell(client, "a", RAW) == bytearray(b"\x00")
    assert rows.batch_write(update=[Update({"owner": "b", "digest": RAW[::-1]},
                                           set={"data": RAW})]).ok
    assert rows.batch_get([{"owner": "b", "digest": RAW[::-1]}]).rows[0].data == RAW
    rows.delete({"owner": "a", "digest": RAW})
    assert rows.get(owner="a", digest=RAW) is None


def test_a_bytearray_value_is_taken_as_it_is(blobs):
    client, rows = blobs
    rows.put(Blob(owner="c", digest=bytearray(b"k"), data=bytearray(RAW)))
    assert rows.get(owner="c", digest=b"k").data == RAW
    assert isinstance(_cell(client, "c", b"k"), bytearray)
