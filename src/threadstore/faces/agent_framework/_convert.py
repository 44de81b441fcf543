"""Agent Framework ``Message`` <-> threadstore records.

A framework message becomes one threadstore message that every other face can read:
its role, its text as ``content``, data and URI contents as ``content_parts``,
``text_reasoning`` contents as nested reasoning steps and ``function_call`` contents as
nested tool calls. A ``tool`` message's ``function_result`` contents are also written
onto the tool calls they answer (see :mod:`.history`), which is where the AG-UI replay
and the chat API read tool results.

Every content type has fields no other face has a place for (usage, errors, hosted
tools, approvals, annotations, additional properties), so the framework's own
serialization of the message (``Message.to_dict()``) is kept under
``metadata["agent_framework"]`` and is what reads back: the round trip is exact. A
message of one plain text needs none: its fields hold all of it.
A record written by another face (no such key) is read from its own fields.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID, uuid4

from agent_framework import Content
from agent_framework import Message as AFMessage

from threadstore.codec import TOOL_CALL_ID_METADATA_KEY
from threadstore.faces._finished import finished_message, finished_tool_call
from threadstore.fold import Record
from threadstore.models import (
    ContentPart,
    MediaPart,
    Message,
    MessageReasoningCreate,
    MessageStatus,
    Role,
    TextPart,
)

__all__ = [
    "METADATA_KEY",
    "Plain",
    "message_identity",
    "message_to_records",
    "messages_of",
    "plain_reading",
    "read_record",
    "records_to_messages",
    "result_text",
]

METADATA_KEY = "agent_framework"
"""Key of ``Message.metadata`` holding the framework's own form of the message."""

_PLAIN_ROLES = ("user", "assistant", "system")

# Activity messages are UI-only: the framework has no form for them.
_NATIVE_ROLES = {
    Role.USER: "user",
    Role.SYSTEM: "system",
    Role.DEVELOPER: "system",
    Role.ASSISTANT: "assistant",
    Role.REASONING: "assistant",
}

_ROLES = {role.value for role in Role}

_MEDIA_KINDS = ("image", "audio", "video")


def message_identity(message: AFMessage) -> tuple[str, ...]:
    """Return what makes two framework messages the same one (its id, else role and contents).

    The same rule as the framework's own providers, so a message re-sent without an
    id is still recognised.
    """
    if message.message_id is not None:
        return ("id", message.message_id)
    contents = json.dumps(
        [content.to_dict() for content in message.contents], sort_keys=True, default=str
    )
    return ("content", str(message.role), contents)


def call_ids(message: AFMessage, kind: str) -> set[str]:
    """The call ids of the message's contents of ``kind`` (``function_call`` or ``_result``)."""
    return {
        content.call_id
        for content in message.contents
        if content.type == kind and content.call_id is not None
    }


def result_text(result: Any) -> str:
    """Return a tool result as the text the other faces show (JSON unless already a string)."""
    if isinstance(result, str):
        return result
    if isinstance(result, list) and all(isinstance(item, Content) for item in result):
        return "\n".join(item.text or "" for item in result if item.type == "text")
    return json.dumps(result, default=str)


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)


def _media_part(content: Content) -> MediaPart:
    media_type = content.media_type or ""
    kind = media_type.split("/", 1)[0]
    part_type: Any = kind if kind in _MEDIA_KINDS else "document"
    uri = content.uri or ""
    if content.type == "data" and uri.startswith("data:") and ";base64," in uri:
        # Text that is not base64 is kept as the URI it came as (binascii.Error is a ValueError).
        with contextlib.suppress(ValueError):
            data = base64.b64decode(uri.split(";base64,", 1)[1], validate=True)
            return MediaPart(type=part_type, source="data", data=data, mime_type=content.media_type)
    return MediaPart(type=part_type, source="url", value=uri, mime_type=content.media_type)


def _content_parts(message: AFMessage) -> list[ContentPart] | None:
    if not any(content.type in ("data", "uri") for content in message.contents):
        return None
    parts: list[ContentPart] = []
    for content in message.contents:
        if content.type == "text":
            parts.append(TextPart(text=content.text or ""))
        elif content.type in ("data", "uri"):
            parts.append(_media_part(content))
    return parts


def message_to_records(message: AFMessage, chat_uuid: UUID) -> Record:
    """Return the records that store ``message`` in the chat ``chat_uuid``."""
    role = Role(message.role) if message.role in _ROLES else Role.ASSISTANT
    results = [
        (content.call_id, result_text(content.result))
        for content in message.contents
        if content.type == "function_result" and content.call_id is not None
    ]
    own_form = _own_form_to_keep(message)
    metadata: dict[str, Any] = {} if own_form is None else {METADATA_KEY: own_form}
    text = message.text if role is not Role.TOOL else "\n".join(text for _, text in results)
    record = finished_message(
        chat_uuid,
        role=role,
        content=text,
        agui_id=message.message_id,
        name=message.author_name,
        content_parts=_content_parts(message),
        metadata=metadata,
        message_uuid=uuid4(),
    )
    tool_calls = [
        finished_tool_call(
            record.message_uuid,
            content.call_id or str(uuid4()),
            content.name or "",
            _arguments_text(content.arguments),
        )
        for content in message.contents
        if content.type == "function_call"
    ]
    reasonings = [
        MessageReasoningCreate(
            message_uuid=record.message_uuid,
            agui_id=content.id,
            content=content.text or "",
            encrypted_value=content.protected_data,
            status=MessageStatus.COMPLETE,
            in_progress=False,
        )
        for content in message.contents
        if content.type == "text_reasoning"
    ]
    return Record(record, tool_calls, reasonings, results)


