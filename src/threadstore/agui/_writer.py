"""One run's persistence: the fold, fed inline, and the writer task behind it.

The stream hands each event to :meth:`RunPersister.take`, which folds it on the spot
(pure data work, no I/O) unless the agent registered a handler of its own for it: such
events, and every event after one until they are handled, go in order to the handler
task, which awaits them. The writer task writes what the fold marked dirty, one batch
per flush: promptly after a boundary (a record opened or closed, the run ended), yet
boundary flushes start at least ``min_flush_interval`` apart so a burst of them shares
one batch, and at a checkpoint (``checkpoint_interval``) while text streams, so a crash
loses at most that much text. A failed flush is retried with backoff, in ever smaller
batches; a create counts as done once its batch committed, and a retried create first
checks whether it landed, so a retry never duplicates anything. With an outbox, a flush
that fails because the store is away goes to the outbox instead (``agui/_outbox.py``),
and so does every later write of the run, to keep their order.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ag_ui.core import BaseEvent
from pydantic import BaseModel

from threadstore import _telemetry
from threadstore.agui._hooks import BuildHooks, EventHandler, PersisterConfig
from threadstore.agui._outbox import Outbox, OutboxFullError, is_outage, replayed
from threadstore.agui._records import (
    Entry,
    default_message_create,
    default_reasoning_create,
    default_tool_call_create,
    record_write,
)
from threadstore.errors import NotFoundError, StoreError
from threadstore.fold import ConversationFold, FoldRecord, RecordKind
from threadstore.models import Chat, MessageCreate, MessageStatus, RunStatus
from threadstore.store import RunStorage, Write
from threadstore.store.ops import (
    FinalizeRunRecords,
    FinishRun,
    UpdateChatState,
)

__all__ = ["BuildHooks", "EventHandler", "PersisterConfig", "RunPersister"]  # re-exported

logger = logging.getLogger("threadstore.agui._agent")

_RUN_STATUS = {
    MessageStatus.COMPLETE: RunStatus.COMPLETE,
    MessageStatus.INTERRUPTED: RunStatus.INTERRUPTED,
    MessageStatus.ERRORED: RunStatus.ERRORED,
}
_RECORD_STATUS = {run: record for record, run in _RUN_STATUS.items()}


@dataclass(slots=True)
class _StreamEnd:
    """Queue sentinel: the stream ended with ``status`` (``complete`` = ended normally)."""

    status: MessageStatus
    error: str | None


@dataclass(slots=True)
class _Op:
    """One write of a flush, with what it will have written once committed."""

    write: Write
    entry: Entry | None = None
    check_exists: bool = False
    """A create retried after a failed flush: it may have landed, so look first."""
    version: int = 0
    content_version: int = 0
    state_version: int | None = None
    terminal: bool = False
    record: FoldRecord | None = None
    final: bool = False
    """One of the writes that close the run (``finalize_run_records``, ``finish_run``)."""


_FLUSH = ({"threadstore.flush.final": False}, {"threadstore.flush.final": True})
"""A flush span's attributes, by whether it is the run's final flush."""


class RunPersister:
    """The fold, the handler task (when handlers are registered) and the writer of one run."""

    def __init__(
        self,
        storage: RunStorage,
        hooks: BuildHooks,
        handlers: Mapping[type[BaseEvent], EventHandler],
        config: PersisterConfig,
        chat: Chat,
        fold: ConversationFold,
    ) -> None:
        self.storage, self.hooks, self.config = storage, hooks, config
        self.chat, self.fold = chat, fold
        self._handlers = handlers
        self._handler_of: dict[type[BaseEvent], EventHandler | None] = {}
        self.queued: collections.deque[BaseEvent | _StreamEnd] = collections.deque()
        """Events waiting for the handler task, in order."""
        self._queued_count = self._handled_count = 0
        self._arrival: asyncio.Future[None] | None = None
        self._handler_task: asyncio.Task[None] | None = None
        self.current: BaseEvent | None = None
        """The event being folded or handled."""
        self.handled = False
        """A handler of the agent's ran: it may have written records the fold does not know."""
        self._writer_wakeup = asyncio.Event()
        self._flush_wanted = self._flush_now = False
        self.entries: dict[str, Entry] = {}
        self.state_written = 0
        self.final: tuple[MessageStatus, RunStatus, str | None] | None = None
        self.failed: BaseException | None = None
        self.retries = 0
        """Failed write attempts so far, each then tried again (or split in halves).

        A healthy store never makes a flush retry: this stays 0 unless the store failed.
        """
        self.chat_deleted = False
        """The chat was deleted during the run: nothing more is written (it stays deleted)."""
        self.chain: Any = None
        """Set on a run that branches: its newest message, the parent of the next one.

        Such a run names each message's parent instead of appending to the chat's leaf,
        so runs branching from the same message at once each keep their own branch.
        """
        self.outbox: Outbox | None = None
        """Where writes go while the store is away (``None``: they are retried in memory)."""
        self.owner: str | None = None
        """The run's owner, journaled with its writes."""
        self.journaling = False
        """A write of this run went to the outbox: every later one does too, in order."""
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._writer_task = asyncio.create_task(self._write_loop(), name="threadstore-writer")

    # --- the stream's side ---------------------------------------------------------------

    def take(self, event: BaseEvent) -> None:
        """Fold one event the stream yields, in order (the stream's only per-event call).

        An event the agent handles itself, and every event after one while any waits,
        goes to the handler task instead, to keep their order.
        """
        if self.queued or (self._handlers and self._handler(type(event)) is not None):
            self._queue(event)
            return
        fold = self.fold
        try:
            fold.apply(event)
        except Exception:
            logger.exception("folding %s failed; the event was not folded", event.type)
        if fold.has_changes:
            self.absorb(event)

    def _handler(self, event_type: type[BaseEvent]) -> EventHandler | None:
        try:
            return self._handler_of[event_type]
        except KeyError:
            # The MRO is walked: subclasses of a registered class resolve to it.
            handlers = self._handlers
            found = next((handlers[c] for c in event_type.__mro__ if c in handlers), None)
            self._handler_of[event_type] = found
            return found

    def _queue(self, item: BaseEvent | _StreamEnd) -> None:
        self.queued.append(item)
        self._queued_count += 1
        if self._handler_task is None:
            self._handler_task = asyncio.create_task(self._handle_loop(), name="threadstore-fold")
        arrival, self._arrival = self._arrival, None
        if arrival is not None and not arrival.done():
            arrival.set_result(None)

    async def close(self, status: MessageStatus, error: str | None) -> None:
        """The stream ended: finalize the run's records and wait for the final flush."""
        if self._handler_task is not None:
            self._queue(_StreamEnd(status, error))
            await self._handler_task
        else:
            self._end(_StreamEnd(status, error))
        self._writer_wakeup.set()
        await self._writer_task

    async def _handle_loop(self) -> None:
        queued = self.queued
        while True:
            if not queued:
                arrival = self._arrival = asyncio.get_running_loop().create_future()
                await arrival
                continue
            # Peeked, and popped once handled: take() queues behind it meanwhile.
            item = queued[0]
            if isinstance(item, _StreamEnd):
                queued.popleft()
                self._end(item)
                self._notify()
                return
            handler = self._handler(type(item))
            self.current = item
            try:
                if handler is None:
                    self.fold.apply(item)
                else:
                    self.handled = True
                    await handler(self.fold, self.chat, item)
            except Exception:
                logger.exception("handler for %s failed; the event was not folded", item.type)
            self.absorb(item)
            queued.popleft()
            self._handled_count += 1
            self._notify()

    def absorb(self, event: BaseEvent | None) -> None:
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
            dto = self._build(record, self.hooks)
        except Exception:
            logger.exception("a build hook failed for %s; using the default DTO", record.key)
            dto = self._build(record, None)
        if isinstance(dto, MessageCreate) and self.chain is not None:
            if dto.parent_uuid is None:
                dto = dto.model_copy(update={"parent_uuid": self.chain})
            self.chain = dto.message_uuid
        uuid = dto.message_uuid if isinstance(dto, MessageCreate) else getattr(dto, "uuid", None)
        record.uuid = uuid
        self.entries[record.key] = Entry(create=dto, uuid=uuid)

    def _build(self, record: FoldRecord, hooks: BuildHooks | None) -> BaseModel:
        """The create DTO of ``record``, from the agent's build hook (``None``: the default)."""
        fold, chat = self.fold, self.chat
        if record.kind is RecordKind.MESSAGE:
            build_message = hooks.build_message_create if hooks else default_message_create
            return build_message(fold, chat, record.agui_id, record.role)
        parent = fold.records[record.parent_key or ""]
        parent_entry = self._entry(parent)
        parent_uuid = parent_entry.uuid if parent_entry is not None else parent.uuid
        assert parent_uuid is not None
        if record.kind is RecordKind.TOOL_CALL:
            build_call = hooks.build_tool_call_create if hooks else default_tool_call_create
            return build_call(fold, chat, parent_uuid, record.agui_id or "", record.name or "")
        build_step = hooks.build_reasoning_create if hooks else default_reasoning_create
        return build_step(fold, chat, parent_uuid, record.agui_id, record.name)

    def _terminal_fields(self, record: FoldRecord, event: BaseEvent | None) -> None:
        try:
            fields = self.hooks.message_update_fields(self.fold, event)
        except Exception:
            logger.exception("message_update_fields failed for %s", record.key)
            return
        entry = self.entries.get(record.key)
        if fields and entry is not None:
            entry.terminal.update(fields)
            entry.terminal_written = False

    def _end(self, end: _StreamEnd) -> None:
        announced = self.fold.run.status
        if end.status is MessageStatus.COMPLETE and announced is not None:
            record_status = _RECORD_STATUS[announced]
        else:
            record_status = end.status
        run_status = announced if announced is not None else _RUN_STATUS[record_status]
        self.fold.finish(record_status)
        self.absorb(None)
        self.final = (record_status, run_status, end.error or self.fold.run.error)

    # --- waiting for durability ----------------------------------------------------------

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
        """Return once every event taken so far is written (or the writer gave up).

        From the handler task (inside a handler) it waits for what has been folded so
        far, the handler's own changes included.
        """
        in_handler = self._handler_task is not None and asyncio.current_task() is self._handler_task
        if in_handler:
            self.absorb(self.current)  # build the DTOs of records the handler opened
        elif self.queued:
            target = self._queued_count
            await self.wait_until(lambda: self._handled_count >= target)
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

    async def settled(self) -> bool:
        """Wait until everything taken so far is durable (stored or journaled).

        False when it could not be made so within ``final_flush_deadline`` (or the
        writer gave up): the run's end must then not be announced as finished.
        """
        try:
            async with asyncio.timeout(self.config.final_flush_deadline):
                await self.durable()
        except TimeoutError:
            return False
        return self.failed is None

    def barrier(self) -> Callable[[], bool]:
        """A predicate that holds once everything folded so far is written."""
        pending = {
            record.key: record.version
            for record in self.fold.records.values()
            if (entry := self._entry(record)) is None or entry.written_version < record.version
        }
        state_version = self.fold.state_version

        def reached() -> bool:
            if self.state_written < state_version and self.storage.keeps_state:
                return False
            for key, version in pending.items():
                entry = self.entries.get(key)
                if entry is None or entry.written_version < version:
                    return False
            return True

        return reached

    # --- writer task ---------------------------------------------------------------------

    def request_flush(self, *, now: bool = False) -> None:
        """Ask the writer for a flush: right away if ``now``, else at the next boundary slot
        (``min_flush_interval`` after the last flush started)."""
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
                retries = self.retries
                with _telemetry.span("threadstore.flush", self.chat.chat_uuid, **_FLUSH[final]):
                    await self._flush(final=final)
                _telemetry.record_flush(loop.time() - started, final=final)
                _telemetry.count_retries(self.retries - retries)
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

    def _entry(self, record: FoldRecord) -> Entry | None:
        entry = self.entries.get(record.key)
        if entry is None and not record.owned and record.uuid is not None:
            # A stored record this run only updates: version 0 is what the store holds.
            entry = Entry(uuid=record.uuid, created=True, written_version=0)
            entry.written_content_version = 0
            self.entries[record.key] = entry
        return entry

    async def _flush(self, *, final: bool) -> None:
        """Write the records dirty now (and, if ``final``, finalize the run) in batches.

        A batch that fails is split in halves, down to single writes, so writes that
        cannot all succeed together still land one by one, in order. A single write that
        fails is retried with backoff: until the run ends for a checkpoint (the final
        flush takes over), for ``final_flush_deadline`` seconds for the final flush,
        which then gives up (:meth:`_give_up`).
        """
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
                for op in batch:
                    if op.entry is not None and not op.entry.created:
                        op.entry.uncertain = True
                if isinstance(exc, NotFoundError) and await self.storage.chat_gone(self.chat):
                    self._give_up_deleted_chat()
                    return
                if self._journal_from_now(exc):
                    limit = None
                    continue
                if len(batch) > 1:
                    limit = len(batch) // 2  # a piece may go through where the whole did not
                    continue
                failures += 1
                now = loop.time()
                failing_since = now if failing_since is None else failing_since
                if not self._retry(exc, final, now - failing_since):
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

    async def check_chat_deleted(self) -> bool:
        """Whether the run's chat is gone; if so, its remaining records are dropped.

        Writes to a deleted chat's existing rows touch nothing and fail nothing, so only
        a look at the chat tells.
        """
        if not self.chat_deleted and await self.storage.chat_gone(self.chat):
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

    def _journal_from_now(self, exc: Exception) -> bool:
        """Send this run's writes to the outbox from now on, if ``exc`` says the store is away.

        Only a failure switches: a healthy store never pays for the journal. Once
        switched, the run stays on it, so its writes reach the store in order.
        """
        if self.outbox is None or self.journaling or not is_outage(exc):
            return False
        self.journaling = True
        logger.warning("run %s: the store is away (%s); journaling", self.fold.run_id, exc)
        return True

    def _retry(self, exc: Exception, final: bool, failing_for: float) -> bool:
        if final and failing_for >= self.config.final_flush_deadline:
            return False
        if final and isinstance(exc, OutboxFullError):
            return False  # the client learns at once that its answer is not stored
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

    async def _commit(self, ops: list[_Op]) -> None:
        if self.journaling:
            assert self.outbox is not None
            # A create that may have landed is checked when the entry is drained.
            run = (self.chat.chat_uuid, self.fold.run_id, self.owner)
            await self.outbox.append(*run, [op.write for op in ops], self.chat.user_uuid)
            return
        # An earlier attempt's create may have landed although its flush failed.
        storage = self.storage
        await storage.write(
            [await replayed(storage, op.write) if op.check_exists else op.write for op in ops]
        )

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
        finals_done: set[str],
    ) -> tuple[list[_Op], list[FoldRecord]]:
        """Build the writes of ``batch`` from the records' current values.

        Returns (ops, deferred): a record whose DTO is not built yet (a handler is still
        running) is deferred, and so is every later create, to keep production order.
        """
        ops: list[_Op] = []
        deferred: list[FoldRecord] = []
        blocked = False
        error = self._record_error()
        for record in batch:
            entry = self._entry(record)
            if entry is None or (not entry.created and blocked):
                blocked = True
                deferred.append(record)
                continue
            errored = record.status is MessageStatus.ERRORED
            ops.append(
                _Op(
                    record_write(record, entry, error if errored else None),
                    entry=entry,
                    check_exists=entry.uncertain and not entry.created,
                    version=record.version,
                    content_version=record.content_version,
                    terminal=bool(entry.terminal) and not entry.terminal_written,
                    record=record,
                )
            )
        if (
            with_state
            and self.fold.state_version != self.state_written
            and self.storage.keeps_state
        ):
            write = UpdateChatState(self.chat.chat_uuid, copy.deepcopy(self.fold.state))
            ops.append(_Op(write, state_version=self.fold.state_version))
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
        may be left in progress: a handler of the agent's ran (it may have written records
        the fold does not know), or ``sweep`` (the run gives up on its own writes).
        """
        chat_uuid, run_id = self.chat.chat_uuid, self.fold.run_id
        ops: list[_Op] = []
        if self.storage.finalizes_records and (sweep or self.handled):
            ops.append(_Op(FinalizeRunRecords(chat_uuid, run_id, status), final=True))
        if self.storage.run_repo is not None:
            ops.append(_Op(FinishRun(chat_uuid, run_id, run_status, error), final=True))
        return ops

    def _record_error(self) -> str | None:
        """The error text an errored record of this run carries, as the seed layer words it.

        An in-band RUN_ERROR gives ``[code] message``; a crash, the exception's text.
        """
        run = self.fold.run
        if run.error is not None:
            return f"[{run.error_code}] {run.error}" if run.error_code else run.error
        return self.final[2] if self.final is not None else None
