"""The Store contract: the seed's repository Protocols plus what every backend shares.

``ChatRepositoryLike`` and ``MessageRepositoryLike`` keep the seed's method names and
meanings, so any object with these methods is a drop-in for the storage agent.
:class:`Store` is the base class of threadstore's own backends; it implements both
Protocols (and the run registry the run manager uses).

Where things go:

- here, once, every public method: limits and cursor paging (``list_chats``), reads by
  key, the branch page and the history cache check (``get_chat_messages``), the tree
  and branch operations, soft delete and purge, runs, batches (``apply_writes``), the
  seed's validations and the capabilities a store declares;
- ``store/_ops.py``: one typed operation per write; ``store/_sql.py``: what both SQL
  backends share (one field-to-column table per record type, insert values, patchable
  columns, the branch page's bounds); ``store/_codec.py``: models from trusted values;
- each backend (``memory.py``, ``sqlite.py``, ``postgres.py``): the eleven abstract
  primitives only: ``setup``, ``close``, ``transaction``, one write primitive
  ``_apply(batch)`` over the operations, and the reads ``_select_chats``,
  ``_select_branch``, ``_select_tree``, ``_find_message``, ``_find_tool_call``,
  ``_select_runs``, ``_select_last_messages`` (plus ``_history_version`` where a
  history cache is kept, ``_select_changed`` where kept histories are extended,
  ``_select_siblings`` where a page's branch points should not read the whole tree, and
  ``_never_branched`` where an export of a chat that never branched should not either).

Soft delete (``delete_chat(..., soft=True)``) stamps a chat's ``deleted_at``; every read
of a backend leaves such chats, and their messages, out.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, ClassVar, Literal, Protocol, Self, runtime_checkable
from uuid import UUID, uuid4

from threadstore._steps import off_loop
from threadstore.errors import ConflictError, InvalidInputError, NotFoundError
from threadstore.models import (
    Chat,
    ChatCreate,
    ChatPage,
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
from threadstore.store._copies import copy_message
from threadstore.store._cursor import decode_chat_cursor, encode_chat_cursor
from threadstore.store._history import (
    STEP_MESSAGES,
    Derivation,
    HistoryCache,
    HistoryView,
    KeptHistory,
    extended,
    kept_history,
)
from threadstore.store._records import Codecs
from threadstore.store._run_events import RunEventLog
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
    MakeRoot,
    Op,
    RenameChat,
    SetActiveLeaf,
    SetDeletedAt,
    StartRun,
    UpdateChatMetadata,
    UpdateChatState,
    UpdateMessage,
    UpdateReasoning,
    UpdateToolCall,
    Write,
)

__all__ = [
    "DEFAULT_DELETED_RETENTION",
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "BatchWriter",
    "BranchPage",
    "Capabilities",
    "ChatField",
    "ChatFilter",
    "ChatRepositoryLike",
    "MessageKey",
    "MessageRepositoryLike",
    "RunFilter",
    "RunRepositoryLike",
    "Siblings",
    "Store",
    "TreeNode",
    "Write",
    "capabilities_of",
]

DEFAULT_PAGE_SIZE = 50
"""Page size of ``list_chats`` when no limit is given."""

MAX_PAGE_SIZE = 1000
"""Largest ``limit`` accepted by the paginated reads."""

DEFAULT_DELETED_RETENTION = timedelta(days=30)
"""How long a soft-deleted chat can be restored before a sweep may purge it."""


@runtime_checkable
class ChatRepositoryLike(Protocol):
    """Structural interface for chat persistence (the seed's names and meanings)."""

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        """Create a chat, idempotent by (user, thread): a repeat returns the existing one."""
        ...

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        """Return the chat for a (user, thread_id) pair, or ``None``."""
        ...

    async def get_all_chats(self, user_uuid: UUID | None = None) -> Sequence[Chat]:
        """Return every chat, optionally scoped to one user.

        Unbounded: with no user it is an admin call that reads every user's chats at
        once. Interactive callers page instead (``Store.list_chats``; the server's
        ``GET /api/admin/chats``, the CLI's ``chats list``).
        """
        ...

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Chat | None:
        """Rename a chat; ``None`` when it is unknown."""
        ...

    async def delete_chat(self, chat_uuid: UUID) -> Chat | None:
        """Delete a chat and every row it owns; return it, or ``None`` when unknown."""
        ...


@runtime_checkable
class MessageRepositoryLike(Protocol):
    """Structural interface for message persistence (the seed's names and meanings)."""

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """Return an async context manager that groups the writes inside it atomically."""
        ...

    async def create_message(self, message_data: MessageCreate) -> Message:
        """Persist a new message and return it."""
        ...

    async def update_message(self, message_uuid: UUID, update: MessageUpdate) -> Message | None:
        """Patch a message's own fields; ``None`` when it is unknown."""
        ...

    async def create_message_tool_call(self, data: MessageToolCallCreate) -> ToolCall:
        """Append a tool call to its parent message."""
        ...

    async def update_message_tool_call(
        self, uuid: UUID, update: MessageToolCallUpdate
    ) -> ToolCall | None:
        """Patch a tool call; ``None`` when it is unknown."""
        ...

    async def create_message_reasoning(self, data: MessageReasoningCreate) -> Reasoning:
        """Append a reasoning step to its parent message."""
        ...

    async def update_message_reasoning(
        self, uuid: UUID, update: MessageReasoningUpdate
    ) -> Reasoning | None:
        """Patch a reasoning step; ``None`` when it is unknown."""
        ...

    async def get_message(self, message_uuid: UUID) -> Message | None:
        """Return a message by its uuid, or ``None``."""
        ...

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> Message | None:
        """Return a message by its AG-UI id within a chat, or ``None``."""
        ...

    async def get_tool_call_by_agui_id(
        self, message_uuid: UUID, tool_call_id: str
    ) -> ToolCall | None:
        """Return a tool call by its AG-UI id within a message, or ``None``."""
        ...

    async def get_chat_messages(self, chat_uuid: UUID) -> Sequence[Message]:
        """Return the chat's history (its active branch), oldest first."""
        ...

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        """Map each given chat that has messages to its latest message."""
        ...


@runtime_checkable
class RunRepositoryLike(Protocol):
    """Structural interface for the run registry (owner + heartbeat per run)."""

    async def start_run(self, run: Run) -> Run:
        """Record a run as running (idempotent by (chat, run_id))."""
        ...

    async def heartbeat_runs(self, owner: str, run_ids: Sequence[tuple[UUID, str]]) -> None:
        """Refresh the heartbeat of the owner's live runs."""
        ...

    async def finish_run(
        self, chat_uuid: UUID, run_id: str, status: RunStatus, error: str | None = None
    ) -> Run | None:
        """Mark a run finished with a terminal status."""
        ...

    async def get_run(self, chat_uuid: UUID, run_id: str) -> Run | None:
        """Return one run, or ``None``."""
        ...

    async def get_stale_runs(self, older_than: datetime) -> Sequence[Run]:
        """Return running runs whose heartbeat is older than ``older_than``."""
        ...


class BatchWriter(Protocol):
    """A repository that declares ``Capabilities.batch_writes``."""

    async def apply_writes(self, writes: Sequence[Write]) -> None:
        """Apply ``writes`` in order, all or nothing."""
        ...


def check_limit(limit: int | None, default: int | None = DEFAULT_PAGE_SIZE) -> int | None:
    """Validate a page-size argument against :data:`MAX_PAGE_SIZE`."""
    if limit is None:
        return default
    if limit < 1 or limit > MAX_PAGE_SIZE:
        raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}")
    return limit


