"""The storage agent: wrap an AG-UI agent and persist its stream as chat history.

:class:`StorageAgent` (also exported as ``AGUIStorageAgent``, the seed's name) is
transparent: :meth:`StorageAgent.run` yields the inner agent's events unchanged and in
real time, and only *enqueues* each one (``put_nowait``) for persistence. Two
background tasks own the rest:

- the **fold task** drains the queue and applies the event handlers, which only
  mutate the run's :class:`~threadstore.fold.ConversationFold` (no I/O);
- the **writer task** writes the records the fold marked dirty: promptly after a
  boundary (a record opened or closed, the run ended) and at a periodic checkpoint
  (``checkpoint_interval``) while text streams, so a hard crash loses at most that
  much text. Each flush is one ``transaction()``; a record is created once and then
  updated, so writes per run are O(records), not O(deltas).

Under a slow or stalled store the fold task keeps draining: pending work coalesces
into the latest state of each record and nothing is dropped. A failed flush is
retried with backoff, in ever smaller transactions so a store that fails now and then
still makes progress; a record counts as created only once its transaction
committed, and a retried create first checks whether the record landed, so a retry
never duplicates anything (even on a repository whose ``transaction()`` cannot roll
back). Whatever way ``run()`` ends, it first waits for the final flush (shielded from
cancellation); if the store stays down for ``final_flush_attempts`` tries the records
are left for the stale-run sweep and :meth:`StorageAgent.persisted` raises.

Before the inner agent runs, ``run()`` finds or creates the chat, loads its history,
and screens ``input.messages``: messages already stored (by AG-UI id, uuid, tool call
id, tool result id or reasoning id) are skipped; new user messages are stored; a new
tool message answering a stored tool call that has no result yet (a client-side
tool) becomes that call's result. Any other new message stops the run with
``RUN_STARTED`` + ``RUN_ERROR(code="INVALID_INPUT")`` and nothing is written.
``input.messages`` is then replaced by :meth:`StorageAgent.translate` of the stored
history, and ``input.state`` by the chat's stored state when the client sent none.
The chat keeps the run's latest state through ``chat_repo.update_chat_state`` when the
repository has one (every :class:`~threadstore.store.base.Store` does; the seed's
Protocol does not, so a Protocol-only repository keeps no state).

How the run ends decides the status of records still active (the seed's table):
normal end -> ``complete``; ``CancelledError`` (or the consumer closing the stream)
-> ``interrupted``; the inner agent raising -> ``errored`` and the exception
propagates; an in-band ``RUN_ERROR`` -> ``errored``. Only this run's records are
touched. See :mod:`threadstore.fold` for how each event family becomes records.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable
from uuid import UUID

from ag_ui.core import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    BaseEvent,
    MessagesSnapshotEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from pydantic import BaseModel, create_model

from threadstore.agui import legacy
from threadstore.errors import InvalidInputError, StoreError
from threadstore.fold import (
    ConversationFold,
    FoldRecord,
    RecordKind,
    pending_tool_calls,
    stored_ids,
    tool_result_text,
)
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
    Role,
    Run,
    RunStatus,
    utcnow,
)
from threadstore.store.base import ChatRepositoryLike, MessageRepositoryLike, RunRepositoryLike

if TYPE_CHECKING:
    import ag_ui.core

__all__ = ["INVALID_INPUT_ERROR_CODE", "AGUIAgent", "AGUIStorageAgent", "StorageAgent"]

logger = logging.getLogger(__name__)

INVALID_INPUT_ERROR_CODE = "INVALID_INPUT"
"""``RunErrorEvent.code`` of a run refused because of its input messages."""

_RUN_STATUS = {
    MessageStatus.COMPLETE: RunStatus.COMPLETE,
    MessageStatus.INTERRUPTED: RunStatus.INTERRUPTED,
    MessageStatus.ERRORED: RunStatus.ERRORED,
}
_RECORD_STATUS = {run: record for record, run in _RUN_STATUS.items()}

_ModelT = TypeVar("_ModelT", bound=BaseModel)


@runtime_checkable
class AGUIAgent(Protocol):
    """Minimal AG-UI agent contract: a named object exposing an event stream."""

    name: str

    def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the agent's AG-UI events for one run."""
        ...


