"""Every threadstore ``Store`` as a ``ChatStore``: :class:`StoreChatStore`.

A record's ``chat_id`` is the chat's AG-UI thread id. Thread ids are unique per user, not
per store, so a ``StoreChatStore`` is bound to one user (``user_id``, the ``Scope.user_id``
of its records) and reads, lists and deletes only that user's chats. The user's UUID is
:func:`threadstore.keys.user_uuid_for` of the id: the id itself when it is a UUID, else
its uuid5, the same mapping the server uses for its users.

A save never rewrites history. The stored active branch is compared with the record,
message by message (AG-UI id and role; text content and tool call ids where the message
has them): what the record adds after the common prefix is written as new messages
under the last common one, in one transaction, so saving a superset of what is stored
writes only the new messages. When the record departs from the stored branch (an app
replaced its history: regenerate, edit-and-resend), the old messages stay as a branch and
the new ones become the active branch; a record that is a prefix of the stored branch
moves the active leaf back. Nothing is deleted by a save.

How AG-UI messages are stored: user, system and developer messages as the storage agent
stores client messages; an assistant message with its tool calls nested; a tool message
becomes the result of the call it answers when that call is on the branch and still has
none (as a client-side tool result is stored), otherwise a ``tool`` message; reasoning
and activity messages as messages of their role. Reading back is
:func:`~threadstore.agui.translate.translate_messages`, so a message's extra fields and
tool results sent as parts (stored as text) do not round-trip exactly.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import UTC
from typing import Any
from uuid import UUID, uuid4

import ag_ui.core as ag

from threadstore.chat._record import ChatRecord, Scope

# The one place this module takes AG-UI <-> stored-record conversion from.
from threadstore.codec import (
    AGUI_METADATA_KEY,
    TOOL_CALL_ID_METADATA_KEY,
    message_create_from_agui,
    translate_messages,
)
from threadstore.errors import CorruptRecordError, InvalidInputError
from threadstore.fold import pending_tool_calls, tool_result_text
from threadstore.keys import user_uuid_for
from threadstore.models import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    Role,
    ToolCall,
)
from threadstore.store import MAX_PAGE_SIZE, Store

__all__ = ["CHAT_RECORD_METADATA_KEY", "StoreChatStore"]

logger = logging.getLogger(__name__)

CHAT_RECORD_METADATA_KEY = "chat_record"
"""Key of ``Chat.metadata`` holding the record's scope and ``parent_id`` (set on creation)."""

_SCOPE_FIELDS = tuple(field.name for field in dataclasses.fields(Scope))


