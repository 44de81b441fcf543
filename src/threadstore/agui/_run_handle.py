"""A run in the background: its numbered event log, its readers, and its control.

:class:`RunHandle` is what a :class:`~threadstore.agui.StreamPersistenceManager` returns
for each run: a producer task drains the agent's stream into a numbered in-memory log,
and any number of readers follow it from any event id, with no gap and no duplicate;
every reader sees a terminal event however the run ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable
from uuid import UUID

from ag_ui.core import (
    BaseEvent,
    EventType,
    RunAgentInput,
    RunErrorEvent,
    RunStartedEvent,
)
from pydantic import BaseModel

from threadstore.codec import now_ms
from threadstore.errors import ErrorCodes, InvalidInputError
from threadstore.models import RunStatus

__all__ = [
    "CANCELLED_ERROR_CODE",
    "INTERNAL_ERROR_CODE",
    "RUN_BOUNDS",
    "RUN_ERROR",
    "RUN_FINISHED",
    "RUN_STARTED",
    "AGUIAgentLike",
    "AgentT",
    "EmittingAgent",
    "EventsDroppedError",
    "RunHandle",
    "RunKey",
    "SettingUpAgent",
    "UserScopedAgent",
    "event_json",
    "user_of",
    "wire_json",
]

# The run manager's logger: a run logs as the manager that started it.
logger = logging.getLogger("threadstore.agui._manager")

INTERNAL_ERROR_CODE = ErrorCodes.INTERNAL_ERROR.value
"""``RunErrorEvent.code`` synthesized when the agent raises instead of ending its stream."""

CANCELLED_ERROR_CODE = ErrorCodes.CANCELLED.value
"""``RunErrorEvent.code`` synthesized when a run is cancelled."""

# Bound once: looking a member up on its enum class is slow next to the rest of
# _append, which runs once per event.
RUN_STARTED, RUN_FINISHED, RUN_ERROR = (
    EventType.RUN_STARTED,
    EventType.RUN_FINISHED,
    EventType.RUN_ERROR,
)
RUN_BOUNDS = frozenset((RUN_STARTED, RUN_FINISHED, RUN_ERROR))


class AGUIAgentLike(Protocol):
    """What the manager needs from an agent: ``run(input)`` yielding AG-UI events."""

    def run(self, input: RunAgentInput, /) -> AsyncIterator[BaseEvent]:
        """Yield the run's AG-UI events."""
        ...


@runtime_checkable
class UserScopedAgent(Protocol):
    """An agent that runs for one user: its runs are keyed by that user too."""

    user_uuid: UUID


@runtime_checkable
class SettingUpAgent(Protocol):
    """An agent that sets ``set_up`` once its run is set up (or refused).

    The handle sets it too when the run ends, so whoever waits for the set-up never
    outlives a run that ended first (one cancelled before its first step included).
    """

    set_up: asyncio.Event


@runtime_checkable
class EmittingAgent(Protocol):
    """An agent that can hand its events straight to the run's log (a ``StorageAgent``)."""

    async def run_into(self, input: RunAgentInput, emit: Callable[[BaseEvent], None]) -> None:
        """Run, handing each event to ``emit`` in order; return when the run is done."""
        ...


AgentT = TypeVar("AgentT", bound=AGUIAgentLike)

RunKey = tuple[UUID | None, str, str]
"""How a manager knows a run: ``(user_uuid, thread_id, run_id)``; no user for agents without one."""


def user_of(agent: object) -> UUID | None:
    """The user an agent runs for (a ``StorageAgent``'s ``user_uuid``), if it says."""
    return agent.user_uuid if isinstance(agent, UserScopedAgent) else None


class EventsDroppedError(InvalidInputError):
    """Events a reader needs were dropped from a log bounded by ``max_buffered_events``."""

    def __init__(self, after: int, first_available: int) -> None:
        super().__init__(
            f"events after {after} are no longer buffered; the oldest available event "
            f"is {first_available}"
        )
        self.after = after
        self.first_available = first_available


# JSON leaves these unescaped, but many line readers (Python's str.splitlines among
# them) treat them as line breaks and would cut an SSE frame in two.
_LINE_BREAKERS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def wire_json(model: BaseModel) -> str:
    """An AG-UI model's wire JSON: camelCase keys, unset optional fields left out, one line."""
    text = model.model_dump_json(by_alias=True)
    return text if text.isascii() else text.translate(_LINE_BREAKERS)


def event_json(event: BaseEvent) -> str:
    """The event's wire JSON: camelCase keys, unset optional fields left out, one line."""
    return wire_json(event)