def require_chat_identity(chat_data: ChatCreate) -> tuple[UUID, str]:
    """Return (user_uuid, thread_id) or raise the seed's ``ValueError`` when either is missing."""
    if chat_data.user_uuid is None:
        raise InvalidInputError("ChatCreate.user_uuid is required")
    if chat_data.thread_id is None:
        raise InvalidInputError("ChatCreate.thread_id is required")
    return chat_data.user_uuid, chat_data.thread_id


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a repository offers beyond the seed's Protocols, declared once per class.

    The storage agent reads it through :func:`capabilities_of`; a Protocol-only
    repository declares nothing and gets the seed's calls only.
    """

    batch_writes: bool = False
    """``apply_writes``: a flush is one call (and a backend may send it in one round trip)."""
    chat_state: bool = False
    """``update_chat_state``: the chat's AG-UI state is stored."""
    run_records: bool = False
    """``finalize_run_records``: a run's leftover in-progress records are finalized at its end."""
    one_running_run: bool = False
    """``start_run`` raises ``RunLiveError`` for a second running run of a chat."""


NO_CAPABILITIES = Capabilities()


def capabilities_of(repo: object) -> Capabilities:
    """The capabilities ``repo`` declares (none for a Protocol-only repository)."""
    declared = getattr(repo, "capabilities", None)
    return declared if isinstance(declared, Capabilities) else NO_CAPABILITIES


def update_fields(update: Any) -> dict[str, Any]:
    """Return the explicitly-set, non-None fields of an update DTO."""
    fields: dict[str, Any] = update.model_dump(exclude_unset=True, exclude_none=True)
    return fields


@dataclass(frozen=True, slots=True)
class BranchPage:
    """Which part of a chat's active branch a read wants (``Message.seq`` bounds)."""

    after: int | None = None
    before: int | None = None
    limit: int | None = None

    @property
    def whole(self) -> bool:
        """The whole branch: what the history cache keeps."""
        return self.after is None and self.before is None and self.limit is None

    @property
    def newest_first(self) -> bool:
        """The ``limit`` messages just before ``before``: read newest first, then reversed."""
        return self.limit is not None and self.before is not None and self.after is None


