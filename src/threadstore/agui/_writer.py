"""The background half of a storage agent's run: the fold task and the writer task.

:class:`RunPersister` takes each event the stream yields (:meth:`RunPersister.take`):
while nothing is queued it folds it on the spot, deltas a run at a time; otherwise it
queues it for the fold task, which awaits overridden handlers in order. The writer task
writes what the fold marked dirty, one transaction per flush. It sees the agent only
through :class:`AgentHooks` and :class:`PersisterConfig`; see
:mod:`threadstore.agui._agent` for the guarantees this gives.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, TypeVar, cast
from uuid import UUID

from ag_ui.core import BaseEvent
from pydantic import BaseModel, create_model

from threadstore.errors import NotFoundError, StoreError
from threadstore.fold import DELTA_EVENTS, ConversationFold, FoldRecord, RecordKind
from threadstore.models import (
    ERROR_METADATA_KEY,
    Chat,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    RunStatus,
)
from threadstore.store import (
    BatchWriter,
    ChatRepositoryLike,
    CreateMessage,
    CreateReasoning,
    CreateToolCall,
    FinalizeRunRecords,
    FinishRun,
    MessageRepositoryLike,
    RunRepositoryLike,
    UpdateChatState,
    UpdateMessage,
    UpdateReasoning,
    UpdateToolCall,
    Write,
    apply_to,
    capabilities_of,
)

__all__ = [
    "DELTA_BATCH",
    "AgentHooks",
    "EventHandler",
    "HandlerKind",
    "PersisterConfig",
    "RunPersister",
    "StreamEnd",
]

logger = logging.getLogger("threadstore.agui._agent")

_RUN_STATUS = {
    MessageStatus.COMPLETE: RunStatus.COMPLETE,
    MessageStatus.INTERRUPTED: RunStatus.INTERRUPTED,
    MessageStatus.ERRORED: RunStatus.ERRORED,
}
_RECORD_STATUS = {run: record for record, run in _RUN_STATUS.items()}

DELTA_BATCH = 64
"""Deltas a stream hands over before they are folded (:meth:`RunPersister.fold_deltas`).

Folding a run of one record's deltas at once costs less than folding each as it
comes; this bounds what a run holds unfolded.
"""

_ModelT = TypeVar("_ModelT", bound=BaseModel)
_T = TypeVar("_T")

EventHandler = Callable[[ConversationFold, Chat, BaseEvent], Awaitable[None]]
"""An event handler of a storage agent: folds one event into the run's state."""


class HandlerKind(Enum):
    """What an event's handler does, as its agent declares it."""

    APPLY = "apply"
    """The default: only ``state.apply(event)``, so the event is folded without awaiting."""
    IGNORE = "ignore"
    """A handler declared to do nothing: the event is only counted."""
    CUSTOM = "custom"
    """An override: awaited, in order, on the fold task."""


class AgentHooks(Protocol):
    """What a run's persister uses of its storage agent: repositories, handlers, build hooks."""

    @property
    def chat_repo(self) -> ChatRepositoryLike:
        """Where the chat's state is kept."""
        ...

    @property
    def message_repo(self) -> MessageRepositoryLike:
        """Where the run's records are written."""
        ...

    @property
    def run_repo(self) -> RunRepositoryLike | None:
        """Where the run record is finished, if the run is recorded."""
        ...

    def handler_kind(self, event_type: type[BaseEvent]) -> HandlerKind:
        """Whether ``event_type``'s handler is a default one (folded inline) or an override."""
        ...

    def handler(self, event_type: type[BaseEvent]) -> EventHandler:
        """The handler of ``event_type``."""
        ...

    def build_hook(self, name: str, *, default: bool) -> Callable[..., BaseModel]:
        """The build hook ``name`` (``build_message_create``...); the base one if ``default``."""
        ...

    def message_update_fields(
        self, state: ConversationFold, event: BaseEvent | None
    ) -> dict[str, Any]:
        """Extra fields written when a message reaches a terminal status."""
        ...


@dataclass(frozen=True, slots=True)
class PersisterConfig:
    """When a persister flushes and how it retries (see ``StorageAgent``'s attributes)."""

    checkpoint_interval: float = 1.0
    min_flush_interval: float = 0.25
    retry_base_delay: float = 0.05
    retry_max_delay: float = 2.0
    final_flush_deadline: float = 30.0
    """Seconds the final flush retries a write that fails on its own before giving up."""

    def backoff(self, failures: int) -> float:
        """Seconds to wait before the retry that follows ``failures`` failures in a row."""
        return float(min(self.retry_max_delay, self.retry_base_delay * 2 ** (failures - 1)))