class RunHandle(Generic[AgentT]):
    """One run started by :class:`StreamPersistenceManager`: its event log, cancel and wait."""

    thread_id: str
    run_id: str
    agent: AgentT
    user_uuid: UUID | None
    """The user the run belongs to: its agent's ``user_uuid`` (``None`` if it has none)."""
    exception: BaseException | None
    """What the agent raised, when the run ended that way."""
    expose_exceptions: bool = True
    """Whether the ``RUN_ERROR`` for an agent that raised carries the exception's text."""
    reader_wake_interval: float = 200e-6
    """Waiting readers are woken at most once per this many seconds; the end, at once.

    A wake costs a reader about as much as a cheap agent spends producing an event, so
    a fast stream reaches its readers in batches. An event arriving this soon after the
    last wake waits for the rest of the interval; if the event loop then has nothing
    else to do, its timer granularity may stretch that. The trade-off between this wait
    and the wakes' cost is measured in docs/benchmarks.md.
    """
    reader_wake_interval_max: float = 500e-6
    """How far the wake interval stretches when wakes keep finding a single event.

    With many runs streaming at once, each run's events come just too far apart for
    the base interval to batch them, and every event cost its readers a wake. While a
    wake finds at most two new events although the last was less than this long ago,
    the interval doubles (up to this); while wakes find 16 or more, it halves again. An
    event after a quiet spell longer than the interval still goes out at once.
    """
    reader_wake_interval_busy_max: float = 50e-3
    """How far the wake interval may stretch while the event loop is slow to run a reader.

    When hundreds of streams share one loop, each turn of it takes milliseconds, a run
    produces about one event per turn, and a reader woken every turn writes every event
    on its own: the server's and the client's cost per write (the ASGI send, the HTTP
    chunk, the socket calls) is then paid per event, which keeps the turns long. So the
    ceiling above grows to twice the time the last woken reader waited for the loop to
    run it (its lag), up to this: a reader then waits a turn or two for company, which
    adds about the delay the load already imposes on every event, and the cheaper
    writes shorten the turns. A loop that keeps up runs a woken reader at once, and the
    ceiling stays ``reader_wake_interval_max``.
    """

    def __init__(
        self, thread_id: str, run_id: str, agent: AgentT, *, max_buffered_events: int | None
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.agent = agent
        self.user_uuid = user_of(agent)
        self.exception = None
        self._events: list[BaseEvent] = []
        self._json: dict[int, str] = {}  # event id -> wire JSON, while shared and live
        self.share_json = False
        """Whether :meth:`json_of` keeps each event's JSON for the run's other readers.

        Set when a second reader serializes every event (the relay); kept only while
        the run is live.
        """
        self._base_id = 1  # id of self._events[0]
        self._last_id = 0
        self._max_buffered = max_buffered_events
        self._readers: list[asyncio.Future[None]] = []
        self._last_wake = float("-inf")  # loop time
        self._wake_lag = 0.0  # how long the last woken reader waited for the loop
        self._wake_interval = self.reader_wake_interval  # adapted to how events come
        self._woken_at = 0  # the newest event id when readers were last woken
        self._wake_timer: asyncio.TimerHandle | None = None
        self._finished = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._cancel_requested = False
        self._cancel_reason = ("The run was cancelled.", CANCELLED_ERROR_CODE)
        self._cancelled_after_end = False
        self._ended = False  # the last lifecycle event was RUN_FINISHED or RUN_ERROR
        self._ended_in_error = False
        self._outcome: RunStatus | None = None

    def __repr__(self) -> str:
        state = self._outcome or "running"
        return f"<RunHandle {self.thread_id}/{self.run_id} {state} events={self._last_id}>"

    # --- state -----------------------------------------------------------------------

    @property
    def key(self) -> RunKey:
        """``(user_uuid, thread_id, run_id)``: the run's key in its manager."""
        return (self.user_uuid, self.thread_id, self.run_id)

    @property
    def done(self) -> bool:
        """True once the producer has finished and the log is complete."""
        return self._outcome is not None

    @property
    def outcome(self) -> RunStatus | None:
        """``complete``, ``interrupted`` or ``errored`` once done; ``None`` while live."""
        return self._outcome

    @property
    def last_event_id(self) -> int:
        """Id of the newest event in the log (0 before the first)."""
        return self._last_id

    @property
    def first_event_id(self) -> int:
        """Id of the oldest event still buffered (a reader may resume from one before it)."""
        if self._max_buffered is None:
            return self._base_id
        return max(self._base_id, self._last_id - self._max_buffered + 1)

    # --- reading ---------------------------------------------------------------------

    def events(self, after: int = 0) -> AsyncGenerator[BaseEvent, None]:
        """Yield the run's events after id ``after``, then live ones, until the run is done."""
        self._check_after(after)
        return self._follow_events(after)

    def numbered_events(self, after: int = 0) -> AsyncGenerator[tuple[int, BaseEvent], None]:
        """Like :meth:`events`, yielding ``(event_id, event)`` pairs."""
        self._check_after(after)
        return self._follow_numbered(after)

    def _check_after(self, after: int) -> None:
        # Checked before the first event so a server can answer with an error status
        # instead of starting a stream it cannot deliver.
        if after < 0:
            raise InvalidInputError(f"after must be >= 0, got {after}")
        if after > self._last_id:
            raise InvalidInputError(
                f"event {after} does not exist in run {self.run_id} (the newest is {self._last_id})"
            )
        if after + 1 < self.first_event_id:
            raise EventsDroppedError(after, self.first_event_id)

    def numbered_batches(self, after: int = 0) -> AsyncGenerator[tuple[int, list[BaseEvent]], None]:
        """Like :meth:`numbered_events`, a batch at a time: ``(first_id, events)``.

        Each batch is every event buffered when the reader woke (``first_id`` is the
        number of its first), so a reader that writes them out together (the server's
        event stream) pays its per-write cost once per batch instead of once per event.
        """
        self._check_after(after)
        return self._follow_batches(after)

    async def _follow_batches(
        self, after: int
    ) -> AsyncGenerator[tuple[int, list[BaseEvent]], None]:
        loop = asyncio.get_running_loop()
        next_id = after + 1
        while True:
            if next_id <= self._last_id:
                if next_id < (first := self.first_event_id):
                    raise EventsDroppedError(next_id - 1, first)
                # A copy: the producer may append to or trim the log while the reader is
                # suspended in the middle of the batch.
                batch = self._events[next_id - self._base_id :]
                yield next_id, batch
                next_id += len(batch)
            elif self._outcome is not None:
                return
            else:
                # Done once the log grows or the run ends. One future per reader: a
                # reader cancelled while waiting cancels only its own.
                future = loop.create_future()
                self._readers.append(future)
                await future
                self._wake_lag = loop.time() - self._last_wake

    async def _follow_events(self, after: int) -> AsyncGenerator[BaseEvent, None]:
        async for _, batch in self._follow_batches(after):
            for event in batch:
                yield event

    async def _follow_numbered(self, after: int) -> AsyncGenerator[tuple[int, BaseEvent], None]:
        async for first, batch in self._follow_batches(after):
            for offset, event in enumerate(batch):
                yield first + offset, event

    def json_of(self, event_id: int, event: BaseEvent) -> str:
        """``event``'s (number ``event_id`` of this run) wire JSON, serialized once per run.

        Every reader of a live run (the client's stream, the relay) needs the same
        text: with :attr:`share_json` the first to ask serializes the event, the
        others reuse it.
        """
        if not self.share_json:
            return event_json(event)
        cached = self._json.get(event_id)
        if cached is None:
            cached = event_json(event)
            if self._outcome is None:
                self._json[event_id] = cached
        return cached

    def _signal(self) -> None:
        """Wake the waiting readers now, or ``reader_wake_interval`` after their last wake."""
        loop = asyncio.get_running_loop()
        due = self._last_wake + self._wake_interval
        if loop.time() >= due:
            self._wake_readers()
        else:
            self._wake_timer = loop.call_at(due, self._timed_wake)

    def _adapt_wake_interval(self, delivered: int, since_last: float) -> None:
        """Stretch or shrink the wake interval by what the last one brought (see the class)."""
        interval, base = self._wake_interval, self.reader_wake_interval
        busy = min(2 * self._wake_lag, self.reader_wake_interval_busy_max)
        ceiling = max(base, self.reader_wake_interval_max, busy)
        if delivered <= 2 and since_last < ceiling:
            self._wake_interval = min(interval * 2, ceiling)
        elif delivered >= 16 and interval > base:
            self._wake_interval = max(interval / 2, base)

    def _timed_wake(self) -> None:
        self._wake_timer = None
        self._wake_readers()

    def _wake_readers(self) -> None:
        if self._wake_timer is not None:
            self._wake_timer.cancel()
            self._wake_timer = None
        readers, self._readers = self._readers, []
        if readers:
            now = asyncio.get_running_loop().time()
            self._adapt_wake_interval(self._last_id - self._woken_at, now - self._last_wake)
            self._last_wake = now
            self._woken_at = self._last_id
        for future in readers:
            if not future.done():
                future.set_result(None)

    # --- producing -------------------------------------------------------------------

    def _append(self, event: BaseEvent) -> None:
        events = self._events
        events.append(event)
        self._last_id += 1
        limit = self._max_buffered
        # Trim in bulk once the list holds twice the limit: O(1) amortized per event.
        if limit is not None and len(events) >= 2 * limit:
            drop = len(events) - limit
            del events[:drop]
            self._base_id += drop
            self._json = {i: text for i, text in self._json.items() if i >= self._base_id}
        kind = event.type
        if kind in RUN_BOUNDS:  # one set lookup for the events that are neither
            if kind == RUN_STARTED:
                self._ended = False
            else:
                self._ended = True
                self._ended_in_error = kind == RUN_ERROR
        if self._readers:
            if self._wake_timer is None:
                self._signal()
            elif limit is not None and self._last_id - self._woken_at >= limit // 2:
                self._wake_readers()  # a reader kept waiting would fall out of a bounded log

    def _start(self, input: RunAgentInput, on_done: Callable[[RunHandle[AgentT]], None]) -> None:
        agent = self.agent
        # A storage agent's run_into is the task itself: every event the agent yields
        # crosses one coroutine fewer on its way up to the event loop and back.
        producer: Coroutine[Any, Any, None] = (
            agent.run_into(input, self._append)
            if isinstance(agent, EmittingAgent)
            else self._produce(input)
        )
        task = asyncio.create_task(producer, name=f"threadstore-run:{self.thread_id}:{self.run_id}")
        self._task = task
        task.add_done_callback(lambda t: self._finish(t, on_done))

    async def _produce(self, input: RunAgentInput) -> None:
        # The only await point is inside the agent's stream, so a cancel always lands
        # in agent.run, which then finalizes its records as interrupted.
        append = self._append
        async for event in self.agent.run(input):
            append(event)

    def _finish(
        self, task: asyncio.Task[None], on_done: Callable[[RunHandle[AgentT]], None]
    ) -> None:
        # A done callback rather than a finally: it also runs for a task cancelled
        # before its first step, whose body never executes.
        if isinstance(self.agent, SettingUpAgent):
            self.agent.set_up.set()
        if not task.cancelled() and (exc := task.exception()) is not None:
            self.exception = exc
            logger.error("agent raised in run %s/%s", self.thread_id, self.run_id, exc_info=exc)
        terminal: tuple[str, str] | None = None  # the RUN_ERROR readers get: message, code
        # A run that returned after RUN_FINISHED went out ended before the cancel could
        # stop it: that end is held back until its records are durable.
        finished = not task.cancelled() and self._ended and not self._ended_in_error
        outcome = RunStatus.ERRORED if self._ended_in_error else RunStatus.COMPLETE
        if task.cancelled() or self._cancel_requested:
            # A run that had ended (its records are final as its terminal event says)
            # stays as it ended: the cancel only cut short what the agent did after that.
            if not (self._cancelled_after_end or finished):
                outcome, terminal = RunStatus.INTERRUPTED, self._cancel_reason
        elif self.exception is not None:
            outcome, exc = RunStatus.ERRORED, self.exception
            terminal = (
                f"{type(exc).__name__}: {exc}"
                if self.expose_exceptions
                else "The run failed with an internal error; the server log has the details.",
                INTERNAL_ERROR_CODE,
            )
        else:
            # An agent whose stream just stops would otherwise leave readers without
            # the terminal event this class promises them.
            terminal = (
                "The agent's stream ended without RUN_FINISHED or RUN_ERROR.",
                INTERNAL_ERROR_CODE,
            )
        if terminal is not None and not self._ended:
            if self._last_id == 0:
                self._append(RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id))
            self._append(RunErrorEvent(message=terminal[0], code=terminal[1], timestamp=now_ms()))
        self._outcome = outcome
        self._json = {}
        self._wake_readers()
        self._finished.set()
        on_done(self)

    # --- control ---------------------------------------------------------------------

    def cancel(self, *, message: str | None = None, code: str | None = None) -> bool:
        """Cancel the run; True if it was live, False if it had already finished.

        ``message`` and ``code`` replace those of the ``RUN_ERROR`` readers get (default
        ``CANCELLED``), e.g. to tell them the server is shutting down.
        """
        if self.done or self._task is None:
            return False
        if not self._cancel_requested:
            # Only once: a second cancel would abort the agent's interrupt finalization.
            self._cancel_reason = (
                message or self._cancel_reason[0],
                code or self._cancel_reason[1],
            )
            self._cancel_requested = True
            self._cancelled_after_end = self._ended
            self._task.cancel()
        return True

    async def wait(self) -> None:
        """Wait until the producer has finished (agent's final flush included); never raises."""
        await self._finished.wait()