@dataclass(frozen=True, slots=True)
class ChatFilter:
    """Which chats a read wants (each field given narrows it), newest activity first."""

    user_uuid: UUID | None = None
    thread_id: str | None = None
    chat_uuid: UUID | None = None
    tenant_id: str | None = None
    app_id: str | None = None
    after: tuple[datetime, str] | None = None
    """Only chats listed after this ``(updated_at, chat_uuid)`` key."""
    limit: int | None = None
    name_contains: str | None = None
    """Only chats whose name contains this text, ignoring case (chats with no name never)."""
    deleted: bool = False
    """Soft-deleted chats instead of live ones (every read but restore and purge: live)."""
    deleted_after: datetime | None = None
    """With ``deleted``: only chats soft-deleted at or after this time."""
    deleted_before: datetime | None = None
    """With ``deleted``: only chats soft-deleted before this time."""

    def name_like(self) -> str | None:
        """``name_contains`` as a ``LIKE`` pattern escaped with ``\\``, or ``None``.

        ``%`` and ``_`` in the user's text match only themselves.
        """
        if self.name_contains is None:
            return None
        text = self.name_contains
        for special in ("\\", "%", "_"):
            text = text.replace(special, "\\" + special)
        return f"%{text}%"

    def equalities(self) -> list[tuple[str, Any]]:
        """``(column, value)`` of every equality this filter asks for."""
        return _given(
            user_uuid=self.user_uuid,
            thread_id=self.thread_id,
            chat_uuid=self.chat_uuid,
            tenant_id=self.tenant_id,
            app_id=self.app_id,
        )


ChatField = Literal["name", "state", "metadata"]
"""The chat fields a caller sets directly (the rest follow from its messages)."""


@dataclass(frozen=True, slots=True)
class MessageKey:
    """Which message a lookup wants: by uuid, or by AG-UI id within a chat."""

    message_uuid: UUID | None = None
    chat_uuid: UUID | None = None
    agui_id: str | None = None

    def equalities(self) -> list[tuple[str, Any]]:
        """``(column, value)`` of every equality this key asks for."""
        return _given(
            message_uuid=self.message_uuid, chat_uuid=self.chat_uuid, agui_id=self.agui_id
        )


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a read wants: one by key (``run_id`` set, ``running`` not), or else
    running ones, oldest heartbeat first.

    Running runs: of one chat when ``chat_uuid`` is set, only those whose heartbeat is
    older than ``stale_before`` when that is. With ``running`` and ``run_id``: the
    chat's running runs and its run ``run_id`` whatever its status (no ``stale_before``).
    """

    chat_uuid: UUID | None = None
    run_id: str | None = None
    stale_before: datetime | None = None
    running: bool = False


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One message of a chat's tree, without its content: what branching reads."""

    message_uuid: UUID
    parent_uuid: UUID | None
    role: str
    seq: int
    agui_id: str | None = None
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class Siblings:
    """A message among the messages sharing its parent (the roots share "no parent")."""

    index: int
    """The message's position among ``siblings`` (0-based)."""
    siblings: tuple[UUID, ...]
    """Every message with the same parent, in creation order, the message included."""

    @property
    def count(self) -> int:
        """How many versions this turn has."""
        return len(self.siblings)


def _siblings_in(tree: Sequence[TreeNode], wanted: set[UUID]) -> dict[UUID, Siblings]:
    """Where each wanted message stands among the messages sharing its parent."""
    by_parent: dict[UUID | None, list[UUID]] = {}
    parents: dict[UUID, UUID | None] = {}
    for node in tree:  # by seq: creation order
        by_parent.setdefault(node.parent_uuid, []).append(node.message_uuid)
        parents[node.message_uuid] = node.parent_uuid
    found: dict[UUID, Siblings] = {}
    for uuid in wanted:
        if uuid in parents:
            group = tuple(by_parent[parents[uuid]])
            found[uuid] = Siblings(group.index(uuid), group)
    return found


def _newest_leaf_under(tree: Sequence[TreeNode], top: UUID) -> UUID:
    """The most recently created message without children in ``top``'s subtree."""
    children: dict[UUID | None, list[UUID]] = {}
    seq: dict[UUID, int] = {}
    for node in tree:
        children.setdefault(node.parent_uuid, []).append(node.message_uuid)
        seq[node.message_uuid] = node.seq
    leaves, stack = [], [top]
    while stack:
        current = stack.pop()
        below = children.get(current)
        if below:
            stack.extend(below)
        else:
            leaves.append(current)
    return max(leaves, key=seq.__getitem__)


def _given(**values: Any) -> list[tuple[str, Any]]:
    return [(name, value) for name, value in values.items() if value is not None]


