"""A repository written only against the Protocols: dicts in memory, no threadstore ``Store``.

It implements ``ChatRepositoryLike``, ``MessageRepositoryLike`` and ``RunRepositoryLike``
and nothing else, the way an app's own repository would, so that the contract suite
(``threadstore.testing``) can show it proves such a repository without the Store API.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from threadstore import (
    Chat,
    ChatCreate,
    ConflictError,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    NotFoundError,
    Reasoning,
    Run,
    RunStatus,
    ToolCall,
)
from threadstore.keys import chat_deduplication_key
from threadstore.models import utcnow


@dataclass
class _Tables:
    """Everything the repository holds; a transaction restores a copy of it on failure."""

    chats: dict[UUID, Chat] = field(default_factory=dict)
    messages: dict[UUID, Message] = field(default_factory=dict)
    runs: dict[tuple[UUID, str], Run] = field(default_factory=dict)
    seq: int = 0


class DictRepository:
    """Chats, messages (with tool calls and reasoning) and runs in dicts.

    Every method returns copies, so a caller that mutates a result changes nothing
    stored. ``transaction()`` holds a lock that the other tasks' calls wait for, and
    puts the tables back as they were when the block raises.
    """

    def __init__(self) -> None:
        self._tables = _Tables()
        self._lock = asyncio.Lock()
        self._owner: asyncio.Task[Any] | None = None

    @asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """Run one call alone, or inside the current task's transaction."""
        if self._owner is asyncio.current_task():
            yield
            return
        async with self._lock:
            yield

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Group the writes inside the block: all or nothing; nesting joins the outer one."""
        if self._owner is asyncio.current_task():
            yield
            return
        async with self._lock:
            self._owner = asyncio.current_task()
            before = copy.deepcopy(self._tables)
            try:
                yield
            except BaseException:
                self._tables = before
                raise
            finally:
                self._owner = None

    # --- chats -----------------------------------------------------------------------------

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        if chat_data.user_uuid is None:
            raise ValueError("ChatCreate.user_uuid is required")
        if chat_data.thread_id is None:
            raise ValueError("ChatCreate.thread_id is required")
        async with self._turn():
            existing = self._find_chat(chat_data.user_uuid, chat_data.thread_id)
            if existing is not None:
                return existing.model_copy(deep=True)
            chat = Chat(
                **chat_data.model_dump(),
                dedup_key=chat_deduplication_key(chat_data.user_uuid, chat_data.thread_id),
            )
            self._tables.chats[chat.chat_uuid] = chat
            return chat.model_copy(deep=True)

    def _find_chat(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        for chat in self._tables.chats.values():
            if (chat.user_uuid, chat.thread_id) == (user_uuid, thread_id):
                return chat
        return None

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        async with self._turn():
            chat = self._find_chat(user_uuid, thread_id)
            return None if chat is None else chat.model_copy(deep=True)

    async def get_all_chats(self, user_uuid: UUID | None = None) -> Sequence[Chat]:
        async with self._turn():
            chats = self._tables.chats.values()
            return [c.model_copy(deep=True) for c in chats if user_uuid in (None, c.user_uuid)]

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Chat | None:
        async with self._turn():
            chat = self._tables.chats.get(chat_uuid)
            if chat is None:
                return None
            chat.name, chat.updated_at = name, utcnow()
            return chat.model_copy(deep=True)

    async def delete_chat(self, chat_uuid: UUID) -> Chat | None:
        async with self._turn():
            chat = self._tables.chats.pop(chat_uuid, None)
            if chat is None:
                return None
            tables = self._tables
            tables.messages = {k: m for k, m in tables.messages.items() if m.chat_uuid != chat_uuid}
            tables.runs = {k: r for k, r in tables.runs.items() if k[0] != chat_uuid}
            return chat

    # --- messages --------------------------------------------------------------------------

    def _next_seq(self) -> int:
        self._tables.seq += 1
        return self._tables.seq

    async def create_message(self, message_data: MessageCreate) -> Message:
        async with self._turn():
            if message_data.chat_uuid is None:
                raise ValueError("MessageCreate.chat_uuid is required")
            chat = self._tables.chats.get(message_data.chat_uuid)
            if chat is None:
                raise ValueError(f"unknown chat {message_data.chat_uuid}")
            if message_data.message_uuid in self._tables.messages:
                raise ConflictError(f"message {message_data.message_uuid} exists")
            parent_uuid = message_data.parent_uuid or chat.active_leaf_uuid
            if message_data.parent_uuid is not None:
                parent = self._tables.messages.get(message_data.parent_uuid)
                if parent is None:
                    raise NotFoundError(f"unknown parent message {message_data.parent_uuid}")
                if parent.chat_uuid != chat.chat_uuid:
                    raise ValueError("the parent message belongs to another chat")
            fields = message_data.model_dump(exclude={"created_at", "parent_uuid"})
            now = utcnow()
            message = Message(
                **fields,
                parent_uuid=parent_uuid,
                seq=self._next_seq(),
                created_at=message_data.created_at or now,
            )
            self._tables.messages[message.message_uuid] = message
            chat.active_leaf_uuid, chat.updated_at = message.message_uuid, now
            return message.model_copy(deep=True)

    async def update_message(self, message_uuid: UUID, update: MessageUpdate) -> Message | None:
        async with self._turn():
            message = self._tables.messages.get(message_uuid)
            if message is None:
                return None
            _patch(message, update)
            return message.model_copy(deep=True)

    def _owner_of(self, message_uuid: UUID) -> Message:
        message = self._tables.messages.get(message_uuid)
        if message is None:
            raise ValueError(f"unknown message {message_uuid}")
        return message

    def _taken(self, uuid: UUID) -> bool:
        return any(
            uuid in {c.uuid for c in m.tool_calls} | {r.uuid for r in m.reasonings}
            for m in self._tables.messages.values()
        )

    async def create_message_tool_call(self, data: MessageToolCallCreate) -> ToolCall:
        async with self._turn():
            message = self._owner_of(data.message_uuid)
            if self._taken(data.uuid):
                raise ConflictError(f"tool call {data.uuid} exists")
            call = ToolCall(**data.model_dump(), seq=_next_part(message))
            message.tool_calls.append(call)
            return call.model_copy(deep=True)

    async def update_message_tool_call(
        self, uuid: UUID, update: MessageToolCallUpdate
    ) -> ToolCall | None:
        async with self._turn():
            for message in self._tables.messages.values():
                for call in message.tool_calls:
                    if call.uuid == uuid:
                        _patch(call, update)
                        return call.model_copy(deep=True)
            return None

    async def create_message_reasoning(self, data: MessageReasoningCreate) -> Reasoning:
        async with self._turn():
            message = self._owner_of(data.message_uuid)
            if self._taken(data.uuid):
                raise ConflictError(f"reasoning step {data.uuid} exists")
            reasoning = Reasoning(**data.model_dump(), seq=_next_part(message))
            message.reasonings.append(reasoning)
            return reasoning.model_copy(deep=True)

    async def update_message_reasoning(
        self, uuid: UUID, update: MessageReasoningUpdate
    ) -> Reasoning | None:
        async with self._turn():
            for message in self._tables.messages.values():
                for reasoning in message.reasonings:
                    if reasoning.uuid == uuid:
                        _patch(reasoning, update)
                        return reasoning.model_copy(deep=True)
            return None

    async def get_message(self, message_uuid: UUID) -> Message | None:
        async with self._turn():
            message = self._tables.messages.get(message_uuid)
            return None if message is None else message.model_copy(deep=True)

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> Message | None:
        async with self._turn():
            for message in self._tables.messages.values():
                if (message.chat_uuid, message.agui_id) == (chat_uuid, agui_id):
                    return message.model_copy(deep=True)
            return None

    async def get_tool_call_by_agui_id(
        self, message_uuid: UUID, tool_call_id: str
    ) -> ToolCall | None:
        async with self._turn():
            message = self._tables.messages.get(message_uuid)
            for call in message.tool_calls if message else []:
                if call.tool_call_id == tool_call_id:
                    return call.model_copy(deep=True)
            return None

    def _branch(self, chat_uuid: UUID) -> list[Message]:
        """The chat's active branch, oldest first."""
        chat = self._tables.chats.get(chat_uuid)
        branch: list[Message] = []
        at = chat.active_leaf_uuid if chat else None
        while at is not None:
            message = self._tables.messages[at]
            branch.append(message)
            at = message.parent_uuid
        return branch[::-1]

    async def get_chat_messages(self, chat_uuid: UUID) -> Sequence[Message]:
        async with self._turn():
            return [m.model_copy(deep=True) for m in self._branch(chat_uuid)]

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        async with self._turn():
            last = {c: self._branch(c)[-1:] for c in chat_uuids}
            return {c: m[0].model_copy(deep=True) for c, m in last.items() if m}

    # --- runs ------------------------------------------------------------------------------

    async def start_run(self, run: Run) -> Run:
        async with self._turn():
            if run.chat_uuid not in self._tables.chats:
                raise ValueError(f"unknown chat {run.chat_uuid}")
            stored = self._tables.runs.setdefault((run.chat_uuid, run.run_id), run.model_copy())
            return stored.model_copy(deep=True)

    async def heartbeat_runs(self, owner: str, run_ids: Sequence[tuple[UUID, str]]) -> None:
        async with self._turn():
            for key in run_ids:
                run = self._tables.runs.get(key)
                if run is not None and run.owner == owner and run.status is RunStatus.RUNNING:
                    run.heartbeat_at = utcnow()

    async def finish_run(
        self, chat_uuid: UUID, run_id: str, status: RunStatus, error: str | None = None
    ) -> Run | None:
        async with self._turn():
            run = self._tables.runs.get((chat_uuid, run_id))
            if run is None:
                return None
            run.status, run.error, run.updated_at = status, error, utcnow()
            return run.model_copy(deep=True)

    async def get_run(self, chat_uuid: UUID, run_id: str) -> Run | None:
        async with self._turn():
            run = self._tables.runs.get((chat_uuid, run_id))
            return None if run is None else run.model_copy(deep=True)

    async def get_stale_runs(self, older_than: datetime) -> Sequence[Run]:
        async with self._turn():
            return [
                r.model_copy(deep=True)
                for r in self._tables.runs.values()
                if r.status is RunStatus.RUNNING and r.heartbeat_at < older_than
            ]


def _next_part(message: Message) -> int:
    """The ``seq`` of a message's next tool call or reasoning step: production order, from 1."""
    return len(message.tool_calls) + len(message.reasonings) + 1


def _patch(record: Any, update: Any) -> None:
    """Apply the explicitly-set, non-None fields of ``update`` to ``record``."""
    for name in update.model_fields_set:
        value = getattr(update, name)
        if value is not None:
            setattr(record, name, copy.deepcopy(value))
    record.updated_at = utcnow()
