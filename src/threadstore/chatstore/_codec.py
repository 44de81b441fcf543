"""The binary-safe JSON codec for chat records (``serialize_chat_record``).

Bytes anywhere in a record (message parts, metadata, tool results) are written with the
value codec of :mod:`threadstore.binary_json` (the tag ``{"$deuzBytes": "<base64>"}``,
the same shape as the TypeScript SDK's codec, so a record is readable by either side);
the store uses that same codec for its JSON columns. Records without look-alikes of the
tag are byte-for-byte what the TypeScript codec writes. Output is strict JSON: NaN and
infinities are refused.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from ag_ui.core import Message
from pydantic import TypeAdapter

from threadstore.binary_json import BYTES_TAG, PLAIN_TAG, decode_value, encode_value
from threadstore.chatstore._record import ChatRecord, Scope

__all__ = [
    "BYTES_TAG",
    "PLAIN_TAG",
    "decode_value",
    "deserialize_chat_record",
    "encode_value",
    "serialize_chat_record",
]

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
