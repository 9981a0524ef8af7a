"""Strings of a parsed request must be UTF-8.

protobuf's upb runtime parses a proto2 `string` field holding bytes that are not UTF-8 without an
error and hands it back as `bytes` instead of `str`; left alone, a table, index or column name
like that fails deep in a handler (a 500). Every message parsed from a client goes through
`check_utf8` first, which answers 400 OTSParameterInvalid naming the field.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from tsmigrate.local.errors import invalid

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_REPEATED = FieldDescriptor.LABEL_REPEATED
# Message types -> whether they hold a string field at any depth (most row traffic does not).
_holds_strings: dict[str, bool] = {}


def parse_nested(message: type[Message], data: bytes, what: str) -> Any:
    """A message a request carries as bytes (a search query, an aggregation), parsed and checked:
    bytes that do not decode are 400 ``Invalid {what}.``, strings that are not UTF-8 as above."""
    proto = message()
    try:
        proto.ParseFromString(data)
    except DecodeError:
        raise invalid(f"Invalid {what}.") from None
    check_utf8(proto)
    return proto


def check_utf8(message: Message) -> None:
    """Raise OTSParameterInvalid when a string field anywhere in `message` is not UTF-8."""
    if _has_strings(message.DESCRIPTOR):
        _check(message, "")


def _check(message: Message, prefix: str) -> None:
    for field, value in message.ListFields():
        if field.type == _STRING:
            values = value if field.label == _REPEATED else (value,)
            for item in values:
                if not isinstance(item, str):
                    raise invalid(f"The value of field '{prefix}{field.name}' is not valid UTF-8.")
        elif field.type == _MESSAGE and _has_strings(field.message_type):
            items = value if field.label == _REPEATED else (value,)
            for item in items:
                _check(item, f"{prefix}{field.name}.")


def _has_strings(descriptor: Descriptor) -> bool:
    known = _holds_strings.get(descriptor.full_name)
    if known is None:
        # Met again while deciding (a recursive type): assume it does, at worst a needless walk.
        _holds_strings[descriptor.full_name] = True
        known = any(
            field.type == _STRING or (field.type == _MESSAGE and _has_strings(field.message_type))
            for field in descriptor.fields
        )
        _holds_strings[descriptor.full_name] = known
    return known
