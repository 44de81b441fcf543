"""The PostgreSQL store's connections: its pool, the few it keeps idle, a task's transaction.

Every call outside a ``transaction()`` leases a connection for its statements and gives
it back; a transaction holds one for its whole block, and every call the same task makes
inside the block joins it. A store that made its own pool keeps the connections it
leased, idle, between calls instead of handing each back (asyncpg's release costs a
shielded task and several event-loop turns, about as much as a small statement); they go
back to the pool on error, while another call waits for the pool, and on ``close()``. A
pool the app passed in is used plainly, so the store never sits on connections the app
may need. Errors that mean the database is away become
:class:`~threadstore.errors.StoreUnavailableError`, and the connection is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any

import asyncpg

from threadstore.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    MigrationError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
)
from threadstore.store._lifecycle import ERASED_USER_DETAIL, ERASED_USER_STATE
from threadstore.store._sql_driver import SQLDriver
from threadstore.store._timeouts import caused_by, unavailable

if TYPE_CHECKING:
    from threadstore.store.postgres import PostgresStore

__all__ = ["LOST", "Connections", "Lease", "PostgresDriver", "iso_times", "translate"]

LOST: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, and TimeoutError: a statement past ``command_timeout``
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,  # shutting down, starting up, cancelled
    asyncpg.exceptions.InsufficientResourcesError,  # too many connections, disk full
    StoreUnavailableError,
)
"""Errors that mean the database is away, not that the call was wrong."""

_UTC_ZONES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Zulu"})

_SESSION = {"application_name": "threadstore", "DateStyle": "ISO", "TimeZone": "UTC"}
"""Session settings of the store's own pool: ISO 8601 timestamps in UTC, which reads parse
faster than asyncpg decodes binary ones (see ``_postgres_sql._select``)."""

_Held = tuple[asyncpg.Connection, "asyncio.Task[Any] | None"]


def iso_times(conn: asyncpg.Connection) -> bool:
    """Whether this session prints timestamps as ISO 8601 text in UTC, which reads can parse."""
    settings = conn.get_settings()
    return bool(
        getattr(settings, "DateStyle", "").startswith("ISO")
        and getattr(settings, "TimeZone", "") in _UTC_ZONES
    )


def translate(exc: asyncpg.PostgresError) -> Exception:
    """Map a server error to threadstore's error tree."""
    if isinstance(exc, asyncpg.UndefinedTableError):
        return MigrationError(f"{exc}: the schema is missing; run `threadstore migrate` or setup()")
    if exc.sqlstate == ERASED_USER_STATE:
        return ConflictError(ERASED_USER_DETAIL)
    if isinstance(exc, asyncpg.ForeignKeyViolationError):
        return NotFoundError(f"a referenced chat or message does not exist ({exc})")
    if isinstance(exc, asyncpg.UniqueViolationError):
        return ConflictError(f"a record with this id already exists ({exc})")
    if isinstance(exc, asyncpg.DeadlockDetectedError | asyncpg.SerializationError):
        return ConflictError(f"a concurrent transaction conflicted; retry ({exc})")
    if isinstance(exc, asyncpg.InFailedSQLTransactionError):
        return StoreError(f"an earlier statement failed, so the transaction must roll back ({exc})")
    if isinstance(
        exc, asyncpg.CharacterNotInRepertoireError | asyncpg.UntranslatableCharacterError
    ):
        return InvalidInputError(f"PostgreSQL cannot store this text: {exc}")
    translated: Exception = exc
    return translated


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Pool reset hook: skip asyncpg's reset query on release.

    The store never changes session state (no SET, LISTEN, cursors or session
    advisory locks), and asyncpg still rolls back an open transaction itself, so
    the default ``RESET ALL`` round trip on every release would buy nothing.
    """


async def _discard(pool: asyncpg.Pool, conn: asyncpg.Connection) -> None:
    """Give back a connection that lost its server; the pool opens a new one when needed.

    Closed at once: a stalled connection would hold its release until the cancel of
    its statement got through.
    """
    with contextlib.suppress(asyncpg.InterfaceError):  # the pool may have taken it back
        conn.terminate()
        await pool.release(conn)


class Connections:
    """One store's way to its database (module docstring)."""

    def __init__(
        self,
        url: str,
        timeout: float,
        *,
        pool: asyncpg.Pool | None = None,
        min_size: int = 1,
        max_size: int = 10,
    ) -> None:
        self.url, self.timeout = url, timeout
        self._pool = pool
        self.owns_pool = pool is None
        self._min_size, self._max_size = min_size, max_size
        self._idle: list[asyncpg.Connection] = []
        self._waiting = 0
        self._held: ContextVar[_Held | None] = ContextVar(
            f"threadstore_pg_{id(self)}", default=None
        )

    @property
    def pool(self) -> asyncpg.Pool:
        """The asyncpg pool (its own, or the one the app passed in)."""
        if self._pool is None:
            raise ConfigurationError("the store is not connected: use open_store() or connect()")
        return self._pool

    async def connect(self) -> None:
        """Create the pool (a no-op when the app passed its own)."""
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=self._min_size,
                max_size=self._max_size,
                reset=_keep_session,
                server_settings=_SESSION,
                timeout=self.timeout,  # to connect
                command_timeout=self.timeout,
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise ConfigurationError(f"cannot connect to {self.url!r}: {exc}") from exc

    async def close(self) -> None:
        """Give back the idle connections; close the pool if it is this store's own."""
        pool, self._pool = self._pool, None
        idle, self._idle = self._idle, []
        if pool is None:
            return
        for conn in idle:
            await pool.release(conn)
        if self.owns_pool:
            await pool.close()

    def in_transaction(self) -> bool:
        """Whether the current task is inside a ``transaction()`` of this store."""
        return self.held() is not None

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Hold one connection in a transaction for the block; the task's calls join it."""
        if self.in_transaction():
            yield
            return
        async with self.lease(join=False) as conn, conn.transaction():
            token = self._held.set((conn, asyncio.current_task()))
            try:
                yield
            finally:
                self._held.reset(token)

    def lease(self, *, join: bool) -> Lease:
        """``async with`` a connection: with ``join``, the task's transaction's if it holds one."""
        return Lease(self, join=join)

    def held(self) -> asyncpg.Connection | None:
        """The current task's transaction connection, if it holds one."""
        held = self._held.get()
        return held[0] if held is not None and held[1] is asyncio.current_task() else None

    async def checkout(self, pool: asyncpg.Pool) -> asyncpg.Connection:
        while self._idle:
            conn = self._idle.pop()
            try:
                if not conn.is_closed():
                    return conn
            except asyncpg.InterfaceError:
                continue  # its socket closed and the pool already took it back
            await pool.release(conn)
        self._waiting += 1
        try:
            conn = await pool.acquire(timeout=self.timeout)
        finally:
            self._waiting -= 1
        return conn

    async def give_back(self, pool: asyncpg.Pool, conn: asyncpg.Connection, clean: bool) -> None:
        # Keep it only while no call of this store waits on the pool: a kept connection
        # is one the pool cannot hand to anyone. After an error the pool resets it, or
        # replaces it if it broke.
        if (
            clean
            and self.owns_pool
            and pool is self._pool
            and not self._waiting
            and not conn.is_in_transaction()
        ):
            self._idle.append(conn)
        else:
            await pool.release(conn)