class Store(abc.ABC):
    """A threadstore backend: chats, messages, tool calls, reasoning and runs.

    Implements :class:`ChatRepositoryLike`, :class:`MessageRepositoryLike` and
    :class:`RunRepositoryLike`. Use it with ``async with`` (or ``await close()``).
    Every uuid lookup is consistent immediately after the write that created it, and
    ``transaction()`` really groups writes: all or nothing.
    """

    url: str
    chat_model: type[Chat]
    message_model: type[Message]
    tool_call_model: type[ToolCall]
    reasoning_model: type[Reasoning]
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

    def __init__(
        self,
        *,
        chat_model: type[Chat] = Chat,
        message_model: type[Message] = Message,
        tool_call_model: type[ToolCall] = ToolCall,
        reasoning_model: type[Reasoning] = Reasoning,
    ) -> None:
        self.chat_model = chat_model
        self.message_model = message_model
        self.tool_call_model = tool_call_model
        self.reasoning_model = reasoning_model
        self.codecs = Codecs(chat_model, message_model, tool_call_model, reasoning_model)

    # --- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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

    # --- chats -----------------------------------------------------------------------

    # --- writes ----------------------------------------------------------------------
    #
    # Every write reaches the backend as typed operations (``store/_ops.py``) through one
    # primitive, ``_apply``; the public write methods below are one operation each.

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

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        """Create a chat, idempotent by (user, thread); ``ValueError`` if either is missing."""
        require_chat_identity(chat_data)
        chat: Chat = await self._apply_one(CreateChat(chat_data))
        return chat

    async def open_chat(
        self,
        chat_data: ChatCreate,
        *,
        run: Run | None = None,
        messages: Sequence[MessageCreate] = (),
    ) -> tuple[Chat, list[Message]]:
        """Create a chat with its first run and messages in one write; what was stored.

        A run's set-up on a new thread (the storage agent's): the chat, the run
        record (``run.chat_uuid`` is set to the chat's) and the messages, each under
        the one before, all or nothing. The chat comes back as created (its active
        leaf and ``updated_at`` as before the messages), the messages as stored.
        Unlike :meth:`create_chat` it is not idempotent: when the (user, thread) chat
        exists already, nothing is written and ``ConflictError`` says so (create or
        look up that chat instead).
        """
        require_chat_identity(chat_data)
        chat_uuid = chat_data.chat_uuid
        batch: list[Op] = [CreateChat(chat_data)]
        if run is not None:
            batch.append(StartRun(run.model_copy(update={"chat_uuid": chat_uuid})))
        batch += [
            CreateMessage(message.model_copy(update={"chat_uuid": chat_uuid}))
            for message in messages
        ]
        try:
            results = await self._apply(batch)
        except NotFoundError:
            # The (user, thread) chat was there: its create returned it and the run or
            # messages meant for ours found no chat of ours, so nothing was written.
            results = None
        if results is None or results[0].chat_uuid != chat_uuid:
            raise ConflictError(
                f"thread {chat_data.thread_id!r} of user {chat_data.user_uuid} has a chat already"
            )
        return results[0], results[len(batch) - len(messages) :]

    async def get_chat(self, chat_uuid: UUID) -> Chat | None:
        """Return a chat by uuid, or ``None``."""
        chats = await self._select_chats(ChatFilter(chat_uuid=chat_uuid))
        return chats[0] if chats else None

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        """Return the chat for a (user, thread_id) pair, or ``None``."""
        chats = await self._select_chats(ChatFilter(user_uuid, thread_id=thread_id))
        return chats[0] if chats else None

    async def get_all_chats(
        self, user_uuid: UUID | None = None, *, name_contains: str | None = None
    ) -> Sequence[Chat]:
        """Return every chat (optionally one user's, or those named like ``list_chats``).

        Unbounded: with no user it is an admin call that reads every chat of every user
        at once. Page with :meth:`list_chats` (``user_uuid=None`` for every user's), as
        the server's ``GET /api/admin/chats`` and the CLI's ``chats list`` do.
        """
        return await self._select_chats(ChatFilter(user_uuid, name_contains=name_contains or None))

    async def list_chats(
        self,
        user_uuid: UUID | None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        tenant_id: str | None = None,
        app_id: str | None = None,
        name_contains: str | None = None,
    ) -> ChatPage:
        """Return one page of a user's chats, newest activity first, with a cursor to the next.

        ``user_uuid=None`` pages through every user's chats (an admin read).
        ``name_contains`` keeps only chats whose name contains that text, ignoring case
        (SQLite folds the case of ASCII letters only).
        """
        size = check_limit(limit)
        assert size is not None
        after = None if cursor is None else decode_chat_cursor(cursor)
        # One more than the page: whether it exists says whether there is a next page.
        chats = await self._select_chats(
            ChatFilter(
                user_uuid,
                tenant_id=tenant_id,
                app_id=app_id,
                after=after,
                limit=size + 1,
                name_contains=name_contains or None,
            )
        )
        items = list(chats[:size])
        next_cursor = encode_chat_cursor(items[-1]) if len(chats) > size else None
        return ChatPage(items=items, next_cursor=next_cursor)

    @abc.abstractmethod
    async def _select_chats(self, where: ChatFilter) -> Sequence[Chat]:
        """Primitive: the chats ``where`` wants, by (updated_at, chat_uuid) descending."""

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Chat | None:
        """Rename a chat; ``None`` when it is unknown."""
        chat: Chat | None = await self._apply_one(RenameChat(chat_uuid, name))
        return chat

    async def update_chat_state(self, chat_uuid: UUID, state: Any) -> Chat | None:
        """Replace the chat's latest AG-UI state; ``None`` when it is unknown."""
        chat: Chat | None = await self._apply_one(UpdateChatState(chat_uuid, state))
        return chat

    async def update_chat_metadata(self, chat_uuid: UUID, metadata: dict[str, Any]) -> Chat | None:
        """Replace the chat's metadata whole; ``None`` when it is unknown."""
        chat: Chat | None = await self._apply_one(UpdateChatMetadata(chat_uuid, dict(metadata)))
        return chat

    async def set_active_leaf(self, chat_uuid: UUID, message_uuid: UUID) -> Chat | None:
        """Make ``message_uuid`` (a message of this chat) the end of the active branch."""
        chat: Chat | None = await self._apply_one(SetActiveLeaf(chat_uuid, message_uuid))
        return chat

    async def delete_chat(self, chat_uuid: UUID, *, soft: bool = False) -> Chat | None:
        """Delete a chat; return it, or ``None`` when it is unknown.

        By default (hard) the chat and every row it owns are gone for good. ``soft=True``
        hides it from every read (listing, by uuid or thread id, its messages) until
        :meth:`restore_chat` brings it back or, once :attr:`deleted_retention` has
        passed, :meth:`purge_deleted_chats` deletes it for good. A soft-deleted chat's
        thread id is free: a new chat created on it purges the deleted one first.
        """
        if soft:
            return await self._set_deleted_at(ChatFilter(chat_uuid=chat_uuid), utcnow())
        return await self._delete_chat(chat_uuid)

    async def _set_deleted_at(self, where: ChatFilter, deleted_at: datetime | None) -> Chat | None:
        chat: Chat | None = await self._apply_one(SetDeletedAt(where, deleted_at))
        return chat

    async def _delete_chat(self, chat_uuid: UUID) -> Chat | None:
        chat: Chat | None = await self._apply_one(DeleteChat(chat_uuid))
        if self.history_cache is not None:
            self.history_cache.discard(chat_uuid)
        return chat

    async def restore_chat(self, chat_uuid: UUID, *, user_uuid: UUID | None = None) -> Chat | None:
        """Undo a soft delete made within :attr:`deleted_retention`; ``None`` when none is.

        ``user_uuid``: only if the chat is that user's.
        """
        since = utcnow() - self.deleted_retention
        where = ChatFilter(user_uuid, chat_uuid=chat_uuid, deleted=True, deleted_after=since)
        return await self._set_deleted_at(where, None)

    async def purge_deleted_chats(self, older_than: datetime | None = None) -> int:
        """Hard-delete the chats soft-deleted before ``older_than``; return how many.

        ``older_than`` defaults to :attr:`deleted_retention` ago.
        """
        cutoff = utcnow() - self.deleted_retention if older_than is None else older_than
        expired = await self._select_chats(ChatFilter(deleted=True, deleted_before=cutoff))
        purged = 0
        for chat in expired:
            if await self._delete_chat(chat.chat_uuid) is not None:
                purged += 1
        return purged

    # --- messages --------------------------------------------------------------------

    async def create_message(self, message_data: MessageCreate) -> Message:
        """Persist a new message; ``ValueError`` if ``chat_uuid`` is missing or unknown."""
        if message_data.chat_uuid is None:
            raise NotFoundError("MessageCreate.chat_uuid is required")
        message: Message = await self._apply_one(CreateMessage(message_data))
        return message

    async def update_message(self, message_uuid: UUID, update: MessageUpdate) -> Message | None:
        """Apply the explicitly-set, non-None fields; ``None`` when the message is unknown."""
        message: Message | None = await self._apply_one(UpdateMessage(message_uuid, update))
        return message

    async def create_message_tool_call(self, data: MessageToolCallCreate) -> ToolCall:
        """Append a tool call; ``ValueError`` if the parent message does not exist."""
        tool_call: ToolCall = await self._apply_one(CreateToolCall(data))
        return tool_call

    async def update_message_tool_call(
        self, uuid: UUID, update: MessageToolCallUpdate
    ) -> ToolCall | None:
        """Patch a tool call; ``None`` when it is unknown."""
        tool_call: ToolCall | None = await self._apply_one(UpdateToolCall(uuid, update))
        return tool_call

    async def create_message_reasoning(self, data: MessageReasoningCreate) -> Reasoning:
        """Append a reasoning step; ``ValueError`` if the parent message does not exist."""
        reasoning: Reasoning = await self._apply_one(CreateReasoning(data))
        return reasoning

    async def update_message_reasoning(
        self, uuid: UUID, update: MessageReasoningUpdate
    ) -> Reasoning | None:
        """Patch a reasoning step; ``None`` when it is unknown."""
        reasoning: Reasoning | None = await self._apply_one(UpdateReasoning(uuid, update))
        return reasoning

    async def get_message(self, message_uuid: UUID) -> Message | None:
        """Return a message (with its tool calls and reasoning) by uuid, or ``None``."""
        return await self._find_message(MessageKey(message_uuid=message_uuid))

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> Message | None:
        """Return a message by its AG-UI id within a chat, or ``None``."""
        return await self._find_message(MessageKey(chat_uuid=chat_uuid, agui_id=agui_id))

    @abc.abstractmethod
    async def _find_message(self, key: MessageKey) -> Message | None:
        """Primitive: the oldest message matching every field ``key`` gives, with children."""

    async def get_tool_call_by_agui_id(
        self, message_uuid: UUID, tool_call_id: str
    ) -> ToolCall | None:
        """Return a tool call by its AG-UI id within a message, or ``None``."""
        return await self._find_tool_call(message_uuid, tool_call_id)

    @abc.abstractmethod
    async def _find_tool_call(self, message_uuid: UUID, tool_call_id: str) -> ToolCall | None:
        """Primitive: the tool call with this AG-UI id within the message, or ``None``."""

    async def get_chat_messages(
        self,
        chat_uuid: UUID,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
    ) -> Sequence[Message]:
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
        view = await self.read_history(chat_uuid)
        # New models of every message: a long history's are built off the event loop.
        return await off_loop(view, view.__getitem__, slice(None))

    async def read_history(self, chat_uuid: UUID, *derivations: Derivation[Any]) -> HistoryView:
        """The chat's whole active branch, oldest first, and what is derived from it.

        What a run replays. With a history cache, a repeated read costs one indexed
        lookup and a read after appends reads only the rows written since the last read
        (see ``store/_history.py``); a chat that does not exist reads as empty. Each of
        ``derivations`` is kept with the history and grown with it: ``view.derived(d)``.
        """
        cache = self.history_cache
        if cache is None:
            return await self._read_whole(chat_uuid, derivations)
        inside = self._in_transaction()
        for _ in range(2):
            # The version is read before the rows: a write committed in between makes
            # the history newer than its tag, never older, so it is read again next time.
            version = await self._history_version(chat_uuid)
            if version is None:
                if not inside:
                    cache.discard(chat_uuid)
                return (await kept_history(None, list, [], derivations)).view()
            kept = cache.entry(chat_uuid)
            if kept is not None and kept.version == version:
                # Inside a transaction too: this version was committed as it is kept.
                cache.hits += 1
                return await self._with_derivations(chat_uuid, kept, derivations)
            if inside:
                # What this transaction reads may never be committed: nothing is kept.
                return await self._read_whole(chat_uuid, derivations)
            if kept is not None:
                since = kept.version
                changed = await self._select_changed(chat_uuid, since, version)
                if kept.version != since:
                    continue  # another read moved it meanwhile: start again from it
                if changed is not None and len(changed[0]) < STEP_MESSAGES:
                    entries, leaf = changed
                    pairs = list(zip(entries, self._build_entries(entries), strict=True))
                    grown = extended(kept, version, pairs, leaf)
                    if grown is not None:
                        cache.extensions += 1
                        cache.keep(chat_uuid, grown)
                        return await self._with_derivations(chat_uuid, grown, derivations)
            break
        cache.misses += 1
        entries = await self._select_entries(chat_uuid, version)
        built = await kept_history(version, self._build_entries, entries, derivations)
        cache.keep(chat_uuid, built)
        return built.view()

    async def _read_whole(
        self, chat_uuid: UUID, derivations: Sequence[Derivation[Any]]
    ) -> HistoryView:
        """The whole active branch, read now and kept by nobody."""
        messages = await self._select_branch(chat_uuid, BranchPage(), None)
        return (await kept_history(None, list, messages, derivations)).view()

    async def _with_derivations(
        self, chat_uuid: UUID, kept: KeptHistory, derivations: Sequence[Derivation[Any]]
    ) -> HistoryView:
        """``kept``'s view, once it holds ``derivations`` (the missing ones built now)."""
        if all(d in kept.derived for d in derivations):
            return kept.view()
        grown = await kept_history(
            kept.version,
            kept.build,
            kept.entries,
            derivations,
            derived=kept.derived,
            positions=kept.positions,
        )
        if self.history_cache is not None and self.history_cache.entry(chat_uuid) is kept:
            kept.derived = grown.derived  # the same entries: what was added serves it too
        return grown.view()

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

    def _build_entries(self, entries: Sequence[Any]) -> list[Message]:
        """Primitive of backends with a history cache: new models of ``entries``."""
        raise NotImplementedError(f"{type(self).__name__} keeps no history cache")

    @abc.abstractmethod
    async def _select_branch(
        self, chat_uuid: UUID, page: BranchPage, version: Hashable | None
    ) -> list[Message]:
        """Primitive: ``page`` of the chat's active branch, oldest first, with children.

        ``version`` is what :meth:`_history_version` just returned, when it was read.
        """

    async def _history_version(self, chat_uuid: UUID) -> Hashable | None:
        """Primitive of backends with a history cache: the chat's history version.

        It changes in the same transaction as every change to the chat's messages, tool
        calls, reasoning or active leaf; ``None`` when the chat does not exist.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps no history cache")

    def _in_transaction(self) -> bool:
        """Whether the current task is inside this store's ``transaction()``."""
        return False

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        """Map each given chat that has messages to the newest message of its active branch."""
        if not chat_uuids:
            return {}
        return {m.chat_uuid: m for m in await self._select_last_messages(chat_uuids)}

    @abc.abstractmethod
    async def _select_last_messages(self, chat_uuids: Sequence[UUID]) -> list[Message]:
        """Primitive: the active leaf of each given live chat that has one, with children."""

    # --- branches ----------------------------------------------------------------------
    #
    # A chat is a tree: each message points at its parent, and the active leaf picks
    # the branch that reads return. Every operation below is built on one read,
    # ``_select_tree`` (the chat's tree without content; a page's branch points on
    # ``_select_siblings``, which defaults to it), and the ``MakeRoot`` and
    # ``SetActiveLeaf`` writes.

    @abc.abstractmethod
    async def _select_tree(self, chat_uuid: UUID) -> list[TreeNode]:
        """Primitive: every message of the chat as a :class:`TreeNode`, by ``seq``."""

    async def _select_siblings(
        self, chat_uuid: UUID, message_uuids: Sequence[UUID]
    ) -> list[TreeNode]:
        """Read: the messages sharing a parent with one of ``message_uuids`` (themselves
        included), by ``seq``; may leave out every group of one (a chat never branched).

        Optional: this default reads the whole tree. A backend that knows whether a chat
        ever branched, and can select by parent, answers a page of a long chat without
        it.
        """
        wanted = set(message_uuids)
        tree = await self._select_tree(chat_uuid)
        parents = {node.parent_uuid for node in tree if node.message_uuid in wanted}
        return [node for node in tree if node.parent_uuid in parents]

    async def get_message_tree(self, chat_uuid: UUID) -> list[TreeNode]:
        """Every message of the chat (every branch) without content, oldest first."""
        return await self._select_tree(chat_uuid)

    async def is_linear(self, chat_uuid: UUID) -> bool:
        """True when the chat is known never to have branched: its messages are one line.

        Every message is then on the active branch, and nothing needs the tree to find
        others. ``False`` says only that it may have branched (a backend that does not
        track it always answers ``False``).
        """
        return await self._never_branched(chat_uuid)

    async def _never_branched(self, chat_uuid: UUID) -> bool:
        """Read: whether the chat is known never to have branched (see :meth:`is_linear`).

        Optional: this default does not know.
        """
        return False

    async def create_root_message(self, message_data: MessageCreate) -> Message:
        """Create a message with no parent, whatever the active leaf: a new first message.

        This is how the first message of a chat is edited: the new version is a second
        root, and the active branch starts from it. ``parent_uuid`` must not be given.
        """
        if message_data.parent_uuid is not None:
            raise InvalidInputError("a root message has no parent_uuid")
        async with self.transaction():
            created = await self.create_message(message_data)
            if created.parent_uuid is not None:
                assert created.chat_uuid is not None
                await self._apply_one(MakeRoot(created.chat_uuid, created.message_uuid))
        return created.model_copy(update={"parent_uuid": None})

    async def get_siblings(self, chat_uuid: UUID, message_uuid: UUID) -> Siblings:
        """The versions of ``message_uuid``'s turn: the messages sharing its parent."""
        found = _siblings_in(await self._select_tree(chat_uuid), {message_uuid})
        if message_uuid not in found:
            raise NotFoundError(f"message {message_uuid} is not in chat {chat_uuid}")
        return found[message_uuid]

    async def get_branch_points(
        self, chat_uuid: UUID, message_uuids: Sequence[UUID]
    ) -> dict[UUID, Siblings]:
        """For each given message that has siblings, where it stands among them (one read)."""
        if not message_uuids:
            return {}
        nodes = await self._select_siblings(chat_uuid, message_uuids)
        found = _siblings_in(nodes, set(message_uuids))
        return {uuid: place for uuid, place in found.items() if place.count > 1}

    async def switch_branch(self, chat_uuid: UUID, message_uuid: UUID) -> Chat:
        """Make the branch through ``message_uuid`` active: its newest leaf becomes the leaf.

        Switching to a sibling shows that version of the turn and everything after it.
        """
        tree = await self._select_tree(chat_uuid)
        if not any(node.message_uuid == message_uuid for node in tree):
            raise NotFoundError(f"message {message_uuid} is not in chat {chat_uuid}")
        chat = await self.set_active_leaf(chat_uuid, _newest_leaf_under(tree, message_uuid))
        if chat is None:
            raise NotFoundError(f"chat {chat_uuid} does not exist")
        return chat

    async def branch_for_regenerate(self, chat_uuid: UUID, message_uuid: UUID) -> UUID:
        """Move the active leaf to the user turn of ``message_uuid`` and return that turn.

        ``message_uuid`` is a user message or a message answering one; the next message
        appended (the new answer) is then a sibling of the answers before it.
        """
        turn = await self.user_turn_of(chat_uuid, message_uuid)
        await self.set_active_leaf(chat_uuid, turn)
        return turn

    async def user_turn_of(self, chat_uuid: UUID, message_uuid: UUID) -> UUID:
        """The user message ``message_uuid`` is (or answers): what a regenerate answers again."""
        tree = {node.message_uuid: node for node in await self._select_tree(chat_uuid)}
        node = tree.get(message_uuid)
        if node is None:
            raise NotFoundError(f"message {message_uuid} is not in chat {chat_uuid}")
        while node.role != "user":
            if node.parent_uuid is None:
                raise InvalidInputError(f"message {message_uuid} answers no user message")
            node = tree[node.parent_uuid]
        return node.message_uuid

    async def edit_message(self, message_uuid: UUID, message_data: MessageCreate) -> Message:
        """Create ``message_data`` as a new version of the user message ``message_uuid``.

        The new message is its sibling (a new root when it is the first message) and
        becomes the active leaf; the old version and everything after it stay as a branch.
        """
        old = await self.get_message(message_uuid)
        if old is None:
            raise NotFoundError(f"message {message_uuid} does not exist")
        if old.role != "user":
            raise InvalidInputError(
                f"message {message_uuid} is a {old.role} message, not a user one"
            )
        data = message_data.model_copy(
            update={"chat_uuid": old.chat_uuid, "parent_uuid": old.parent_uuid}
        )
        if old.parent_uuid is None:
            return await self.create_root_message(data)
        return await self.create_message(data)

    async def fork_chat(
        self,
        chat_uuid: UUID,
        at_message_uuid: UUID,
        *,
        thread_id: str | None = None,
        user_uuid: UUID | None = None,
    ) -> Chat:
        """A new chat holding a copy of the branch from the root to ``at_message_uuid``.

        The copy has fresh uuids (the two chats never share rows, so either can be
        deleted alone) and records its lineage in ``forked_from_chat_uuid`` and
        ``forked_from_message_uuid``. It belongs to ``user_uuid`` (default: the
        source's owner) under ``thread_id`` (default: a new one).
        """
        source = await self.get_chat(chat_uuid)
        if source is None:
            raise NotFoundError(f"chat {chat_uuid} does not exist")
        tree = {node.message_uuid: node for node in await self._select_tree(chat_uuid)}
        if at_message_uuid not in tree:
            raise NotFoundError(f"message {at_message_uuid} is not in chat {chat_uuid}")
        path: list[UUID] = []
        current: UUID | None = at_message_uuid
        while current is not None:
            path.append(current)
            current = tree[current].parent_uuid
        path.reverse()
        async with self.transaction():
            owner = user_uuid or source.user_uuid
            thread = thread_id or f"fork-{uuid4()}"
            if await self.get_chat_by_thread_id(owner, thread) is not None:
                raise ConflictError(f"a chat with thread id {thread!r} already exists")
            fork = await self.create_chat(
                ChatCreate(
                    user_uuid=owner,
                    thread_id=thread,
                    name=source.name,
                    tenant_id=source.tenant_id,
                    app_id=source.app_id,
                    forked_from_chat_uuid=chat_uuid,
                    forked_from_message_uuid=at_message_uuid,
                    state=source.state,
                    metadata=source.metadata,
                )
            )
            parent: UUID | None = None
            for uuid in path:
                message = await self.get_message(uuid)
                assert message is not None
                parent = await copy_message(self, message, fork.chat_uuid, parent)
            found = await self.get_chat(fork.chat_uuid)
        return found or fork

    # --- runs --------------------------------------------------------------------------

    async def start_run(self, run: Run) -> Run:
        """Record a run as running (idempotent by (chat, run_id))."""
        started: Run = await self._apply_one(StartRun(run))
        return started

    async def heartbeat_runs(self, owner: str, run_ids: Sequence[tuple[UUID, str]]) -> None:
        """Refresh the heartbeat of the owner's live runs."""
        if run_ids:
            await self._apply((HeartbeatRuns(owner, tuple(run_ids)),), returning=False)

    async def finish_run(
        self, chat_uuid: UUID, run_id: str, status: RunStatus, error: str | None = None
    ) -> Run | None:
        """Mark a run finished; ``None`` when it is unknown."""
        run: Run | None = await self._apply_one(FinishRun(chat_uuid, run_id, status, error))
        return run

    async def get_run(self, chat_uuid: UUID, run_id: str) -> Run | None:
        """Return one run, or ``None``."""
        runs = await self._select_runs(RunFilter(chat_uuid, run_id))
        return runs[0] if runs else None

    async def get_stale_runs(self, older_than: datetime) -> Sequence[Run]:
        """Return running runs whose heartbeat is older than ``older_than``."""
        return await self._select_runs(RunFilter(stale_before=older_than))

    async def get_running_runs(
        self, chat_uuid: UUID, *, with_run: str | None = None
    ) -> Sequence[Run]:
        """Return the chat's runs recorded running, whatever their heartbeat (oldest first).

        With ``with_run``, also the chat's run of that id whatever its status, in the
        same read (what a run's start checks: is this id taken, is the chat busy).
        Reads that chat's runs only, however many run elsewhere in the store.
        """
        return await self._select_runs(RunFilter(chat_uuid, with_run, running=True))

    @abc.abstractmethod
    async def _select_runs(self, where: RunFilter) -> list[Run]:
        """Primitive: the runs ``where`` wants (by key, or running ones: see ``RunFilter``)."""

    async def finalize_run_records(
        self, chat_uuid: UUID, run_id: str, status: MessageStatus
    ) -> int:
        """Flip the run's still-in-progress records to ``status``; return how many changed."""
        changed: int = await self._apply_one(FinalizeRunRecords(chat_uuid, run_id, status))
        return changed

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

    async def iter_chat_messages(
        self, chat_uuid: UUID, *, page_size: int = 500
    ) -> AsyncIterator[Message]:
        """Yield the whole active branch oldest first, one page at a time."""
        after: int | None = None
        while True:
            page = await self.get_chat_messages(chat_uuid, after=after, limit=page_size)
            for message in page:
                yield message
            if len(page) < page_size:
                return
            after = page[-1].seq
