"""Every threadstore ``Store`` as a ``ChatStore``: :class:`StoreChatStore`.

A record's ``chat_id`` is the chat's AG-UI thread id. Thread ids are unique per user, not
per store, so a ``StoreChatStore`` is bound to one user (``user_id``, the ``Scope.user_id``
of its records) and reads, lists and deletes only that user's chats. The user's UUID is
:func:`threadstore.keys.user_uuid_for` of the id: the id itself when it is a UUID, else
its uuid5, the same mapping the server uses for its users.

A save never rewrites history. The stored active branch is compared with the record,
message by message (AG-UI id and role; text content and tool call ids where the message
has them) through the one append plan (:func:`threadstore.fold.plan_append`, against the
translation the store keeps with the history): what the record adds after the common
prefix is written as new messages under the last common one, in one batch, so saving a
superset of what is stored writes only the new messages and costs what they cost. When
the record departs from the stored branch (an app replaced its history: regenerate,
edit-and-resend), the old messages stay as a branch and the new ones become the active
branch; a record that is a prefix of the stored branch moves the active leaf back.
Nothing is deleted by a save.

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
from datetime import UTC
from typing import Any
from uuid import UUID

from threadstore.chatstore._record import ChatRecord, Scope
from threadstore.codec import TRANSLATION
from threadstore.errors import CorruptRecordError, InvalidInputError
from threadstore.fold import HISTORY_INDEX, plan_append
from threadstore.keys import user_uuid_for
from threadstore.models import Chat, ChatCreate
from threadstore.store import MAX_PAGE_SIZE, HistoryView, Store
from threadstore.store.ops import CreateMessage

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
            await self._write(chat, await self._history(chat.chat_uuid), record)

    async def load_chat(self, chat_id: str) -> ChatRecord | None:
        """The chat's active branch as AG-UI messages, or ``None`` when there is no such chat.

        The messages are the translation the store keeps with the chat's history, shared
        with later loads and saves, not copied: a record is a value, so build new messages
        instead of changing loaded ones (a save of what was loaded then costs a pointer
        comparison per message). A chat with a stored row that cannot be read loads as
        ``None`` with a logged warning naming it, as a corrupt file of the JSON-file
        store does.
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
        history = await self._history(chat.chat_uuid)
        updated = chat.updated_at
        return ChatRecord(
            chat_id=chat.thread_id,
            scope=self._scope_of(chat),
            messages=tuple(history.derived(TRANSLATION).upto(len(history))),
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
            page = await self.store.chats.list_chats(
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

    async def _history(self, chat_uuid: UUID) -> HistoryView:
        # Kept with the store's history: a save compares and writes only what changed.
        return await self.store.messages.read_history(chat_uuid, TRANSLATION, HISTORY_INDEX)

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
        parent_chat = await self.store.chats.get_chat(chat.forked_from_chat_uuid)
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
                history = await self._history(parent.chat_uuid)
                translation = history.derived(TRANSLATION)
                kept = plan_append(
                    parent.chat_uuid, translation, len(history), record.messages
                ).kept
                forked_chat = parent.chat_uuid
                forked_message = _uuid_at(history, kept - 1) if kept else None
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

    async def _write(self, chat: Chat, history: HistoryView, record: ChatRecord) -> None:
        index = history.derived(HISTORY_INDEX)
        length = len(history)
        plan = plan_append(
            chat.chat_uuid,
            history.derived(TRANSLATION),
            length,
            record.messages,
            lambda kept: index.at(kept).pending,
        )
        kept = plan.kept
        if kept == length and not plan.records and not plan.results:
            return  # nothing new
        if kept == 0 and length and not plan.records:
            raise InvalidInputError(
                f"chat {record.chat_id!r}: the record holds no messages, and a saved chat keeps "
                "every message it had; save it under a new chat_id"
            )
        parent = _uuid_at(history, kept - 1) if kept else None
        writes = plan.writes(parent)
        if kept == 0 and length:
            # Another first message starts a second root: the old history stays a branch.
            first = writes.pop(len(plan.results))
            assert isinstance(first, CreateMessage)
            await self.store.branches.create_root_message(first.data)
        if writes:
            await self.store.apply_writes(writes)
        # Creating a message moves the active leaf to it; without one, move it back here.
        if not plan.records and parent is not None and parent != chat.active_leaf_uuid:
            await self.store.branches.set_active_leaf(chat.chat_uuid, parent)


def _uuid_at(history: HistoryView, at: int) -> UUID:
    """The uuid of the history's message at ``at`` (from its index, nothing built)."""
    return UUID(int=history.derived(HISTORY_INDEX).uuids[at])
