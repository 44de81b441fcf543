"""Relay runs' AG-UI events through PostgreSQL so any process can resume or cancel them.

:class:`EventRelay` owns one dedicated connection that ``LISTEN``s on two channels:

- ``threadstore_run_events``: a producer appended events to ``run_events``; readers
  of that run wake and read them. Payload ``"<chat_uuid>/<run_id>"``.
- ``threadstore_cancel``: some process asked to cancel a run; the process running it
  cancels it. Payload ``"<chat_uuid>/<run_id>"``.

Each relayed run has an :class:`EventPump` that reads the run's in-process log like
any other reader (never on the client's path) and takes its events' JSON, serialized
once for the pump and the client's stream (``RunHandle.json_of``); the relay's
one :class:`RelayWriter` writes what all pumps have pending in one ``INSERT ...
SELECT FROM unnest`` plus a ``NOTIFY`` per run, at least every ``flush_interval``
seconds or as soon as ``batch_size`` events wait or a run ended. So the statements
per second stay flat however many runs stream. Rows of finished runs are deleted by
:meth:`EventRelay.prune`.

Runs are addressed by ``(chat_uuid, run_id)`` only: a chat belongs to one user, so
callers resolve it from the user's own thread first and can never reach another
user's run with a guessed thread id.

PostgreSQL may drop the listening connection (a restart, a fail-over,
``pg_terminate_backend``). The relay notices, reconnects with backoff and listens
again, then wakes every waiting reader so it re-reads the table after its last
event: notifications sent meanwhile are lost, events are not. Cancel requests sent
meanwhile are lost too; a requester that waits for the run to stop repeats its request.

This is PostgreSQL only; the embedded backends need none of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import aclosing
from datetime import timedelta
from typing import Any
from uuid import UUID

from ag_ui.core import BaseEvent, Event, EventType, RunErrorEvent
from pydantic import TypeAdapter

from threadstore.agui._run_handle import INTERNAL_ERROR_CODE, EventsDroppedError, RunHandle
from threadstore.errors import ConfigurationError, InvalidInputError
from threadstore.models import RunStatus, utcnow
from threadstore.store import EventBatch, RunEventListener, RunEventLog

__all__ = [
    "EventPump",
    "EventRelay",
    "RelayWriter",
]

logger = logging.getLogger(__name__)

_EVENT: TypeAdapter[BaseEvent] = TypeAdapter(Event)
_TERMINAL = frozenset({EventType.RUN_FINISHED, EventType.RUN_ERROR})
_TERMINAL_TYPES = frozenset(kind.value for kind in _TERMINAL)


def _key(chat_uuid: UUID, run_id: str) -> str:
    return f"{chat_uuid}/{run_id}"


class EventRelay:
    """One process's link to the shared run-event log and cancel channel."""

    def __init__(
        self,
        events: RunEventLog,
        *,
        liveness_interval: float = 1.0,
        end_grace: float = 5.0,
        reconnect_delay: float = 0.1,
        reconnect_max_delay: float = 10.0,
        flush_interval: float = 0.05,
        batch_size: int = 256,
    ) -> None:
        self.events = events
        """The store's run-events log this relay orchestrates."""
        self.writer = RelayWriter(self, flush_interval=flush_interval, batch_size=batch_size)
        """Writes the pending events of every run this process relays."""
        self.liveness_interval = liveness_interval
        """How often a reader waiting on a quiet run checks the run is still recorded live."""
        self.end_grace = end_grace
        """How long a reader waits for more events of a run no longer recorded running."""
        self.reconnect_delay = reconnect_delay
        """Seconds before the first attempt to listen again after the connection was lost."""
        self.reconnect_max_delay = reconnect_max_delay
        """Upper bound of the delay, which doubles after each failed attempt."""
        self.on_cancel: Callable[[UUID, str], None] | None = None
        """Called with ``(chat_uuid, run_id)`` for each cancel request heard."""
        self.reconnects = 0
        """How many times the listening connection was lost and established again."""
        self._listener: RunEventListener | None = None
        self._reconnecting: asyncio.Task[None] | None = None
        self._started = False
        self._waiters: dict[str, set[asyncio.Event]] = {}

    @property
    def listening(self) -> bool:
        """Whether the relay holds a live listening connection right now."""
        return self._listener is not None

    @property
    def listener_pid(self) -> int | None:
        """The server process id of the listening connection (``None`` while reconnecting)."""
        listener = self._listener
        return None if listener is None else listener.server_pid

    async def start(self) -> None:
        """Take the dedicated listening connection and subscribe to both channels."""
        if self._started:
            return
        await self._listen()
        self._started = True

    async def _listen(self) -> None:
        self._listener = await self.events.listen(
            self._heard_events, self._heard_cancel, self._lost
        )

    def _lost(self, listener: RunEventListener) -> None:
        """The listening connection closed under us: listen again on a new one."""
        if listener is not self._listener:
            return
        self._listener = None
        logger.warning("the LISTEN connection to PostgreSQL was lost; reconnecting")
        self._reconnecting = asyncio.get_running_loop().create_task(
            self._reconnect(listener), name="threadstore-relay-reconnect"
        )

    async def _reconnect(self, lost: RunEventListener | None) -> None:
        if lost is not None:
            try:
                await lost.close(lost=True)
            except Exception:
                logger.debug("giving back the lost LISTEN connection failed", exc_info=True)
        delay = self.reconnect_delay
        while True:
            try:
                await self._listen()
                break
            except ConfigurationError:
                logger.error("the store was closed; the relay stops listening")
                return
            except Exception as exc:
                # Any failure, expected (the server is still down) or not, is retried:
                # a relay that stopped trying would stay deaf for the process's life.
                logger.warning("listening again failed (%s); retrying in %.1f s", exc, delay)
            # Jittered, so many processes that lost one server do not return in lockstep.
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(2 * delay, self.reconnect_max_delay)
        self.reconnects += 1
        logger.info("listening to PostgreSQL again")
        # Notifications sent while nobody listened are gone: every reader re-reads.
        self._wake_all()

    async def close(self) -> None:
        """Stop reconnecting, unsubscribe and give the listening connection back."""
        self._started = False
        reconnecting, self._reconnecting = self._reconnecting, None
        if reconnecting is not None and not reconnecting.done():
            reconnecting.cancel()
            await asyncio.gather(reconnecting, return_exceptions=True)
        listener, self._listener = self._listener, None
        try:
            if listener is not None:
                await listener.close()
        finally:
            self._wake_all()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.set()

    def _heard_events(self, payload: str) -> None:
        for waiter in self._waiters.get(payload, ()):
            waiter.set()

    def _heard_cancel(self, payload: str) -> None:
        chat, _, run_id = payload.partition("/")
        if self.on_cancel is not None:
            try:
                self.on_cancel(UUID(chat), run_id)
            except ValueError:
                logger.warning("ignoring malformed cancel request %r", payload)

    @contextlib.contextmanager
    def _waiting(self, chat_uuid: UUID, run_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever the run's events are appended or the relay listens again."""
        key, event = _key(chat_uuid, run_id), asyncio.Event()
        self._waiters.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[key]

    # --- runs -----------------------------------------------------------------------------

    async def live_runs(self, chat_uuid: UUID, *, fresh_within: float) -> list[str]:
        """Run ids of the chat recorded running with a heartbeat at most ``fresh_within`` s old.

        Newest first.
        """
        since = utcnow() - timedelta(seconds=fresh_within)
        return await self.events.live_runs(chat_uuid, since)

    async def live_elsewhere(
        self, user_uuid: UUID, thread_id: str, run_id: str, *, owner: str, fresh_within: float
    ) -> str | None:
        """The owner of the user's run ``(thread_id, run_id)`` if another process runs it."""
        since = utcnow() - timedelta(seconds=fresh_within)
        return await self.events.live_elsewhere(user_uuid, thread_id, run_id, since, owner)

    # --- cancel -------------------------------------------------------------------------

    async def request_cancel(
        self, chat_uuid: UUID, run_id: str, *, fresh_within: float, wait: bool = False
    ) -> bool:
        """Ask whichever process runs ``(chat_uuid, run_id)`` to cancel it.

        True when the runs table records it running with a heartbeat at most
        ``fresh_within`` seconds old. With ``wait``, returns once the run is no
        longer recorded running (its records are then finalized) or its heartbeat
        went stale, repeating the request every ``liveness_interval`` in case the
        owner's listening connection was reconnecting when it went out.
        """
        if not await self._notify_cancel(chat_uuid, run_id, fresh_within):
            return False
        if wait:
            await self._until_stopped(chat_uuid, run_id, fresh_within)
        return True

    async def _notify_cancel(self, chat_uuid: UUID, run_id: str, fresh_within: float) -> bool:
        since = utcnow() - timedelta(seconds=fresh_within)
        return await self.events.notify_cancel(chat_uuid, run_id, since)

    async def _until_stopped(self, chat_uuid: UUID, run_id: str, fresh_within: float) -> None:
        # The owner records the run's end before its last events land, and each batch
        # of events wakes us: the status is re-read after every wake.
        with self._waiting(chat_uuid, run_id) as waiter:
            while True:
                waiter.clear()
                since = utcnow() - timedelta(seconds=fresh_within)
                standing = await self.events.run_standing(chat_uuid, run_id, since)
                if standing is None or standing.status != RunStatus.RUNNING or not standing.beating:
                    return
                try:
                    await asyncio.wait_for(waiter.wait(), self.liveness_interval)
                except TimeoutError:
                    await self._notify_cancel(chat_uuid, run_id, fresh_within)

    # --- reading ------------------------------------------------------------------------

    async def resume(
        self, chat_uuid: UUID, run_id: str, after: int = 0
    ) -> AsyncGenerator[tuple[int, BaseEvent], None] | None:
        """Check that the run's events after ``after`` can be followed, then :meth:`follow`.

        ``None`` when no run ``(chat_uuid, run_id)`` is recorded, or it ended at least
        ``end_grace`` seconds ago with no event stored (pruned). Raises
        :class:`EventsDroppedError` when events after ``after`` were pruned, and
        :class:`~threadstore.errors.InvalidInputError` when ``after`` lies beyond
        the run's stored end.
        """
        if after < 0:
            raise InvalidInputError(f"after must be >= 0, got {after}")
        log = await self.events.run_log(chat_uuid, run_id)
        if log is None:
            return None
        first, last = log.first_id, log.last_id
        if last is None or first is None:
            settled = utcnow() - timedelta(seconds=self.end_grace)
            if log.status != RunStatus.RUNNING and log.updated_at < settled:
                return None
        elif after + 1 < first:
            raise EventsDroppedError(after, first)
        elif after > last and log.last_type in _TERMINAL_TYPES:
            raise InvalidInputError(
                f"event {after} does not exist in run {run_id} (its last event is {last})"
            )
        return self.follow(chat_uuid, run_id, after)

    async def follow(
        self, chat_uuid: UUID, run_id: str, after: int = 0
    ) -> AsyncGenerator[tuple[int, BaseEvent], None]:
        """Yield ``(event_id, event)`` of the run after ``after``, live, up to its end.

        Ends after the run's ``RUN_FINISHED``/``RUN_ERROR`` (at once if event
        ``after`` was that end). If the run is no longer recorded as running
        (finished, or swept after its process died) and no event comes for
        ``end_grace`` seconds, ends with a synthesized ``RUN_ERROR``. Raises
        :class:`EventsDroppedError` when events it needs were pruned.
        """
        with self._waiting(chat_uuid, run_id) as waiter:
            next_id = after + 1
            # Event ``after`` is read once too: a client that saw the run's end from
            # another process's memory must not wait here for an end already past.
            settled = after == 0
            loop = asyncio.get_running_loop()
            stopped_at: float | None = None  # when the run was first seen not running
            while True:
                # Cleared before reading, so a notify racing the read is not lost.
                waiter.clear()
                rows = await self._read(chat_uuid, run_id, next_id - (0 if settled else 1))
                if rows and not settled:
                    settled = True
                    if rows[0][0] == after:
                        if rows.pop(0)[1].type in _TERMINAL:
                            return
                for event_id, event in rows:
                    if event_id != next_id:
                        raise EventsDroppedError(next_id - 1, event_id)
                    yield event_id, event
                    next_id += 1
                    if event.type in _TERMINAL:
                        return
                if rows:
                    stopped_at = None
                    continue
                try:
                    await asyncio.wait_for(waiter.wait(), self.liveness_interval)
                    continue
                except TimeoutError:
                    pass
                if await self.events.run_status(chat_uuid, run_id) == RunStatus.RUNNING:
                    stopped_at = None
                    continue
                # A producer finishing normally records the run's end before its last
                # batch lands; only a run quiet for end_grace after that has no producer.
                now = loop.time()
                if stopped_at is None:
                    stopped_at = now
                if now - stopped_at < self.end_grace:
                    continue
                yield (
                    next_id,
                    RunErrorEvent(
                        message="The run's process stopped before the run ended.",
                        code=INTERNAL_ERROR_CODE,
                    ),
                )
                return

    async def read_events(
        self, chat_uuid: UUID, run_id: str, after: int = 0
    ) -> list[tuple[int, BaseEvent]]:
        """The run's events stored so far after ``after``, oldest first."""
        return await self._read(chat_uuid, run_id, after + 1)

    async def _read(self, chat_uuid: UUID, run_id: str, first: int) -> list[tuple[int, BaseEvent]]:
        rows = await self.events.read(chat_uuid, run_id, first)
        return [(event_id, _EVENT.validate_json(event)) for event_id, event in rows]

    # --- writing ------------------------------------------------------------------------

    async def append(self, batches: list[EventBatch]) -> None:
        """Append ``(chat_uuid, run_id, [(event_id, event JSON)...])`` batches at once.

        One statement (one commit) for every run given, and a notification for each run
        so its readers wake.
        """
        await self.events.append(batches)

    async def prune(self, retention: float) -> int:
        """Delete the events of runs not running, older than ``retention`` seconds."""
        return await self.events.prune(utcnow() - timedelta(seconds=retention))


RELAY_FINAL_ATTEMPTS = 8
"""Tries to write a finished run's last relayed events before giving up on them."""

RELAY_RETRY_MAX_DELAY = 5.0
"""Longest wait, in seconds, between two tries of a failed relay write."""


class EventPump:
    """Copy one run's in-process event log to ``run_events`` (see the module docstring)."""

    def __init__(self, relay: EventRelay, handle: RunHandle[Any]) -> None:
        self.relay = relay
        self.handle = handle
        self.batches = 0
        """How many INSERT statements carried some of this run's events."""
        self.written_id = 0
        """Id of the newest event known to be in ``run_events``."""
        self.stopped = False
        self.pending: list[tuple[int, str]] = []
        """Events read and serialized, not yet written: ``(event_id, event JSON)``."""
        self.reading_done = False
        handle.share_json = True  # the client's stream and this pump serialize each event once
        self._progress = asyncio.Event()  # replaced after each set, so each wait sees one
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read(), name="threadstore-relay-read")

    @property
    def chat_uuid(self) -> UUID | None:
        """The run's chat, once its agent has found or created it."""
        chat_uuid = getattr(getattr(self.handle.agent, "chat", None), "chat_uuid", None)
        return chat_uuid if isinstance(chat_uuid, UUID) else None

    def done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the pump has stopped."""
        self._done.add_done_callback(lambda _: callback())

    async def wait(self) -> None:
        """Wait until every event of the finished run was written (or given up on)."""
        await asyncio.wait([self._done])

    async def durable(
        self, stream: AsyncGenerator[tuple[int, BaseEvent], None]
    ) -> AsyncGenerator[tuple[int, BaseEvent], None]:
        """Yield ``stream``'s events, each only once it is in ``run_events``.

        Once the pump has stopped (the run ended, or the store failed), the rest
        passes through as it comes.
        """
        async with aclosing(stream):
            async for event_id, event in stream:
                while self.written_id < event_id and not self.stopped:
                    await self._progress.wait()
                yield event_id, event

    def written(self, up_to: int) -> None:
        """The writer stored this run's events up to ``up_to``."""
        self.batches += 1
        self.written_id = up_to
        self._signal_progress()

    def stop(self, error: BaseException | None = None) -> None:
        """End the pump: everything written, or given up on (``error``)."""
        if self._done.done():
            return
        self.stopped = True
        self._reader.cancel()
        self._signal_progress()
        if error is not None:
            logger.warning(
                "relaying run %s/%s failed; its unwritten events are dropped",
                self.handle.thread_id,
                self.handle.run_id,
                exc_info=error,
            )
        self._done.set_result(None)

    def _signal_progress(self) -> None:
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    async def _read(self) -> None:
        writer = self.relay.writer
        try:
            json_of = self.handle.json_of
            async for first, batch in self.handle.numbered_batches():
                # The writer swaps ``pending`` for a new list as it takes the events.
                self.pending += [
                    (event_id, json_of(event_id, event))
                    for event_id, event in enumerate(batch, first)
                ]
                writer.has_pending(self, len(batch))
        except Exception as exc:
            self.stop(exc)
            return
        self.reading_done = True
        writer.has_pending(self, 0)  # so it writes the rest at once and then ends the pump