def _own_form_to_keep(message: AFMessage) -> dict[str, Any] | None:
    """Return the framework form to keep in the record, or ``None`` when its fields hold it all.

    A message of one non-empty plain text (most of a conversation) reads back exactly
    from the record's own fields, as any other face's record does; checked here against
    the framework's own form, ``Message.to_dict()``.
    """
    full = message.to_dict()
    contents = message.contents
    if (
        message.role in _PLAIN_ROLES
        and len(contents) == 1
        and contents[0].type == "text"
        and contents[0].text
        and full
        == AFMessage(
            message.role,
            [Content.from_text(contents[0].text)],
            author_name=message.author_name,
            message_id=message.message_id,
        ).to_dict()
    ):
        return None
    return full


def _own_form(record: Message) -> AFMessage | None:
    stored = record.metadata.get(METADATA_KEY)
    # The framework's message keeps parts of the dict it is built from (arguments,
    # results, properties), and the record may be the store's own: build from a copy.
    return AFMessage.from_dict(copy.deepcopy(stored)) if isinstance(stored, dict) else None


def _native_contents(record: Message) -> list[Content]:
    contents: list[Content] = [
        Content.from_text_reasoning(
            id=step.agui_id, text=step.content or None, protected_data=step.encrypted_value
        )
        for step in sorted(record.reasonings, key=lambda step: step.seq)
    ]
    if record.content_parts:
        for part in record.content_parts:
            if isinstance(part, TextPart):
                contents.append(Content.from_text(part.text))
            elif part.source == "data" and part.data is not None:
                contents.append(
                    Content.from_data(part.data, part.mime_type or "application/octet-stream")
                )
            elif part.value is not None:
                contents.append(Content.from_uri(part.value, media_type=part.mime_type))
    elif record.content:
        contents.append(Content.from_text(record.content))
    contents.extend(
        Content.from_function_call(call.tool_call_id, call.name, arguments=call.arguments or None)
        for call in sorted(record.tool_calls, key=lambda call: call.seq)
    )
    return contents


def _native(record: Message, answered: set[str]) -> list[AFMessage]:
    """Read a record another face wrote: the message, then a tool message with its results."""
    if record.role is Role.TOOL:
        call_id = record.metadata.get(TOOL_CALL_ID_METADATA_KEY)
        if not isinstance(call_id, str) or call_id in answered:
            return []
        answered.add(call_id)
        result = Content.from_function_result(call_id, result=record.content)
        return [AFMessage("tool", [result], message_id=record.agui_id)]
    role = _NATIVE_ROLES.get(record.role)
    if role is None:
        return []
    out = [
        AFMessage(
            role,
            _native_contents(record),
            author_name=record.name,
            message_id=record.agui_id,
        )
    ]
    results = [
        Content.from_function_result(call.tool_call_id, result=call.content or call.error)
        for call in sorted(record.tool_calls, key=lambda call: call.seq)
        if (call.content is not None or call.error is not None)
        and call.tool_call_id not in answered
    ]
    answered.update(content.call_id for content in results if content.call_id is not None)
    if results:
        out.append(AFMessage("tool", results))
    return out


Plain = tuple[str, str | None, str | None, str | None]
"""A record read without the general assembly: role, text (``None`` when empty), author, id."""


def plain_reading(record: Message) -> Plain | None:
    """Return the fields ``record`` reads from when it is plain, else ``None``.

    Plain: one text (or none) and nothing else, which is most of a conversation, of
    whichever face. :func:`messages_of` builds such a record's message from these
    fields alone, the same message :func:`read_record` builds.
    """
    role = _NATIVE_ROLES.get(record.role)
    if (
        role is None
        or record.reasonings
        or record.tool_calls
        or record.content_parts
        or METADATA_KEY in record.metadata
    ):
        return None
    return (role, record.content or None, record.name, record.agui_id)


def messages_of(
    records: Sequence[Message], readings: Sequence[Plain | None], answered: set[str]
) -> list[AFMessage]:
    """Return the framework messages of ``records``, given each one's :func:`plain_reading`.

    A plain record's message is built from its reading: one text content, then the
    message, the least the framework's constructors allow. Any other record is read
    by :func:`read_record`. ``answered`` is as in :func:`records_to_messages`.
    """
    if len(records) != len(readings):
        raise ValueError(f"{len(records)} records and {len(readings)} readings")
    out: list[AFMessage] = []
    append = out.append
    for index, reading in enumerate(readings):
        if reading is None:  # only such a record is read (a history builds it on access)
            out.extend(read_record(records[index], answered))
            continue
        role, text, name, message_id = reading
        append(
            AFMessage(
                role,
                None if text is None else [Content("text", text=text)],
                author_name=name,
                message_id=message_id,
            )
        )
    return out


def records_to_messages(
    records: Sequence[Message], answered: set[str] | None = None
) -> list[AFMessage]:
    """Return the framework messages of a stored history (oldest first).

    They share nothing mutable with ``records``, so ``records`` may be the store's own.
    ``answered`` (the tool call ids answered so far) carries a conversion fed in pieces
    from one piece to the next; it is updated in place.
    """
    readings = [plain_reading(record) for record in records]
    return messages_of(records, readings, set() if answered is None else answered)


def read_record(record: Message, answered: set[str]) -> list[AFMessage]:
    """Return the framework messages of one record: none, it, or it and its tool results.

    Reads any record, the general way: the framework form kept in it, else its own
    fields (the reference read: :func:`messages_of` builds plain records without it).
    ``answered`` is as in :func:`records_to_messages`.
    """
    own = _own_form(record)
    if own is None:
        return _native(record, answered)
    answered.update(call_ids(own, "function_result"))
    return [own]
