"""Tablestore's wire protocol, below both the local server and the client side: PlainBuffer
(plainbuffer.py, with its compiled walks in _rowwalk.c), the protobuf messages the SDK lacks and
their extensions (table_protocol.py, search_protocol.py, protoext.py), protobuf by hand for the
messages sent per row (protowire.py), GetRange pages and BatchWriteRow rows read and written
without the SDK's objects (rows.py), and request signing (signing.py). Imports nothing else of
tsmigrate."""