class StoreChatStore:
    """``save_chat`` / ``load_chat`` / ``delete_chat`` / ``list_chats`` on a ``Store``.

    Bound to the user ``user_id``; see the module docstring for how records map to chats.
    """

    def __init__(self, store: Store, user_id: str) -> None:
        if not isinstance(user_id, str) or not user_id:
            raise InvalidInputError("StoreChatStore needs a non-empty user_id")
        self.store = store
        self.user_id = user_id
        self.user_uuid: UUID = user_uuid_for(user_id)

    # --- the seam ------------------------------------------------------------------------

    async def save_chat(self, record: ChatRecord) -> None:
        """Write what ``record`` adds to the stored chat; keep what it leaves out as a branch."""
        if user_uuid_for(record.scope.user_id) != self.user_uuid:
            raise InvalidInputError(
                f"chat {record.chat_id!r} belongs to user {record.scope.user_id!r}; "
                f"this chat store is user {self.user_id!r}'s"
            )
        async with self.store.transaction():
            chat = await self.store.get_chat_by_thread_id(self.user_uuid, record.chat_id)
            if chat is None:
                chat = await self._create(record)
            else:
                await self._check_owner(chat, record)
            branch = list(await self.store.get_chat_messages(chat.chat_uuid))
            await self._write(chat, branch, record)

    async def load_chat(self, chat_id: str) -> ChatRecord | None:
        """The chat's active branch as AG-UI messages, or ``None`` when there is no such chat.

        A chat with a stored row that cannot be read loads as ``None`` with a logged
        warning naming it, as a corrupt file of the JSON-file store does.
        """
        try:
            return await self._load(chat_id)
        except CorruptRecordError as exc:
            logger.warning("chat %r: %s; loaded as None", chat_id, exc)
            return None

    async def _load(self, chat_id: str) -> ChatRecord | None:
        chat = await self.store.get_chat_by_thread_id(self.user_uuid, chat_id)
        if chat is None:
            return None
        branch = await self.store.get_chat_messages(chat.chat_uuid)
        updated = chat.updated_at
        return ChatRecord(
            chat_id=chat.thread_id,
            scope=self._scope_of(chat),
            messages=tuple(translate_messages(branch)),
            parent_id=await self._parent_id(chat),
            updated_at=updated if updated.tzinfo is not None else updated.replace(tzinfo=UTC),
        )

    async def delete_chat(self, chat_id: str) -> None:
        """Delete the chat and every message it holds; a missing one is not an error."""
        chat = await self.store.get_chat_by_thread_id(self.user_uuid, chat_id)
        if chat is not None:
            await self.store.delete_chat(chat.chat_uuid)

    async def list_chats(self, scope: Scope | None = None) -> list[str]:
        """The user's chat ids whose scope matches ``scope``, newest activity first."""
        if scope is not None and user_uuid_for(scope.user_id) != self.user_uuid:
            return []
        wanted = None if scope is None else dataclasses.replace(scope, user_id=self.user_id)
        found: list[str] = []
        cursor: str | None = None
        while True:
            page = await self.store.list_chats(
                self.user_uuid,
                limit=MAX_PAGE_SIZE,
                cursor=cursor,
                tenant_id=None if wanted is None else wanted.tenant_id,
                app_id=None if wanted is None else wanted.app_id,
            )
            found.extend(
                chat.thread_id
                for chat in page.items
                if wanted is None or wanted.matches(self._scope_of(chat))
            )
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    # --- chats ---------------------------------------------------------------------------

    def _recorded(self, chat: Chat) -> dict[str, Any]:
        value = chat.metadata.get(CHAT_RECORD_METADATA_KEY)
        return value if isinstance(value, dict) else {}

    def _scope_of(self, chat: Chat) -> Scope:
        recorded = self._recorded(chat).get("scope")
        extra = recorded if isinstance(recorded, dict) else {}
        return Scope(
            user_id=self.user_id,
            tenant_id=chat.tenant_id,
            app_id=chat.app_id,
            agent_id=extra.get("agent_id"),
            chat_id=extra.get("chat_id"),
        )

    async def _parent_id(self, chat: Chat) -> str | None:
        recorded = self._recorded(chat)
        if "parent_id" in recorded:
            parent = recorded["parent_id"]
            return parent if isinstance(parent, str) else None
        if chat.forked_from_chat_uuid is None:
            return None
        parent_chat = await self.store.get_chat(chat.forked_from_chat_uuid)
        if parent_chat is None or parent_chat.user_uuid != self.user_uuid:
            return None
        return parent_chat.thread_id

    async def _create(self, record: ChatRecord) -> Chat:
        scope = record.scope
        forked_chat: UUID | None = None
        forked_message: UUID | None = None
        if record.parent_id is not None:
            parent = await self.store.get_chat_by_thread_id(self.user_uuid, record.parent_id)
            if parent is not None:
                # The fork point: the last message the record shares with the parent.
                parent_branch = list(await self.store.get_chat_messages(parent.chat_uuid))
                kept = _common_nodes(parent_branch, record.messages)[0]
                forked_chat = parent.chat_uuid
                forked_message = parent_branch[kept - 1].message_uuid if kept else None
        return await self.store.create_chat(
            ChatCreate(
                user_uuid=self.user_uuid,
                thread_id=record.chat_id,
                tenant_id=scope.tenant_id,
                app_id=scope.app_id,
                forked_from_chat_uuid=forked_chat,
                forked_from_message_uuid=forked_message,
                metadata={
                    CHAT_RECORD_METADATA_KEY: {
                        "scope": {name: getattr(scope, name) for name in ("agent_id", "chat_id")},
                        "parent_id": record.parent_id,
                    }
                },
            )
        )

    async def _check_owner(self, chat: Chat, record: ChatRecord) -> None:
        """Refuse a record whose scope or lineage contradicts what the chat recorded."""
        recorded = self._recorded(chat).get("scope")
        known = set(recorded) if isinstance(recorded, dict) else set()
        stored = self._scope_of(chat)
        for name in _SCOPE_FIELDS:
            if name == "user_id" or (name in ("agent_id", "chat_id") and name not in known):
                continue
            if getattr(record.scope, name) != getattr(stored, name):
                raise InvalidInputError(
                    f"chat {record.chat_id!r} is stored with {name}={getattr(stored, name)!r}; "
                    f"the record says {getattr(record.scope, name)!r}"
                )
        if record.parent_id is not None:
            parent = await self._parent_id(chat)
            if parent != record.parent_id:
                raise InvalidInputError(
                    f"chat {record.chat_id!r} was forked from {parent!r}; "
                    f"the record says {record.parent_id!r}"
                )

    # --- messages ------------------------------------------------------------------------

    async def _write(self, chat: Chat, branch: list[Message], record: ChatRecord) -> None:
        kept, start = _common_nodes(branch, record.messages)
        tail = record.messages[start:]
        if kept == len(branch) and not tail:
            return  # nothing new
        if kept == 0 and branch and not tail:
            raise InvalidInputError(
                f"chat {record.chat_id!r}: the record holds no messages, and a saved chat keeps "
                "every message it had; save it under a new chat_id"
            )
        # Another first message starts a second root: the old history stays as a branch.
        new_root = kept == 0 and bool(branch)
        parent = branch[kept - 1].message_uuid if kept else None
        plan = _Plan(chat.chat_uuid, parent, pending_tool_calls(branch[:kept]))
        for message in tail:
            plan.add(message)
        for call_uuid, update in plan.results:
            await self.store.update_message_tool_call(call_uuid, update)
        for index, (create, calls) in enumerate(plan.nodes):
            if index == 0 and new_root:
                await self.store.create_root_message(create)
            else:
                await self.store.create_message(create)
            for call in calls:
                await self.store.create_message_tool_call(call)
        # Creating a message moves the active leaf to it; without one, move it back here.
        if not plan.nodes and parent is not None and parent != chat.active_leaf_uuid:
            await self.store.set_active_leaf(chat.chat_uuid, parent)


