"""SQLite writes on the database thread: statements, and many tasks' writes in one commit.

A write that cannot run inline waits for the writer thread. Under load many wait at
once (new runs' set-up writes among the flushes of runs already streaming), and a
thread trip and a commit each would pass the writer from task to task through the
event loop once per write: a run's set-up then waited for hundreds of such hand-offs.
So writes that wait are queued, and one task hands the thread every write queued when
the writer's turn comes, to run in one ``BEGIN IMMEDIATE`` ... ``COMMIT``.

Each statement the thread runs waits to take the interpreter back from a busy event
loop, so a group costs about as many of those waits as it runs statements. It first
runs as they are, one after the other. Should one write fail, the group is rolled
back and runs again with each write in a savepoint of its own (the failing write
rolls back alone, the others commit): two statements more per write, paid only then.
When that transaction itself fails, each write runs again alone, as it would without
the queue: that path is the reference, and :func:`run_group` of one write is exactly
it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from threadstore.errors import NotFoundError
from threadstore.store._records import WriterLock
from threadstore.store._sqlite_thread import DatabaseThread
from threadstore.store._timeouts import unavailable

__all__ = ["Statement", "WriteQueue", "busy", "run_group", "run_statements"]

Rows = list[list[Any]]
"""What a write returns: each statement's rows."""

BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
"""The primary result codes of SQLite giving up on another connection's lock."""


@dataclass(slots=True)
class Statement:
    """One statement of a write, built on the event loop and run on the database thread."""

    sql: str
    params: Sequence[Any]
    missing: str | None = None
    """If set, the statement must return a row; when it returns none the write fails
    with ``NotFoundError(missing)`` (a create whose parent does not exist)."""
    inline: bool = True
    """False for a statement that may touch many rows (a cascading delete): never inline."""


def run_statements(
    conn: sqlite3.Connection, statements: Sequence[Statement], transaction: bool
) -> Rows:
    """Run ``statements`` in order (on the database thread); return each one's rows.

    With ``transaction`` they share one ``BEGIN IMMEDIATE`` ... ``COMMIT`` and roll back
    together when one fails.
    """
    if transaction:
        conn.execute("BEGIN IMMEDIATE")
    try:
        results: Rows = []
        for statement in statements:
            cursor = conn.execute(statement.sql, statement.params)
            rows = cursor.fetchall()
            # A statement that must touch a row: rows it returned, or rows it inserted.
            if statement.missing is not None and not rows and cursor.rowcount < 1:
                raise NotFoundError(statement.missing)
            results.append(rows)
        if transaction:
            conn.execute("COMMIT")
    except BaseException:
        if transaction and conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return results


def _alone(conn: sqlite3.Connection, statements: Sequence[Statement]) -> Rows | Exception:
    try:
        return run_statements(conn, statements, len(statements) > 1)
    except Exception as exc:
        return exc


def run_group(
    conn: sqlite3.Connection, writes: Sequence[Sequence[Statement]]
) -> list[Rows | Exception]:
    """Run several writes in one transaction, each atomic on its own; each one's outcome.

    An outcome is the write's rows, or the exception that rolled it back.
    """
    if len(writes) == 1:
        return [_alone(conn, writes[0])]
    try:
        outcomes = _together(conn, writes)
    except Exception as exc:  # the transaction itself failed (its BEGIN or COMMIT)
        if busy(exc):
            # Another process held the database past busy_timeout: each write alone
            # would wait as long again, and nothing was written.
            return [exc] * len(writes)
        return [_alone(conn, statements) for statements in writes]
    if outcomes is None:  # a write failed and nothing was committed: find which
        return _in_savepoints(conn, writes)
    return outcomes


def busy(exc: Exception) -> bool:
    """Whether SQLite gave up waiting for another connection's lock (an error raised by
    the sqlite3 module itself, such as a closed connection, has no SQLite code)."""
    code = getattr(exc, "sqlite_errorcode", None) or 0
    return isinstance(exc, sqlite3.OperationalError) and code & 0xFF in BUSY_CODES


