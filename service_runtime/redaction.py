"""Blanking of the fields marked ``(texera.lake.v1.sensitive) = true``, and of credentials in
free text.

Works on any message type by reading the option from the descriptors, so a
new secret field is redacted as soon as the .proto marks it. Text that others
wrote (a catalog's error message shown to a user) goes through
without_credentials.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from texera.lake.v1 import annotations_pb2

REDACTED = "[REDACTED]"


def _is_sensitive(field: FieldDescriptor) -> bool:
    return bool(field.GetOptions().Extensions[annotations_pb2.sensitive])


def _map_value_is_message(field: FieldDescriptor) -> bool | None:
    """None if the field is not a map, else whether its values are messages."""
    entry = field.message_type
    if entry is None or not entry.GetOptions().map_entry:
        return None
    return entry.fields_by_name["value"].message_type is not None


def _blank_value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_STRING:
        return REDACTED
    if field.type == FieldDescriptor.TYPE_BYTES:
        return REDACTED.encode()
    return type(value)()  # numbers, bools and enums become their zero value


def _blank_everything(message: Message) -> None:
    """Blanks every set field of a message that is sensitive as a whole."""
    for field, value in message.ListFields():
        _blank_field(message, field, value, force=True)


def _blank_field(message: Message, field: FieldDescriptor, value: Any, *, force: bool) -> None:
    sensitive = force or _is_sensitive(field)
    map_of_messages = _map_value_is_message(field)
    if map_of_messages is not None:
        if sensitive:
            message.ClearField(field.name)
        elif map_of_messages:
            for entry in value.values():
                _redact_in_place(entry)
        return
    if field.message_type is not None:
        children = value if field.is_repeated else [value]
        for child in children:
            (_blank_everything if sensitive else _redact_in_place)(child)
        return
    if not sensitive:
        return
    if field.is_repeated:
        blanked = [_blank_value(field, item) for item in value]
        message.ClearField(field.name)
        getattr(message, field.name).extend(blanked)
    else:
        setattr(message, field.name, _blank_value(field, value))


def _redact_in_place(message: Message) -> None:
    for field, value in message.ListFields():
        _blank_field(message, field, value, force=False)


def redact(message: Message) -> Message:
    """A copy of the message with every sensitive field blanked."""
    copy = type(message)()
    copy.CopyFrom(message)
    _redact_in_place(copy)
    return copy


def redacted_json(message: Message) -> dict[str, Any]:
    """The redacted message as a JSON-compatible dict, for log lines."""
    return json_format.MessageToDict(redact(message), preserving_proto_field_name=True)


#: Credentials as they appear in text: bearer tokens, JWTs, AWS access key ids, passwords in
#: URLs, and values named as secrets (``secret=…``, ``"token": "…"``).
_CREDENTIALS = (
    (re.compile(r"(?i)\b(bearer\s+)[\w.~+/=-]+"), rf"\1{REDACTED}"),
    (re.compile(r"\beyJ[\w-]*\.[\w-]+\.[\w-]*"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{12,}\b"), REDACTED),
    (re.compile(r"(://)[^/\s:@]+:[^/\s@]+@"), rf"\1{REDACTED}@"),
    (
        re.compile(
            r"(?i)\b([\w-]*(?:secret|token|password|passwd|signature|credential|api[_-]?key)"
            r"[\w-]*[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;}]+"
        ),
        rf"\1{REDACTED}",
    ),
)


def without_credentials(text: str) -> str:
    """text with anything that looks like a credential blanked."""
    for pattern, replacement in _CREDENTIALS:
        text = pattern.sub(replacement, text)
    return text