class Lease:
    """``async with`` a connection of a store (:meth:`Connections.lease`).

    A class rather than a generator-based context manager: every store call enters one.
    """

    __slots__ = ("_conn", "_connections", "_join", "_pool")

    def __init__(self, connections: Connections, *, join: bool) -> None:
        self._connections = connections
        self._join = join
        self._pool: asyncpg.Pool | None = None

    async def __aenter__(self) -> asyncpg.Connection:
        connections = self._connections
        if self._join and (held := connections.held()) is not None:
            return held
        pool = connections.pool
        try:
            self._conn: asyncpg.Connection = await connections.checkout(pool)
        except LOST as exc:
            raise unavailable(connections.timeout, exc) from exc
        self._pool = pool
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lost = exc is not None and caused_by(exc, LOST)
        if self._pool is not None:
            if lost:
                await _discard(self._pool, self._conn)
            else:
                await self._connections.give_back(self._pool, self._conn, clean=exc_type is None)
        if lost and not isinstance(exc, StoreUnavailableError):
            assert exc is not None
            raise unavailable(self._connections.timeout, exc) from exc


class PostgresDriver(SQLDriver):
    """Statements on the store's connections (each borrows one, or joins the task's
    transaction); asyncpg takes and gives uuids and times as they are."""

    store: PostgresStore

    async def _write(
        self, sql: str, params: Sequence[Any], *, missing: str | None = None
    ) -> list[Any]:
        rows = await self.store._fetch(sql, *params)
        if missing is not None and not rows:
            raise NotFoundError(missing)
        return rows

    async def _read(self, sql: str, params: Sequence[Any], small: bool = False) -> list[Any]:
        return await self.store._fetch(sql, *params)
