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
# Message type -> its fields that hold a string at any depth.
_holding_strings: dict[str, tuple[FieldDescriptor, ...]] = {}
_singular: dict[str, tuple[str, ...] | None] = {}  # see `_singular_fields`


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
    if _string_fields(message.DESCRIPTOR):
        _check(message, "")


def _check(message: Message, prefix: str) -> None:
    # Only the fields that can hold a string are looked at: ListFields would build every set
    # field's value (a row's bytes, for each row of a batch) just to skip it.
    for field in _string_fields(message.DESCRIPTOR):
        if field.label == _REPEATED:
            values = getattr(message, field.name)
        elif message.HasField(field.name):
            values = (getattr(message, field.name),)
        else:
            continue
        if field.type == _STRING:
            for item in values:
                if not isinstance(item, str):
                    raise invalid(f"The value of field '{prefix}{field.name}' is not valid UTF-8.")
            continue
        nested = f"{prefix}{field.name}."
        singular = _singular_fields(field.message_type)
        for item in values:
            # A batch's rows: most set none of their string-holding fields (all singular), and
            # asking costs less than walking each row.
            if singular is None or any(map(item.HasField, singular)):
                _check(item, nested)


def _singular_fields(descriptor: Descriptor) -> tuple[str, ...] | None:
    """The names of a message type's string-holding fields when none is repeated (a message
    with none of them set holds no string), else None."""
    key = descriptor.full_name
    if key not in _singular:
        fields = _string_fields(descriptor)
        repeated = any(f.label == _REPEATED for f in fields)
        _singular[key] = None if repeated else tuple(f.name for f in fields)
    return _singular[key]


def _string_fields(descriptor: Descriptor) -> tuple[FieldDescriptor, ...]:
    """The fields of a message type that hold a string at any depth (most row traffic: none)."""
    known = _holding_strings.get(descriptor.full_name)
    if known is None:
        # Met again while deciding (a recursive type): assume its message fields do, at worst a
        # needless walk.
        _holding_strings[descriptor.full_name] = tuple(
            f for f in descriptor.fields if f.type in (_STRING, _MESSAGE)
        )
        known = tuple(
            field
            for field in descriptor.fields
            if field.type == _STRING or (field.type == _MESSAGE and _string_fields(field.message_type))
        )
        _holding_strings[descriptor.full_name] = known
    return known