# --- DTO helpers -------------------------------------------------------------------------


@functools.cache
def _extended(cls: type[_ModelT], names: frozenset[str]) -> type[_ModelT]:
    """A subclass of ``cls`` declaring ``names`` (Any, default None), cached per set."""
    fields: dict[str, Any] = {name: (Any, None) for name in sorted(names)}
    return create_model(f"{cls.__name__}WithFields", __base__=cls, **fields)


def _with_fields(dto: _ModelT, fields: dict[str, Any]) -> _ModelT:
    """Return ``dto`` with ``fields`` set; keys its class lacks are declared on a subclass."""
    if not fields:
        return dto
    unknown = frozenset(fields) - set(type(dto).model_fields)
    if not unknown:
        return dto.model_copy(update=fields)
    extended: type[_ModelT] = _extended(type(dto), unknown)
    return extended.model_validate({**dto.model_dump(), **fields})


def _set(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


# --- the background half of one run ------------------------------------------------------


@dataclass(slots=True)
class _End:
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

    run: Callable[[], Awaitable[Any]]
    entry: _Entry | None = None
    version: int = 0
    content_version: int = 0
    state_version: int | None = None
    terminal: bool = False


class _Persister:
    """The fold task and the writer task of one run."""

    def __init__(self, agent: StorageAgent, chat: Chat, fold: ConversationFold) -> None:
        self.agent, self.chat, self.fold = agent, chat, fold
        self.queue: asyncio.Queue[BaseEvent | _End] = asyncio.Queue()
        self.enqueued = self.folded = 0
        self.urgent = asyncio.Event()
        self.entries: dict[str, _Entry] = {}
        self.state_written = 0
        self.final: tuple[MessageStatus, RunStatus, str | None] | None = None
        self.failed: BaseException | None = None
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._fold_task = asyncio.create_task(self._fold_loop(), name="threadstore-fold")
        self._writer_task = asyncio.create_task(self._write_loop(), name="threadstore-writer")

    # --- client side ---------------------------------------------------------------------

    def put(self, event: BaseEvent) -> None:
        self.queue.put_nowait(event)
        self.enqueued += 1

    async def close(self, status: MessageStatus, error: str | None) -> None:
        self.queue.put_nowait(_End(status, error))
        await self._fold_task
        await self._writer_task

    @property
    def done(self) -> bool:
        return self._writer_task.done()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        if predicate() or self.done:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, future))
        await future

    def _notify(self) -> None:
        waiting, self._waiters = self._waiters, []
        for predicate, future in waiting:
            if future.done():
                continue
            if predicate() or self.done or self.failed is not None:
                future.set_result(None)
            else:
                self._waiters.append((predicate, future))

    def barrier(self) -> Callable[[], bool]:
        """A predicate that holds once everything folded so far is written."""
        pending = {
            record.key: record.version
            for record in self.fold.records.values()
            if (entry := self._entry(record)) is None or entry.written_version < record.version
        }
        state_version = self.fold.state_version

        def reached() -> bool:
            if self.state_written < state_version and self.agent._can_update_state():
                return False
            for key, version in pending.items():
                entry = self.entries.get(key)
                if entry is None or entry.written_version < version:
                    return False
            return True

        return reached

    # --- fold task -----------------------------------------------------------------------

    async def _fold_loop(self) -> None:
        while True:
            item = await self.queue.get()
            while True:
                if isinstance(item, _End):
                    self._end(item)
                    self.urgent.set()
                    self._notify()
                    return
                await self._apply(item)
                self.folded += 1
                try:
                    item = self.queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
            self._notify()

    async def _apply(self, event: BaseEvent) -> None:
        handler = self.agent._handler_for(type(event))
        try:
            await handler(self.fold, self.chat, event)
        except Exception:
            logger.exception("handler for %s failed; the event was not folded", event.type)
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
            self.urgent.set()

    def _prepare(self, record: FoldRecord) -> None:
        try:
            dto = self._build(record, default=False)
        except Exception:
            logger.exception("a build hook failed for %s; using the default DTO", record.key)
            dto = self._build(record, default=True)
        uuid = dto.message_uuid if isinstance(dto, MessageCreate) else getattr(dto, "uuid", None)
        record.uuid = uuid
        self.entries[record.key] = _Entry(create=dto, uuid=uuid)

    def _build(self, record: FoldRecord, *, default: bool) -> BaseModel:
        agent, fold, chat = self.agent, self.fold, self.chat

        def hook(name: str) -> Callable[..., BaseModel]:
            # ``default`` binds the base implementation, bypassing a failing override.
            method: Callable[..., BaseModel] = (
                getattr(StorageAgent, name).__get__(agent) if default else getattr(agent, name)
            )
            return functools.partial(method, fold, chat)

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

    def _end(self, end: _End) -> None:
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

    async def _write_loop(self) -> None:
        interval = self.agent.checkpoint_interval
        timeout = None if interval == float("inf") else interval
        try:
            while True:
                if not self.urgent.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(timeout):
                            await self.urgent.wait()
                self.urgent.clear()
                final = self.final is not None
                await self._flush(final=final)
                if final:
                    return
        finally:
            self._notify()

    def _entry(self, record: FoldRecord) -> _Entry | None:
        entry = self.entries.get(record.key)
        if entry is None and not record.owned and record.uuid is not None:
            # A stored record this run only updates: version 0 is what the store holds.
            entry = _Entry(uuid=record.uuid, created=True, written_version=0)
            entry.written_content_version = 0
            self.entries[record.key] = entry
        return entry

    async def _flush(self, *, final: bool) -> None:
        """Write the records dirty now (and, if ``final``, finalize the run) in transactions."""
        records = self.fold.take_dirty()
        state_pending = final or self.fold.state_version != self.state_written
        limit: int | None = None
        failures = 0
        while records or state_pending:
            batch = records if limit is None else records[:limit]
            closing = final and len(batch) == len(records)
            try:
                ops, deferred = self._ops(batch, with_state=state_pending, closing=closing)
                await self._commit(ops)
            except Exception as exc:
                failures += 1
                self._failed_batch(batch)
                if not self._retry(exc, failures, final):
                    self.fold.mark_dirty(records)
                    return
                limit = max(1, len(batch) // 2)
                await asyncio.sleep(self.agent._backoff(failures))
                continue
            failures = 0
            self._committed(ops)
            self.fold.mark_dirty(deferred)
            records = records[len(batch) :]
            state_pending = False
            self._notify()

    def _retry(self, exc: Exception, failures: int, final: bool) -> bool:
        if final and failures >= self.agent.final_flush_attempts:
            self.failed = exc
            logger.error(
                "run %s: giving up persisting after %d attempts; its records are left for the "
                "stale-run sweep",
                self.fold.run_id,
                failures,
                exc_info=exc,
            )
            self._notify()
            return False
        if not final and self.final is not None:
            return False  # the run ended meanwhile: the final flush takes over
        logger.warning("run %s: flush failed (%s); retrying", self.fold.run_id, exc)
        return True

    def _failed_batch(self, batch: list[FoldRecord]) -> None:
        for record in batch:
            entry = self.entries.get(record.key)
            if entry is not None and not entry.created:
                entry.uncertain = True

    async def _commit(self, ops: list[_Op]) -> None:
        if not ops:
            return
        async with self.agent.message_repo.transaction():
            for op in ops:
                await op.run()

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
        self, batch: list[FoldRecord], *, with_state: bool, closing: bool
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
        repo = self.agent.chat_repo
        if with_state and self.fold.state_version != self.state_written:
            update_state = getattr(repo, "update_chat_state", None)
            if update_state is not None:
                ops.append(self._state_op(update_state))
        if closing and self.final is not None:
            ops.extend(self._final_ops(*self.final))
        return ops, deferred

    def _state_op(self, update_state: Callable[[UUID, Any], Awaitable[Any]]) -> _Op:
        state, chat_uuid = copy.deepcopy(self.fold.state), self.chat.chat_uuid
        return _Op(
            run=lambda: update_state(chat_uuid, state), state_version=self.fold.state_version
        )

    def _final_ops(
        self, status: MessageStatus, run_status: RunStatus, error: str | None
    ) -> list[_Op]:
        chat_uuid, run_id = self.chat.chat_uuid, self.fold.run_id
        ops: list[_Op] = []
        finalize = getattr(self.agent.message_repo, "finalize_run_records", None)
        if finalize is not None:
            # Catches records of this run written outside the fold (custom handlers).
            ops.append(_Op(run=lambda: finalize(chat_uuid, run_id, status)))
        run_repo = self.agent.run_repo
        if run_repo is not None:
            ops.append(_Op(run=lambda: run_repo.finish_run(chat_uuid, run_id, run_status, error)))
        return ops

    def _record_op(self, record: FoldRecord, entry: _Entry) -> _Op:
        """The write bringing ``record`` up to date: a create the first time, then updates."""
        content = record.content_version != entry.written_content_version and record.owned
        terminal = dict(entry.terminal) if not entry.terminal_written else {}
        base_metadata: dict[str, Any] = getattr(entry.create, "metadata", None) or {}
        metadata = {**base_metadata, **copy.deepcopy(record.metadata)}
        common = {"status": record.status, "in_progress": record.in_progress}
        repo = self.agent.message_repo
        # Any: the three record kinds share this code but not their DTO types.
        create: Any
        update: Any
        update_cls: type[BaseModel]
        if record.kind is RecordKind.MESSAGE:
            fields = {
                "content": record.content if content else None,
                "content_parts": copy.deepcopy(record.content_parts) if content else None,
                "activity_content": copy.deepcopy(record.activity_content) if content else None,
                "name": record.name,
                "encrypted_value": record.encrypted_value,
            }
            create, update, update_cls = repo.create_message, repo.update_message, MessageUpdate
        elif record.kind is RecordKind.TOOL_CALL:
            fields = {
                "arguments": record.content if content else None,
                "content": record.result,
                "result_message_id": record.result_message_id,
                "name": record.name or None,
            }
            create, update = repo.create_message_tool_call, repo.update_message_tool_call
            update_cls = MessageToolCallUpdate
        else:
            fields = {
                "content": record.content if content else None,
                "encrypted_value": record.encrypted_value,
                "name": record.name,
            }
            create, update = repo.create_message_reasoning, repo.update_message_reasoning
            update_cls = MessageReasoningUpdate
        fields = _set({**fields, **common})
        if entry.created:
            patch = _with_fields(update_cls(**fields, metadata=metadata or None), terminal)
            run: Callable[[], Awaitable[Any]] = functools.partial(update, _uuid(entry), patch)
        else:
            extra = {"activity_type": record.activity_type} if record.activity_type else {}
            assert entry.create is not None
            dto = _with_fields(entry.create, {**fields, **extra, "metadata": metadata, **terminal})
            run = self._creator(entry, dto, create, update)
        return _Op(
            run=run,
            entry=entry,
            version=record.version,
            content_version=record.content_version,
            terminal=bool(terminal),
        )

    def _creator(
        self,
        entry: _Entry,
        create: BaseModel,
        create_call: Callable[[Any], Awaitable[Any]],
        update_call: Callable[[UUID, Any], Awaitable[Any]],
    ) -> Callable[[], Awaitable[Any]]:
        async def run() -> Any:
            if entry.uncertain and await self._exists(entry, create):
                # An earlier attempt's create landed although its flush failed.
                return await update_call(_uuid(entry), _as_update(create))
            return await create_call(create)

        return run

    async def _exists(self, entry: _Entry, create: BaseModel) -> bool:
        repo = self.agent.message_repo
        uuid = _uuid(entry)
        if isinstance(create, MessageCreate):
            return await repo.get_message(uuid) is not None
        parent = await repo.get_message(getattr(create, "message_uuid"))  # noqa: B009
        if parent is None:
            return False
        children = (
            parent.tool_calls if isinstance(create, MessageToolCallCreate) else parent.reasonings
        )
        return any(child.uuid == uuid for child in children)


def _uuid(entry: _Entry) -> UUID:
    assert entry.uuid is not None
    return entry.uuid


_UPDATE_FOR_CREATE: dict[type[BaseModel], type[BaseModel]] = {
    MessageCreate: MessageUpdate,
    MessageToolCallCreate: MessageToolCallUpdate,
    MessageReasoningCreate: MessageReasoningUpdate,
}


def _as_update(create: BaseModel) -> BaseModel:
    """The update that brings an already-created record to what ``create`` would write."""
    update_cls = next(u for c, u in _UPDATE_FOR_CREATE.items() if isinstance(create, c))
    fields = {name: getattr(create, name) for name in update_cls.model_fields}
    return update_cls(**_set(fields))


# --- the agent ---------------------------------------------------------------------------


class StorageAgent:
    """Wrap an inner AG-UI agent, persisting its event stream as chat history.

    ``run()`` yields the inner agent's events unchanged and in real time; a background
    fold task and writer task persist them (see the module docstring). Build a fresh
    instance per run (the run manager's factory does).
    """

    retry_base_delay: float = 0.05
    """First delay before retrying a failed flush; doubles per failure."""
    retry_max_delay: float = 2.0
    """Longest delay between flush retries."""
    final_flush_attempts: int = 12
    """Attempts of the final flush before giving up (records are left to the sweep)."""

    def __init__(
        self,
        name: str,
        user_uuid: UUID,
        chat_repo: ChatRepositoryLike,
        message_repo: MessageRepositoryLike,
        inner_agent: AGUIAgent,
        *,
        run_repo: RunRepositoryLike | None = None,
        owner: str | None = None,
        translate: Callable[[Sequence[Message]], list[ag_ui.core.Message]] | None = None,
        checkpoint_interval: float = 1.0,
        tenant_id: str | None = None,
        app_id: str | None = None,
    ) -> None:
        if not checkpoint_interval > 0:
            raise InvalidInputError(f"checkpoint_interval must be > 0, got {checkpoint_interval}")
        self.name = name
        self.user_uuid = user_uuid
        self.chat_repo = chat_repo
        self.message_repo = message_repo
        self.inner_agent = inner_agent
        self.run_repo = run_repo
        self.owner = owner
        self.checkpoint_interval = checkpoint_interval
        self.tenant_id = tenant_id
        self.app_id = app_id
        self.chat: Chat | None = None
        """The chat of the run, once resolved or created."""
        self._translate = translate
        self._persister: _Persister | None = None
        self._dispatch: dict[type[BaseEvent], Callable[..., Awaitable[None]]] = {}

    # --- the run -------------------------------------------------------------------------

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        """Persist inbound user messages, replay history, then stream the inner agent.

        ``input.messages`` is replaced in place with the translated stored history
        before the inner agent runs. Yields the inner agent's events verbatim, or
        ``RUN_STARTED`` + ``RUN_ERROR(code="INVALID_INPUT")`` when the input is refused.
        """
        if self._persister is not None:
            raise RuntimeError("a StorageAgent runs once; build a new one per run")
        try:
            chat, history = await self._prepare(input)
        except InvalidInputError as exc:
            yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
            yield RunErrorEvent(message=str(exc), code=INVALID_INPUT_ERROR_CODE)
            return
        self.chat = chat
        input.messages = self.translate(history)
        if input.state in (None, {}) and chat.state is not None:
            input.state = copy.deepcopy(chat.state)
        fold = ConversationFold(
            input.run_id,
            thread_id=input.thread_id,
            parent_run_id=input.parent_run_id,
            history=history,
            state=input.state,
        )
        if self.run_repo is not None:
            run = Run(
                chat_uuid=chat.chat_uuid,
                thread_id=input.thread_id,
                run_id=input.run_id,
                parent_run_id=input.parent_run_id,
                owner=self.owner,
            )
            await self.run_repo.start_run(run)
        persister = self._persister = _Persister(self, chat, fold)
        stream: AsyncIterator[BaseEvent] | None = None
        status, error = MessageStatus.COMPLETE, None
        try:
            stream = self.inner_agent.run(input)
            async for event in stream:
                persister.put(event)
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            status = MessageStatus.INTERRUPTED
            raise
        except BaseException as exc:
            status, error = MessageStatus.ERRORED, f"{type(exc).__name__}: {exc}"
            raise
        finally:
            await self._finish(stream, persister, status, error)

    async def _finish(
        self,
        stream: AsyncIterator[BaseEvent] | None,
        persister: _Persister,
        status: MessageStatus,
        error: str | None,
    ) -> None:
        """Close the inner stream and wait for the final flush, even through cancellation."""
        closing = asyncio.ensure_future(self._close(stream, persister, status, error))
        cancelled = False
        while not closing.done():
            try:
                await asyncio.shield(closing)
            except asyncio.CancelledError:
                cancelled = True
        closing.result()
        if cancelled and status is MessageStatus.COMPLETE:
            raise asyncio.CancelledError

    @staticmethod
    async def _close(
        stream: AsyncIterator[BaseEvent] | None,
        persister: _Persister,
        status: MessageStatus,
        error: str | None,
    ) -> None:
        aclose = getattr(stream, "aclose", None)  # runs the inner agent's own cleanup
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                logger.exception("closing the inner agent's stream failed")
        await persister.close(status, error)

    async def persisted(self) -> None:
        """Return when every event seen so far is durable in the store.

        Raises :class:`~threadstore.errors.StoreError` when the store could not take
        them (the final flush gave up).
        """
        persister = self._persister
        if persister is None:
            return
        target = persister.enqueued
        await persister.wait_until(lambda: persister.folded >= target)
        reached = persister.barrier()
        if not reached():
            persister.urgent.set()
            await persister.wait_until(reached)
        if persister.failed is not None:
            raise StoreError("the run's records could not be persisted") from persister.failed

    @property
    def backlog(self) -> int:
        """Events handed to persistence that the fold task has not applied yet."""
        persister = self._persister
        return 0 if persister is None else persister.enqueued - persister.folded

    # --- input ---------------------------------------------------------------------------

    async def _prepare(self, input: RunAgentInput) -> tuple[Chat, list[Message]]:
        """Find or create the chat, store the new inbound messages, return (chat, history)."""
        chat = await self.chat_repo.get_chat_by_thread_id(self.user_uuid, input.thread_id)
        history = await self._history(chat)
        creates, results = self._screen(input, history)  # refuses before anything is written
        if chat is None:
            chat = await self.chat_repo.create_chat(
                ChatCreate(
                    user_uuid=self.user_uuid,
                    thread_id=input.thread_id,
                    tenant_id=self.tenant_id,
                    app_id=self.app_id,
                )
            )
            history = await self._history(chat)
            if history:  # a concurrent run created the chat meanwhile
                creates, results = self._screen(input, history)
        if creates or results:
            async with self.message_repo.transaction():
                for create in creates:
                    await self.message_repo.create_message(
                        create.model_copy(update={"chat_uuid": chat.chat_uuid})
                    )
                for call_uuid, update in results:
                    await self.message_repo.update_message_tool_call(call_uuid, update)
            history = await self._history(chat)
        return chat, history

    async def _history(self, chat: Chat | None) -> list[Message]:
        return (
            [] if chat is None else list(await self.message_repo.get_chat_messages(chat.chat_uuid))
        )

    def _screen(
        self, input: RunAgentInput, history: Sequence[Message]
    ) -> tuple[list[MessageCreate], list[tuple[UUID, MessageToolCallUpdate]]]:
        """Sort inbound messages into new user messages and tool results; refuse the rest."""
        from threadstore.agui.translate import message_create_from_agui

        known = stored_ids(history)
        pending = pending_tool_calls(history)
        creates: list[MessageCreate] = []
        results: list[tuple[UUID, MessageToolCallUpdate]] = []
        for message in input.messages:
            if message.id in known:
                continue
            known.add(message.id)
            if isinstance(message, UserMessage):
                creates.append(message_create_from_agui(message, UUID(int=0), input.run_id))
                continue
            call = (
                pending.pop(message.tool_call_id, None)
                if isinstance(message, ToolMessage)
                else None
            )
            if isinstance(message, ToolMessage) and call is not None:
                text, _ = tool_result_text(message.content)
                update = MessageToolCallUpdate(
                    content=text,
                    result_message_id=message.id,
                    error=message.error,
                    status=MessageStatus.COMPLETE,
                    in_progress=False,
                )
                results.append((call.uuid, update))
                continue
            raise InvalidInputError(
                f"message {message.id!r} (role {message.role!r}) is not stored in this chat; "
                "a run accepts only new user messages and results of tool calls still "
                "waiting for one"
            )
        return creates, results

    def translate(self, messages: Sequence[Message]) -> list[ag_ui.core.Message]:
        """Translate stored messages into AG-UI history (default: ``translate_messages``)."""
        if self._translate is not None:
            return self._translate(messages)
        from threadstore.agui.translate import translate_messages

        return translate_messages(messages)

    # --- extension point 1: the event-dispatch registry ------------------------------------

    @classmethod
    def event_handlers(cls) -> dict[type[BaseEvent], str]:
        """Map each AG-UI event class to the name of the method that folds it.

        Override as ``{**super().event_handlers(), MyEvent: "handle_my_event"}``. The
        event's MRO is walked, so subclasses of a registered class resolve to it.
        """
        lifecycle = (RunStartedEvent, RunFinishedEvent, RunErrorEvent)
        steps = (StepStartedEvent, StepFinishedEvent)
        text = (TextMessageStartEvent, TextMessageContentEvent, TextMessageEndEvent)
        tools = (ToolCallStartEvent, ToolCallArgsEvent, ToolCallEndEvent, ToolCallResultEvent)
        reasoning = (
            ReasoningStartEvent,
            ReasoningMessageStartEvent,
            ReasoningMessageContentEvent,
            ReasoningMessageEndEvent,
            ReasoningMessageChunkEvent,
            ReasoningEndEvent,
            ReasoningEncryptedValueEvent,
            legacy.ThinkingStartEvent,
            legacy.ThinkingEndEvent,
            legacy.ThinkingTextMessageStartEvent,
            legacy.ThinkingTextMessageContentEvent,
            legacy.ThinkingTextMessageEndEvent,
        )
        subagents = (SubagentStartedEvent, SubagentFinishedEvent, SubagentErrorEvent)
        table: dict[type[BaseEvent], str] = {}
        for classes, handler in (
            (lifecycle, "handle_run_lifecycle"),
            (steps, "handle_step"),
            ((*text, TextMessageChunkEvent), "handle_text_message"),
            ((*tools, ToolCallChunkEvent), "handle_tool_call"),
            (reasoning, "handle_reasoning"),
            ((StateSnapshotEvent, StateDeltaEvent), "handle_state"),
            ((MessagesSnapshotEvent,), "handle_messages_snapshot"),
            ((ActivitySnapshotEvent, ActivityDeltaEvent), "handle_activity"),
            (subagents, "handle_subagent"),
        ):
            table.update(dict.fromkeys(classes, handler))
        return table

    def _handler_for(self, event_type: type[BaseEvent]) -> Callable[..., Awaitable[None]]:
        handler = self._dispatch.get(event_type)
        if handler is None:
            table = type(self).event_handlers()
            name = next((table[c] for c in event_type.__mro__ if c in table), None)
            handler = getattr(self, name) if name is not None else self.handle_unknown_event
            self._dispatch[event_type] = handler
        return handler

    async def handle_unknown_event(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        """Handle an event with no registered handler (CUSTOM, RAW...): ignored by default."""

    # --- extension point 2: category handlers (fold only; no I/O) ---------------------------

    async def handle_run_lifecycle(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        """Fold RUN_STARTED / RUN_FINISHED / RUN_ERROR: the run's outcome and final statuses."""
        state.apply(event)

    async def handle_step(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Track the active step across STEP_STARTED / STEP_FINISHED."""
        state.apply(event)

    async def handle_text_message(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        """Fold text message events (start/content/end/chunk) onto their message."""
        state.apply(event)

    async def handle_tool_call(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Fold tool call events (start/args/end/chunk/result) onto their tool call."""
        state.apply(event)

    async def handle_reasoning(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Fold REASONING_* (and the deprecated THINKING_*) events onto reasoning steps."""
        state.apply(event)

    async def handle_state(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Fold STATE_SNAPSHOT / STATE_DELTA into the chat's state."""
        state.apply(event)

    async def handle_messages_snapshot(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        """Store the messages of a MESSAGES_SNAPSHOT that are not stored yet."""
        state.apply(event)

    async def handle_activity(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Fold ACTIVITY_SNAPSHOT / ACTIVITY_DELTA onto an activity message."""
        state.apply(event)

    async def handle_subagent(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Fold SUBAGENT_STARTED / FINISHED / ERROR onto the subagent's records."""
        state.apply(event)

    async def flush_message_buffer(self) -> None:
        """Ask the writer to persist buffered message content now (it does not wait)."""
        self._request_flush()

    async def flush_tool_call_buffer(self) -> None:
        """Ask the writer to persist buffered tool call arguments now (it does not wait)."""
        self._request_flush()

    async def flush_reasoning_buffer(self) -> None:
        """Ask the writer to persist buffered reasoning content now (it does not wait)."""
        self._request_flush()

    def _request_flush(self) -> None:
        if self._persister is not None:
            self._persister.urgent.set()

    # --- extension point 3: build hooks ------------------------------------------------------

    def build_message_create(
        self, state: ConversationFold, chat: Chat, agui_id: str | None, role: Role | str | None
    ) -> MessageCreate:
        """Build the DTO that creates a new agent message (override to fill subclass fields)."""
        return MessageCreate(
            chat_uuid=chat.chat_uuid,
            role=Role(role or Role.ASSISTANT),
            agui_id=agui_id,
            step_name=state.active_step,
            run_id=state.run_id,
            created_at=utcnow(),
        )

    def build_tool_call_create(
        self,
        state: ConversationFold,
        chat: Chat,
        message_uuid: UUID,
        tool_call_id: str,
        name: str,
    ) -> MessageToolCallCreate:
        """Build the DTO that creates a tool call nested in ``message_uuid``."""
        return MessageToolCallCreate(
            message_uuid=message_uuid,
            tool_call_id=tool_call_id,
            name=name,
            step_name=state.active_step,
        )

    def build_reasoning_create(
        self,
        state: ConversationFold,
        chat: Chat,
        message_uuid: UUID,
        agui_id: str | None,
        name: str | None,
    ) -> MessageReasoningCreate:
        """Build the DTO that creates a reasoning step nested in ``message_uuid``."""
        return MessageReasoningCreate(
            message_uuid=message_uuid, agui_id=agui_id, name=name, step_name=state.active_step
        )

    def message_update_fields(
        self, state: ConversationFold, event: BaseEvent | None
    ) -> dict[str, Any]:
        """Extra fields written when a message reaches a terminal status (default: none).

        ``event`` is the event that ended it, or ``None`` when the run ended without
        one (cancelled, crashed). Keys the base ``MessageUpdate`` does not declare are
        kept when the store's message model declares them.
        """
        return {}

    # --- helpers -----------------------------------------------------------------------------

    def _can_update_state(self) -> bool:
        return hasattr(self.chat_repo, "update_chat_state")

    def _backoff(self, failures: int) -> float:
        return float(min(self.retry_max_delay, self.retry_base_delay * 2 ** (failures - 1)))


AGUIStorageAgent = StorageAgent
"""The seed's name for :class:`StorageAgent`."""
