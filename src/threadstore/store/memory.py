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

from pydantic import BaseModel

from threadstore import models
from threadstore.errors import ConflictError, NotFoundError, RunLiveError
from threadstore.store import ops
from threadstore.store._base import Store
from threadstore.store._lifecycle import ERASED_USER_DETAIL
from threadstore.store._memory_lifecycle import MemoryLifecycle
from threadstore.store._memory_search import MemorySearch
from threadstore.store._memory_usage import MemoryUsage
from threadstore.store._queries import BranchPage, ChatFilter, MessageKey, RunFilter, TreeNode
from threadstore.store._records import (
    ExtrasCodec,
    WriterLock,
    merge_extra,
    split_create,
    split_update,
)
from threadstore.store._sql import chat_values

__all__ = ["MemoryStore"]


_K = TypeVar("_K")
_M = TypeVar("_M", bound=BaseModel)
_R = TypeVar("_R", dict[str, Any], models.Run)

_CHILD_WRITES: dict[type[ops.Op], tuple[str, type[Any]]] = {
    ops.CreateToolCall: ("tool_calls", models.MessageToolCallCreate),
    ops.UpdateToolCall: ("tool_calls", models.MessageToolCallUpdate),
    ops.CreateReasoning: ("reasonings", models.MessageReasoningCreate),
    ops.UpdateReasoning: ("reasonings", models.MessageReasoningUpdate),
}
"""Per write of a tool call or reasoning step: its table, and the model its fields split by."""


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
        self.runs: dict[tuple[UUID, str], models.Run] = {}
        self.deleted: dict[UUID, datetime] = {}
        """The soft-deleted chats and when they were deleted."""
        self.summaries: dict[UUID, models.Summary] = {}
        """Every chat's summaries by uuid (``store/_memory_lifecycle.py``)."""
        self.erased: dict[UUID, datetime] = {}
        """Users forgotten, and when: no chat of theirs is created again."""
        self.receipts: dict[UUID, models.ErasureReceipt] = {}
        """Erasure receipts by uuid."""
        self.policies: dict[tuple[Any, UUID], models.RetentionPolicy] = {}
        """Retention policies by (scope, scope uuid)."""

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
    copied: _R = row.model_copy() if isinstance(row, models.Run) else dict(row)
    table[key] = copied
    return copied


