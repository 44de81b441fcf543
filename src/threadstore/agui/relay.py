"""Relay runs' AG-UI events through PostgreSQL so any process can resume or cancel them.

:class:`EventRelay` owns one dedicated connection that ``LISTEN``s on two channels:

- ``threadstore_run_events``: a producer appended events to ``run_events``; readers
  of that run wake and read them. Payload ``"<chat_uuid>/<run_id>"``.
- ``threadstore_cancel``: some process asked to cancel a run; the process running it
  cancels it. Payload ``"<chat_uuid>/<run_id>"``.

A producer's events go to ``run_events`` through :class:`EventPump`, in batches:
one ``INSERT ... SELECT FROM unnest`` plus its ``NOTIFY`` per batch, written at least
every ``flush_interval`` seconds or as soon as ``batch_size`` events wait, never on
the client's path (the pump reads the run's in-process log like any other reader).
Rows of finished runs are deleted by :meth:`EventRelay.prune`.

This is PostgreSQL only; the embedded backends need none of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager, aclosing
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
from ag_ui.core import BaseEvent, Event, EventType, RunErrorEvent
from pydantic import TypeAdapter

from threadstore.agui.manager import INTERNAL_ERROR_CODE, EventsDroppedError, RunHandle
from threadstore.models import utcnow
from threadstore.store.postgres import PostgresStore

__all__ = [
    "CANCEL_CHANNEL",
    "EVENTS_CHANNEL",
    "EventPump",
    "EventRelay",
]

logger = logging.getLogger(__name__)

CANCEL_CHANNEL = "threadstore_cancel"
"""Channel on which cancel requests travel between processes."""

EVENTS_CHANNEL = "threadstore_run_events"
"""Channel that wakes readers when a run's events were appended."""

_EVENT: TypeAdapter[BaseEvent] = TypeAdapter(Event)
_TERMINAL = frozenset({EventType.RUN_FINISHED, EventType.RUN_ERROR})

# The chat must still exist: a run whose chat was deleted leaves nothing behind.
INSERT_EVENTS = (
    "WITH ins AS (INSERT INTO run_events (chat_uuid, run_id, event_id, event, created_at)"
    " SELECT $1, $2, e.id, e.event::json, $5"
    " FROM unnest($3::integer[], $4::text[]) AS e (id, event)"
    " WHERE EXISTS (SELECT 1 FROM chats WHERE chat_uuid = $1)"
    " ON CONFLICT DO NOTHING RETURNING 1)"
    " SELECT pg_notify($6, $1::text || '/' || $2), (SELECT count(*) FROM ins)"
)
READ_EVENTS = (
    "SELECT event_id, event::text FROM run_events"
    " WHERE chat_uuid = $1 AND run_id = $2 AND event_id > $3 ORDER BY event_id"
)
LIVE_RUNS = (
    "SELECT chat_uuid FROM runs WHERE thread_id = $1 AND run_id = $2"
    " AND status = 'running' AND heartbeat_at >= $3"
)
RUNS_BY_THREAD = (
    "SELECT chat_uuid FROM runs WHERE thread_id = $1 AND run_id = $2"
    " ORDER BY created_at DESC LIMIT 1"
)
RUN_STATUS = "SELECT status FROM runs WHERE chat_uuid = $1 AND run_id = $2"
NOTIFY = "SELECT pg_notify($1, $2)"
# Rows of runs no longer running (or never recorded) once older than the retention.
PRUNE_EVENTS = (
    "DELETE FROM run_events e WHERE e.created_at < $1 AND NOT EXISTS"
    " (SELECT 1 FROM runs r WHERE r.chat_uuid = e.chat_uuid AND r.run_id = e.run_id"
    "  AND r.status = 'running')"
)


def _key(chat_uuid: UUID, run_id: str) -> str:
    return f"{chat_uuid}/{run_id}"