def _together(
    conn: sqlite3.Connection, writes: Sequence[Sequence[Statement]]
) -> list[Rows | Exception] | None:
    """Every write in one transaction, or ``None`` (rolled back) when one of them fails."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        outcomes: list[Rows | Exception] = []
        for statements in writes:
            try:
                outcomes.append(run_statements(conn, statements, False))
            except Exception:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                return None
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return outcomes


def _in_savepoints(
    conn: sqlite3.Connection, writes: Sequence[Sequence[Statement]]
) -> list[Rows | Exception]:
    outcomes: list[Rows | Exception] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        for statements in writes:
            conn.execute("SAVEPOINT write")
            try:
                outcomes.append(run_statements(conn, statements, False))
            except Exception as exc:
                if not conn.in_transaction:
                    raise  # SQLite ended the transaction: what was released is gone too
                conn.execute("ROLLBACK TO write")
                outcomes.append(exc)
            conn.execute("RELEASE write")
        conn.execute("COMMIT")
    except Exception:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return [_alone(conn, statements) for statements in writes]
    return outcomes


@dataclass(slots=True)
class _Queued:
    statements: Sequence[Statement]
    background: bool
    future: asyncio.Future[Rows]
    queued_at: float


class WriteQueue:
    """Writes that wait for the writer, run a whole queue at a time (module docstring)."""

    def __init__(self, thread: DatabaseThread, lock: WriterLock) -> None:
        self._thread = thread
        self._lock = lock
        self._queued: list[_Queued] = []
        self._foreground = 0
        self._drainer: asyncio.Task[None] | None = None
        self.groups = 0
        """Thread trips that ran more than one write."""

    @property
    def empty(self) -> bool:
        """True when no write waits."""
        return not self._queued

    def __len__(self) -> int:
        """How many writes wait."""
        return len(self._queued)

    @property
    def background_only(self) -> bool:
        """True when every write that waits is a flush (a foreground write may go first)."""
        return self._foreground == 0

    async def run(self, statements: Sequence[Statement], *, background: bool) -> Rows:
        """Queue one write (atomic by itself) and return its rows once it committed."""
        future: asyncio.Future[Rows] = asyncio.get_running_loop().create_future()
        self._queued.append(_Queued(statements, background, future, time.monotonic()))
        if not background:
            self._foreground += 1
        if self._drainer is None:
            # Its own task: a caller cancelled mid-commit must not strand the others.
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def wait(self) -> None:
        """Return once every queued write has run (before the store closes)."""
        while self._drainer is not None:
            await asyncio.shield(self._drainer)

    def _give_up_late(self, batch: list[_Queued]) -> list[_Queued]:
        """The writes of ``batch`` queued since the database last failed to answer in time;
        the others fail now, as they would after waiting as long again."""
        kept: list[_Queued] = []
        for queued in batch:
            if self._lock.gave_up_since(queued.queued_at):
                queued.future.set_exception(unavailable(self._lock.timeout))
            else:
                kept.append(queued)
        return kept

    async def _drain(self) -> None:
        batch: list[_Queued] = []
        try:
            while self._queued:
                async with self._lock.turn(background=self.background_only):
                    # Foreground writes first: the set-up of a run goes before flushes. A
                    # caller that gave up before its write ran gets nothing written.
                    batch = sorted(
                        (queued for queued in self._queued if not queued.future.done()),
                        key=lambda queued: queued.background,
                    )
                    self._queued.clear()
                    self._foreground = 0
                    batch = self._give_up_late(batch)
                    if not batch:
                        continue
                    writes = [queued.statements for queued in batch]
                    outcomes = await self._thread.call(run_group, writes)
                    if any(isinstance(o, Exception) and busy(o) for o in outcomes):
                        self._lock.give_up_waiting()
                self.groups += len(batch) > 1
                for queued, outcome in zip(batch, outcomes, strict=True):
                    if queued.future.done():
                        continue
                    if isinstance(outcome, Exception):
                        queued.future.set_exception(outcome)
                    else:
                        queued.future.set_result(outcome)
                batch = []
        except BaseException as exc:
            for queued in (*batch, *self._queued):
                if queued.future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    queued.future.cancel()
                else:
                    queued.future.set_exception(exc)
            self._queued.clear()
            self._foreground = 0
            if not isinstance(exc, Exception):
                raise
        finally:
            self._drainer = None
