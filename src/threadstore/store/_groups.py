"""The store's methods grouped by concern: ``store.chats``, ``messages`` and ``runs``.

``store.branches`` is in ``store/_branches.py``.

``Store`` itself keeps its life cycle, ``transaction`` and ``apply_writes``, and the seed's
repository methods (so it stays a ``ChatRepositoryLike``, ``MessageRepositoryLike`` and
``RunRepositoryLike``); each group holds the rest of its concern, and refers to the seed's
methods of its concern too, so ``store.chats.create_chat`` is ``store.create_chat``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from threadstore import _telemetry
from threadstore.errors import ConflictError, InvalidInputError, NotFoundError
from threadstore.models import (
    Chat,
    ChatCreate,
    ChatPage,
    ErasureReceipt,
    ExpiredChat,
    Message,
    MessageCreate,
    RetentionPolicy,
    Run,
    ScopedPolicy,
    SearchPage,
    SweepReport,
    utcnow,
)
from threadstore.store._cursor import decode_chat_cursor, encode_chat_cursor
from threadstore.store._history import (
    STEP_MESSAGES,
    Derivation,
    HistoryView,
    KeptHistory,
    extended,
    kept_history,
)
from threadstore.store._lifecycle import ERASED_KINDS, GLOBAL_SCOPE, LifecycleBackend, Scope
from threadstore.store._queries import (
    BranchPage,
    ChatFilter,
    RunFilter,
    check_limit,
    require_chat_identity,
)
from threadstore.store._search import SearchBackend, SearchOrder, search
from threadstore.store.ops import (
    CreateChat,
    CreateMessage,
    Op,
    StartRun,
    UpdateChatMetadata,
)

if TYPE_CHECKING:
    from threadstore.store._base import Store

__all__ = [
    "ERASE_BATCH",
    "SWEEP_BATCH",
    "Chats",
    "ErasureHook",
    "Messages",
    "Runs",
]

ERASE_BATCH = 50
"""Chats an erasure deletes per transaction: writers wait for one batch at most."""

SWEEP_BATCH = 10
"""Chats a retention sweep deletes per transaction."""

SWEEP_PAGE = 100
"""Expired chats a sweep looks up at a time: each lookup reads a few hundred chats."""

ErasureHook = Callable[[UUID], int | Awaitable[int]]
"""Removes a user's data kept outside the store; returns how many items went."""


