"""OpenAI Agents SDK face: a ``Session`` over any threadstore store.

Install with ``pip install "threadstore[openai-agents]"``.

:class:`ThreadstoreSession` behaves as the SDK's ``SQLiteSession``: items come back
in the order they were added, ``get_items(limit)`` returns the latest ``limit`` items
oldest first (``0`` none, a negative limit all; ``None`` the session settings' limit;
a compacted chat's items are its summary, as a system message, and the items after it),
``pop_item`` removes and returns the newest item, ``clear_session`` removes them all.

One item is one threadstore message on the chat of ``(user_uuid, session_id)``, so
the chat API and the AG-UI replay read the session too: user, system and developer
messages and assistant text keep their role and text, a ``function_call`` is an
assistant message with one tool call, a ``function_call_output`` a tool message
answering it, a ``reasoning`` item a reasoning message; other items are activity
messages named by their type. The item itself is kept, as the SDK gave it, as JSON
text in ``metadata["openai_agents"]`` and is what the session reads back, so every
item type round-trips exactly. Messages written by other faces read back as the
closest items (text messages, function calls and their outputs).

``pop_item`` moves the chat's active branch back by one message: the popped message
stays in the chat's tree off the active branch (as an edited message does) and no
face reads it again; popping the only message deletes the chat. Messages another face
wrote that have no item form (an activity, say) are removed on the way to the newest
item, as SQLiteSession drops rows it cannot read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast
from uuid import UUID

from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from threadstore.codec import TOOL_CALL_ID_METADATA_KEY
from threadstore.faces._chat import SessionChat, load_history
from threadstore.faces._finished import finished_message, finished_tool_call
from threadstore.fold import Record
from threadstore.models import Message, MessageToolCallCreate, Role, Summary
from threadstore.store import Store

__all__ = ["ThreadstoreSession"]

ITEM_METADATA_KEY = "openai_agents"
"""``Message.metadata`` key holding the item as JSON text."""

_PAGE = 500
"""Messages read per query when looking back for the latest items."""

_NEWEST = 2**63 - 1
"""A ``Message.seq`` cursor after every message: ``before=_NEWEST`` reads from the end."""

_ROLES = {
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "system": Role.SYSTEM,
    "developer": Role.DEVELOPER,
}


class ThreadstoreSession:
    """An Agents SDK session kept in a threadstore chat; ``session_id`` is its thread id.

    Pass an open :class:`~threadstore.Store`; use the session on the store's event loop.
    """

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        user_uuid: UUID,
        tenant_id: str | None = None,
        app_id: str | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.store = store
        self.user_uuid = user_uuid
        self._chat = SessionChat(store, user_uuid, session_id, tenant_id, app_id)
        self.session_settings: SessionSettings | None = session_settings or SessionSettings()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items, oldest first (all when the limit resolves to none)."""
        settings = self.session_settings
        size = limit if limit is not None else settings.limit if settings is not None else None
        if size == 0:
            return []
        chat_uuid = await self._chat.find()
        if chat_uuid is None:
            return []
        if size is None or size < 0:  # SQLite reads a negative LIMIT as no limit
            return await load_history(self.store, chat_uuid, history_items, summary_items)
        if await self.store.branches.summaries(chat_uuid):
            # A compacted chat: the latest items of what its agent is given.
            given = await load_history(self.store, chat_uuid, history_items, summary_items)
            return given[-size:]
        return await self._latest(chat_uuid, size)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order, all or nothing."""
        if items:
            await self._chat.append(lambda chat: [item_records(chat, one) for one in items])

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; ``None`` when the session is empty."""
        chat_uuid = await self._chat.find()
        if chat_uuid is None:
            return None
        async with self.store.transaction():
            # A message with no item form (another face's reasoning, say) goes with it, as
            # SQLiteSession drops unreadable rows on its way to the newest item.
            while newest := await self.store.get_chat_messages(chat_uuid, before=_NEWEST, limit=1):
                message = newest[0]
                if message.parent_uuid is None:
                    await self.store.delete_chat(chat_uuid)
                else:
                    await self.store.branches.set_active_leaf(chat_uuid, message.parent_uuid)
                items = session_items(message)
                if items:
                    return items[-1]
        return None

    async def clear_session(self) -> None:
        """Remove every item (the whole chat)."""
        await self._chat.delete()

    async def _latest(self, chat_uuid: UUID, size: int) -> list[TResponseInputItem]:
        """The latest ``size`` items, read back from the end a page of messages at a time."""
        items: list[TResponseInputItem] = []
        before = _NEWEST
        page_size = min(size, _PAGE)
        while len(items) < size:
            page = await self.store.get_chat_messages(chat_uuid, before=before, limit=page_size)
            items[:0] = [item for message in page for item in session_items(message)]
            if len(page) < page_size:
                break
            before = page[0].seq
        return items[-size:]


