"""Protobuf messages built at runtime, for the service messages the Python SDK does not ship.

No protoc step and no generated file: a FileDescriptorProto is assembled from a short table of
fields, added to the default descriptor pool with a dependency on one of the SDK's proto files
(so the SDK's own message types can be reused as field types), and turned into classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
# (field name, number, label, type, type name for message and enum fields or "")
Field = tuple[str, int, int, int, str]


def build_messages(
    file_name: str,
    package: str,
    dependency: str,
    messages: Sequence[tuple[str, Sequence[Field]]],
    enums: Mapping[str, Sequence[tuple[str, int]]] | None = None,
) -> dict[str, Any]:
    """Message classes by name, registered once in the default pool under ``file_name``."""
    pool = descriptor_pool.Default()
    try:  # already registered (the module imported under a second name, e.g. by pytest)
        descriptor = pool.FindFileByName(file_name)
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto(
            name=file_name, package=package, syntax="proto2", dependency=[dependency]
        )
        for enum_name, values in (enums or {}).items():
            enum = proto.enum_type.add(name=enum_name)
            for name, number in values:
                enum.value.add(name=name, number=number)
        for message_name, fields in messages:
            message = proto.message_type.add(name=message_name)
            for name, number, label, kind, type_name in fields:
                field = message.field.add(name=name, number=number, label=label, type=kind)
                if type_name:
                    field.type_name = type_name
        pool.AddSerializedFile(proto.SerializeToString())
        descriptor = pool.FindFileByName(file_name)
    return {
        name: message_factory.GetMessageClass(descriptor.message_types_by_name[name])
        for name, _fields in messages
    }