class Chats:
    """The chats of a store: found, listed, opened with a run, their state and metadata, soft
    deletes undone and purged; and the seed's chat methods, the store's own."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._erasure_hooks: dict[str, ErasureHook] = {}
        self.create_chat = store.create_chat
        self.get_chat_by_thread_id = store.get_chat_by_thread_id
        self.get_all_chats = store.get_all_chats
        self.update_chat_name = store.update_chat_name
        self.delete_chat = store.delete_chat
        self.update_chat_state = store.update_chat_state

    async def get_chat(self, chat_uuid: UUID) -> Chat | None:
        """Return a chat by uuid, or ``None``."""
        chats = await self._store._select_chats(ChatFilter(chat_uuid=chat_uuid))
        return chats[0] if chats else None

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
        chats = await self._store._select_chats(
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
            results = await self._store._apply(batch)
        except NotFoundError:
            # The (user, thread) chat was there: its create returned it and the run or
            # messages meant for ours found no chat of ours, so nothing was written.
            results = None
        if results is None or results[0].chat_uuid != chat_uuid:
            raise ConflictError(
                f"thread {chat_data.thread_id!r} of user {chat_data.user_uuid} has a chat already"
            )
        return results[0], results[len(batch) - len(messages) :]

    async def update_chat_metadata(self, chat_uuid: UUID, metadata: dict[str, Any]) -> Chat | None:
        """Replace the chat's metadata whole; ``None`` when it is unknown."""
        op = UpdateChatMetadata(chat_uuid, dict(metadata))
        return cast(Chat | None, await self._store._apply_one(op))

    async def restore_chat(self, chat_uuid: UUID, *, user_uuid: UUID | None = None) -> Chat | None:
        """Undo a soft delete made within :attr:`deleted_retention`; ``None`` when none is.

        ``user_uuid``: only if the chat is that user's.
        """
        since = utcnow() - self._store.deleted_retention
        where = ChatFilter(user_uuid, chat_uuid=chat_uuid, deleted=True, deleted_after=since)
        return await self._store._set_deleted_at(where, None)

    async def purge_deleted_chats(self, older_than: datetime | None = None) -> int:
        """Hard-delete the chats soft-deleted before ``older_than``; return how many.

        ``older_than`` defaults to :attr:`deleted_retention` ago.
        """
        cutoff = utcnow() - self._store.deleted_retention if older_than is None else older_than
        expired = await self._store._select_chats(ChatFilter(deleted=True, deleted_before=cutoff))
        return sum([await self._store._delete_chat(c.chat_uuid) is not None for c in expired])

    # --- erasure --------------------------------------------------------------------

    def add_erasure_hook(self, name: str, hook: ErasureHook) -> None:
        """Have ``hook(user_uuid)`` remove what else keeps a user's data (sync or async).

        For copies the store does not hold: a run manager's event logs, an outbox's
        entries, files written for the user. It returns how many it removed, which an
        erasure's receipt counts under ``name``; a second hook of one name replaces the first.
        """
        self._erasure_hooks[name] = hook

    def remove_erasure_hook(self, name: str) -> None:
        """Stop calling the erasure hook ``name`` (nothing when there is none)."""
        self._erasure_hooks.pop(name, None)

    @_telemetry.traced("threadstore.erase")
    async def forget_user(
        self, user_uuid: UUID, *, requested_by: str | None = None, batch: int = ERASE_BATCH
    ) -> ErasureReceipt:
        """Remove everything of a user; return a receipt of what went (counts, no content).

        First a tombstone: from then on no chat of the user can be created, so a run
        still streaming writes nothing back (its flushes find their chat gone). Then the
        user's chats (live and soft-deleted) with their messages, tool calls, reasoning,
        runs, relayed run events and summaries, ``batch`` chats per transaction; the
        histories this store keeps of them; their usage ledger rows and budgets
        (``usage_records``); and what each erasure hook removes. The receipt is kept
        (``erasure_receipts``). Running it again finds nothing more.
        """
        backend = self._lifecycle()
        started = utcnow()
        await backend.tombstone(user_uuid, started)
        counts: Counter[str] = Counter(dict.fromkeys(ERASED_KINDS, 0))
        cache = self._store.history_cache
        while True:
            removed, chats = await backend.erase_chats(user_uuid, batch)
            if not chats:
                break
            counts.update(removed)
            for chat_uuid in chats:
                if cache is not None and cache.entry(chat_uuid) is not None:
                    cache.discard(chat_uuid)
                    counts["cached_histories"] += 1
        if self._store._usage is not None:
            # The ledger outlives a chat (it is accounting), not its user.
            counts["usage_records"] = await self._store._usage.erase_user(user_uuid)
        for name, hook in list(self._erasure_hooks.items()):
            done = hook(user_uuid)
            counts[name] += int(await done if inspect.isawaitable(done) else done)
        receipt = ErasureReceipt(
            user_uuid=user_uuid,
            requested_by=requested_by,
            started_at=started,
            finished_at=utcnow(),
            counts=dict(counts),
        )
        await backend.save_receipt(receipt)
        return receipt

    async def erasure_receipts(self, user_uuid: UUID | None = None) -> list[ErasureReceipt]:
        """Receipts of past erasures (of one user, or every one), newest first."""
        return await self._lifecycle().select_receipts(user_uuid)

    def _lifecycle(self) -> LifecycleBackend:
        return self._store._required(self._store._lifecycle, "lifecycle records")

    # --- retention ------------------------------------------------------------------

    async def set_retention_policy(
        self,
        policy: RetentionPolicy,
        *,
        user_uuid: UUID | None = None,
        chat_uuid: UUID | None = None,
    ) -> None:
        """Set the retention policy of one chat, of a user's chats, or (neither) of all.

        A chat's policy is its own fields, else its user's, else the global one's; a
        legal hold on the chat or the user exempts it. Replaces that scope's policy whole.
        """
        scope, scope_uuid = _scope(user_uuid, chat_uuid)
        await self._lifecycle().upsert_policy(scope, scope_uuid, policy, utcnow())

    async def clear_retention_policy(
        self, *, user_uuid: UUID | None = None, chat_uuid: UUID | None = None
    ) -> bool:
        """Remove the policy of a chat, a user, or (neither) the global one; whether there was."""
        scope, scope_uuid = _scope(user_uuid, chat_uuid)
        return await self._lifecycle().delete_policy(scope, scope_uuid)

    async def retention_policies(self) -> list[ScopedPolicy]:
        """Every retention policy set, global, per user and per chat."""
        return await self._lifecycle().select_policies()

    async def expired_chats(
        self, *, now: datetime | None = None, limit: int | None = None
    ) -> list[ExpiredChat]:
        """The chats a sweep would delete now, and why (read only, a page at a time)."""
        found: list[ExpiredChat] = []
        async for page in self._expired_pages(now or utcnow()):
            found += page
            if limit is not None and len(found) >= limit:
                break
        return found[:limit]

    async def _expired_pages(self, at: datetime) -> AsyncIterator[list[ExpiredChat]]:
        """The chats expired at ``at``, :data:`SWEEP_PAGE` at a time, by chat uuid."""
        window = self._store.deleted_retention.total_seconds()
        after: UUID | None = None
        while True:
            page = await self._lifecycle().select_expired(at, window, after, SWEEP_PAGE)
            yield page
            if len(page) < SWEEP_PAGE:
                return
            after = page[-1].chat_uuid

    @_telemetry.traced("threadstore.sweep")
    async def sweep_expired(
        self,
        *,
        now: datetime | None = None,
        batch: int = SWEEP_BATCH,
        pause: float = 0.0,
        share: float = 1.0,
    ) -> SweepReport:
        """Delete the chats whose retention has passed, ``batch`` chats per transaction.

        Chats are found without waiting for writers; each batch is checked again as it
        is deleted (a chat written to meanwhile stays) and at least ``pause`` seconds
        pass between batches, so writers never wait long and the event loop is never
        held. ``share`` is the most of the time the sweep may keep the database busy: at
        0.25 it waits three times as long as each batch took (the server's background
        sweep does), so the runs beside it keep most of the machine. Then the relayed
        events of runs beyond each chat's ``keep_run_logs`` go (PostgreSQL).
        """
        if batch < 1:
            raise InvalidInputError(f"batch must be at least 1, got {batch}")
        if not 0 < share <= 1:
            raise InvalidInputError(f"share must be above 0 and at most 1, got {share}")
        loop = asyncio.get_running_loop()
        backend, report = self._lifecycle(), SweepReport()
        at, window = now or utcnow(), self._store.deleted_retention.total_seconds()
        cache = self._store.history_cache
        reasons: Counter[str] = Counter()
        async for page in self._expired_pages(at):
            why = {expired.chat_uuid: expired.reason for expired in page}
            for start in range(0, len(page), batch):
                chunk = [expired.chat_uuid for expired in page[start : start + batch]]
                began = loop.time()
                gone, messages = await backend.delete_expired(chunk, at, window)
                took = loop.time() - began
                report.chats += len(gone)
                report.messages += messages
                reasons.update(why[chat_uuid] for chat_uuid in gone)
                for chat_uuid in gone:
                    if cache is not None:
                        cache.discard(chat_uuid)
                await asyncio.sleep(max(pause, took * (1 / share - 1)))
        report.run_events = await backend.prune_run_logs()
        report.reasons = dict(reasons)
        report.finished_at = utcnow()
        return report