def _same(given: ag.Message, stored: ag.Message) -> bool:
    """Whether a record's message is the stored one (as the store reads it back)."""
    if given.id != stored.id or given.role != stored.role:
        return False
    mine: Any = getattr(given, "content", None)
    theirs: Any = getattr(stored, "content", None)
    if isinstance(given, ag.AssistantMessage) and isinstance(stored, ag.AssistantMessage):
        mine, theirs = mine or "", theirs or ""
        if [c.id for c in given.tool_calls or ()] != [c.id for c in stored.tool_calls or ()]:
            return False
    if isinstance(given, ag.ToolMessage) and isinstance(stored, ag.ToolMessage):
        if given.tool_call_id != stored.tool_call_id:
            return False
    # Text is compared where it is text on both sides; parts are matched by id alone.
    return not (isinstance(mine, str) and isinstance(theirs, str)) or mine == theirs


def _common_nodes(branch: Sequence[Message], messages: Sequence[ag.Message]) -> tuple[int, int]:
    """(stored messages the record keeps, record messages they account for).

    A stored message reads back as several AG-UI messages (its reasoning steps, itself,
    its tool results); it is kept only when the record has all of them in order.
    """
    kept = accounted = position = 0
    for node in branch:
        for expected in translate_messages([node]):
            if position >= len(messages) or not _same(messages[position], expected):
                return kept, accounted
            position += 1
        kept, accounted = kept + 1, position
    return kept, accounted


