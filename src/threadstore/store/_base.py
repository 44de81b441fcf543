"""The Store: what every backend shares, over the seed's repository Protocols.

Every public method lives here once (limits and cursor paging, reads by key, the branch
page and the history cache check, tree and branch operations, soft delete, runs,
``apply_writes``, the seed's validations, declared capabilities); the small values reads
are asked with are in ``store/_queries.py``, the typed writes in ``store/ops.py``, what
both SQL backends share in ``store/_sql.py``. A backend (``memory.py``, ``sqlite.py``,
``postgres.py``) implements only the abstract primitives: ``setup``, ``close``,
``transaction``, the write primitive ``_apply(batch)`` and the ``_select_*``/``_find_*``
reads; ``_history_version``, ``_select_changed``, ``_select_siblings`` and
``_never_branched`` are optional (a history cache, extending kept histories, a page's
branch points or an export without reading the whole tree).

Soft delete (``delete_chat(..., soft=True)``) stamps a chat's ``deleted_at``; every read
of a backend leaves such chats, and their messages, out.
"""

from __future__ import annotations

import abc
from collections.abc import Hashable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any, ClassVar, Self, TypeVar, cast
from uuid import UUID

from threadstore import _telemetry, models
from threadstore._steps import off_loop
from threadstore.errors import ConfigurationError, InvalidInputError, NotFoundError
from threadstore.store._contract import Capabilities
from threadstore.store._history import HistoryCache
from threadstore.store._lifecycle import LifecycleBackend
from threadstore.store._queries import (
    BranchPage,
    ChatFilter,
    MessageKey,
    RunFilter,
    TreeNode,
    check_limit,
    require_chat_identity,
)
from threadstore.store._records import Codecs
from threadstore.store._run_events import RunEventLog
from threadstore.store._search import SearchBackend
from threadstore.store._usage import UsageBackend
from threadstore.store.ops import (
    WRITE_METHODS,
    WRITE_TYPES,
    CreateChat,
    CreateMessage,
    CreateReasoning,
    CreateToolCall,
    DeleteChat,
    FinalizeRunRecords,
    FinishRun,
    HeartbeatRuns,
    Op,
    RenameChat,
    SetDeletedAt,
    StartRun,
    UpdateChatState,
    UpdateMessage,
    UpdateReasoning,
    UpdateToolCall,
    Write,
)

__all__ = ["DEFAULT_DELETED_RETENTION", "Store", "Write"]

_B = TypeVar("_B")

DEFAULT_DELETED_RETENTION = timedelta(days=30)
"""How long a soft-deleted chat can be restored before a sweep may purge it."""