# --- conversion ------------------------------------------------------------------------------


def _text(content: Any) -> str:
    """The plain text of an item's content (a string, or parts with ``text``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def _str(item: Mapping[str, Any], key: str) -> str | None:
    value = item.get(key)
    return value if isinstance(value, str) else None


def item_records(chat_uuid: UUID, item: TResponseInputItem) -> Record:
    """The threadstore message (and tool call) that store one session item."""
    fields = cast(Mapping[str, Any], item)
    # As JSON text, not a JSON document: PostgreSQL's jsonb would read 1e16 back as an int.
    create = finished_message(
        chat_uuid,
        role=Role.ASSISTANT,  # items that are not a role's message (tool output...) are the agent's
        agui_id=_str(fields, "id"),
        metadata={ITEM_METADATA_KEY: json.dumps(item)},
    )
    kind = fields.get("type", "message")
    role = _ROLES.get(fields.get("role"), None) if kind == "message" else None  # type: ignore[arg-type]
    calls: list[MessageToolCallCreate] = []
    if role is not None:
        create.role, create.content = role, _text(fields.get("content"))
    elif kind == "function_call" and _str(fields, "call_id") and _str(fields, "name"):
        create.role = Role.ASSISTANT
        arguments = _str(fields, "arguments") or ""
        calls.append(
            finished_tool_call(create.message_uuid, fields["call_id"], fields["name"], arguments)
        )
    elif kind == "function_call_output" and _str(fields, "call_id"):
        create.role, create.content = Role.TOOL, _text(fields.get("output"))
        create.metadata[TOOL_CALL_ID_METADATA_KEY] = fields["call_id"]
    elif kind == "reasoning":
        create.role, create.content = Role.REASONING, _text(fields.get("summary"))
        create.encrypted_value = _str(fields, "encrypted_content")
    else:
        create.role, create.activity_type = Role.ACTIVITY, str(kind)
    return Record(create, calls)


def summary_items(summary: Summary) -> list[TResponseInputItem]:
    """What a compacted chat's summary reads as: one system message, before what follows it."""
    return [cast(TResponseInputItem, {"role": "system", "content": summary.content})]


def history_items(messages: Sequence[Message]) -> list[TResponseInputItem]:
    """The session items of a stored history, oldest first (new objects: nothing is shared)."""
    return [item for message in messages for item in session_items(message)]


def session_items(message: Message) -> list[TResponseInputItem]:
    """The session items a stored message reads as."""
    saved = message.metadata.get(ITEM_METADATA_KEY)
    if isinstance(saved, str):
        return [cast(TResponseInputItem, json.loads(saved))]
    return _from_other_face(message)


def _from_other_face(message: Message) -> list[TResponseInputItem]:
    """Read a message another face wrote: its text, tool calls and their results."""
    items: list[dict[str, Any]] = []
    role = message.role
    if role in (Role.USER, Role.SYSTEM, Role.DEVELOPER) or (
        role is Role.ASSISTANT and (message.content or not message.tool_calls)
    ):
        items.append({"role": role.value, "content": message.content})
    if role is Role.TOOL:
        call_id = message.metadata.get(TOOL_CALL_ID_METADATA_KEY)
        if isinstance(call_id, str):
            items.append(
                {"type": "function_call_output", "call_id": call_id, "output": message.content}
            )
    if role is Role.ASSISTANT:
        calls = sorted(message.tool_calls, key=lambda call: call.seq)
        items.extend(
            {
                "type": "function_call",
                "call_id": call.tool_call_id,
                "name": call.name,
                "arguments": call.arguments,
            }
            for call in calls
        )
        items.extend(
            {
                "type": "function_call_output",
                "call_id": call.tool_call_id,
                "output": call.content if call.content is not None else call.error or "",
            }
            for call in calls
            if call.content is not None or call.error is not None
        )
    return cast(list[TResponseInputItem], items)