# --- DTO helpers -------------------------------------------------------------------------


@functools.cache
def _extended(cls: type[_ModelT], names: frozenset[str]) -> type[_ModelT]:
    """A subclass of ``cls`` declaring ``names`` (Any, default None), cached per set."""
    fields: dict[str, Any] = {name: (Any, None) for name in sorted(names)}
    return create_model(f"{cls.__name__}WithFields", __base__=cls, **fields)


@functools.cache
def _field_names(cls: type[BaseModel]) -> frozenset[str]:
    return frozenset(cls.model_fields)


def _with_fields(dto: _ModelT, fields: dict[str, Any]) -> _ModelT:
    """Return ``dto`` with ``fields`` set; keys its class lacks are declared on a subclass."""
    if not fields:
        return dto
    cls = type(dto)
    unknown = fields.keys() - _field_names(cls)
    if not unknown:
        # Shallow and unvalidated: the fields come from the fold or from the DTO itself.
        return dto.model_copy(update=fields)
    extended: type[_ModelT] = _extended(cls, frozenset(unknown))
    return extended.model_validate({**dto.model_dump(), **fields})


def _copied(value: _T) -> _T:
    """A deep copy of ``value``, which the fold keeps changing (cheap when it is empty)."""
    if value is None:
        return value
    if not value:
        fresh: _T = type(value)()  # an empty container, but never the fold's own
        return fresh
    return copy.deepcopy(value)


