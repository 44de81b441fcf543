"""One run of a storage agent: its set-up and first events, its held end, and its close.

:class:`AgentRun` is what ``StorageAgent.run`` and ``run_into`` drive: the set-up (or a
refusal), the inner agent's first events around an early start, the ``RUN_FINISHED``
held until the run is durable, and the close that decides its records' status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, TypeAlias

from ag_ui.core import BaseEvent, EventType, RunAgentInput, RunErrorEvent

from threadstore.agui._usage import RunWatch
from threadstore.agui._writer import RunPersister
from threadstore.errors import BudgetExceededError, ErrorCodes, InvalidInputError, RunLiveError
from threadstore.models import MessageStatus
from threadstore.store import run_storage

if TYPE_CHECKING:
    from threadstore.agui._agent import StorageAgent

__all__ = [
    "CHAT_DELETED_ERROR_CODE",
    "RUN_FINISHED",
    "RUN_STARTED",
    "STORE_UNAVAILABLE_ERROR_CODE",
    "AgentRun",
    "Started",
]

# The storage agent's own logger: one name for everything a run of it logs.
logger = logging.getLogger("threadstore.agui._agent")

STORE_UNAVAILABLE_ERROR_CODE = ErrorCodes.STORE_UNAVAILABLE.value
"""``RunErrorEvent.code`` sent instead of ``RUN_FINISHED`` when the run's records could not
be made durable (stored, or journaled in the outbox) within ``final_flush_deadline``."""

CHAT_DELETED_ERROR_CODE = ErrorCodes.CHAT_DELETED.value
"""``RunErrorEvent.code`` sent instead of the inner agent's ``RUN_FINISHED`` when the run's
chat was deleted during the run (from another process, say): its answer is not stored."""

RUN_FINISHED = EventType.RUN_FINISHED  # bound once: compared for every event
RUN_STARTED = EventType.RUN_STARTED


Started: TypeAlias = "RunPersister | asyncio.Task[RunPersister]"
"""A run set up (its persister), or started early (the task whose writes make it)."""


class AgentRun:
    """One run of a storage agent: its set-up and first events, and its end.

    :meth:`prelude` sets the run up and yields what comes before the inner agent's
    stream proper: a refusal, or, for a run started early, the inner agent's
    ``RUN_STARTED`` (before the set-up's writes are done) and its first event. Then the
    caller folds and passes on :attr:`stream`; :meth:`finish` closes it: normal end ->
    complete, cancelled (or the consumer closed ``run()``) -> interrupted, anything
    raised (:meth:`failed`) -> errored.
    """

    __slots__ = (
        "agent",
        "closed",
        "error",
        "events",
        "held",
        "input",
        "persister",
        "started",
        "status",
        "stream",
        "watch",
    )

    def __init__(self, agent: StorageAgent, input: RunAgentInput) -> None:
        self.agent, self.input = agent, input
        self.started: Started | None = None
        self.persister: RunPersister | None = None
        self.stream: AsyncIterator[BaseEvent] | None = None
        """The inner agent's stream (closed at the end); the caller iterates ``events``."""
        self.events: AsyncIterator[BaseEvent] | None = None
        self.watch: RunWatch | None = None
        self.status = MessageStatus.COMPLETE
        self.error: str | None = None
        self.held: BaseEvent | None = None
        """The inner agent's ``RUN_FINISHED``, held until the run is durable."""
        self.closed = False

    async def prelude(self) -> AsyncIterator[BaseEvent]:
        agent, input = self.agent, self.input
        if agent._persister is not None or agent.set_up.is_set():
            raise RuntimeError("a StorageAgent runs once; build a new one per run")
        agent.storage = run_storage(agent.chat_repo, agent.message_repo, agent.run_repo)
        self.watch = RunWatch(agent.name, input.thread_id, input.run_id)
        try:
            started = self.started = await agent._start(agent._setup(input))
        except (InvalidInputError, RunLiveError, BudgetExceededError) as exc:
            for event in agent._refusal(input, exc):
                yield event
            return
        finally:
            agent.set_up.set()
        stream = self.stream = agent.inner_agent.run(input)
        self.events = self.watch.events(stream)
        if isinstance(started, RunPersister):
            self.persister = started
            if agent.history_skipped:  # its RUN_STARTED, then the notice
                first = await anext(self.events, None)
                if first is not None and self._took(started, first):
                    yield first
                yield agent._skipped()
            return
        # Started early: the inner agent's RUN_STARTED goes out as it comes, and every
        # later event waits for the set-up's writes (the run's records and a refusal
        # found by them must come first).
        first = await anext(stream, None)
        if first is not None:
            self.watch.first_event(first)
        early = first is not None and first.type is RUN_STARTED
        if first is not None and early:
            yield first
        try:
            persister = await asyncio.shield(started)
        except (InvalidInputError, RunLiveError) as exc:
            refusal = agent._refusal(input, exc)
            for event in refusal[1:] if early else refusal:  # one RUN_STARTED
                yield event
            return
        if first is not None and self._took(persister, first) and not early:
            yield first
        if agent.history_skipped:
            yield agent._skipped()
        self.persister = persister

    def _took(self, persister: RunPersister, first: BaseEvent) -> bool:
        """Fold the stream's first event; False when it is its ``RUN_FINISHED``, now held."""
        persister.take(first)
        if first.type is RUN_FINISHED:
            self.held = first
        return self.held is not first

    def failed(self, exc: BaseException) -> None:
        """The run ended by ``exc``: cancelled (interrupted) or anything else (errored)."""
        if isinstance(exc, asyncio.CancelledError | GeneratorExit):
            self.status = MessageStatus.INTERRUPTED
        else:
            self.status, self.error = MessageStatus.ERRORED, f"{type(exc).__name__}: {exc}"

    async def release(self) -> BaseEvent:
        """The held ``RUN_FINISHED`` once the run is durable (and its chat is not gone); else
        a ``RUN_ERROR`` saying why.

        After :meth:`finish` the final flush has told; before it (a stream that goes on
        after its end) everything folded so far must become durable within the deadline.
        """
        held, self.held = self.held, None
        persister = self.persister
        assert held is not None and persister is not None
        durable = persister.failed is None if self.closed else await persister.settled()
        if not durable:
            return RunErrorEvent(
                message="The run's answer could not be stored: the store is unavailable. "
                "It was streamed, but it is not saved.",
                code=STORE_UNAVAILABLE_ERROR_CODE,
            )
        # A journaling run's store is away: asking it would only wait for its timeout.
        if persister.journaling or not await persister.check_chat_deleted():
            return held
        return RunErrorEvent(
            message="The chat was deleted during the run; its answer is not stored.",
            code=CHAT_DELETED_ERROR_CODE,
        )

    async def finish(self) -> None:
        """Close the inner stream and wait for the final flush, even through cancellation."""
        if self.started is None:
            if self.watch is not None:  # refused, or its set-up failed
                await self.watch.end(None, None, None, "refused", self.error)
            return
        if self.closed:
            return
        self.closed = True
        closing = asyncio.ensure_future(self._close())
        cancelled = False
        while not closing.done():
            try:
                await asyncio.shield(closing)
            except asyncio.CancelledError:
                cancelled = True
        closing.result()
        # A run whose RUN_FINISHED is held has ended: a cancel during its final flush
        # comes too late to interrupt it, and the held end still goes out.
        if cancelled and self.status is MessageStatus.COMPLETE and self.held is None:
            raise asyncio.CancelledError

    async def _close(self) -> None:
        aclose = getattr(self.stream, "aclose", None)  # runs the inner agent's own cleanup
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                logger.exception("closing the inner agent's stream failed")
        started = self.started
        if isinstance(started, RunPersister):
            persister = started
        else:
            # An early start ends only once its set-up writes have: what they began is
            # finalized like any run's. Writes that failed or were refused left nothing
            # running (and the stream said why, or the run raised).
            assert started is not None
            try:
                persister = await started
            except Exception:
                await self._end_watch(None)
                return
        try:
            await persister.close(self.status, self.error)
        finally:
            await self._end_watch(persister)
        compactor, chat = self.agent.compactor, self.agent.chat
        skipped = self.agent.history_skipped  # its chat is provisional until drained
        if compactor is not None and chat is not None and not (persister.chat_deleted or skipped):
            compactor.request(chat.chat_uuid)

    async def _end_watch(self, persister: RunPersister | None) -> None:
        """Record the run's usage and end its span (``persister``: when it ran)."""
        if self.watch is None:
            return
        storage = self.agent.storage
        # A run that started while the store was away names a provisional chat: its usage
        # is not recorded (docs/reliability.md).
        gone = persister is None or persister.chat_deleted or self.agent.history_skipped
        await self.watch.end(
            None if storage is None else storage.usage,
            None if gone else self.agent.chat,
            None if persister is None else persister.fold.run,
            self.status.value,
            self.error,
        )
