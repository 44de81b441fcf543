"""How a SQLite store runs its statements: one executor, its policy chosen when the store opens.

The writer connection lives on the store's database thread, in WAL mode with foreign
keys on. A transaction holds the executor's writer lock for its whole body, so no other
task's statement can land in the middle of it. Writes that wait for the writer are
committed together, each atomic on its own, the flushes a storage agent runs in the
background (``apply_writes``) after every other write (``_sqlite_writes.py``), so a new
run's set-up never waits for the flushes of the runs already streaming. Several
processes may share one file: SQLite serializes their writers and ``busy_timeout``
makes them wait instead of failing, for the store's ``timeout`` (``_timeouts.py``): a
write that waits longer for another process's lock, or for this store's writer, raises
:class:`~threadstore.errors.StoreUnavailableError`, and so do the writes queued behind it.

Reads never take the writer lock: WAL lets readers run beside the writer, so a query
outside the caller's own transaction runs on a reader connection (its own thread), or
inline when it reads one record, and sees what was committed when it started. Inside a
transaction a read goes to the transaction's connection.

The policy for small calls (``inline``, on by default): a round trip to the database
thread costs more than a small write itself (on a 2-core VM 100 to 180 µs against about
60), so a write of at most :data:`INLINE_MAX_STATEMENTS` statements and
:data:`INLINE_MAX_BYTES` of text runs on the event loop's thread on a second connection
when no other task holds or waits for the writer lock (or, a foreground write, when only
flushes do); so does a lookup of one record when no task holds or waits for the lock. (An
inline call lets go of the interpreter's lock inside SQLite and takes it back after:
beside a thread busy with a long write each take-back may wait a whole switch interval,
so the loop leaves its calls to the threads then.) That connection never waits:
``busy_timeout`` is 0 on it, so a write that meets a lock (another process's, or a flush
the thread is running) goes to the thread and waits there instead. It never checkpoints
during a commit: every :data:`CHECKPOINT_EVERY_WRITES` inline writes a checkpoint runs on
the thread, holding the writer lock as SQLite's automatic checkpoint would. Each inline
call yields to the event loop once before returning, so a loop of them cannot starve
other tasks. ``inline=False`` (or ``?inline=off`` in the store's URL) sends every
statement to a thread (reads to the reader's): the reference the inline policy is tested
against.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import date, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qs
from uuid import UUID

from threadstore import models
from threadstore.errors import (
    ConfigurationError,
    ConflictError,
    MigrationError,
    NotFoundError,
    StoreUnavailableError,
)
from threadstore.store._lifecycle import ERASED_USER, ERASED_USER_DETAIL
from threadstore.store._records import WriterLock
from threadstore.store._sql_driver import SQLDriver
from threadstore.store._sqlite_schema import MIGRATIONS
from threadstore.store._sqlite_sql import ts
from threadstore.store._sqlite_thread import DatabaseThread
from threadstore.store._sqlite_writes import Statement, WriteQueue, busy, run_statements
from threadstore.store._timeouts import DEFAULT_TIMEOUT

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CHECKPOINT_EVERY_WRITES",
    "INLINE_MAX_BYTES",
    "INLINE_MAX_STATEMENTS",
    "SQLiteDriver",
    "SQLiteExecutor",
    "sqlite_options",
    "sqlite_path",
    "translate_error",
]

logger = logging.getLogger("threadstore.store.sqlite")

BUSY_TIMEOUT_MS = int(DEFAULT_TIMEOUT * 1000)
"""How long a writer waits for another process's write lock before failing, at the
default store timeout (a store's own is its ``timeout``)."""

INLINE_MAX_STATEMENTS = 4
"""The most statements a write may have and still run inline on the event loop."""

INLINE_MAX_BYTES = 64 * 1024
"""The most characters or bytes of text and blob parameters an inline write may carry."""

CHECKPOINT_EVERY_WRITES = 100
"""Inline writes between two WAL checkpoints (about 700 pages of a typical append)."""

_T = TypeVar("_T")


def _fits_inline(statements: Sequence[Statement]) -> bool:
    """Whether a write is small enough to run on the event loop's thread."""
    if len(statements) > INLINE_MAX_STATEMENTS:
        return False
    size = 0
    for statement in statements:
        if not statement.inline:
            return False
        for param in statement.params:
            if param.__class__ is str or param.__class__ is bytes:
                size += len(param)
    return size <= INLINE_MAX_BYTES


def sqlite_path(url: str) -> str:
    """Return the filesystem path (or ``:memory:``) named by a ``sqlite://`` URL."""
    prefix = "sqlite://"
    if not url.startswith(prefix):
        raise ConfigurationError(f"not a sqlite URL: {url!r}")
    rest = url[len(prefix) :].partition("?")[0]
    if rest in (":memory:", "/:memory:"):
        return ":memory:"
    if not rest.startswith("/") or rest == "/":
        raise ConfigurationError(
            f"invalid sqlite URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
        )
    return rest[1:]


_URL_OPTIONS = ("inline",)
_TRUE, _FALSE = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


def sqlite_options(url: str) -> dict[str, bool]:
    """The options in a ``sqlite://`` URL's query (``?inline=off``), checked."""
    query = url.partition("?")[2]
    options: dict[str, bool] = {}
    for name, values in parse_qs(query, keep_blank_values=True).items():
        if name not in _URL_OPTIONS:
            raise ConfigurationError(
                f"unknown option {name!r} in sqlite URL {url!r}; known: {', '.join(_URL_OPTIONS)}"
            )
        value = values[-1].lower()
        if value not in _TRUE + _FALSE:
            raise ConfigurationError(f"option {name}={values[-1]!r} in {url!r}: use on or off")
        options[name] = value in _TRUE
    return options


class SQLiteExecutor:
    """The connections, threads, writer lock and write queue of one SQLite store."""

    def __init__(self, path: str, *, inline: bool, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout
        """Seconds a call waits for another process's write lock, or for this store's
        writer or threads, before :class:`StoreUnavailableError`."""
        self.inline = inline and path != ":memory:"
        """Whether small calls run on the event loop's thread (see the module docstring).

        Always off for ``:memory:``: a second connection would open another, empty database.
        """
        self.thread = DatabaseThread(timeout=timeout)
        """The database thread and its writer connection."""
        self.reader = DatabaseThread("threadstore-sqlite-read", timeout=timeout)
        """The reader thread and its connection (not opened for ``:memory:``)."""
        self.lock = WriterLock(timeout)
        """The lock writes and transactions queue in."""
        self.write_queue = WriteQueue(self.thread, self.lock)
        """The writes waiting for the writer, committed together."""
        self._inline: sqlite3.Connection | None = None
        self._inline_thread = 0
        self._inline_changes = 0
        self._writes_since_checkpoint = 0
        self._checkpointing: asyncio.Task[None] | None = None
        self.checkpoint_every_writes = CHECKPOINT_EVERY_WRITES
        """Inline writes between two checkpoints; 0 turns these checkpoints off."""
        self.checkpoints = 0
        """Checkpoints run for inline writes so far."""

    @property
    def held(self) -> bool:
        """Whether the current task is inside a transaction of this executor."""
        return self.lock.held

    async def open(self) -> None:
        """Open the database file and set the pragmas every connection needs."""
        if self.thread.is_open:
            return
        busy_ms = int(self.timeout * 1000)
        await self.thread.open(self.path, functools.partial(_set_pragmas, busy_ms=busy_ms))
        if self.path != ":memory:":  # another connection would open another database
            try:
                await self.reader.open(
                    self.path, functools.partial(_set_reader_pragmas, busy_ms=busy_ms)
                )
            except BaseException:
                await self.thread.close()
                raise
        if self.inline:
            self._open_inline()

    def _open_inline(self) -> None:
        """Open the event loop thread's connection (after the thread's, which set WAL)."""
        inline = sqlite3.connect(self.path, isolation_level=None)
        try:
            inline.execute("PRAGMA synchronous = NORMAL")
            inline.execute("PRAGMA foreign_keys = ON")
            inline.execute("PRAGMA busy_timeout = 0")  # a busy write goes to the thread
            inline.execute("PRAGMA wal_autocheckpoint = 0")  # see _after_inline_write
        except BaseException:
            inline.close()
            raise
        self._inline = inline
        self._inline_thread = threading.get_ident()
        self._inline_changes = inline.total_changes

    async def close(self) -> None:
        """Wait for the queued writes and any checkpoint, then close every connection."""
        await self.write_queue.wait()
        if self._checkpointing is not None:
            await asyncio.gather(self._checkpointing, return_exceptions=True)
        if self._inline is not None:
            inline, self._inline = self._inline, None
            inline.close()
        await self.reader.close()
        await self.thread.close()

    async def set_trace_callback(self, callback: Callable[[str], object] | None) -> None:
        """Call ``callback`` with the text of every statement the store runs (None: stop).

        Covers both connections; SQLite also reports each trigger body it starts.
        """
        if self._inline is not None:
            self._inline.set_trace_callback(callback)
        if self.reader.is_open:
            await self.reader.call(sqlite3.Connection.set_trace_callback, callback)
        await self.thread.call(sqlite3.Connection.set_trace_callback, callback)

    async def migrate(self) -> None:
        """Apply pending migrations in order, each recorded in ``threadstore_migrations``."""
        async with self.lock.hold():
            await self._call(_migrate)

    async def applied_version(self) -> int:
        """Return the highest applied migration (0 for an empty database)."""
        async with self.lock.hold():
            return await self._call(_applied_version)

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """Hold the writer lock and one ``BEGIN IMMEDIATE`` transaction for the block."""
        return self.lock.transaction(
            functools.partial(self._call, _fetch_all, "BEGIN IMMEDIATE"),
            functools.partial(self._call, _commit),
            functools.partial(self._call, _fetch_all, "ROLLBACK"),
        )

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(connection, *args)`` on the database thread, its errors translated."""
        try:
            return await self.thread.call(fn, *args)
        except sqlite3.Error as exc:
            raise self._writer_error(exc) from exc

    def _writer_error(self, exc: sqlite3.Error) -> Exception:
        """``exc`` of the writer's connection, translated; past the busy timeout, the
        writes waiting behind this one give up too (``WriterLock.give_up_waiting``)."""
        error = translate_error(exc, self.timeout)
        if isinstance(error, StoreUnavailableError):
            self.lock.give_up_waiting()
        return error

    # --- statements ----------------------------------------------------------------------

    async def fetch(self, sql: str, params: Sequence[Any], *, small: bool = False) -> list[Any]:
        """Run one statement and return its rows (after any open transaction of another task).

        ``small``: the statement touches at most a few rows, so it may run inline.
        """
        if small and (rows := await self._run_small((Statement(sql, params),))) is not None:
            return rows[0]
        if self.lock.held:
            return await self._fetch_now(sql, params)
        async with self.lock.turn():
            return await self._fetch_now(sql, params)

    async def read(self, sql: str, params: Sequence[Any], *, small: bool = False) -> list[Any]:
        """Run one query without waiting for the writer lock; return its rows.

        Inside this task's transaction it runs there (it must see the transaction's
        writes). Otherwise on the reader connection, or inline when ``small`` (one
        record) and the writer is idle: WAL readers see the last commit and never block
        the writer.
        """
        if self.lock.held or not self.reader.is_open:
            return await self.fetch(sql, params, small=small)
        if small and self._inline_ready():
            rows = self._inline_read(sql, params)
            if rows is not None:
                await asyncio.sleep(0)  # as a trip to the thread would, let others run
                return rows
        try:
            return await self.reader.call(_fetch_all, sql, params)
        except sqlite3.Error as exc:
            raise translate_error(exc, self.timeout) from exc

    def _inline_read(self, sql: str, params: Sequence[Any]) -> list[Any] | None:
        """One query on the inline connection; None when SQLite answered busy."""
        inline = self._inline
        assert inline is not None
        try:
            return inline.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            if busy(exc):
                return None
            raise translate_error(exc) from exc

    async def _fetch_now(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return await self._call(_fetch_all, sql, params)

    async def run(self, *statements: Statement, background: bool = False) -> list[list[Any]]:
        """Run write statements in one hop to the database thread; return each one's rows.

        Several statements form one transaction (or join the caller's). Handing the
        thread one function for all of them, rather than a call per statement, is what
        makes a write, or a whole batch of them, cost one thread round trip.
        ``background``: a flush nobody waits for; it lets every other waiting write go first.
        """
        if (results := await self._run_small(statements, background)) is not None:
            return results
        try:
            if self.lock.held:  # inside this task's transaction
                return await self.thread.call(run_statements, statements, False)
            return await self.write_queue.run(statements, background=background)
        except sqlite3.Error as exc:
            raise self._writer_error(exc) from exc

    async def _run_small(
        self, statements: Sequence[Statement], background: bool = False
    ) -> list[list[Any]] | None:
        """Run ``statements`` inline if they may (module docstring); None: use the thread.

        A foreground write may also run while only flushes hold or wait for the lock:
        it would go before them anyway, and SQLite's own lock keeps it out of a flush
        the thread is running (it then answers busy, and the write queues).
        """
        if not (self._inline_ready(overtake=not background) and _fits_inline(statements)):
            return None
        results = self._inline_run(statements)
        if results is not None:
            await asyncio.sleep(0)  # as a trip to the thread would, let others run
        return results

    def _inline_ready(self, *, overtake: bool = False) -> bool:
        """Whether a small call may run inline now (module docstring: "Small calls").

        ``overtake``: a foreground write, which may go ahead of flushes.
        """
        lock, writes = self.lock, self.write_queue
        return (
            self._inline is not None
            # Nobody's transaction is open, nobody queues ahead (but flushes).
            and (
                (lock.idle and writes.empty)
                or (overtake and not lock.held and lock.background_only and writes.background_only)
            )
            and threading.get_ident() == self._inline_thread
        )

    def _inline_run(self, statements: Sequence[Statement]) -> list[list[Any]] | None:
        """Run ``statements`` on the inline connection; None if the file's lock was busy.

        Several statements share one ``BEGIN IMMEDIATE`` transaction, so a busy lock
        shows before anything is written and the thread can run them all again.
        """
        inline = self._inline
        assert inline is not None
        try:
            results = run_statements(inline, statements, len(statements) > 1)
        except sqlite3.Error as exc:
            if busy(exc):
                return None
            raise translate_error(exc) from exc
        finally:
            if inline.total_changes != self._inline_changes:
                self._inline_changes = inline.total_changes
                self._after_inline_write()
        return results

    def _after_inline_write(self) -> None:
        """Start a checkpoint every ``checkpoint_every_writes`` inline writes.

        The inline connection never checkpoints itself (that would write the database
        file and sync it on the event loop); without this its WAL would only grow.
        """
        self._writes_since_checkpoint += 1
        every = self.checkpoint_every_writes
        if not every or self._writes_since_checkpoint < every or self._checkpointing:
            return
        self._writes_since_checkpoint = 0
        self._checkpointing = asyncio.get_running_loop().create_task(self._run_checkpoint())

    async def _run_checkpoint(self) -> None:
        # On the thread's connection, holding the writer lock as SQLite's own automatic
        # checkpoint holds its connection: writes of this store wait the few
        # milliseconds it takes, so it copies the whole WAL and the next write starts
        # the WAL over instead of making it longer.
        try:
            async with self.lock.turn():
                await self.thread.call(_fetch_all, "PRAGMA wal_checkpoint(PASSIVE)")
            self.checkpoints += 1
        except Exception:
            logger.warning("WAL checkpoint of %s failed", self.path, exc_info=True)
        finally:
            self._checkpointing = None


def _set_pragmas(conn: sqlite3.Connection, busy_ms: int = BUSY_TIMEOUT_MS) -> None:
    """The settings of the thread's connection (the first one: it turns WAL on)."""
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")


def _set_reader_pragmas(conn: sqlite3.Connection, busy_ms: int = BUSY_TIMEOUT_MS) -> None:
    """The settings of the reader thread's connection: it only reads."""
    conn.execute("PRAGMA query_only = ON")
    conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")


def _fetch_all(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run one statement; return its rows."""
    return conn.execute(sql, params).fetchall()


def _commit(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("COMMIT")
    except sqlite3.Error:
        if conn.in_transaction:  # a failed COMMIT leaves the transaction open
            conn.execute("ROLLBACK")
        raise


def _applied_version(conn: sqlite3.Connection) -> int:
    """The highest applied migration, 0 when none is (on the database thread)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'threadstore_migrations'"
    ).fetchone()
    if exists is None:
        return 0
    row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM threadstore_migrations").fetchone()
    return int(row[0])


def _migrate(conn: sqlite3.Connection) -> None:
    """Apply the pending migrations in one transaction (on the database thread)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS threadstore_migrations"
        " (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
    )
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(
            "SELECT COALESCE(MAX(version), 0) FROM threadstore_migrations"
        ).fetchone()
        current = int(row[0])
        if current > len(MIGRATIONS):
            raise MigrationError(
                f"database schema version {current} is newer than this threadstore"
                f" ({len(MIGRATIONS)}); upgrade threadstore"
            )
        for version in range(current + 1, len(MIGRATIONS) + 1):
            for statement in _split_script(MIGRATIONS[version - 1]):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO threadstore_migrations (version, applied_at) VALUES (?, ?)",
                (version, models.utcnow().isoformat(timespec="microseconds")),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _split_script(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    statements: list[str] = []
    buffer: list[str] = []
    for line in script.splitlines():
        if line.strip().startswith("--"):
            continue
        buffer.append(line)
        candidate = "\n".join(buffer).strip()
        if candidate.endswith(";") and sqlite3.complete_statement(candidate):
            statements.append(candidate)
            buffer = []
    if "\n".join(buffer).strip():
        statements.append("\n".join(buffer).strip())
    return statements


def translate_error(exc: sqlite3.Error, timeout: float | None = None) -> Exception:
    """Map a driver error to threadstore's error tree (``timeout``: the store's)."""
    text = str(exc)
    if busy(exc):
        # Past busy_timeout: another process holds the database's lock.
        return StoreUnavailableError(
            f"the store is unavailable: the database is locked by another process ({text})",
            timeout=timeout,
        )
    if "no such table" in text:
        return MigrationError(
            f"{text}: the schema is missing; run `threadstore migrate` or setup()"
        )
    if isinstance(exc, sqlite3.IntegrityError):
        if ERASED_USER in text:
            return ConflictError(ERASED_USER_DETAIL)
        if "FOREIGN KEY" in text or "NOT NULL constraint failed: messages.chat_uuid" in text:
            return NotFoundError(f"a referenced chat or message does not exist ({text})")
        if "UNIQUE" in text:
            return ConflictError(f"a record with this id already exists ({text})")
    return exc


class SQLiteDriver(SQLDriver):
    """Writes through the store's executor, reads on its reader connection; uuids kept as
    text, times as fixed-width ISO text, flags as integers."""

    executor: SQLiteExecutor
    uuid_param = staticmethod(str)
    time_param = staticmethod(ts)
    flag_param = staticmethod(int)
    uuid_value = staticmethod(UUID)
    time_value = staticmethod(datetime.fromisoformat)
    day_value = staticmethod(date.fromisoformat)

    async def _write(
        self, sql: str, params: Sequence[Any], *, missing: str | None = None
    ) -> list[Any]:
        (rows,) = await self.executor.run(Statement(sql, tuple(params), missing=missing))
        return rows

    async def _read(self, sql: str, params: Sequence[Any], small: bool = False) -> list[Any]:
        return await self.executor.read(sql, params, small=small)
