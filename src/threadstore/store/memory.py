"""The in-memory backend: a real store that copies on every read and write.

It keeps the same rules as the SQL backends (idempotent create, cascading delete,
foreign keys, transactions that roll back) so tests written against it hold on
them, and so aliasing bugs show up here first.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Hashable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from threadstore.errors import ConflictError, NotFoundError, RunLiveError
from threadstore.keys import chat_deduplication_key
from threadstore.models import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    Reasoning,
    Run,
    RunStatus,
    ToolCall,
    utcnow,
)
from threadstore.store.base import (
    BranchPage,
    ChatField,
    ChatFilter,
    MessageKey,
    Store,
    TreeNode,
    require_chat_identity,
)
from threadstore.store.records import (
    ExtrasCodec,
    WriterLock,
    merge_extra,
    split_create,
    split_update,
)

__all__ = ["MemoryStore"]


_K = TypeVar("_K")
_R = TypeVar("_R", dict[str, Any], Run)


class _State:
    """Everything the store holds.

    Rows are never changed in place once stored: a write replaces the row with a
    changed copy (:func:`_writable`). So a snapshot (for a transaction's rollback and
    for readers outside it) copies only the tables' mappings, not the rows they share.
    """

    def __init__(self) -> None:
        self.chats: dict[UUID, dict[str, Any]] = {}
        self.threads: dict[tuple[UUID, str], UUID] = {}
        self.messages: dict[UUID, dict[str, Any]] = {}
        self.tool_calls: dict[UUID, dict[str, Any]] = {}
        self.reasonings: dict[UUID, dict[str, Any]] = {}
        self.children: dict[UUID, tuple[tuple[str, UUID], ...]] = {}
        """Per message, its children in ``seq`` order: ``("tool_calls" | "reasonings", uuid)``."""
        self.runs: dict[tuple[UUID, str], Run] = {}
        self.deleted: dict[UUID, datetime] = {}
        """The soft-deleted chats and when they were deleted."""

    def live_chat(self, chat_uuid: UUID) -> dict[str, Any] | None:
        """The chat's row, unless it does not exist or is soft-deleted."""
        return None if chat_uuid in self.deleted else self.chats.get(chat_uuid)

    def snapshot(self) -> _State:
        """A copy of every table's mapping, sharing the (never mutated) rows."""
        copied = _State.__new__(_State)
        for name, table in vars(self).items():
            setattr(copied, name, dict(table))
        return copied


def _writable(table: dict[_K, _R], key: _K) -> _R | None:
    """The row under ``key``, first replaced by a copy of it (a snapshot may share it)."""
    row = table.get(key)
    if row is None:
        return None
    copied: _R = row.model_copy() if isinstance(row, Run) else dict(row)
    table[key] = copied
    return copied