class _Plan:
    """The writes that append AG-UI messages under ``parent``, built before any is sent."""

    def __init__(self, chat_uuid: UUID, parent: UUID | None, pending: dict[str, ToolCall]) -> None:
        self.chat_uuid = chat_uuid
        self.parent = parent
        self.nodes: list[tuple[MessageCreate, list[MessageToolCallCreate]]] = []
        self.results: list[tuple[UUID, MessageToolCallUpdate]] = []
        self.stored_calls: dict[str, UUID] = {
            call_id: call.uuid for call_id, call in pending.items()
        }
        self.new_calls: dict[str, tuple[int, int]] = {}
        """Calls created by this save still without a result: (node index, call index)."""

    def add(self, message: ag.Message) -> None:
        if isinstance(message, ag.ToolMessage) and self._answer(message):
            return
        create = _message_create(message, self.chat_uuid).model_copy(
            update={"parent_uuid": self.parent, "message_uuid": uuid4()}
        )
        calls = [
            MessageToolCallCreate(
                message_uuid=create.message_uuid,
                tool_call_id=call.id,
                name=call.function.name,
                arguments=call.function.arguments,
                status=MessageStatus.COMPLETE,
                in_progress=False,
                # Where the storage agent keeps a call's encrypted value, read back from there.
                metadata={"encrypted_value": call.encrypted_value}
                if call.encrypted_value is not None
                else {},
            )
            for call in (
                message.tool_calls or () if isinstance(message, ag.AssistantMessage) else ()
            )
        ]
        for index, call in enumerate(calls):
            self.new_calls[call.tool_call_id] = (len(self.nodes), index)
        self.nodes.append((create, calls))
        self.parent = create.message_uuid

    def _answer(self, message: ag.ToolMessage) -> bool:
        """Make ``message`` the result of the call it answers, if that call awaits one."""
        text, _ = tool_result_text(message.content)
        result = {
            "content": text,
            "result_message_id": message.id,
            "error": message.error,
        }
        stored = self.stored_calls.pop(message.tool_call_id, None)
        if stored is not None:
            update = MessageToolCallUpdate(
                **result, status=MessageStatus.COMPLETE, in_progress=False
            )
            self.results.append((stored, update))
            return True
        new = self.new_calls.pop(message.tool_call_id, None)
        if new is not None:
            node, index = new
            calls = self.nodes[node][1]
            calls[index] = calls[index].model_copy(update=result)
            return True
        return False


def _message_create(message: ag.Message, chat_uuid: UUID) -> MessageCreate:
    """The stored form of one AG-UI message (tool calls and results aside)."""
    if isinstance(message, ag.UserMessage | ag.SystemMessage | ag.DeveloperMessage):
        return message_create_from_agui(message, chat_uuid, None)
    common: dict[str, Any] = {
        "chat_uuid": chat_uuid,
        "agui_id": message.id,
        "status": MessageStatus.COMPLETE,
        "in_progress": False,
    }
    if isinstance(message, ag.AssistantMessage):
        return MessageCreate(
            **common,
            role=Role.ASSISTANT,
            content=message.content or "",
            name=message.name,
            encrypted_value=message.encrypted_value,
            metadata={AGUI_METADATA_KEY: message.metadata} if message.metadata else {},
        )
    if isinstance(message, ag.ReasoningMessage):
        return MessageCreate(
            **common,
            role=Role.REASONING,
            content=message.content,
            encrypted_value=message.encrypted_value,
        )
    if isinstance(message, ag.ToolMessage):
        # A result for no call awaiting one: kept as a message naming its call.
        text, _ = tool_result_text(message.content)
        return MessageCreate(
            **common,
            role=Role.TOOL,
            content=text,
            encrypted_value=message.encrypted_value,
            metadata={TOOL_CALL_ID_METADATA_KEY: message.tool_call_id},
        )
    if isinstance(message, ag.ActivityMessage):
        return MessageCreate(
            **common,
            role=Role.ACTIVITY,
            activity_type=message.activity_type,
            activity_content=message.content,
        )
    raise InvalidInputError(f"message {message.id!r} has a role no store keeps: {message.role!r}")