def _set(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


# --- the background half of one run ------------------------------------------------------


@dataclass(slots=True)
class StreamEnd:
    """Queue sentinel: the stream ended with ``status`` (``complete`` = ended normally)."""

    status: MessageStatus
    error: str | None


@dataclass(slots=True)
class _Entry:
    """What the writer knows about one record."""

    create: BaseModel | None = None
    uuid: UUID | None = None
    created: bool = False
    uncertain: bool = False
    """A create was attempted in a transaction that failed: check before creating again."""
    written_version: int = -1
    written_content_version: int = -1
    terminal: dict[str, Any] = field(default_factory=dict)
    terminal_written: bool = True


@dataclass(slots=True)
class _Op:
    """One write of a flush, with what it will have written once committed."""

    repo: Any
    """The repository that takes ``write``."""
    write: Write
    entry: _Entry | None = None
    check_exists: bool = False
    """A create retried after a failed flush: it may have landed, so look first."""
    version: int = 0
    content_version: int = 0
    state_version: int | None = None
    terminal: bool = False
    record: FoldRecord | None = None
    final: bool = False
    """One of the writes that close the run (``finalize_run_records``, ``finish_run``)."""


class RunPersister:
    """The fold task and the writer task of one run."""

    def __init__(
        self, agent: AgentHooks, config: PersisterConfig, chat: Chat, fold: ConversationFold
    ) -> None:
        self.agent, self.config, self.chat, self.fold = agent, config, chat, fold
        # What the chat repository can keep: a Protocol-only repository keeps no state.
        self.keeps_state = capabilities_of(agent.chat_repo).chat_state
        self.pending: collections.deque[BaseEvent | StreamEnd] = collections.deque()
        self.deltas: list[BaseEvent] = []
        """Deltas the stream handed over while nothing was pending, not folded yet."""
        self._arrival: asyncio.Future[None] | None = None
        self.enqueued = self.folded = 0
        self._writer_wakeup = asyncio.Event()
        self._flush_wanted = self._flush_now = False
        self.entries: dict[str, _Entry] = {}
        self.state_written = 0
        self.final: tuple[MessageStatus, RunStatus, str | None] | None = None
        self.failed: BaseException | None = None
        self.retries = 0
        """Failed write attempts so far, each then tried again (or split in halves).

        A healthy store never makes a flush retry: this stays 0 unless the store failed.
        """
        self.chat_deleted = False
        """The chat was deleted during the run: nothing more is written (it stays deleted)."""
        self.chain: UUID | None = None
        """Set on a run that branches: its newest message, the parent of the next one.

        Such a run names each message's parent instead of appending to the chat's leaf,
        so runs branching from the same message at once each keep their own branch.
        """
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._handling: BaseEvent | None = None
        """The event whose overridden handler the fold task is awaiting, if any."""
        self._custom_handled = False
        """An overridden handler ran: it may have written records the fold does not know."""
        self._kinds: dict[type[BaseEvent], HandlerKind] = {}
        """Per event class: what its handler does (asked once per class)."""
        self.delta_kinds = frozenset(
            kind for kind in DELTA_EVENTS if self._handler_kind(kind) is HandlerKind.APPLY
        )
        """The delta classes folded a run at a time while nothing is queued."""
        self._fold_task = asyncio.create_task(self._fold_loop(), name="threadstore-fold")
        self._writer_task = asyncio.create_task(self._write_loop(), name="threadstore-writer")

    # --- client side ---------------------------------------------------------------------

    def take(self, event: BaseEvent) -> None:
        """Hand over one event the stream yields, in order (the stream's only per-event call).

        While nothing is queued ahead of it, an event whose handler is a default one is
        folded here (no I/O): deltas a few dozen at a time, each run of one record's at
        once, anything else at once after the deltas before it. Events with an
        overridden handler go to the fold task, and so does everything after them until
        it has caught up, to keep their order.
        """
        if self.pending:
            self.put(event)
        elif type(event) in self.delta_kinds:
            deltas = self.deltas
            deltas.append(event)
            if len(deltas) >= DELTA_BATCH:
                self.fold_deltas()
        else:
            if self.deltas:
                self.fold_deltas()
            if not self.fold_now(event):
                self.put(event)

    def put(self, event: BaseEvent) -> None:
        self._push(event)
        self.enqueued += 1

    async def close(self, status: MessageStatus, error: str | None) -> None:
        self.fold_deltas()
        self._push(StreamEnd(status, error))
        await self._fold_task
        await self._writer_task

    def _push(self, item: BaseEvent | StreamEnd) -> None:
        # A deque and one future rather than asyncio.Queue, whose bookkeeping took about
        # a sixth of the time a streamed event costs (see docs/benchmarks.md).
        self.pending.append(item)
        arrival, self._arrival = self._arrival, None
        if arrival is not None and not arrival.done():
            arrival.set_result(None)

    @property
    def done(self) -> bool:
        return self._writer_task.done()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        if predicate() or self.done or self.chat_deleted:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, future))
        await future

    def _notify(self) -> None:
        waiting, self._waiters = self._waiters, []
        for predicate, future in waiting:
            if future.done():
                continue
            if predicate() or self.done or self.failed is not None or self.chat_deleted:
                future.set_result(None)
            else:
                self._waiters.append((predicate, future))

    async def durable(self) -> None:
        """Return once every event handed over so far is written (or the writer gave up).

        From inside an overridden handler (on the fold task) it waits for what has been
        folded so far, the handler's own changes included: waiting for the handler's own
        event to be folded could never end.
        """
        handling = self._handling
        in_handler = handling is not None and asyncio.current_task() is self._fold_task
        if in_handler:
            self._absorb(handling)  # build the DTOs of records the handler opened
        else:
            target = self.enqueued
            await self.wait_until(lambda: self.folded >= target)
        reached = self.barrier()
        if reached():
            return
        self.request_flush(now=True)
        if not in_handler:
            await self.wait_until(reached)
            return
        # The run cannot end while its handler waits, so a store that stays down would
        # hold it forever: the handler gets an error after the final flush's deadline.
        try:
            async with asyncio.timeout(self.config.final_flush_deadline):
                await self.wait_until(reached)
        except TimeoutError:
            raise StoreError(
                f"run {self.fold.run_id}: buffered content was not written within "
                f"{self.config.final_flush_deadline} s"
            ) from None

    def barrier(self) -> Callable[[], bool]:
        """A predicate that holds once everything folded so far is written."""
        self.fold_deltas()
        pending = {
            record.key: record.version
            for record in self.fold.records.values()
            if (entry := self._entry(record)) is None or entry.written_version < record.version
        }
        state_version = self.fold.state_version

        def reached() -> bool:
            if self.state_written < state_version and self.keeps_state:
                return False
            for key, version in pending.items():
                entry = self.entries.get(key)
                if entry is None or entry.written_version < version:
                    return False
            return True

        return reached

    # --- fold task -----------------------------------------------------------------------

    def _handler_kind(self, event_type: type[BaseEvent]) -> HandlerKind:
        try:
            return self._kinds[event_type]
        except KeyError:
            kind = self._kinds[event_type] = self.agent.handler_kind(event_type)
            return kind

    def fold_deltas(self) -> None:
        """Fold the deltas in :attr:`deltas`, in order: each run of one record's at once.

        Called before anything reads the fold: the next event that is not such a delta,
        a flush, a barrier, the end of the stream, and every ``DELTA_BATCH`` deltas.
        """
        deltas = self.deltas
        if not deltas:
            return
        apply_deltas = self.fold.apply_deltas
        index, count = 0, len(deltas)
        try:
            while index < count:
                taken = apply_deltas(deltas, index)
                if taken:
                    index += taken
                else:  # a delta that opens a record, warns or closes a chunk
                    self._apply_inline(deltas[index])
                    index += 1
        finally:
            deltas.clear()

    def fold_now(self, event: BaseEvent) -> bool:
        """Fold ``event`` on the spot if its handler is a default one; False to queue it.

        The caller (the stream) must only call this while nothing is pending, so no
        event overtakes one still queued.
        """
        kind = self._handler_kind(type(event))
        if kind is HandlerKind.CUSTOM:
            return False
        self._fold_inline(kind, event)
        return True

    def _fold_inline(self, kind: HandlerKind, event: BaseEvent) -> None:
        """What :meth:`_apply` does for a default handler, without a coroutine."""
        if kind is HandlerKind.IGNORE:
            self._absorb(event)
        elif not (type(event) in self.delta_kinds and self.fold.apply_deltas((event,))):
            self._apply_inline(event)  # (a delta folded above opened or closed nothing)

    def _apply_inline(self, event: BaseEvent) -> None:
        try:
            self.fold.apply(event)
        except Exception:
            logger.exception("handler for %s failed; the event was not folded", event.type)
        self._absorb(event)

    async def _fold_loop(self) -> None:
        pending = self.pending
        while True:
            if not pending:
                arrival = self._arrival = asyncio.get_running_loop().create_future()
                await arrival
                continue
            while pending:
                # Peeked, and popped once folded: StorageAgent.run folds a delta itself
                # only while nothing is pending, so no event overtakes one still folding.
                item = pending[0]
                if isinstance(item, StreamEnd):
                    pending.popleft()
                    self._end(item)
                    self._writer_wakeup.set()
                    self._notify()
                    return
                kind = self._handler_kind(type(item))
                if kind is HandlerKind.CUSTOM:
                    await self._apply(item)
                else:
                    self._fold_inline(kind, item)
                pending.popleft()
                self.folded += 1
            self._notify()

    async def _apply(self, event: BaseEvent) -> None:
        handler = self.agent.handler(type(event))
        self._handling = event
        self._custom_handled = True
        try:
            await handler(self.fold, self.chat, event)
        except Exception:
            logger.exception("handler for %s failed; the event was not folded", event.type)
        finally:
            self._handling = None
        self._absorb(event)

    def _absorb(self, event: BaseEvent | None) -> None:
        """Take the fold's changes: build DTOs of opened records, terminal fields of closed ones."""
        changes = self.fold.take_changes()
        for warning in changes.warnings:
            logger.warning("run %s: %s", self.fold.run_id, warning)
        for record in changes.opened:
            self._prepare(record)
        for record in changes.closed:
            if record.kind is RecordKind.MESSAGE and record.owned:
                self._terminal_fields(record, event)
        if changes.boundary:
            self.request_flush()

    def _prepare(self, record: FoldRecord) -> None:
        try:
            dto = self._build(record, default=False)
        except Exception:
            logger.exception("a build hook failed for %s; using the default DTO", record.key)
            dto = self._build(record, default=True)
        if isinstance(dto, MessageCreate) and self.chain is not None:
            if dto.parent_uuid is None:
                dto = dto.model_copy(update={"parent_uuid": self.chain})
            self.chain = dto.message_uuid
        uuid = dto.message_uuid if isinstance(dto, MessageCreate) else getattr(dto, "uuid", None)
        record.uuid = uuid
        self.entries[record.key] = _Entry(create=dto, uuid=uuid)

    def _build(self, record: FoldRecord, *, default: bool) -> BaseModel:
        agent, fold, chat = self.agent, self.fold, self.chat

        def hook(name: str) -> Callable[..., BaseModel]:
            # ``default`` is the base implementation, bypassing a failing override.
            return functools.partial(agent.build_hook(name, default=default), fold, chat)

        if record.kind is RecordKind.MESSAGE:
            return hook("build_message_create")(record.agui_id, record.role)
        parent = fold.records[record.parent_key or ""]
        parent_entry = self._entry(parent)
        parent_uuid = parent_entry.uuid if parent_entry is not None else parent.uuid
        assert parent_uuid is not None
        if record.kind is RecordKind.TOOL_CALL:
            return hook("build_tool_call_create")(
                parent_uuid, record.agui_id or "", record.name or ""
            )
        return hook("build_reasoning_create")(parent_uuid, record.agui_id, record.name)

    def _terminal_fields(self, record: FoldRecord, event: BaseEvent | None) -> None:
        try:
            fields = self.agent.message_update_fields(self.fold, event)
        except Exception:
            logger.exception("message_update_fields failed for %s", record.key)
            return
        entry = self.entries.get(record.key)
        if fields and entry is not None:
            entry.terminal.update(fields)
            entry.terminal_written = False

    def _end(self, end: StreamEnd) -> None:
        announced = self.fold.run.status
        if end.status is MessageStatus.COMPLETE and announced is not None:
            record_status = _RECORD_STATUS[announced]
        else:
            record_status = end.status
        run_status = announced if announced is not None else _RUN_STATUS[record_status]
        self.fold.finish(record_status)
        self._absorb(None)
        self.final = (record_status, run_status, end.error or self.fold.run.error)

    # --- writer task ---------------------------------------------------------------------

    def request_flush(self, *, now: bool = False) -> None:
        """Ask the writer for a flush: right away if ``now``, else at the next boundary slot.

        Boundary flushes start at least ``min_flush_interval`` apart, so the boundaries
        of a fast stream share a transaction; ``now`` (and the end of the stream) skips
        that wait.
        """
        if now:
            self._flush_now = True
        elif self._flush_wanted:
            return  # the writer already waits for the next slot
        self._flush_wanted = True
        self._writer_wakeup.set()

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        wakeup = self._writer_wakeup
        started = -float("inf")  # when the last flush started: the first boundary flushes at once
        checkpoint = loop.time()
        try:
            while True:
                delay = self._flush_delay(started, checkpoint, loop.time())
                if delay > 0:
                    wakeup.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(None if delay == float("inf") else delay):
                            await wakeup.wait()
                    continue  # a request or the due time: look again
                self._flush_wanted = self._flush_now = False
                started = checkpoint = loop.time()
                final = self.final is not None
                await self._flush(final=final)
                if final:
                    return
        finally:
            self._notify()

    def _flush_delay(self, started: float, checkpoint: float, now: float) -> float:
        """Seconds until the next flush, given when the last one started (or the run did)."""
        if self._flush_now or self.final is not None:
            return 0.0
        due = checkpoint + self.config.checkpoint_interval
        if self._flush_wanted:  # a boundary: its slot, but never after the checkpoint
            due = min(due, started + self.config.min_flush_interval)
        return due - now

    def _entry(self, record: FoldRecord) -> _Entry | None:
        entry = self.entries.get(record.key)
        if entry is None and not record.owned and record.uuid is not None:
            # A stored record this run only updates: version 0 is what the store holds.
            entry = _Entry(uuid=record.uuid, created=True, written_version=0)
            entry.written_content_version = 0
            self.entries[record.key] = entry
        return entry

    async def _flush(self, *, final: bool) -> None:
        """Write the records dirty now (and, if ``final``, finalize the run) in transactions.

        A transaction that fails is split in halves, down to single writes, so writes
        that cannot all succeed together still land one by one, in order. A single write
        that fails is retried with backoff: until the run ends for a checkpoint (the
        final flush takes over), for ``final_flush_deadline`` seconds for the final
        flush, which then gives up (:meth:`_give_up`).
        """
        self.fold_deltas()
        records = self.fold.take_dirty()
        if self.chat_deleted:
            return
        loop = asyncio.get_running_loop()
        state_pending = final or self.fold.state_version != self.state_written
        closing = final
        finals_done: set[str] = set()
        limit: int | None = None
        failures = 0
        failing_since: float | None = None
        while records or state_pending or closing:
            batch: list[_Op] = []
            try:
                ops, deferred = self._ops(
                    records, with_state=state_pending, closing=closing, finals_done=finals_done
                )
                if deferred:
                    # Written by a later flush, once their handler has built them.
                    self.fold.mark_dirty(deferred)
                    waiting = {id(record) for record in deferred}
                    records = [record for record in records if id(record) not in waiting]
                batch = ops if limit is None else ops[:limit]
                if not batch:
                    break
                await self._commit(batch)
            except Exception as exc:
                self.retries += 1
                self._failed_ops(batch)
                if isinstance(exc, NotFoundError) and await self._chat_gone():
                    self._give_up_deleted_chat()
                    return
                if len(batch) > 1:
                    limit = len(batch) // 2  # a piece may go through where the whole did not
                    continue
                failures += 1
                now = loop.time()
                failing_since = now if failing_since is None else failing_since
                if not self._retry(exc, failures, final, now - failing_since):
                    if final:
                        await self._give_up(records, exc, failures, now - failing_since)
                    else:
                        self.fold.mark_dirty(records)
                    return
                await asyncio.sleep(self.config.backoff(failures))
                continue
            failures, failing_since = 0, None
            self._committed(batch)
            written = {id(op.record) for op in batch if op.record is not None}
            records = [record for record in records if id(record) not in written]
            if not any(op.state_version is not None for op in ops[len(batch) :]):
                state_pending = False
            finals_done.update(op.write.method for op in batch if op.final)
            if not any(op.final for op in ops[len(batch) :]):
                closing = False
            self._notify()

    async def _chat_gone(self) -> bool:
        """Whether the run's chat no longer exists (deleted while the run streamed)."""
        repo, chat = self.agent.chat_repo, self.chat
        try:
            get_chat = getattr(repo, "get_chat", None)
            if get_chat is not None:
                return await get_chat(chat.chat_uuid) is None
            found = await repo.get_chat_by_thread_id(chat.user_uuid, chat.thread_id)
        except Exception:
            return False  # the store is failing: retry as for any failure
        return found is None or found.chat_uuid != chat.chat_uuid

    async def check_chat_deleted(self) -> bool:
        """Whether the run's chat is gone; if so, its remaining records are dropped.

        Writes to a deleted chat's existing rows touch nothing and fail nothing, so only
        a look at the chat tells.
        """
        if not self.chat_deleted and await self._chat_gone():
            self._give_up_deleted_chat()
        return self.chat_deleted

    def _give_up_deleted_chat(self) -> None:
        # A delete is the user's word: the run's remaining records are dropped rather
        # than retried (a retry could only fail again, or bring the chat back).
        self.chat_deleted = True
        logger.info(
            "run %s: chat %s was deleted during the run; its remaining records are not written",
            self.fold.run_id,
            self.chat.chat_uuid,
        )
        self._notify()

    def _retry(self, exc: Exception, failures: int, final: bool, failing_for: float) -> bool:
        if final and failing_for >= self.config.final_flush_deadline:
            return False
        if not final and self.final is not None:
            return False  # the run ended meanwhile: the final flush takes over
        logger.warning("run %s: flush failed (%s); retrying", self.fold.run_id, exc)
        return True

    async def _give_up(
        self, records: list[FoldRecord], exc: Exception, attempts: int, failing_for: float
    ) -> None:
        """Stop retrying: log what is lost, and mark the run ``errored`` if the store lets us.

        Never a silent loss: the log says how many records and characters were not
        written, and :meth:`StorageAgent.persisted` raises.
        """
        self.failed = exc
        lost_records, lost_chars = 0, 0
        for record in records:
            entry = self.entries.get(record.key)
            if entry is not None and entry.created and entry.written_version >= record.version:
                continue
            lost_records += 1
            unwritten = entry is None or entry.written_content_version < record.content_version
            if unwritten:
                lost_chars += len(record.content) + len(record.result or "")
        reason = f"the run's records could not be persisted: {exc}"
        logger.error(
            "run %s: giving up persisting after %d attempts over %.1f s; %d records "
            "(%d characters) lost",
            self.fold.run_id,
            attempts,
            failing_for,
            lost_records,
            lost_chars,
            exc_info=exc,
        )
        # Best effort, one write at a time: the run says why its history is short.
        for op in self._final_ops(MessageStatus.ERRORED, RunStatus.ERRORED, reason, sweep=True):
            try:
                await self._commit([op])
            except Exception as final_exc:
                logger.error(
                    "run %s: could not mark the run errored (%s): %s",
                    self.fold.run_id,
                    op.write.method,
                    final_exc,
                )
        self._notify()

    def _failed_ops(self, ops: list[_Op]) -> None:
        for op in ops:
            entry = op.entry
            if entry is not None and not entry.created:
                entry.uncertain = True

    async def _commit(self, ops: list[_Op]) -> None:
        if not ops:
            return
        repo = self.agent.message_repo
        if capabilities_of(repo).batch_writes and all(
            op.repo is repo and not op.check_exists for op in ops
        ):
            # One call for the whole flush: a backend may send it in one round trip.
            await cast(BatchWriter, repo).apply_writes([op.write for op in ops])
            return
        async with repo.transaction():
            for op in ops:
                write = op.write
                if op.check_exists and await self._exists(op):
                    # An earlier attempt's create landed although its flush failed.
                    write = _as_update(write, _uuid(op.entry))
                await apply_to(op.repo, write)

    def _committed(self, ops: list[_Op]) -> None:
        for op in ops:
            if op.state_version is not None:
                self.state_written = max(self.state_written, op.state_version)
            entry = op.entry
            if entry is None:
                continue
            entry.created, entry.uncertain = True, False
            entry.written_version = max(entry.written_version, op.version)
            entry.written_content_version = max(entry.written_content_version, op.content_version)
            if op.terminal:
                entry.terminal_written = True

    def _ops(
        self,
        batch: list[FoldRecord],
        *,
        with_state: bool,
        closing: bool,
        finals_done: set[str] | frozenset[str] = frozenset(),
    ) -> tuple[list[_Op], list[FoldRecord]]:
        """Build the writes of ``batch`` from the records' current values.

        Returns (ops, deferred): a record whose DTO is not built yet (a handler is still
        running) is deferred, and so is every later create, to keep production order.
        """
        ops: list[_Op] = []
        deferred: list[FoldRecord] = []
        blocked = False
        for record in batch:
            entry = self._entry(record)
            if entry is None or (not entry.created and blocked):
                blocked = True
                deferred.append(record)
                continue
            ops.append(self._record_op(record, entry))
        chat_repo = self.agent.chat_repo
        if with_state and self.fold.state_version != self.state_written:
            if self.keeps_state:
                state = copy.deepcopy(self.fold.state)
                write = UpdateChatState(self.chat.chat_uuid, state)
                ops.append(_Op(chat_repo, write, state_version=self.fold.state_version))
        if closing and self.final is not None:
            finals = self._final_ops(*self.final)
            ops.extend(op for op in finals if op.write.method not in finals_done)
        return ops, deferred

    def _final_ops(
        self,
        status: MessageStatus,
        run_status: RunStatus,
        error: str | None,
        *,
        sweep: bool = False,
    ) -> list[_Op]:
        """The writes that close the run: its leftover records (when some may be), its row.

        The final flush writes every record the fold made in its terminal status, so
        ``finalize_run_records`` (three statements on SQL stores) only runs when records
        may be left in progress: an overridden handler ran (it may have written records
        the fold does not know), or ``sweep`` (the run gives up on its own writes).
        """
        chat_uuid, run_id = self.chat.chat_uuid, self.fold.run_id
        ops: list[_Op] = []
        message_repo = self.agent.message_repo
        if capabilities_of(message_repo).run_records and (sweep or self._custom_handled):
            ops.append(_Op(message_repo, FinalizeRunRecords(chat_uuid, run_id, status), final=True))
        run_repo = self.agent.run_repo
        if run_repo is not None:
            ops.append(_Op(run_repo, FinishRun(chat_uuid, run_id, run_status, error), final=True))
        return ops

    def _record_op(self, record: FoldRecord, entry: _Entry) -> _Op:
        """The write bringing ``record`` up to date: a create the first time, then updates."""
        content = record.content_version != entry.written_content_version and record.owned
        terminal = dict(entry.terminal) if not entry.terminal_written else {}
        base_metadata: dict[str, Any] = getattr(entry.create, "metadata", None) or {}
        metadata = {**base_metadata, **_copied(record.metadata)}
        common = {"status": record.status, "in_progress": record.in_progress}
        error = self._record_error() if record.status is MessageStatus.ERRORED else None
        update_cls: type[BaseModel]
        write: Write
        if record.kind is RecordKind.MESSAGE:
            fields = {
                "content": record.content if content else None,
                "content_parts": _copied(record.content_parts) if content else None,
                "activity_content": _copied(record.activity_content) if content else None,
                "name": record.name,
                "encrypted_value": record.encrypted_value,
            }
            if record.agui_id is not None and getattr(entry.create, "agui_id", "") is None:
                # A message opened to hold reasoning took the id of the answer it precedes.
                fields["agui_id"] = record.agui_id
            if error is not None and record.owned:
                fields["error"] = error
            update_cls = MessageUpdate
        elif record.kind is RecordKind.TOOL_CALL:
            fields = {
                "arguments": record.content if content else None,
                "content": record.result,
                "result_message_id": record.result_message_id,
                "name": record.name or None,
                "error": error if record.owned else None,
            }
            update_cls = MessageToolCallUpdate
        else:
            fields = {
                "content": record.content if content else None,
                "encrypted_value": record.encrypted_value,
                "name": record.name,
            }
            if error is not None and record.owned:
                metadata[ERROR_METADATA_KEY] = error  # read back as Reasoning.error
            update_cls = MessageReasoningUpdate
        fields = _set({**fields, **common})
        if entry.created:
            patch = _with_fields(update_cls(**fields, metadata=metadata or None), terminal)
            write = _as_update(patch, _uuid(entry))
        else:
            extra = {"activity_type": record.activity_type} if record.activity_type else {}
            assert entry.create is not None
            dto = _with_fields(entry.create, {**fields, **extra, "metadata": metadata, **terminal})
            write = _create(dto)
        return _Op(
            self.agent.message_repo,
            write,
            entry=entry,
            check_exists=entry.uncertain and not entry.created,
            version=record.version,
            content_version=record.content_version,
            terminal=bool(terminal),
            record=record,
        )

    def _record_error(self) -> str | None:
        """The error text an errored record of this run carries, as the seed layer words it.

        An in-band RUN_ERROR gives ``[code] message``; a crash, the exception's text.
        """
        run = self.fold.run
        if run.error is not None:
            return f"[{run.error_code}] {run.error}" if run.error_code else run.error
        return self.final[2] if self.final is not None else None

    async def _exists(self, op: _Op) -> bool:
        """Whether the record ``op`` creates is in the store already."""
        repo = self.agent.message_repo
        uuid = _uuid(op.entry)
        write = op.write
        if isinstance(write, CreateMessage):
            return await repo.get_message(uuid) is not None
        assert isinstance(write, CreateToolCall | CreateReasoning)
        parent = await repo.get_message(write.data.message_uuid)
        if parent is None:
            return False
        children = parent.tool_calls if isinstance(write, CreateToolCall) else parent.reasonings
        return any(child.uuid == uuid for child in children)


