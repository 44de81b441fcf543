"""The binary-safe JSON codec for chat records (``serialize_chat_record``).

Plain ``json.dumps`` cannot write bytes, so an image in a message part or a tool result in
``metadata`` would fail or decay. The codec writes ``bytes`` anywhere in the value as the
tag ``{"$deuzBytes": "<base64>"}`` — the same shape as the TypeScript SDK's codec, so a
record is readable by either side — and turns only that exact shape (one key, a valid
base64 string) back into bytes.

A plain object that happens to have exactly that shape (or the escape shape below) is
written as ``{"$deuzPlain": {...}}`` and read back unchanged, so every value round-trips
exactly; records without such look-alikes are byte-for-byte what the TypeScript codec
writes. Output is strict JSON: NaN and infinities are refused.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ag_ui.core import Message
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from threadstore.chat.record import ChatRecord, Scope

__all__ = [
    "BYTES_TAG",
    "PLAIN_TAG",
    "decode_value",
    "deserialize_chat_record",
    "encode_value",
    "serialize_chat_record",
]

BYTES_TAG = "$deuzBytes"
"""The key of the one-key object that stands for bytes."""

PLAIN_TAG = "$deuzPlain"
"""The key that wraps a plain object which would otherwise read as a tag."""

_TAGS = frozenset({BYTES_TAG, PLAIN_TAG})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)
_MESSAGE = TypeAdapter(Message)
_SCOPE_KEYS = {
    "user_id": "userId",
    "tenant_id": "tenantId",
    "app_id": "appId",
    "agent_id": "agentId",
    "chat_id": "chatId",
}


def encode_value(value: Any) -> Any:
    """Return ``value`` as JSON-compatible data, bytes written as the bytes tag."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {BYTES_TAG: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        encoded = {str(key): encode_value(item) for key, item in value.items()}
        if len(encoded) == 1 and next(iter(encoded)) in _TAGS:
            return {PLAIN_TAG: encoded}
        return encoded
    if isinstance(value, list | tuple):
        return [encode_value(item) for item in value]
    # Models, datetimes, UUIDs, decimals: pydantic's own JSON form, bytes still tagged.
    return encode_value(to_jsonable_python(value, bytes_mode="base64"))


def _bytes_of(tagged: Any) -> bytes | None:
    """The bytes a tag's value stands for, or ``None`` when it is not valid base64 text."""
    if not isinstance(tagged, str):
        return None
    try:
        return base64.b64decode(tagged.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None


def decode_value(value: Any) -> Any:
    """The inverse of :func:`encode_value` on parsed JSON."""
    if isinstance(value, list):
        return [decode_value(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, item),) = value.items()
        if key == BYTES_TAG:
            data = _bytes_of(item)
            if data is not None:
                return data
        elif key == PLAIN_TAG and isinstance(item, dict) and len(item) == 1:
            # An escaped look-alike: its own key is kept as data, its value decoded.
            return {name: decode_value(inner) for name, inner in item.items()}
    return {key: decode_value(item) for key, item in value.items()}


def _message_data(message: Message) -> dict[str, Any]:
    # Only what was set, as the TypeScript side leaves unset keys out; an explicit None
    # (even in an extra field) is kept. ``role`` picks the message type on the way back.
    data = message.model_dump(by_alias=True, exclude_unset=True)
    data["role"] = message.role
    return data


def _record_data(record: ChatRecord) -> dict[str, Any]:
    scope = {
        camel: getattr(record.scope, name)
        for name, camel in _SCOPE_KEYS.items()
        if getattr(record.scope, name) is not None
    }
    data: dict[str, Any] = {
        "chatId": record.chat_id,
        "scope": scope,
        "messages": [_message_data(message) for message in record.messages],
        "updatedAt": (record.updated_at - _EPOCH) // _MILLISECOND,
    }
    if record.parent_id is not None:
        data["parentId"] = record.parent_id
    return data


def serialize_chat_record(record: ChatRecord) -> str:
    """Return ``record`` as JSON text in which bytes at any depth survive."""
    return json.dumps(
        encode_value(_record_data(record)),
        ensure_ascii=False,
        allow_nan=False,
        separators=(",", ":"),
    )


def deserialize_chat_record(text: str | bytes) -> ChatRecord:
    """Parse :func:`serialize_chat_record` output; ``ValueError`` saying what is wrong."""
    try:
        data = decode_value(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ValueError(f"a chat record must be JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("a chat record must be a JSON object")
    for key in ("chatId", "scope", "messages", "updatedAt"):
        if key not in data:
            raise ValueError(f"a chat record needs {key!r}")
    scope_data = data["scope"]
    if not isinstance(scope_data, dict):
        raise ValueError("a chat record's 'scope' must be an object")
    updated = data["updatedAt"]
    if not isinstance(updated, int | float) or isinstance(updated, bool):
        raise ValueError("a chat record's 'updatedAt' must be milliseconds since the epoch")
    if not isinstance(data["messages"], list):
        raise ValueError("a chat record's 'messages' must be a list")
    try:
        values: dict[str, Any] = {
            name: scope_data.get(camel) for name, camel in _SCOPE_KEYS.items()
        }
        scope = Scope(**values)
        return ChatRecord(
            chat_id=data["chatId"],
            scope=scope,
            messages=tuple(_MESSAGE.validate_python(each) for each in data["messages"]),
            parent_id=data.get("parentId"),
            updated_at=_EPOCH + timedelta(milliseconds=updated),
        )
    # pydantic's ValidationError is a ValueError.
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"not a valid chat record: {exc}") from exc