class MemoryStore(Store):
    """A store held in process memory; everything is lost when the process exits."""

    def __init__(
        self, url: str = "memory://", *, timeout: float | None = None, **model_classes: Any
    ) -> None:
        super().__init__(**model_classes)
        self.url = url
        self.timeout = timeout  # accepted as the SQL stores take it; nothing here waits
        self._live = _State()
        self._committed: _State | None = None
        self._seq = itertools.count(1)
        self._lock = WriterLock()
        self._lifecycle = MemoryLifecycle(self)
        self._search = MemorySearch(self)
        self._usage = MemoryUsage(self)

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
    def _load(model: type[_M], codec: ExtrasCodec, row: dict[str, Any]) -> _M:
        fields = {k: v for k, v in row.items() if k != "extra"}
        return model.model_validate({**copy.deepcopy(fields), **codec.decode(row["extra"])})

    def _chat(self, row: dict[str, Any]) -> models.Chat:
        return self._load(self.chat_model, self.codecs.chat, row)

    def _tool_call(self, row: dict[str, Any]) -> models.ToolCall:
        return self._load(self.tool_call_model, self.codecs.tool_call, row)

    def _reasoning(self, row: dict[str, Any]) -> models.Reasoning:
        return self._load(self.reasoning_model, self.codecs.reasoning, row)

    def _child(self, table: str, row: dict[str, Any]) -> models.ToolCall | models.Reasoning:
        """A tool call's or reasoning step's row (of ``table``) as its model."""
        return self._tool_call(row) if table == "tool_calls" else self._reasoning(row)

    def _message(self, row: dict[str, Any]) -> models.Message:
        message = self._load(self.message_model, self.codecs.message, row)
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
    def _row(dto: Any, base_cls: Any) -> dict[str, Any]:
        """A new row of a create's fields (copied), its subclass's own in ``extra``."""
        base, extra = split_create(dto, base_cls)
        return {**copy.deepcopy(base), "extra": extra}

    # --- writes ---------------------------------------------------------------------------

    async def _apply(
        self, batch: Sequence[ops.Op], *, returning: bool = True, background: bool = False
    ) -> list[Any]:
        # One write holds the lock (each checks before it changes anything); several
        # share a transaction, whose snapshot undoes them all when one fails.
        if len(batch) == 1:
            async with self._lock.hold():
                return [self._write(batch[0])]
        async with self.transaction():
            return [self._write(op) for op in batch]

    def _write(self, op: ops.Op) -> Any:
        """Apply one operation (the caller holds the lock); return its result."""
        match op:
            case ops.CreateMessage(data):
                return self._create_message(data)
            case ops.UpdateMessage(message_uuid, update):
                row = self._update(self._state.messages, message_uuid, update, models.MessageUpdate)
                return None if row is None else self._message(row)
            case ops.CreateToolCall(data) | ops.CreateReasoning(data):
                table, base_cls = _CHILD_WRITES[type(op)]
                return self._child(table, self._create_child(table, data, base_cls))
            case ops.UpdateToolCall(uuid, update) | ops.UpdateReasoning(uuid, update):
                table, base_cls = _CHILD_WRITES[type(op)]
                row = self._update(getattr(self._state, table), uuid, update, base_cls)
                return None if row is None else self._child(table, row)
            case ops.RenameChat() | ops.UpdateChatState() | ops.UpdateChatMetadata():
                return self._patch_chat(op.chat_uuid, **{op.field: op.value})
            case ops.CreateChat(data):
                return self._create_chat(data)
            case ops.SetActiveLeaf(chat_uuid, message_uuid):
                message = self._state.messages.get(message_uuid)
                if message is None or message["chat_uuid"] != chat_uuid:
                    raise NotFoundError(f"message {message_uuid} is not in chat {chat_uuid}")
                return self._patch_chat(chat_uuid, active_leaf_uuid=message_uuid)
            case ops.MakeRoot(chat_uuid, message_uuid):
                row = _writable(self._state.messages, message_uuid)
                if row is not None and row["chat_uuid"] == chat_uuid:
                    row["parent_uuid"] = None
                return None
            case ops.SetDeletedAt(where, deleted_at):
                return self._set_deleted(where, deleted_at)
            case ops.DeleteChat(chat_uuid):
                row = self._drop_chat(chat_uuid)
                return None if row is None else self._chat(row)
            case ops.StartRun(run):
                return self._start_run(run)
            case ops.HeartbeatRuns(owner, run_ids):
                self._beat(owner, run_ids)
                return None
            case ops.FinishRun(chat_uuid, run_id, status, error):
                finished = _writable(self._state.runs, (chat_uuid, run_id))
                if finished is None:
                    return None
                finished.status, finished.error = status, error
                finished.updated_at = models.utcnow()
                return finished.model_copy(deep=True)
            case ops.FinalizeRunRecords(chat_uuid, run_id, status):
                return self._finalize(chat_uuid, run_id, status)
        raise AssertionError(f"unknown operation {op!r}")

    def _create_chat(self, chat_data: models.ChatCreate) -> models.Chat:
        row = copy.deepcopy(chat_values(chat_data))
        thread = (row["user_uuid"], row["thread_id"])
        if thread[0] in self._state.erased:
            raise ConflictError(ERASED_USER_DETAIL)
        existing = self._state.threads.get(thread)
        if existing is not None and existing in self._state.deleted:
            self._drop_chat(existing)  # a deleted chat's thread is free
        elif existing is not None:
            return self._chat(self._state.chats[existing])
        row.update(active_leaf_uuid=None, updated_at=row["created_at"])
        self._state.chats[chat_data.chat_uuid] = row
        self._state.threads[thread] = chat_data.chat_uuid
        return self._chat(row)

    def _patch_chat(self, chat_uuid: UUID, **fields: Any) -> models.Chat | None:
        row = _writable(self._state.chats, chat_uuid)
        if row is None:
            return None
        row.update(copy.deepcopy(fields))
        row["updated_at"] = models.utcnow()
        return self._chat(row)

    def _set_deleted(self, where: ChatFilter, deleted_at: datetime | None) -> models.Chat | None:
        assert where.chat_uuid is not None
        found = self._chats_where(where)
        if not found:
            return None
        if deleted_at is None:
            del self._state.deleted[where.chat_uuid]
        else:
            self._state.deleted[where.chat_uuid] = deleted_at
        return found[0]

    def _drop_chat(self, chat_uuid: UUID) -> dict[str, Any] | None:
        """Remove a chat and every row it owns (the caller holds the lock); return its row."""
        state = self._state
        row = state.chats.pop(chat_uuid, None)
        if row is None:
            return None
        state.deleted.pop(chat_uuid, None)
        del state.threads[(row["user_uuid"], row["thread_id"])]
        owned = [u for u, m in state.messages.items() if m["chat_uuid"] == chat_uuid]
        for u in owned:
            del state.messages[u]
            for table, child in state.children.pop(u, ()):
                del getattr(state, table)[child]
        state.runs = {k: v for k, v in state.runs.items() if k[0] != chat_uuid}
        state.summaries = {k: v for k, v in state.summaries.items() if v.chat_uuid != chat_uuid}
        return row

    def _create_message(self, message_data: models.MessageCreate) -> models.Message:
        assert message_data.chat_uuid is not None
        chat = self._state.chats.get(message_data.chat_uuid)
        if chat is None:
            raise NotFoundError(f"chat {message_data.chat_uuid} does not exist")
        if message_data.message_uuid in self._state.messages:
            raise ConflictError(f"message {message_data.message_uuid} already exists")
        parent = message_data.parent_uuid
        if parent is None:
            parent = chat["active_leaf_uuid"]
        elif self._state.messages.get(parent, {}).get("chat_uuid") != chat["chat_uuid"]:
            raise NotFoundError(f"parent message {parent} is not in chat {chat['chat_uuid']}")
        at = message_data.created_at or models.utcnow()
        row = self._row(message_data, models.MessageCreate)
        row.update(parent_uuid=parent, seq=next(self._seq), created_at=at, updated_at=at)
        self._state.messages[message_data.message_uuid] = row
        chat = _writable(self._state.chats, message_data.chat_uuid)
        assert chat is not None
        chat["active_leaf_uuid"] = message_data.message_uuid
        chat["updated_at"] = row["created_at"]
        return self._message(row)

    def _create_child(
        self,
        table: str,
        data: models.MessageToolCallCreate | models.MessageReasoningCreate,
        base_cls: Any,
    ) -> dict[str, Any]:
        """Store a new tool call or reasoning step; return its row.

        Tool calls and reasoning steps share one position counter (``seq``) per message.
        """
        state = self._state
        if data.message_uuid not in state.messages:
            raise NotFoundError(f"parent message {data.message_uuid} does not exist")
        rows: dict[UUID, dict[str, Any]] = getattr(state, table)
        if data.uuid in rows:
            raise ConflictError(f"{data.uuid} already exists in {table}")
        row = self._row(data, base_cls)
        # Children are never deleted one by one: the next position is one past their count.
        children = state.children.get(data.message_uuid, ())
        # A new tuple, never an appended one: snapshots share the old.
        state.children[data.message_uuid] = (*children, (table, data.uuid))
        now = models.utcnow()
        row.update(seq=len(children) + 1, created_at=now, updated_at=now)
        rows[data.uuid] = row
        return row

    @staticmethod
    def _update(
        table: dict[UUID, dict[str, Any]], uuid: UUID, update: Any, base_cls: Any
    ) -> dict[str, Any] | None:
        """Patch a row with the update's set fields; return it, or ``None`` when unknown."""
        row = _writable(table, uuid)
        if row is None:
            return None
        base, extra = split_update(update, base_cls)
        row.update(copy.deepcopy(base))
        if extra:
            row["extra"] = merge_extra(row["extra"], extra)
        row["updated_at"] = models.utcnow()
        return row

    def _start_run(self, run: models.Run) -> models.Run:
        if run.chat_uuid not in self._state.chats:
            raise NotFoundError(f"chat {run.chat_uuid} does not exist")
        key = (run.chat_uuid, run.run_id)
        stored = self._state.runs.get(key)
        running = models.RunStatus.RUNNING
        if stored is None:
            if run.status == running and run.exclusive:
                # One exclusive running run per chat, as the SQL stores' index has it.
                for (chat_uuid, run_id), other in self._state.runs.items():
                    if chat_uuid == run.chat_uuid and other.status == running and other.exclusive:
                        raise RunLiveError(run.chat_uuid, run_id)
            stored = self._state.runs[key] = run.model_copy(deep=True)
        return stored.model_copy(deep=True)

    def _beat(self, owner: str, run_ids: Sequence[tuple[UUID, str]]) -> None:
        now = models.utcnow()
        for key in run_ids:
            run = self._state.runs.get(key)
            if run is not None and run.owner == owner and run.status == models.RunStatus.RUNNING:
                beating = _writable(self._state.runs, key)
                assert beating is not None
                beating.heartbeat_at = now

    def _finalize(self, chat_uuid: UUID, run_id: str, status: models.MessageStatus) -> int:
        state = self._state
        run_messages = {
            u
            for u, m in state.messages.items()
            if m["chat_uuid"] == chat_uuid and m["run_id"] == run_id
        }
        changed = 0
        now = models.utcnow()
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

    # --- reads ------------------------------------------------------------------------------

    async def _select_chats(self, where: ChatFilter) -> Sequence[models.Chat]:
        return self._chats_where(where)

    def _chats_where(self, where: ChatFilter) -> list[models.Chat]:
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

    async def _find_message(self, key: MessageKey) -> models.Message | None:
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

    async def _find_tool_call(
        self, message_uuid: UUID, tool_call_id: str
    ) -> models.ToolCall | None:
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
    ) -> list[models.Message]:
        after, before, size = page.after, page.before, page.limit
        rows = [
            r
            for r in self._branch(chat_uuid)
            if (after is None or r["seq"] > after) and (before is None or r["seq"] < before)
        ]
        if size is not None:
            rows = rows[-size:] if page.newest_first else rows[:size]
        return [self._message(r) for r in rows]

    async def _select_last_messages(self, chat_uuids: Sequence[UUID]) -> list[models.Message]:
        leaves = [self._state.live_chat(chat_uuid) for chat_uuid in chat_uuids]
        return [
            self._message(self._state.messages[chat["active_leaf_uuid"]])
            for chat in leaves
            if chat and chat["active_leaf_uuid"] is not None
        ]

    async def _select_runs(self, where: RunFilter) -> list[models.Run]:
        if where.run_id is not None and not where.running:
            run = self._state.runs.get((where.chat_uuid, where.run_id))  # type: ignore[arg-type]
            return [] if run is None else [run.model_copy(deep=True)]
        running = [
            r
            for r in self._state.runs.values()
            if (where.chat_uuid is None or r.chat_uuid == where.chat_uuid)
            and (
                (where.run_id is not None and r.run_id == where.run_id)
                or (
                    r.status == models.RunStatus.RUNNING
                    and (where.stale_before is None or r.heartbeat_at < where.stale_before)
                )
            )
        ]
        return [r.model_copy(deep=True) for r in sorted(running, key=lambda r: r.heartbeat_at)]


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