def _uuid(entry: _Entry | None) -> UUID:
    assert entry is not None and entry.uuid is not None
    return entry.uuid


def _create(dto: BaseModel) -> Write:
    """The create write of a record's create DTO."""
    if isinstance(dto, MessageCreate):
        return CreateMessage(dto)
    if isinstance(dto, MessageToolCallCreate):
        return CreateToolCall(dto)
    assert isinstance(dto, MessageReasoningCreate)
    return CreateReasoning(dto)


def _as_update(change: BaseModel | Write, uuid: UUID) -> Write:
    """The update write of record ``uuid``: from an update DTO, or from a create write.

    From a create, it is the update that brings an already-created record to what the
    create would write.
    """
    if isinstance(change, CreateMessage | CreateToolCall | CreateReasoning):
        create = change.data
        update_cls = next(u for c, u in _UPDATE_FOR_CREATE.items() if isinstance(create, c))
        fields = {name: getattr(create, name) for name in update_cls.model_fields}
        change = update_cls(**_set(fields))
    if isinstance(change, MessageUpdate):
        return UpdateMessage(uuid, change)
    if isinstance(change, MessageToolCallUpdate):
        return UpdateToolCall(uuid, change)
    assert isinstance(change, MessageReasoningUpdate)
    return UpdateReasoning(uuid, change)


_UPDATE_FOR_CREATE: dict[type[BaseModel], type[BaseModel]] = {
    MessageCreate: MessageUpdate,
    MessageToolCallCreate: MessageToolCallUpdate,
    MessageReasoningCreate: MessageReasoningUpdate,
}