class EventRelay:
    """One process's link to the shared run-event log and cancel channel."""

    def __init__(
        self, store: PostgresStore, *, liveness_interval: float = 1.0, end_grace: float = 5.0
    ) -> None:
        self.store = store
        self.liveness_interval = liveness_interval
        """How often a reader waiting on a quiet run checks the run is still recorded live."""
        self.end_grace = end_grace
        """How long a reader waits for more events of a run no longer recorded running."""
        self.on_cancel: Callable[[UUID, str], None] | None = None
        """Called with ``(chat_uuid, run_id)`` for each cancel request heard."""
        self._listener: asyncpg.Connection | None = None
        self._listener_lease: AbstractAsyncContextManager[asyncpg.Connection] | None = None
        self._waiters: dict[str, set[asyncio.Event]] = {}

    async def start(self) -> None:
        """Take the dedicated listening connection and subscribe to both channels."""
        if self._listener is not None:
            return
        lease = self._lease()
        conn: asyncpg.Connection = await lease.__aenter__()
        await conn.add_listener(EVENTS_CHANNEL, self._heard_events)
        await conn.add_listener(CANCEL_CHANNEL, self._heard_cancel)
        self._listener = conn
        self._listener_lease = lease

    def _lease(self) -> AbstractAsyncContextManager[asyncpg.Connection]:
        # Through the store's own lending, never ``pool.acquire()``: a store that owns
        # its pool keeps idle connections until one of its own calls waits, so a
        # direct acquire could wait forever.
        return self.store._borrowed()

    async def close(self) -> None:
        """Unsubscribe and give the listening connection back."""
        conn, self._listener = self._listener, None
        if conn is None:
            return
        try:
            # The store's pool skips the session reset on release, so unlisten here.
            await conn.remove_listener(EVENTS_CHANNEL, self._heard_events)
            await conn.remove_listener(CANCEL_CHANNEL, self._heard_cancel)
        finally:
            lease, self._listener_lease = self._listener_lease, None
            if lease is not None:
                await lease.__aexit__(None, None, None)
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.set()

    def _heard_events(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        for waiter in self._waiters.get(payload, ()):
            waiter.set()

    def _heard_cancel(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        chat, _, run_id = payload.partition("/")
        if self.on_cancel is not None:
            try:
                self.on_cancel(UUID(chat), run_id)
            except ValueError:
                logger.warning("ignoring malformed cancel request %r", payload)

    # --- cancel -------------------------------------------------------------------------

    async def request_cancel(self, thread_id: str, run_id: str, *, fresh_within: float) -> bool:
        """Ask whichever process runs ``(thread_id, run_id)`` to cancel it.

        True when the runs table records it running with a heartbeat at most
        ``fresh_within`` seconds old.
        """
        since = utcnow() - timedelta(seconds=fresh_within)
        async with self._lease() as conn:
            rows = await conn.fetch(LIVE_RUNS, thread_id, run_id, since)
            for row in rows:
                await conn.execute(NOTIFY, CANCEL_CHANNEL, _key(row["chat_uuid"], run_id))
        return bool(rows)

    # --- reading ------------------------------------------------------------------------

    async def find_chat(self, thread_id: str, run_id: str) -> UUID | None:
        """The chat of the newest recorded run ``(thread_id, run_id)``, if any."""
        async with self._lease() as conn:
            chat: UUID | None = await conn.fetchval(RUNS_BY_THREAD, thread_id, run_id)
        return chat

    async def follow(
        self, chat_uuid: UUID, run_id: str, after: int = 0
    ) -> AsyncGenerator[tuple[int, BaseEvent], None]:
        """Yield ``(event_id, event)`` of the run after ``after``, live, up to its end.

        Ends after the run's ``RUN_FINISHED``/``RUN_ERROR``. If the run is no longer
        recorded as running (finished, or swept after its process died) and no event
        comes for ``end_grace`` seconds, ends with a synthesized ``RUN_ERROR``. Raises
        :class:`EventsDroppedError` when events it needs were pruned.
        """
        key = _key(chat_uuid, run_id)
        waiter = asyncio.Event()
        self._waiters.setdefault(key, set()).add(waiter)
        try:
            next_id = after + 1
            loop = asyncio.get_running_loop()
            stopped_at: float | None = None  # when the run was first seen not running
            while True:
                # Cleared before reading, so a notify racing the read is not lost.
                waiter.clear()
                rows = await self._read(chat_uuid, run_id, next_id - 1)
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
                if await self._status(chat_uuid, run_id) == "running":
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
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[key]

    async def _read(self, chat_uuid: UUID, run_id: str, after: int) -> list[tuple[int, BaseEvent]]:
        async with self._lease() as conn:
            rows = await conn.fetch(READ_EVENTS, chat_uuid, run_id, after)
        return [(row[0], _EVENT.validate_json(row[1])) for row in rows]

    async def _status(self, chat_uuid: UUID, run_id: str) -> str | None:
        async with self._lease() as conn:
            status: str | None = await conn.fetchval(RUN_STATUS, chat_uuid, run_id)
        return status

    # --- writing ------------------------------------------------------------------------

    async def append(self, chat_uuid: UUID, run_id: str, batch: list[tuple[int, str]]) -> None:
        """Append one batch of ``(event_id, event JSON)`` and wake the run's readers."""
        async with self._lease() as conn:
            await conn.execute(
                INSERT_EVENTS,
                chat_uuid,
                run_id,
                [event_id for event_id, _ in batch],
                [event for _, event in batch],
                utcnow(),
                EVENTS_CHANNEL,
            )

    async def prune(self, retention: float) -> int:
        """Delete the events of runs not running, older than ``retention`` seconds."""
        older_than = utcnow() - timedelta(seconds=retention)
        async with self._lease() as conn:
            status: str = await conn.execute(PRUNE_EVENTS, older_than)
        return int(status.rsplit(" ", 1)[-1])


class EventPump:
    """Copy one run's in-process event log to ``run_events`` in batches."""

    def __init__(
        self,
        relay: EventRelay,
        handle: RunHandle[Any],
        *,
        flush_interval: float = 0.05,
        batch_size: int = 256,
    ) -> None:
        self.relay = relay
        self.handle = handle
        self.flush_interval = flush_interval
        self.batch_size = batch_size
        self.batches = 0
        """How many INSERT statements this pump ran."""
        self.written_id = 0
        """Id of the newest event known to be in ``run_events``."""
        self.stopped = False
        self._progress = asyncio.Event()  # replaced after each set, so each wait sees one
        self._pending: list[tuple[int, str]] = []
        self._wake = asyncio.Event()  # something is pending, or the run ended
        self._full = asyncio.Event()  # a whole batch is pending, or the run ended
        self._reading_done = False
        self._task = asyncio.gather(self._read(), self._write())
        self._task.add_done_callback(self._stopped)

    def done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the pump has stopped."""
        self._task.add_done_callback(lambda _: callback())

    async def wait(self) -> None:
        """Wait until every event of the finished run was written (or given up on)."""
        await asyncio.wait([self._task])

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

    def _signal_progress(self) -> None:
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    def _stopped(self, task: asyncio.Future[Any]) -> None:
        self.stopped = True
        self._signal_progress()
        if not task.cancelled() and task.exception() is not None:
            logger.warning(
                "relaying run %s/%s failed",
                self.handle.thread_id,
                self.handle.run_id,
                exc_info=task.exception(),
            )

    async def _read(self) -> None:
        try:
            async for event_id, event in self.handle.numbered_events():
                pending = self._pending
                pending.append((event_id, event.model_dump_json(by_alias=True)))
                if len(pending) == 1:
                    self._wake.set()
                if len(pending) >= self.batch_size:
                    self._full.set()
        finally:
            self._reading_done = True
            self._wake.set()
            self._full.set()

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._reading_done and len(self._pending) < self.batch_size:
                # The first pending event waits at most one interval for company.
                try:
                    await asyncio.wait_for(self._full.wait(), self.flush_interval)
                except TimeoutError:
                    pass
            self._full.clear()
            done = self._reading_done
            await self._flush()
            if done:
                return
            if self._pending:
                self._wake.set()  # not written (no chat yet, or more came meanwhile)

    async def _flush(self) -> None:
        chat = getattr(self.handle.agent, "chat", None)
        chat_uuid = getattr(chat, "chat_uuid", None)
        if not self._pending or not isinstance(chat_uuid, UUID):
            return  # no chat yet: the events wait for the next flush
        batch, self._pending = self._pending, []
        await self.relay.append(chat_uuid, self.handle.run_id, batch)
        self.batches += 1
        self.written_id = batch[-1][0]
        self._signal_progress()
