"""The port a storage agent's run stores through: one small interface, two adapters.

A run needs, of where it stores: its chat (found or created), the chat's history, its
set-up writes (the run record and the input messages), a flush of its records as one
batch, and a few checks. :func:`run_storage` gives the adapter for what a storage agent
was given: :class:`StoreStorage` over a :class:`Store` (a set-up in one write, kept
histories, the message tree for branches, batches in one round trip), or
:class:`RepositoryStorage` over the seed's repository Protocols, which uses what they
declare (:class:`Capabilities`) and the seed's methods otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from threadstore._steps import off_loop
from threadstore.errors import ConflictError, InvalidInputError
from threadstore.models import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    Run,
    RunStatus,
    Summary,
)
from threadstore.store._base import Store
from threadstore.store._contract import (
    ChatRepositoryLike,
    MessageRepositoryLike,
    RunRepositoryLike,
    capabilities_of,
)
from threadstore.store._history import Derivation
from threadstore.store._queries import TreeNode
from threadstore.store._usage import Usage
from threadstore.store.ops import (
    FinishRun,
    RenameChat,
    UpdateChatState,
    Write,
    apply_to,
)

__all__ = ["RepositoryStorage", "RunStorage", "StoreStorage", "run_storage"]


class RunStorage:
    """What a storage agent's run needs of where it stores (the seed's calls by default).

    Every method has the seed's meaning; an adapter overrides what its store does better.
    """

    keeps_state: bool
    """The chat's AG-UI state is stored (``UpdateChatState`` writes are kept), as the chat
    repository declares (:class:`Capabilities`)."""
    finalizes_records: bool
    """``FinalizeRunRecords`` writes finalize a run's leftover in-progress records."""
    foresees: bool = False
    """What a set-up stores is known before it is stored: a run may start before it is."""
    branches: bool = False
    """Chats are trees (:meth:`tree`, :meth:`set_active_leaf`): a run may branch."""
    usage: Usage | None = None
    """The usage ledger where runs record what they used and budgets are checked, if any."""

    def __init__(
        self,
        chat_repo: ChatRepositoryLike,
        message_repo: MessageRepositoryLike,
        run_repo: RunRepositoryLike | None,
    ) -> None:
        self.chat_repo, self.message_repo, self.run_repo = chat_repo, message_repo, run_repo
        self.keeps_state = capabilities_of(chat_repo).chat_state
        self.finalizes_records = capabilities_of(message_repo).run_records

    async def find_chat(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        """The user's chat of ``thread_id``, or ``None``."""
        return await self.chat_repo.get_chat_by_thread_id(user_uuid, thread_id)

    async def history(self, chat: Chat, *derivations: Derivation[Any]) -> Sequence[Message]:
        """The chat's history, oldest first (with ``derivations`` where they are kept)."""
        history = list(await self.message_repo.get_chat_messages(chat.chat_uuid))
        await off_loop(history, _check_chat, chat, history)
        return history

    async def summaries(self, chat: Chat) -> Sequence[Summary]:
        """The chat's summaries, newest first (none where the storage keeps none)."""
        return ()

    async def tree(self, chat_uuid: UUID) -> Sequence[TreeNode]:
        """Every message of the chat without content (where :attr:`branches`)."""
        raise NotImplementedError("this storage keeps no message tree")

    async def get_message(self, message_uuid: UUID) -> Message | None:
        """A stored message by uuid, with its children."""
        return await self.message_repo.get_message(message_uuid)

    async def create_chat(self, chat: ChatCreate) -> Chat:
        """Create the chat, or return the thread's chat another run created meanwhile."""
        return await self.chat_repo.create_chat(chat)

    async def open_chat(
        self, chat: ChatCreate, run: Run | None, messages: Sequence[MessageCreate]
    ) -> tuple[Chat, list[Message]] | None:
        """A new thread's chat, run and first messages in one write; ``None`` when this
        storage cannot (or the thread has a chat by now): create them one by one."""
        return None

    async def start_run(self, run: Run) -> None:
        """Record the run (``RunLiveError`` when its chat already has a running one)."""
        if self.run_repo is not None:
            await self.run_repo.start_run(run)

    async def abandon_run(self, chat_uuid: UUID, run_id: str, reason: str) -> None:
        """End the record of a run that failed before it began: it must not hold its chat."""
        if self.run_repo is not None:
            with contextlib.suppress(Exception):
                await self.run_repo.finish_run(chat_uuid, run_id, RunStatus.ERRORED, reason)

    async def set_active_leaf(self, chat_uuid: UUID, message_uuid: UUID) -> None:
        """Make ``message_uuid`` the chat's active leaf (where there is a tree)."""

    async def write(self, writes: Sequence[Write]) -> None:
        """Write a flush of the run's records: all or nothing."""
        repo = self.message_repo
        if capabilities_of(repo).batch_writes and all(self._repo_for(w) is repo for w in writes):
            await repo.apply_writes(writes)  # type: ignore[attr-defined]
            return
        async with repo.transaction():
            for write in writes:
                await apply_to(self._repo_for(write), write)

    def _repo_for(self, write: Write) -> Any:
        if isinstance(write, UpdateChatState | RenameChat):
            return self.chat_repo
        if isinstance(write, FinishRun):
            return self.run_repo
        return self.message_repo

    async def chat_gone(self, chat: Chat) -> bool:
        """Whether the run's chat no longer exists (deleted while the run streamed)."""
        try:
            get_chat = getattr(self.chat_repo, "get_chat", None)
            if get_chat is not None:
                return await get_chat(chat.chat_uuid) is None
            found = await self.chat_repo.get_chat_by_thread_id(chat.user_uuid, chat.thread_id)
        except Exception:
            return False  # the store is failing: retry as for any failure
        return found is None or found.chat_uuid != chat.chat_uuid


class RepositoryStorage(RunStorage):
    """The seed's repository Protocols, with the capabilities they declare."""


class StoreStorage(RunStorage):
    """A :class:`Store` holding the chats, the messages and (when given) the runs."""

    foresees = True
    branches = True

    def __init__(self, store: Store, run_repo: RunRepositoryLike | None) -> None:
        super().__init__(store, store, run_repo)
        self.store = store
        self.usage = store.usage if store.usage.kept else None

    async def history(self, chat: Chat, *derivations: Derivation[Any]) -> Sequence[Message]:
        return await self.store.messages.read_history(chat.chat_uuid, *derivations)

    async def summaries(self, chat: Chat) -> Sequence[Summary]:
        if self.store._lifecycle is None:
            return ()
        return await self.store.branches.summaries(chat.chat_uuid)

    async def tree(self, chat_uuid: UUID) -> Sequence[TreeNode]:
        return await self.store.branches.get_message_tree(chat_uuid)

    async def open_chat(
        self, chat: ChatCreate, run: Run | None, messages: Sequence[MessageCreate]
    ) -> tuple[Chat, list[Message]] | None:
        # The steps one by one are three writes; under load each waits its turn behind
        # other runs' flushes, so one write is a third of the wait.
        if self.run_repo not in (None, self.store):
            return None
        try:
            return await self.store.chats.open_chat(chat, run=run, messages=messages)
        except ConflictError:
            return None  # another run created the thread's chat meanwhile

    async def set_active_leaf(self, chat_uuid: UUID, message_uuid: UUID) -> None:
        await self.store.branches.set_active_leaf(chat_uuid, message_uuid)

    async def write(self, writes: Sequence[Write]) -> None:
        if any(isinstance(w, FinishRun) for w in writes) and self.run_repo is not self.store:
            await super().write(writes)  # the run record lives elsewhere
            return
        await self.store.apply_writes(writes)


def _check_chat(chat: Chat, history: Sequence[Message]) -> None:
    for message in history:
        # A custom repository that mixes chats up must not leak one into another.
        if message.chat_uuid != chat.chat_uuid:
            which = message.agui_id or str(message.message_uuid)
            raise InvalidInputError(
                f"the message repository returned message {which!r} of chat "
                f"{message.chat_uuid} for chat {chat.chat_uuid}: messages do not all "
                "belong to the same chat"
            )


def run_storage(
    chat_repo: ChatRepositoryLike,
    message_repo: MessageRepositoryLike,
    run_repo: RunRepositoryLike | None = None,
) -> RunStorage:
    """The adapter for a storage agent's repositories: one store, or the seed's Protocols."""
    if isinstance(chat_repo, Store) and message_repo is chat_repo:
        return StoreStorage(chat_repo, run_repo)
    return RepositoryStorage(chat_repo, message_repo, run_repo)
