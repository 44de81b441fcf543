"""The PostgreSQL run-events log: ``run_events`` rows plus ``LISTEN``/``NOTIFY``.

Implements :class:`~threadstore.store._run_events.RunEventLog` for
:class:`~threadstore.store.postgres.PostgresStore`; the table's schema is migration 2
in :mod:`threadstore.store._postgres_schema`. Two channels carry notifications:

- :data:`EVENTS_CHANNEL`: events of a run were appended; its readers wake and read.
- :data:`CANCEL_CHANNEL`: some process asked to cancel a run; its owner cancels it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import asyncpg

from threadstore.errors import StoreUnavailableError
from threadstore.models import utcnow
from threadstore.store._run_events import EventBatch, RunEventListener, RunLog, RunStanding

if TYPE_CHECKING:
    from threadstore.store.postgres import PostgresStore

__all__ = ["CANCEL_CHANNEL", "EVENTS_CHANNEL", "PostgresRunEvents"]

CANCEL_CHANNEL = "threadstore_cancel"
"""Channel on which cancel requests travel between processes."""

EVENTS_CHANNEL = "threadstore_run_events"
"""Channel that wakes readers when a run's events were appended."""

_CONNECT_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)

# Events of any number of runs in one statement, then one NOTIFY per run. The chat
# must still exist: a run whose chat was deleted leaves nothing behind.
INSERT_EVENTS = (
    "WITH batch AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::integer[], $4::text[])"
    " AS e (chat_uuid, run_id, event_id, event)),"
    " ins AS (INSERT INTO run_events (chat_uuid, run_id, event_id, event, created_at)"
    " SELECT b.chat_uuid, b.run_id, b.event_id, b.event::json, $5 FROM batch b"
    " WHERE EXISTS (SELECT 1 FROM chats c WHERE c.chat_uuid = b.chat_uuid)"
    " ON CONFLICT DO NOTHING RETURNING 1)"
    " SELECT pg_notify($6, k.chat_uuid::text || '/' || k.run_id), (SELECT count(*) FROM ins)"
    " FROM (SELECT DISTINCT chat_uuid, run_id FROM batch) k"
)
READ_EVENTS = (
    "SELECT event_id, event::text FROM run_events"
    " WHERE chat_uuid = $1 AND run_id = $2 AND event_id >= $3 ORDER BY event_id"
)
# What a reader must know before following a run: is it recorded, how it stands, and
# which of its events are stored (the first, and the last with its type).
RUN_LOG = (
    "SELECT r.status, r.updated_at,"
    " (SELECT min(event_id) FROM run_events f WHERE f.chat_uuid = r.chat_uuid"
    "  AND f.run_id = r.run_id) AS first_id, l.event_id AS last_id, l.event ->> 'type' AS last_type"
    " FROM runs r LEFT JOIN LATERAL (SELECT event_id, event FROM run_events e"
    "  WHERE e.chat_uuid = r.chat_uuid AND e.run_id = r.run_id"
    "  ORDER BY event_id DESC LIMIT 1) l ON true"
    " WHERE r.chat_uuid = $1 AND r.run_id = $2"
)
# One statement: the notify goes out only if the run is recorded running and beating.
CANCEL_IF_LIVE = (
    "SELECT pg_notify($4, chat_uuid::text || '/' || run_id) FROM runs"
    " WHERE chat_uuid = $1 AND run_id = $2 AND status = 'running' AND heartbeat_at >= $3"
)
RUN_STANDING = (
    "SELECT status, heartbeat_at >= $3 AS beating FROM runs WHERE chat_uuid = $1 AND run_id = $2"
)
LIVE_RUNS_OF_CHAT = (
    "SELECT run_id FROM runs WHERE chat_uuid = $1 AND status = 'running' AND heartbeat_at >= $2"
    " ORDER BY created_at DESC"
)
# A live run of this user's thread with these ids, owned by another process.
LIVE_ELSEWHERE = (
    "SELECT r.owner FROM runs r JOIN chats c ON c.chat_uuid = r.chat_uuid"
    " WHERE c.user_uuid = $1 AND c.thread_id = $2 AND r.run_id = $3 AND r.status = 'running'"
    " AND r.heartbeat_at >= $4 AND r.owner IS DISTINCT FROM $5"
)
RUN_STATUS = "SELECT status FROM runs WHERE chat_uuid = $1 AND run_id = $2"
# Rows of runs no longer running (or never recorded) once older than the retention.
PRUNE_EVENTS = (
    "DELETE FROM run_events e WHERE e.created_at < $1 AND NOT EXISTS"
    " (SELECT 1 FROM runs r WHERE r.chat_uuid = e.chat_uuid AND r.run_id = e.run_id"
    "  AND r.status = 'running')"
)