class Messages:
    """The messages of a store: the kept history and its pages; and the seed's message
    methods, the store's own."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.create_message = store.create_message
        self.update_message = store.update_message
        self.create_message_tool_call = store.create_message_tool_call
        self.update_message_tool_call = store.update_message_tool_call
        self.create_message_reasoning = store.create_message_reasoning
        self.update_message_reasoning = store.update_message_reasoning
        self.get_message = store.get_message
        self.get_message_by_agui_id = store.get_message_by_agui_id
        self.get_tool_call_by_agui_id = store.get_tool_call_by_agui_id
        self.get_chat_messages = store.get_chat_messages
        self.get_last_messages = store.get_last_messages

    @_telemetry.traced("threadstore.search", attributes={"gen_ai.operation.name": "retrieval"})
    async def search(
        self,
        user_uuid: UUID,
        query: str,
        *,
        order: SearchOrder = "newest",
        all_branches: bool = False,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> SearchPage:
        """One page of the user's messages holding every word of ``query``, with snippets.

        Reads the text, tool calls (name, arguments, result) and reasoning of the user's
        live chats only; the active branch of each unless ``all_branches``; newest first
        or (``order="best"``) best match first. ``query`` is plain words (no operators).
        Messages stored before search existed are indexed in the background after
        ``setup()``; until then a search may miss them (:meth:`search_backlog`).
        """
        return await search(
            self._searcher(),
            user_uuid,
            query,
            order=order,
            all_branches=all_branches,
            limit=limit,
            cursor=cursor,
        )

    async def search_backlog(self) -> int:
        """How many stored messages still wait to be indexed for search (0: none)."""
        return await self._searcher().backlog()

    def _searcher(self) -> SearchBackend:
        return self._store._required(self._store._search, "search index")

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

    @_telemetry.traced("threadstore.store.read_history", conversation=True)
    async def read_history(self, chat_uuid: UUID, *derivations: Derivation[Any]) -> HistoryView:
        """The chat's whole active branch, oldest first, and what is derived from it.

        What a run replays. With a history cache, a repeated read costs one indexed
        lookup and a read after appends reads only the rows written since the last read
        (see ``store/_history.py``); a chat that does not exist reads as empty. Each of
        ``derivations`` is kept with the history and grown with it: ``view.derived(d)``.
        """
        cache = self._store.history_cache
        if cache is None:
            return await self._read_whole(chat_uuid, derivations)
        inside = self._store._in_transaction()
        for _ in range(2):
            # The version is read before the rows: a write committed in between makes
            # the history newer than its tag, never older, so it is read again next time.
            version = await self._store._history_version(chat_uuid)
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
                changed = await self._store._select_changed(chat_uuid, since, version)
                if kept.version != since or kept.retired:
                    continue  # another read moved it meanwhile: start again from it
                if changed is not None and len(changed[0]) < STEP_MESSAGES:
                    entries, leaf = changed
                    pairs = list(zip(entries, self._store._build_entries(entries), strict=True))
                    grown = extended(kept, version, pairs, leaf)
                    if grown is not None:
                        cache.extensions += 1
                        cache.keep(chat_uuid, grown)
                        return await self._with_derivations(chat_uuid, grown, derivations)
            break
        cache.misses += 1
        entries = await self._store._select_entries(chat_uuid, version)
        built = await kept_history(version, self._store._build_entries, entries, derivations)
        cache.keep(chat_uuid, built)
        return built.view()

    async def _read_whole(
        self, chat_uuid: UUID, derivations: Sequence[Derivation[Any]]
    ) -> HistoryView:
        """The whole active branch, read now and kept by nobody."""
        messages = await self._store._select_branch(chat_uuid, BranchPage(), None)
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
        cache = self._store.history_cache
        if cache is not None and cache.entry(chat_uuid) is kept:
            kept.derived = grown.derived  # the same entries: what was added serves it too
        return grown.view()


class Runs:
    """The runs of a store: those running, and their leftover records finalized; and the seed's
    run methods, the store's own."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.start_run = store.start_run
        self.heartbeat_runs = store.heartbeat_runs
        self.finish_run = store.finish_run
        self.get_run = store.get_run
        self.get_stale_runs = store.get_stale_runs
        self.finalize_run_records = store.finalize_run_records

    async def get_running_runs(
        self, chat_uuid: UUID, *, with_run: str | None = None
    ) -> Sequence[Run]:
        """Return the chat's runs recorded running, whatever their heartbeat (oldest first).

        With ``with_run``, also the chat's run of that id whatever its status, in the
        same read (what a run's start checks: is this id taken, is the chat busy).
        Reads that chat's runs only, however many run elsewhere in the store.
        """
        return await self._store._select_runs(RunFilter(chat_uuid, with_run, running=True))


def _scope(user_uuid: UUID | None, chat_uuid: UUID | None) -> tuple[Scope, UUID]:
    """The scope a retention policy is for: one chat, one user, or (neither) every chat."""
    if user_uuid is not None and chat_uuid is not None:
        raise InvalidInputError("a retention policy is for a chat or a user, not both")
    if chat_uuid is not None:
        return "chat", chat_uuid
    if user_uuid is not None:
        return "user", user_uuid
    return "global", GLOBAL_SCOPE