class Store(abc.ABC):
    """A threadstore backend: chats, messages, tool calls, reasoning and runs.

    Implements :class:`ChatRepositoryLike`, :class:`MessageRepositoryLike` and
    :class:`RunRepositoryLike`. Use it with ``async with`` (or ``await close()``).
    Every uuid lookup is consistent immediately after the write that created it, and
    ``transaction()`` really groups writes: all or nothing.
    """

    url: str
    chat_model: type[models.Chat]
    message_model: type[models.Message]
    tool_call_model: type[models.ToolCall]
    reasoning_model: type[models.Reasoning]
    capabilities: ClassVar[Capabilities] = Capabilities(
        batch_writes=True, chat_state=True, run_records=True, one_running_run=True
    )
    history_cache: HistoryCache | None = None
    """Whole histories read before, reused while their chat's history version is unchanged."""
    deleted_retention: timedelta = DEFAULT_DELETED_RETENTION
    """How long a soft-deleted chat can be restored; after it ``purge_deleted_chats`` may."""
    timeout: float | None = None
    """Seconds a call waits for the database before it raises
    :class:`~threadstore.errors.StoreUnavailableError`; ``None``: nothing to wait for."""
    _lifecycle: LifecycleBackend | None = None
    """The backend's primitives of summaries, erasure and retention (``store/_lifecycle.py``)."""
    _search: SearchBackend | None = None
    """The backend's full-text index of its messages (``store/_search.py``)."""
    _usage: UsageBackend | None = None
    """The backend's usage ledger and budgets (``store/_usage.py``)."""

    def __init__(
        self,
        *,
        chat_model: type[models.Chat] = models.Chat,
        message_model: type[models.Message] = models.Message,
        tool_call_model: type[models.ToolCall] = models.ToolCall,
        reasoning_model: type[models.Reasoning] = models.Reasoning,
    ) -> None:
        self.chat_model = chat_model
        self.message_model = message_model
        self.tool_call_model = tool_call_model
        self.reasoning_model = reasoning_model
        self.codecs = Codecs(chat_model, message_model, tool_call_model, reasoning_model)
        # The groups are built on this module's primitives (a cycle kept to run time).
        from threadstore.store._branches import Branches
        from threadstore.store._groups import Chats, Messages, Runs
        from threadstore.store._usage import Usage

        self.chats = Chats(self)
        """Chats by concern: find, list, open with a run, state, metadata, restore, purge."""
        self.messages = Messages(self)
        """Messages by concern: the kept history (``read_history``) and pages of a branch."""
        self.runs = Runs(self)
        """Runs by concern: those running, and the records a run left in progress."""
        self.branches = Branches(self)
        """A chat as a tree: regenerate, edit-and-resend, versions of a turn, forks."""
        self.search = self.messages.search
        """Full-text search of a user's messages: ``store.messages.search``."""
        self.usage = Usage(self)
        """The usage ledger: what runs used, totals per chat, user and day, and budgets."""

    # --- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def run_events(self) -> RunEventLog | None:
        """The log that relays runs' events between processes, or ``None`` (embedded backends)."""
        return None

    async def connect(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Open connections (called by ``open_store``); a no-op for backends without any."""

    @abc.abstractmethod
    async def setup(self) -> None:
        """Create or upgrade the schema (apply pending numbered migrations)."""

    async def schema_version(self) -> int | None:
        """The highest applied migration (0 before the first); ``None`` without a schema."""
        return None

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""

    @abc.abstractmethod
    def transaction(self) -> AbstractAsyncContextManager[None]:
        """Group the writes made inside the block atomically (nesting joins the outer one)."""

    # --- writes: each public write method is one typed operation (``store/ops.py``) ---

    @abc.abstractmethod
    async def _apply(
        self, batch: Sequence[Op], *, returning: bool = True, background: bool = False
    ) -> list[Any]:
        """Primitive: apply ``batch`` in order, all or nothing; return each one's result.

        What each operation returns is listed at :data:`threadstore.store.ops.Op`.
        Errors are threadstore's (``NotFoundError`` for a missing chat or parent,
        ``ConflictError`` for a taken id). With ``returning=False`` nobody reads the
        results, so the backend may skip building them. ``background``: a flush
        (``apply_writes``) nobody waits for; a backend that queues its writes may let
        the other waiting writes go first (SQLite does).
        """

    async def _apply_one(self, op: Op) -> Any:
        (result,) = await self._apply((op,))
        return result

    async def create_chat(self, chat_data: models.ChatCreate) -> models.Chat:
        """Create a chat, idempotent by (user, thread); ``ValueError`` if either is missing."""
        require_chat_identity(chat_data)
        return cast(models.Chat, await self._apply_one(CreateChat(chat_data)))

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> models.Chat | None:
        """Return the chat for a (user, thread_id) pair, or ``None``."""
        chats = await self._select_chats(ChatFilter(user_uuid, thread_id=thread_id))
        return chats[0] if chats else None

    async def get_all_chats(
        self, user_uuid: UUID | None = None, *, name_contains: str | None = None
    ) -> Sequence[models.Chat]:
        """Return every chat (optionally one user's, or those named like ``list_chats``).

        Unbounded: with no user it is an admin call that reads every chat of every user
        at once. Page with :meth:`list_chats` (``user_uuid=None`` for every user's), as
        the server's ``GET /api/admin/chats`` and the CLI's ``chats list`` do.
        """
        return await self._select_chats(ChatFilter(user_uuid, name_contains=name_contains or None))

    @abc.abstractmethod
    async def _select_chats(self, where: ChatFilter) -> Sequence[models.Chat]:
        """Primitive: the chats ``where`` wants, by (updated_at, chat_uuid) descending."""

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> models.Chat | None:
        """Rename a chat; ``None`` when it is unknown."""
        return cast(models.Chat | None, await self._apply_one(RenameChat(chat_uuid, name)))

    async def update_chat_state(self, chat_uuid: UUID, state: Any) -> models.Chat | None:
        """Replace the chat's latest AG-UI state; ``None`` when it is unknown."""
        return cast(models.Chat | None, await self._apply_one(UpdateChatState(chat_uuid, state)))

    async def delete_chat(self, chat_uuid: UUID, *, soft: bool = False) -> models.Chat | None:
        """Delete a chat; return it, or ``None`` when it is unknown.

        By default (hard) the chat and every row it owns are gone for good. ``soft=True``
        hides it from every read (listing, by uuid or thread id, its messages) until
        :meth:`restore_chat` brings it back or, once :attr:`deleted_retention` has
        passed, :meth:`purge_deleted_chats` deletes it for good. A soft-deleted chat's
        thread id is free: a new chat created on it purges the deleted one first.
        """
        if soft:
            return await self._set_deleted_at(ChatFilter(chat_uuid=chat_uuid), models.utcnow())
        return await self._delete_chat(chat_uuid)

    async def _set_deleted_at(
        self, where: ChatFilter, deleted_at: datetime | None
    ) -> models.Chat | None:
        return cast(models.Chat | None, await self._apply_one(SetDeletedAt(where, deleted_at)))

    async def _delete_chat(self, chat_uuid: UUID) -> models.Chat | None:
        chat: models.Chat | None = await self._apply_one(DeleteChat(chat_uuid))
        if self.history_cache is not None:
            self.history_cache.discard(chat_uuid)
        return chat

    async def create_message(self, message_data: models.MessageCreate) -> models.Message:
        """Persist a new message; ``ValueError`` if ``chat_uuid`` is missing or unknown."""
        if message_data.chat_uuid is None:
            raise NotFoundError("MessageCreate.chat_uuid is required")
        return cast(models.Message, await self._apply_one(CreateMessage(message_data)))

    async def update_message(
        self, message_uuid: UUID, update: models.MessageUpdate
    ) -> models.Message | None:
        """Apply the explicitly-set, non-None fields; ``None`` when the message is unknown."""
        return cast(
            models.Message | None, await self._apply_one(UpdateMessage(message_uuid, update))
        )

    async def create_message_tool_call(self, data: models.MessageToolCallCreate) -> models.ToolCall:
        """Append a tool call; ``ValueError`` if the parent message does not exist."""
        return cast(models.ToolCall, await self._apply_one(CreateToolCall(data)))

    async def update_message_tool_call(
        self, uuid: UUID, update: models.MessageToolCallUpdate
    ) -> models.ToolCall | None:
        """Patch a tool call; ``None`` when it is unknown."""
        return cast(models.ToolCall | None, await self._apply_one(UpdateToolCall(uuid, update)))

    async def create_message_reasoning(
        self, data: models.MessageReasoningCreate
    ) -> models.Reasoning:
        """Append a reasoning step; ``ValueError`` if the parent message does not exist."""
        return cast(models.Reasoning, await self._apply_one(CreateReasoning(data)))

    async def update_message_reasoning(
        self, uuid: UUID, update: models.MessageReasoningUpdate
    ) -> models.Reasoning | None:
        """Patch a reasoning step; ``None`` when it is unknown."""
        return cast(models.Reasoning | None, await self._apply_one(UpdateReasoning(uuid, update)))

    async def get_message(self, message_uuid: UUID) -> models.Message | None:
        """Return a message (with its tool calls and reasoning) by uuid, or ``None``."""
        return await self._find_message(MessageKey(message_uuid=message_uuid))

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> models.Message | None:
        """Return a message by its AG-UI id within a chat, or ``None``."""
        return await self._find_message(MessageKey(chat_uuid=chat_uuid, agui_id=agui_id))

    @abc.abstractmethod
    async def _find_message(self, key: MessageKey) -> models.Message | None:
        """Primitive: the oldest message matching every field ``key`` gives, with children."""

    async def get_tool_call_by_agui_id(
        self, message_uuid: UUID, tool_call_id: str
    ) -> models.ToolCall | None:
        """Return a tool call by its AG-UI id within a message, or ``None``."""
        return await self._find_tool_call(message_uuid, tool_call_id)

    @abc.abstractmethod
    async def _find_tool_call(
        self, message_uuid: UUID, tool_call_id: str
    ) -> models.ToolCall | None:
        """Primitive: the tool call with this AG-UI id within the message, or ``None``."""

    async def get_chat_messages(
        self,
        chat_uuid: UUID,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
    ) -> Sequence[models.Message]:
        """Return the active branch oldest first; ``after``/``before`` are ``Message.seq`` cursors.

        With ``limit`` and ``before`` the page is the ``limit`` messages just before
        ``before`` (still oldest first); otherwise the first ``limit`` after ``after``.
        The messages are the caller's own. A whole long history makes every model at
        once; read a long chat in pages (``iter_chat_messages``) where that will do.
        """
        page = BranchPage(after, before, check_limit(limit, default=None))
        # Only whole histories read outside a transaction are cached: inside one, the
        # version may belong to writes that are never committed.
        if not page.whole or self.history_cache is None or self._in_transaction():
            return await self._select_branch(chat_uuid, page, None)
        view = await self.messages.read_history(chat_uuid)
        # New models of every message: a long history's are built off the event loop.
        return await off_loop(view, view.__getitem__, slice(None))

    async def _select_changed(
        self, chat_uuid: UUID, since: Hashable, version: Hashable
    ) -> tuple[list[Any], UUID | None] | None:
        """Primitive of backends that extend kept histories: what changed after ``since``.

        The entries (as :meth:`_select_entries` makes them) of every message of the chat
        (any branch) whose row, tool calls or reasoning were written after history
        version ``since``, by ``seq``, and the chat's active leaf at ``version``;
        ``None`` when the backend cannot tell (the whole history is then read again).
        """
        return None

    async def _select_entries(self, chat_uuid: UUID, version: Hashable) -> list[Any]:
        """Primitive of backends with a history cache: the active branch as compact entries.

        One entry per message, oldest first, that :meth:`_build_entries` turns into the
        models :meth:`_select_branch` would read; entries hold no object the cyclic
        collector tracks (tuples of strings, numbers and times). ``version`` is what
        :meth:`_history_version` just returned.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps no history cache")

    def _build_entries(self, entries: Sequence[Any]) -> list[models.Message]:
        """Primitive of backends with a history cache: new models of ``entries``."""
        raise NotImplementedError(f"{type(self).__name__} keeps no history cache")

    @abc.abstractmethod
    async def _select_branch(
        self, chat_uuid: UUID, page: BranchPage, version: Hashable | None
    ) -> list[models.Message]:
        """Primitive: ``page`` of the chat's active branch, oldest first, with children.

        ``version`` is what :meth:`_history_version` just returned, when it was read.
        """

    async def _history_version(self, chat_uuid: UUID) -> Hashable | None:
        """Primitive of backends with a history cache: the chat's history version.

        It changes in the same transaction as every change to the chat's messages, tool
        calls, reasoning or active leaf; ``None`` when the chat does not exist.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps no history cache")

    def _required(self, backend: _B | None, keeps: str) -> _B:
        """``backend``, or ``ConfigurationError`` when this store keeps no ``keeps``."""
        if backend is None:
            raise ConfigurationError(f"{type(self).__name__} keeps no {keeps}")
        return backend

    def _in_transaction(self) -> bool:
        """Whether the current task is inside this store's ``transaction()``."""
        return False

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, models.Message]:
        """Map each given chat that has messages to the newest message of its active branch."""
        if not chat_uuids:
            return {}
        return {m.chat_uuid: m for m in await self._select_last_messages(chat_uuids)}

    @abc.abstractmethod
    async def _select_last_messages(self, chat_uuids: Sequence[UUID]) -> list[models.Message]:
        """Primitive: the active leaf of each given live chat that has one, with children."""

    # --- branches: ``store.branches`` is built on these reads and the ``MakeRoot`` and
    # ``SetActiveLeaf`` writes; the active leaf picks the branch that reads return.

    @abc.abstractmethod
    async def _select_tree(self, chat_uuid: UUID) -> list[TreeNode]:
        """Primitive: every message of the chat as a :class:`TreeNode`, by ``seq``."""

    async def _select_siblings(
        self, chat_uuid: UUID, message_uuids: Sequence[UUID]
    ) -> list[TreeNode]:
        """Read: the messages sharing a parent with one of ``message_uuids`` (themselves
        included), by ``seq``; may leave out every group of one (a chat never branched).

        Optional: this default reads the whole tree, which a backend that knows whether a
        chat ever branched, and can select by parent, avoids for a page of a long chat.
        """
        wanted = set(message_uuids)
        tree = await self._select_tree(chat_uuid)
        parents = {node.parent_uuid for node in tree if node.message_uuid in wanted}
        return [node for node in tree if node.parent_uuid in parents]

    async def _never_branched(self, chat_uuid: UUID) -> bool:
        """Optional read: whether the chat is known never to have branched (:meth:`is_linear`)."""
        return False

    async def start_run(self, run: models.Run) -> models.Run:
        """Record a run as running (idempotent by (chat, run_id))."""
        return cast(models.Run, await self._apply_one(StartRun(run)))

    async def heartbeat_runs(self, owner: str, run_ids: Sequence[tuple[UUID, str]]) -> None:
        """Refresh the heartbeat of the owner's live runs."""
        if run_ids:
            await self._apply((HeartbeatRuns(owner, tuple(run_ids)),), returning=False)

    async def finish_run(
        self, chat_uuid: UUID, run_id: str, status: models.RunStatus, error: str | None = None
    ) -> models.Run | None:
        """Mark a run finished; ``None`` when it is unknown."""
        return cast(
            models.Run | None, await self._apply_one(FinishRun(chat_uuid, run_id, status, error))
        )

    async def get_run(self, chat_uuid: UUID, run_id: str) -> models.Run | None:
        """Return one run, or ``None``."""
        runs = await self._select_runs(RunFilter(chat_uuid, run_id))
        return runs[0] if runs else None

    async def get_stale_runs(self, older_than: datetime) -> Sequence[models.Run]:
        """Return running runs whose heartbeat is older than ``older_than``."""
        return await self._select_runs(RunFilter(stale_before=older_than))

    @abc.abstractmethod
    async def _select_runs(self, where: RunFilter) -> list[models.Run]:
        """Primitive: the runs ``where`` wants (by key, or running ones: see ``RunFilter``)."""

    async def finalize_run_records(
        self, chat_uuid: UUID, run_id: str, status: models.MessageStatus
    ) -> int:
        """Flip the run's still-in-progress records to ``status``; return how many changed."""
        return cast(int, await self._apply_one(FinalizeRunRecords(chat_uuid, run_id, status)))

    @_telemetry.traced("threadstore.store.apply_writes")
    async def apply_writes(self, writes: Sequence[Write]) -> None:
        """Apply ``writes`` in order, all or nothing, without returning their results.

        Each write behaves exactly as its method called inside one ``transaction()``
        (same errors, same rows); a backend sends the whole batch in as few round trips
        as it can (SQLite: one hop to its database thread, queued behind the other
        writes that wait). To see every write of a batch, a subclass overrides this method.
        """
        for write in writes:
            if not isinstance(write, WRITE_TYPES):
                raise InvalidInputError(
                    f"apply_writes takes the writes of threadstore.store"
                    f" ({', '.join(sorted(WRITE_METHODS))}); got {write!r}"
                )
            if isinstance(write, CreateMessage) and write.data.chat_uuid is None:
                raise NotFoundError("MessageCreate.chat_uuid is required")
        if writes:
            await self._apply(writes, returning=False, background=True)