class _Listener:
    """One listening connection, lent by the store for as long as it listens."""

    def __init__(
        self,
        lease: AbstractAsyncContextManager[asyncpg.Connection],
        on_events: Callable[[str], None],
        on_cancel: Callable[[str], None],
        on_lost: Callable[[RunEventListener], None],
    ) -> None:
        self._lease = lease
        self._conn: asyncpg.Connection | None = None
        self._on_events, self._on_cancel, self._on_lost = on_events, on_cancel, on_lost

    async def start(self) -> None:
        conn: asyncpg.Connection = await self._lease.__aenter__()
        try:
            await conn.add_listener(EVENTS_CHANNEL, self._heard)
            await conn.add_listener(CANCEL_CHANNEL, self._heard)
        except BaseException as exc:
            await self._lease.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        conn.add_termination_listener(self._terminated)
        self._conn = conn

    @property
    def server_pid(self) -> int | None:
        conn = self._conn
        try:
            return None if conn is None else conn.get_server_pid()
        except asyncpg.InterfaceError:
            return None  # lost a moment ago; the termination callback is about to run

    def _heard(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        (self._on_events if channel == EVENTS_CHANNEL else self._on_cancel)(payload)

    def _terminated(self, conn: Any) -> None:
        if conn is self._conn:
            self._on_lost(self)

    async def close(self, *, lost: bool = False) -> None:
        conn, self._conn = self._conn, None
        broken: BaseException | None = (
            ConnectionError("the LISTEN connection was lost") if lost else None
        )
        try:
            if conn is not None and not lost:
                conn.remove_termination_listener(self._terminated)
                # The store's pool skips the session reset on release, so unlisten here.
                await conn.remove_listener(EVENTS_CHANNEL, self._heard)
                await conn.remove_listener(CANCEL_CHANNEL, self._heard)
        except _CONNECT_ERRORS as exc:
            broken = exc  # lost just now: given back as failed, the pool replaces it
        finally:
            if conn is not None:
                # Given back as failed when it broke, so the pool replaces it; the lease
                # then reports the store unavailable, which a lost listener knows.
                with contextlib.suppress(StoreUnavailableError):
                    await self._lease.__aexit__(type(broken) if broken else None, broken, None)


class PostgresRunEvents:
    """:class:`~threadstore.store._run_events.RunEventLog` on a :class:`PostgresStore`."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def _call(self, method: str, query: str, *args: Any) -> Any:
        """``conn.<method>(query, *args)`` on a connection borrowed for it (never the
        task's transaction: the log is written and read beside the store's writes)."""
        async with self.store.borrow() as conn:
            return await getattr(conn, method)(query, *args)

    async def listen(
        self,
        on_events: Callable[[str], None],
        on_cancel: Callable[[str], None],
        on_lost: Callable[[RunEventListener], None],
    ) -> RunEventListener:
        # Through the store's own lending, never ``pool.acquire()``: a store that owns
        # its pool keeps idle connections until one of its own calls waits, so a
        # direct acquire could wait forever.
        listener = _Listener(self.store.borrow(), on_events, on_cancel, on_lost)
        await listener.start()
        return listener

    async def append(self, batches: Sequence[EventBatch]) -> None:
        rows = [(chat, run, n, event) for chat, run, batch in batches for n, event in batch]
        columns = [[row[i] for row in rows] for i in range(4)]  # an array each (unnest)
        await self._call("execute", INSERT_EVENTS, *columns, utcnow(), EVENTS_CHANNEL)

    async def read(self, chat_uuid: UUID, run_id: str, first: int) -> list[tuple[int, str]]:
        rows = await self._call("fetch", READ_EVENTS, chat_uuid, run_id, first)
        return [(row[0], row[1]) for row in rows]

    async def prune(self, older_than: datetime) -> int:
        status = await self._call("execute", PRUNE_EVENTS, older_than)
        return int(status.rsplit(" ", 1)[-1])

    async def run_log(self, chat_uuid: UUID, run_id: str) -> RunLog | None:
        row = await self._call("fetchrow", RUN_LOG, chat_uuid, run_id)
        return None if row is None else RunLog(*row)  # its columns are RunLog's fields

    async def run_status(self, chat_uuid: UUID, run_id: str) -> str | None:
        status: str | None = await self._call("fetchval", RUN_STATUS, chat_uuid, run_id)
        return status

    async def run_standing(
        self, chat_uuid: UUID, run_id: str, beating_since: datetime
    ) -> RunStanding | None:
        row = await self._call("fetchrow", RUN_STANDING, chat_uuid, run_id, beating_since)
        return None if row is None else RunStanding(row["status"], bool(row["beating"]))

    async def live_runs(self, chat_uuid: UUID, beating_since: datetime) -> list[str]:
        rows = await self._call("fetch", LIVE_RUNS_OF_CHAT, chat_uuid, beating_since)
        return [row[0] for row in rows]

    async def live_elsewhere(
        self, user_uuid: UUID, thread_id: str, run_id: str, beating_since: datetime, owner: str
    ) -> str | None:
        args = (user_uuid, thread_id, run_id, beating_since, owner)
        found: str | None = await self._call("fetchval", LIVE_ELSEWHERE, *args)
        return found

    async def notify_cancel(self, chat_uuid: UUID, run_id: str, beating_since: datetime) -> bool:
        args = (chat_uuid, run_id, beating_since, CANCEL_CHANNEL)
        return bool(await self._call("fetch", CANCEL_IF_LIVE, *args))