class MemoryStore(Store):
    """A store held in process memory; everything is lost when the process exits."""

    def __init__(self, url: str = "memory://", **models: Any) -> None:
        super().__init__(**models)
        self.url = url
        self._live = _State()
        self._committed: _State | None = None
        self._seq = itertools.count(1)
        self._lock = WriterLock()

    @property
    def _state(self) -> _State:
        # Tasks outside an open transaction read the state as of its start, as a
        # SQL reader would: they never see writes that may still roll back.
        if self._committed is not None and not self._lock.held:
            return self._committed
        return self._live

    async def setup(self) -> None:
        """Nothing to migrate in memory."""

    async def close(self) -> None:
        """Drop nothing: the data lives as long as the object."""

    def transaction(self) -> AbstractAsyncContextManager[None]:
        return self._lock.transaction(self._begin, self._commit, self._rollback)

    async def _begin(self) -> None:
        self._committed = self._live.snapshot()

    async def _commit(self) -> None:
        self._committed = None

    async def _rollback(self) -> None:
        assert self._committed is not None
        self._live, self._committed = self._committed, None

    # --- rows -> models ------------------------------------------------------------------

    @staticmethod
    def _load(model: Any, codec: ExtrasCodec, row: dict[str, Any]) -> Any:
        fields = {k: v for k, v in row.items() if k != "extra"}
        return model.model_validate({**copy.deepcopy(fields), **codec.decode(row["extra"])})

    def _chat(self, row: dict[str, Any]) -> Chat:
        chat: Chat = self._load(self.chat_model, self.codecs.chat, row)
        return chat

    def _tool_call(self, row: dict[str, Any]) -> ToolCall:
        tool_call: ToolCall = self._load(self.tool_call_model, self.codecs.tool_call, row)
        return tool_call

    def _reasoning(self, row: dict[str, Any]) -> Reasoning:
        reasoning: Reasoning = self._load(self.reasoning_model, self.codecs.reasoning, row)
        return reasoning

    def _message(self, row: dict[str, Any]) -> Message:
        message: Message = self._load(self.message_model, self.codecs.message, row)
        state = self._state
        children = state.children.get(row["message_uuid"], ())
        message.tool_calls = [
            self._tool_call(state.tool_calls[u]) for table, u in children if table == "tool_calls"
        ]
        message.reasonings = [
            self._reasoning(state.reasonings[u]) for table, u in children if table == "reasonings"
        ]
        return message

    @staticmethod
    def _row(base: dict[str, Any], extra: str | None) -> dict[str, Any]:
        row = copy.deepcopy(base)
        row["extra"] = extra
        return row

    # --- chats ------------------------------------------------------------------------

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        user_uuid, thread_id = require_chat_identity(chat_data)
        async with self._lock.hold():
            existing = self._state.threads.get((user_uuid, thread_id))
            if existing is not None and existing in self._state.deleted:
                self._drop_chat(existing)  # a deleted chat's thread is free
            elif existing is not None:
                return self._chat(self._state.chats[existing])
            base, extra = split_create(chat_data, ChatCreate)
            now = utcnow()
            row = self._row(base, extra)
            row.update(
                dedup_key=chat_deduplication_key(user_uuid, thread_id),
                active_leaf_uuid=None,
                created_at=now,
                updated_at=now,
            )
            self._state.chats[chat_data.chat_uuid] = row
            self._state.threads[(user_uuid, thread_id)] = chat_data.chat_uuid
            return self._chat(row)

    async def _select_chats(self, where: ChatFilter) -> Sequence[Chat]:
        state = self._state
        if where.thread_id is not None and where.user_uuid is not None:
            found = state.threads.get((where.user_uuid, where.thread_id))
            candidates = [] if found is None else [found]
        elif where.chat_uuid is not None:
            candidates = [where.chat_uuid]
        else:
            candidates = list(state.chats)
        rows = [
            r
            for r in (state.chats.get(chat_uuid) for chat_uuid in candidates)
            if r is not None
            and (where.user_uuid is None or r["user_uuid"] == where.user_uuid)
            and (where.chat_uuid is None or r["chat_uuid"] == where.chat_uuid)
            and (where.tenant_id is None or r.get("tenant_id") == where.tenant_id)
            and (where.app_id is None or r.get("app_id") == where.app_id)
            and (where.after is None or (r["updated_at"], str(r["chat_uuid"])) < where.after)
            and (where.name_contains is None or _name_contains(r, where.name_contains))
            and _deleted_as_wanted(state.deleted.get(r["chat_uuid"]), where)
        ]
        rows.sort(key=lambda r: (r["updated_at"], str(r["chat_uuid"])), reverse=True)
        return [self._chat(r) for r in rows[: where.limit]]

    async def _patch_chat(self, chat_uuid: UUID, **fields: Any) -> Chat | None:
        async with self._lock.hold():
            row = _writable(self._state.chats, chat_uuid)
            if row is None:
                return None
            row.update(copy.deepcopy(fields))
            row["updated_at"] = utcnow()
            return self._chat(row)

    async def _set_chat_field(self, chat_uuid: UUID, field: ChatField, value: Any) -> Chat | None:
        return await self._patch_chat(chat_uuid, **{field: value})

    async def set_active_leaf(self, chat_uuid: UUID, message_uuid: UUID) -> Chat | None:
        message = self._state.messages.get(message_uuid)
        if message is None or message["chat_uuid"] != chat_uuid:
            raise NotFoundError(f"message {message_uuid} is not in chat {chat_uuid}")
        return await self._patch_chat(chat_uuid, active_leaf_uuid=message_uuid)

    async def _set_deleted_at(self, where: ChatFilter, deleted_at: datetime | None) -> Chat | None:
        async with self._lock.hold():
            assert where.chat_uuid is not None
            found = await self._select_chats(where)
            if not found:
                return None
            if deleted_at is None:
                del self._state.deleted[where.chat_uuid]
            else:
                self._state.deleted[where.chat_uuid] = deleted_at
            return found[0]

    async def _delete_chat(self, chat_uuid: UUID) -> Chat | None:
        async with self._lock.hold():
            row = self._drop_chat(chat_uuid)
            return None if row is None else self._chat(row)

    def _drop_chat(self, chat_uuid: UUID) -> dict[str, Any] | None:
        """Remove a chat and every row it owns (the caller holds the lock); return its row."""
        state = self._state
        row = state.chats.pop(chat_uuid, None)
        if row is None:
            return None
        state.deleted.pop(chat_uuid, None)
        del state.threads[(row["user_uuid"], row["thread_id"])]
        owned = {u for u, m in state.messages.items() if m["chat_uuid"] == chat_uuid}
        for u in owned:
            del state.messages[u]
            state.children.pop(u, None)
        state.tool_calls = {
            k: v for k, v in state.tool_calls.items() if v["message_uuid"] not in owned
        }
        state.reasonings = {
            k: v for k, v in state.reasonings.items() if v["message_uuid"] not in owned
        }
        state.runs = {k: v for k, v in state.runs.items() if k[0] != chat_uuid}
        return row

    # --- messages ---------------------------------------------------------------------

    async def create_message(self, message_data: MessageCreate) -> Message:
        if message_data.chat_uuid is None:
            raise NotFoundError("MessageCreate.chat_uuid is required")
        async with self._lock.hold():
            chat = self._state.chats.get(message_data.chat_uuid)
            if chat is None:
                raise NotFoundError(f"chat {message_data.chat_uuid} does not exist")
            if message_data.message_uuid in self._state.messages:
                raise ConflictError(f"message {message_data.message_uuid} already exists")
            base, extra = split_create(message_data, MessageCreate)
            parent = message_data.parent_uuid
            if parent is None:
                parent = chat["active_leaf_uuid"]
            elif self._state.messages.get(parent, {}).get("chat_uuid") != chat["chat_uuid"]:
                raise NotFoundError(f"parent message {parent} is not in chat {chat['chat_uuid']}")
            now = utcnow()
            row = self._row(base, extra)
            row.update(
                parent_uuid=parent,
                seq=next(self._seq),
                created_at=message_data.created_at or now,
                updated_at=message_data.created_at or now,
            )
            self._state.messages[message_data.message_uuid] = row
            chat = _writable(self._state.chats, message_data.chat_uuid)
            assert chat is not None
            chat["active_leaf_uuid"] = message_data.message_uuid
            chat["updated_at"] = row["created_at"]
            return self._message(row)

    async def update_message(self, message_uuid: UUID, update: MessageUpdate) -> Message | None:
        async with self._lock.hold():
            row = _writable(self._state.messages, message_uuid)
            if row is None:
                return None
            _apply(row, update, MessageUpdate)
            return self._message(row)

    async def create_message_tool_call(self, data: MessageToolCallCreate) -> ToolCall:
        async with self._lock.hold():
            if data.message_uuid not in self._state.messages:
                raise NotFoundError(f"parent message {data.message_uuid} does not exist")
            if data.uuid in self._state.tool_calls:
                raise ConflictError(f"{data.uuid} already exists in tool_calls")
            base, extra = split_create(data, MessageToolCallCreate)
            row = self._row(base, extra)
            now = utcnow()
            seq = self._add_child("tool_calls", data.message_uuid, data.uuid)
            row.update(seq=seq, created_at=now, updated_at=now)
            self._state.tool_calls[data.uuid] = row
            return self._tool_call(row)

    def _add_child(self, table: str, message_uuid: UUID, uuid: UUID) -> int:
        """Register a new tool call or reasoning step; return its position (``seq``).

        Tool calls and reasoning steps share one position counter per message.
        """
        state = self._state
        children = state.children.get(message_uuid, ())
        last_seq = 0
        if children:
            last_table, last = children[-1]
            last_seq = getattr(state, last_table)[last]["seq"]
        # A new tuple, never an appended one: snapshots share the old.
        state.children[message_uuid] = (*children, (table, uuid))
        return last_seq + 1

    async def update_message_tool_call(
        self, uuid: UUID, update: MessageToolCallUpdate
    ) -> ToolCall | None:
        async with self._lock.hold():
            row = _writable(self._state.tool_calls, uuid)
            if row is None:
                return None
            _apply(row, update, MessageToolCallUpdate)
            return self._tool_call(row)

    async def create_message_reasoning(self, data: MessageReasoningCreate) -> Reasoning:
        async with self._lock.hold():
            if data.message_uuid not in self._state.messages:
                raise NotFoundError(f"parent message {data.message_uuid} does not exist")
            if data.uuid in self._state.reasonings:
                raise ConflictError(f"{data.uuid} already exists in reasonings")
            base, extra = split_create(data, MessageReasoningCreate)
            row = self._row(base, extra)
            now = utcnow()
            seq = self._add_child("reasonings", data.message_uuid, data.uuid)
            row.update(seq=seq, created_at=now, updated_at=now)
            self._state.reasonings[data.uuid] = row
            return self._reasoning(row)

    async def update_message_reasoning(
        self, uuid: UUID, update: MessageReasoningUpdate
    ) -> Reasoning | None:
        async with self._lock.hold():
            row = _writable(self._state.reasonings, uuid)
            if row is None:
                return None
            _apply(row, update, MessageReasoningUpdate)
            return self._reasoning(row)

    async def _find_message(self, key: MessageKey) -> Message | None:
        if key.message_uuid is not None:
            row = self._state.messages.get(key.message_uuid)
            rows = [] if row is None else [row]
        else:
            rows = sorted(self._state.messages.values(), key=lambda r: r["seq"])
        for row in rows:
            if (
                (key.chat_uuid is None or row["chat_uuid"] == key.chat_uuid)
                and (key.agui_id is None or row["agui_id"] == key.agui_id)
                and row["chat_uuid"] not in self._state.deleted
            ):
                return self._message(row)
        return None

    async def get_tool_call_by_agui_id(
        self, message_uuid: UUID, tool_call_id: str
    ) -> ToolCall | None:
        for row in self._state.tool_calls.values():
            if row["message_uuid"] == message_uuid and row["tool_call_id"] == tool_call_id:
                return self._tool_call(row)
        return None

    async def _select_tree(self, chat_uuid: UUID) -> list[TreeNode]:
        rows = [r for r in self._state.messages.values() if r["chat_uuid"] == chat_uuid]
        rows.sort(key=lambda r: r["seq"])
        return [
            TreeNode(
                r["message_uuid"],
                r["parent_uuid"],
                str(r["role"]),
                r["seq"],
                r["agui_id"],
                r["run_id"],
            )
            for r in rows
        ]

    async def _make_root(self, chat_uuid: UUID, message_uuid: UUID) -> None:
        async with self._lock.hold():
            row = _writable(self._state.messages, message_uuid)
            if row is not None and row["chat_uuid"] == chat_uuid:
                row["parent_uuid"] = None

    def _branch(self, chat_uuid: UUID) -> list[dict[str, Any]]:
        chat = self._state.live_chat(chat_uuid)
        path: list[dict[str, Any]] = []
        current = chat["active_leaf_uuid"] if chat else None
        while current is not None:
            row = self._state.messages[current]
            path.append(row)
            current = row["parent_uuid"]
        path.reverse()
        return path

    async def _select_branch(
        self, chat_uuid: UUID, page: BranchPage, version: Hashable | None
    ) -> list[Message]:
        after, before, size = page.after, page.before, page.limit
        rows = [
            r
            for r in self._branch(chat_uuid)
            if (after is None or r["seq"] > after) and (before is None or r["seq"] < before)
        ]
        if size is not None:
            rows = rows[-size:] if page.newest_first else rows[:size]
        return [self._message(r) for r in rows]

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        result: dict[UUID, Message] = {}
        for chat_uuid in chat_uuids:
            chat = self._state.live_chat(chat_uuid)
            if chat and chat["active_leaf_uuid"] is not None:
                result[chat_uuid] = self._message(self._state.messages[chat["active_leaf_uuid"]])
        return result

    # --- runs ---------------------------------------------------------------------------

    async def start_run(self, run: Run) -> Run:
        async with self._lock.hold():
            if run.chat_uuid not in self._state.chats:
                raise NotFoundError(f"chat {run.chat_uuid} does not exist")
            key = (run.chat_uuid, run.run_id)
            stored = self._state.runs.get(key)
            if stored is None:
                if run.status == RunStatus.RUNNING and run.exclusive:
                    # One exclusive running run per chat, as the SQL stores' index has it.
                    for (chat_uuid, run_id), other in self._state.runs.items():
                        if (
                            chat_uuid == run.chat_uuid
                            and other.status == RunStatus.RUNNING
                            and other.exclusive
                        ):
                            raise RunLiveError(run.chat_uuid, run_id)
                stored = self._state.runs[key] = run.model_copy(deep=True)
            return stored.model_copy(deep=True)

    async def heartbeat_runs(self, owner: str, run_ids: Sequence[tuple[UUID, str]]) -> None:
        async with self._lock.hold():
            now = utcnow()
            for key in run_ids:
                run = self._state.runs.get(key)
                if run is not None and run.owner == owner and run.status == RunStatus.RUNNING:
                    beating = _writable(self._state.runs, key)
                    assert beating is not None
                    beating.heartbeat_at = now

    async def finish_run(
        self, chat_uuid: UUID, run_id: str, status: RunStatus, error: str | None = None
    ) -> Run | None:
        async with self._lock.hold():
            run = _writable(self._state.runs, (chat_uuid, run_id))
            if run is None:
                return None
            run.status, run.error, run.updated_at = status, error, utcnow()
            return run.model_copy(deep=True)

    async def get_run(self, chat_uuid: UUID, run_id: str) -> Run | None:
        run = self._state.runs.get((chat_uuid, run_id))
        return run.model_copy(deep=True) if run else None

    async def get_stale_runs(self, older_than: datetime) -> Sequence[Run]:
        return [
            r.model_copy(deep=True)
            for r in self._state.runs.values()
            if r.status == RunStatus.RUNNING and r.heartbeat_at < older_than
        ]

    async def finalize_run_records(
        self, chat_uuid: UUID, run_id: str, status: MessageStatus
    ) -> int:
        async with self._lock.hold():
            state = self._state
            run_messages = {
                u
                for u, m in state.messages.items()
                if m["chat_uuid"] == chat_uuid and m["run_id"] == run_id
            }
            changed = 0
            now = utcnow()
            for table in (state.messages, state.tool_calls, state.reasonings):
                keys = [
                    key
                    for key, row in table.items()
                    if row["message_uuid"] in run_messages and row["in_progress"]
                ]
                for key in keys:
                    row = _writable(table, key)
                    assert row is not None
                    row.update(status=status, in_progress=False, updated_at=now)
                changed += len(keys)
            return changed


def _deleted_as_wanted(deleted_at: datetime | None, where: ChatFilter) -> bool:
    if deleted_at is None:
        return not where.deleted
    return (
        where.deleted
        and (where.deleted_after is None or deleted_at >= where.deleted_after)
        and (where.deleted_before is None or deleted_at < where.deleted_before)
    )


def _name_contains(row: dict[str, Any], text: str) -> bool:
    name = row.get("name")
    return name is not None and text.casefold() in name.casefold()


def _apply(row: dict[str, Any], update: Any, base_cls: Any) -> None:
    base, extra = split_update(update, base_cls)
    row.update(copy.deepcopy(base))
    if extra:
        row["extra"] = merge_extra(row["extra"], extra)
    row["updated_at"] = utcnow()