class RelayWriter:
    """Writes every relayed run's pending events in one ``INSERT`` per interval (see the
    module docstring); a failed write keeps its events, in order, and is retried with backoff.
    """

    def __init__(self, relay: EventRelay, *, flush_interval: float, batch_size: int) -> None:
        self.relay = relay
        self.flush_interval = flush_interval
        self.batch_size = batch_size
        self.statements = 0
        """How many INSERT statements the writer ran."""
        self._pumps: set[EventPump] = set()
        self._pending = 0
        self._wake = asyncio.Event()
        self._full = asyncio.Event()  # a whole batch waits, or a run ended
        self._task: asyncio.Task[None] | None = None

    def has_pending(self, pump: EventPump, events: int) -> None:
        """``pump`` has ``events`` new events, or finished reading: write them soon."""
        self._pumps.add(pump)
        self._pending += events
        self._wake.set()
        if self._pending >= self.batch_size or pump.reading_done:
            self._full.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="threadstore-relay-write")

    async def _run(self) -> None:
        failures = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._full.is_set():
                # The first pending event waits at most one interval for company.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.flush_interval)
            self._full.clear()
            try:
                await self._write()
            except Exception as exc:
                failures += 1
                delay = min(RELAY_RETRY_MAX_DELAY, self.flush_interval * 2 ** (failures - 1))
                logger.warning("relaying events failed (%s); retrying in %.2f s", exc, delay)
                if failures >= RELAY_FINAL_ATTEMPTS:
                    for pump in [p for p in self._pumps if p.reading_done]:
                        self._pumps.discard(pump)
                        pump.stop(exc)
                await asyncio.sleep(delay)
                self._wake.set()
                continue
            failures = 0
            for pump in list(self._pumps):
                if not pump.pending:
                    self._pumps.discard(pump)
                    if pump.reading_done:
                        pump.stop()
            if self._pumps:
                self._wake.set()  # a run with no chat yet, or events that came meanwhile
            else:
                self._task = None  # the next pending event starts a new writer
                return

    async def _write(self) -> None:
        taken: list[tuple[EventPump, list[tuple[int, str]]]] = []
        batches: list[EventBatch] = []
        for pump in list(self._pumps):
            chat_uuid = pump.chat_uuid
            if chat_uuid is None:
                if pump.reading_done:  # the run ended before it had a chat (refused input)
                    pump.pending = []
                continue  # otherwise its events wait for the chat
            if pump.pending:
                taken.append((pump, pump.pending))
                batches.append((chat_uuid, pump.handle.run_id, pump.pending))
                pump.pending = []
        self._pending = sum(len(p.pending) for p in self._pumps)
        if not taken:
            return
        try:
            await self.relay.append(batches)
        except BaseException:
            for pump, batch in taken:  # in order, ahead of what came meanwhile
                pump.pending = batch + pump.pending
            self._pending = sum(len(p.pending) for p in self._pumps)
            raise
        self.statements += 1
        for pump, batch in taken:
            pump.written(batch[-1][0])
