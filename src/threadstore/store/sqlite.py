"""The SQLite backend (the embedded default), on sqlite3 and its database threads.

The writer connection lives on the store's database thread, in WAL mode with foreign
keys on. A transaction holds the store's writer lock for its whole body, so no other
task's statement can land in the middle of it. Writes that wait for the writer are
committed together, each atomic on its own, the flushes a storage agent runs in the
background (``apply_writes``) after every other write (``_sqlite_writes.py``), so a new
run's set-up never waits for the flushes of the runs already streaming. Several
processes may share one file: SQLite serializes their writers and ``busy_timeout``
makes them wait instead of failing, for the store's ``timeout`` (``_timeouts.py``): a
write that waits longer for another process's lock, or for this store's writer, raises
:class:`~threadstore.errors.StoreUnavailableError`.

Reads never take the writer lock: WAL lets readers run beside the writer, so a
query outside the caller's own transaction runs on a reader connection (its own
thread), or inline when it reads one record, and sees what was committed when it
started. Inside a transaction a read goes to the transaction's connection.

Small calls run inline. A round trip to the database thread costs more than a small
write itself (on a 2-core VM 100 to 180 µs against about 60), so a write of at most
:data:`INLINE_MAX_STATEMENTS` statements and :data:`INLINE_MAX_BYTES` of text runs
on the event loop's thread on a second connection when no other task of the store
holds or waits for the writer lock (or, a foreground write, when only flushes do); so
does a lookup of one record, at any time. That connection never waits:
``busy_timeout`` is 0 on it, so a write that meets a lock (another process's, or a
flush the thread is running) goes to the thread and waits there instead. It never
checkpoints during a commit: every :data:`CHECKPOINT_EVERY_WRITES` inline writes a
checkpoint runs on the thread, holding the writer lock as SQLite's automatic
checkpoint would. Each inline call yields to the event loop once before returning, so
a loop of them cannot starve other tasks. ``inline=False`` (or ``?inline=off`` in the
URL) sends every statement to a thread (reads to the reader's).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import parse_qs
from uuid import UUID

from threadstore import models
from threadstore._steps import consume, off_loop
from threadstore.errors import (
    ConfigurationError,
    ConflictError,
    MigrationError,
    NotFoundError,
    RunLiveError,
    StoreUnavailableError,
)
from threadstore.store import ops
from threadstore.store._base import BranchPage, ChatFilter, MessageKey, RunFilter, Store, TreeNode
from threadstore.store._history import DEFAULT_HISTORY_CACHE_MESSAGES, HistoryCache
from threadstore.store._records import WriterLock, split_update
from threadstore.store._rows import EntryLoader, RowLoader, attach_rows
from threadstore.store._sql import (
    CHAT_FIELD_ENCODERS,
    CHAT_INSERT,
    JSON_ENCODERS,
    MESSAGE_INSERT,
    REASONING_INSERT,
    RUN_INSERT,
    TOOL_CALL_INSERT,
    UPDATABLE,
    Encoder,
    InsertColumns,
    InsertPlans,
    Kind,
    Plan,
    branch_page,
    chat_values,
    created_child,
    created_message,
    load_run,
    params,
    record_values,
    update_value,
)
from threadstore.store._sqlite_schema import (
    CHAT_COLUMNS,
    MESSAGE_COLUMNS,
    MIGRATIONS,
    REASONING_COLUMNS,
    RUN_COLUMNS,
    TOOL_CALL_COLUMNS,
)
from threadstore.store._sqlite_thread import DatabaseThread
from threadstore.store._sqlite_writes import BUSY_CODES, Statement, WriteQueue, run_statements
from threadstore.store._timeouts import DEFAULT_TIMEOUT, split_timeout

__all__ = ["SQLiteStore", "sqlite_options", "sqlite_path"]

BUSY_TIMEOUT_MS = int(DEFAULT_TIMEOUT * 1000)
"""How long a writer waits for another process's write lock before failing, at the
default store timeout (a store's own is its ``timeout``)."""

INLINE_MAX_STATEMENTS = 4
"""The most statements a write may have and still run inline on the event loop."""

INLINE_MAX_BYTES = 64 * 1024
"""The most characters or bytes of text and blob parameters an inline write may carry."""

CHECKPOINT_EVERY_WRITES = 100
"""Inline writes between two WAL checkpoints (about 700 pages of a typical append)."""

_CHAT_FIELD_SET = {"name": "name = ?", "state": "state = ?", "metadata": "metadata = ?"}
"""The assignment of each directly set chat field (column names are only taken from here)."""

logger = logging.getLogger(__name__)

_CHAT_SELECT = "SELECT " + ", ".join(CHAT_COLUMNS) + " FROM chats"
_SELECT_SIBLINGS = """
WITH wanted(parent) AS (
    SELECT parent_uuid FROM messages
    WHERE chat_uuid = ?1 AND message_uuid IN (SELECT value FROM json_each(?2))
)
SELECT message_uuid, parent_uuid, role, seq, agui_id, run_id FROM messages
WHERE chat_uuid = ?1
  AND (SELECT has_branches FROM chats WHERE chat_uuid = ?1)
  AND (parent_uuid IN (SELECT parent FROM wanted)
       OR (parent_uuid IS NULL AND EXISTS (SELECT 1 FROM wanted WHERE parent IS NULL)))
ORDER BY seq
"""
"""The messages sharing a parent with one of a list of messages (``_select_siblings``)."""

_MESSAGE_SELECT = "SELECT " + ", ".join(f"m.{c}" for c in MESSAGE_COLUMNS) + " FROM messages m"
_TOOL_CALL_SELECT = "SELECT " + ", ".join(TOOL_CALL_COLUMNS) + " FROM tool_calls"
_REASONING_SELECT = "SELECT " + ", ".join(REASONING_COLUMNS) + " FROM reasonings"
_RUN_SELECT = "SELECT " + ", ".join(RUN_COLUMNS) + " FROM runs"


def _numbered(columns: InsertColumns, **instead: str) -> str:
    """``?1, ?2, ...`` for ``columns``, with an expression ``instead`` of some of them."""
    return ", ".join(instead.get(name, f"?{i}") for i, name in enumerate(columns.names, 1))


def _names(columns: InsertColumns) -> str:
    return ", ".join(columns.names)


_CREATED = {
    table: f"?{columns.position('created_at')}"
    for table, columns in (
        ("chats", CHAT_INSERT),
        ("messages", MESSAGE_INSERT),
        ("tool_calls", TOOL_CALL_INSERT),
        ("reasonings", REASONING_INSERT),
    )
}

_INSERT_CHAT = (
    f"INSERT INTO chats ({_names(CHAT_INSERT)}, updated_at, version)"
    f" VALUES ({_numbered(CHAT_INSERT)}, {_CREATED['chats']}, ?{len(CHAT_INSERT.names) + 1})"
    # A no-op update makes RETURNING yield the existing row when (user, thread) exists;
    # a soft-deleted one yields nothing (create_chat then purges it).
    " ON CONFLICT (user_uuid, thread_id) DO UPDATE SET thread_id = excluded.thread_id"
    " WHERE chats.deleted_at IS NULL"
    " RETURNING " + ", ".join(CHAT_COLUMNS)
)

_INSERT_MESSAGE = (
    f"INSERT INTO messages ({_names(MESSAGE_INSERT)}, updated_at) VALUES ("
    + _numbered(
        MESSAGE_INSERT,
        # No parent given: the chat's active leaf.
        parent_uuid="COALESCE(?3, (SELECT active_leaf_uuid FROM chats WHERE chat_uuid = ?2))",
    )
    + f", {_CREATED['messages']}) RETURNING seq, parent_uuid"
)
assert MESSAGE_INSERT.names[1:3] == ("chat_uuid", "parent_uuid")

# The next position among a message's tool calls and reasoning steps, so the order
# in which they were produced survives across the two tables.
_NEXT_CHILD_SEQ = (
    "(SELECT COALESCE(MAX(seq), 0) + 1 FROM ("
    " SELECT seq FROM tool_calls WHERE message_uuid = ?1"
    " UNION ALL SELECT seq FROM reasonings WHERE message_uuid = ?1))"
)


def _child_insert_sql(table: str, columns: InsertColumns) -> str:
    """A tool call's or reasoning step's insert: its chat from the parent, the next ``seq``."""
    assert columns.names[0] == "message_uuid"
    return (
        f"INSERT INTO {table} ({_names(columns)}, chat_uuid, seq, updated_at)"
        f" SELECT {_numbered(columns)}, m.chat_uuid, {_NEXT_CHILD_SEQ}, {_CREATED[table]}"
        " FROM messages m WHERE m.message_uuid = ?1 RETURNING seq"
    )


_INSERT_TOOL_CALL = _child_insert_sql("tool_calls", TOOL_CALL_INSERT)
_INSERT_REASONING = _child_insert_sql("reasonings", REASONING_INSERT)

_INSERT_RUN = (
    f"INSERT INTO runs ({_names(RUN_INSERT)}) VALUES ({_numbered(RUN_INSERT)})"
    " ON CONFLICT (chat_uuid, run_id) DO UPDATE SET run_id = excluded.run_id"
    " RETURNING " + ", ".join(RUN_COLUMNS)
)

# How SQLite names a violation of the index runs_one_running_per_chat.
_ONE_RUNNING_RUN = "UNIQUE constraint failed: runs.chat_uuid"

# The creates of a batch, whose results nobody reads: without RETURNING, SQLite need
# not collect the new rows (about 3.5 µs a statement).
_UNRETURNED = {
    sql: sql.partition(" RETURNING ")[0]
    for sql in (_INSERT_MESSAGE, _INSERT_TOOL_CALL, _INSERT_REASONING)
}

# The active branch of a chat that has branches: the path from the active leaf to the
# root. A chat that never branched reads every message instead (one index range scan).
# The messages written after a chat version, or whose tool calls or reasoning were.
_CHANGED_SELECT = (
    _MESSAGE_SELECT + " WHERE m.message_uuid IN ("
    " SELECT message_uuid FROM messages WHERE chat_uuid = ?1 AND chat_version > ?2"
    " UNION SELECT message_uuid FROM tool_calls WHERE chat_uuid = ?1 AND chat_version > ?2"
    " UNION SELECT message_uuid FROM reasonings WHERE chat_uuid = ?1 AND chat_version > ?2)"
    " ORDER BY m.seq"
)

_BRANCH_FILTER = (
    "m.chat_uuid = ?1 AND m.message_uuid IN ("
    " WITH RECURSIVE branch(uuid) AS ("
    "  SELECT active_leaf_uuid FROM chats WHERE chat_uuid = ?1"
    "  UNION ALL SELECT p.parent_uuid FROM messages p JOIN branch b ON p.message_uuid = b.uuid"
    "  WHERE p.parent_uuid IS NOT NULL)"
    " SELECT uuid FROM branch)"
)


_CHAT_IS_LIVE = (
    "NOT EXISTS (SELECT 1 FROM chats c WHERE c.chat_uuid = m.chat_uuid"
    " AND c.deleted_at IS NOT NULL)"
)
"""A message's chat is not soft-deleted."""


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


def _ts(value: datetime) -> str:
    """Store times as fixed-width UTC ISO text so they sort as text."""
    return value.isoformat(timespec="microseconds")


def _u(value: UUID | None) -> str | None:
    return None if value is None else str(value)


def _param(value: Any) -> Any:
    """A key value as SQLite takes it (uuids as text)."""
    return str(value) if isinstance(value, UUID) else value


_ENCODERS: dict[Kind, Encoder] = {**JSON_ENCODERS, Kind.UUID: str, Kind.TIME: _ts, Kind.BOOL: int}
_PLANS = InsertPlans(_ENCODERS)


_T = TypeVar("_T")

_Finish = Callable[[list[list[Any]]], Awaitable[Any]]
"""Turns the rows of an operation's statements into its result."""


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


def _tree_nodes(rows: list[Any]) -> list[TreeNode]:
    return [
        TreeNode(UUID(uuid), None if parent is None else UUID(parent), role, seq, agui, run)
        for uuid, parent, role, seq, agui, run in rows
    ]


class SQLiteStore(Store):
    """Store backed by one SQLite database file."""

    timeout: float

    def __init__(
        self,
        url: str = "sqlite:///./threadstore.db",
        *,
        history_cache_messages: int = DEFAULT_HISTORY_CACHE_MESSAGES,
        inline: bool | None = None,
        timeout: float | None = None,
        **model_classes: Any,
    ) -> None:
        super().__init__(**model_classes)
        self.url, self.timeout = split_timeout(url, timeout)
        """The URL, and the seconds a call may wait for another process's write lock or
        for this store's writer before :class:`StoreUnavailableError` (the ``timeout``
        keyword, else ``?timeout=`` in the URL, else 5)."""
        url = self.url
        self.path = sqlite_path(url)
        if inline is None:
            inline = sqlite_options(url).get("inline", True)
        self.inline = inline and self.path != ":memory:"
        """Whether small calls run on the event loop's thread (see the module docstring).

        ``inline=False`` or ``?inline=off`` in the URL turns it off. Always off for
        ``:memory:``: a second connection would open another, empty database.
        """
        self._thread = DatabaseThread(timeout=self.timeout)
        self._reader = DatabaseThread("threadstore-sqlite-read", timeout=self.timeout)
        self._inline: sqlite3.Connection | None = None
        self._inline_thread = 0
        self._inline_changes = 0
        self._writes_since_checkpoint = 0
        self._checkpointing: asyncio.Task[None] | None = None
        self._lock = WriterLock(self.timeout)
        self._writes = WriteQueue(self._thread, self._lock)
        self.checkpoint_every_writes = CHECKPOINT_EVERY_WRITES
        """Inline writes between two checkpoints; 0 turns these checkpoints off."""
        self.checkpoints = 0
        """Checkpoints run for inline writes so far."""
        self.history_cache: HistoryCache | None = (
            HistoryCache(history_cache_messages) if history_cache_messages else None
        )
        """Histories read before, reused while their chat's version is unchanged."""
        self._chats = RowLoader(self.chat_model, models.Chat, CHAT_COLUMNS, self.codecs.chat)
        self._messages = RowLoader(
            self.message_model, models.Message, MESSAGE_COLUMNS, self.codecs.message
        )
        self._tool_calls = RowLoader(
            self.tool_call_model, models.ToolCall, TOOL_CALL_COLUMNS, self.codecs.tool_call
        )
        self._reasonings = RowLoader(
            self.reasoning_model, models.Reasoning, REASONING_COLUMNS, self.codecs.reasoning
        )
        self._entries = EntryLoader(self._messages, self._tool_calls, self._reasonings)

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def thread(self) -> DatabaseThread:
        """The database thread and its writer connection (for tracing and diagnostics)."""
        return self._thread

    @property
    def writer_lock(self) -> WriterLock:
        """The lock writes and transactions queue in (for tests and diagnostics)."""
        return self._lock

    @property
    def write_queue(self) -> WriteQueue:
        """The writes waiting for the writer, committed together (for tests and diagnostics)."""
        return self._writes

    @property
    def reader(self) -> DatabaseThread:
        """The reader thread and its connection (not opened for ``:memory:``)."""
        return self._reader

    async def connect(self) -> None:
        """Open the database file and set the pragmas every connection needs."""
        if self._thread.is_open:
            return
        busy_ms = int(self.timeout * 1000)
        await self._thread.open(self.path, functools.partial(_set_pragmas, busy_ms=busy_ms))
        if self.path != ":memory:":  # another connection would open another database
            try:
                await self._reader.open(
                    self.path, functools.partial(_set_reader_pragmas, busy_ms=busy_ms)
                )
            except BaseException:
                await self._thread.close()
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
        await self._writes.wait()
        if self._checkpointing is not None:
            await asyncio.gather(self._checkpointing, return_exceptions=True)
        if self._inline is not None:
            inline, self._inline = self._inline, None
            inline.close()
        await self._reader.close()
        await self._thread.close()

    async def set_trace_callback(self, callback: Callable[[str], object] | None) -> None:
        """Call ``callback`` with the text of every statement the store runs (None: stop).

        Covers both connections; SQLite also reports each trigger body it starts.
        """
        if self._inline is not None:
            self._inline.set_trace_callback(callback)
        if self._reader.is_open:
            await self._reader.call(sqlite3.Connection.set_trace_callback, callback)
        await self._thread.call(sqlite3.Connection.set_trace_callback, callback)

    async def setup(self) -> None:
        """Apply pending migrations in order, each recorded in ``threadstore_migrations``."""
        async with self._lock.hold():
            await self._call(_migrate)

    async def schema_version(self) -> int:
        """Return the highest applied migration (0 for an empty database)."""
        async with self._lock.hold():
            return await self._call(_applied_version)

    def transaction(self) -> AbstractAsyncContextManager[None]:
        return self._lock.transaction(
            functools.partial(self._call, _fetch_all, "BEGIN IMMEDIATE"),
            functools.partial(self._call, _commit),
            functools.partial(self._call, _fetch_all, "ROLLBACK"),
        )

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(connection, *args)`` on the database thread, its errors translated."""
        try:
            return await self._thread.call(fn, *args)
        except sqlite3.Error as exc:
            raise self._writer_error(exc) from exc

    def _writer_error(self, exc: sqlite3.Error) -> Exception:
        """``exc`` of the writer's connection, translated; past the busy timeout, the
        writes waiting behind this one give up too (``WriterLock.give_up_waiting``)."""
        error = _translate(exc, self.timeout)
        if isinstance(error, StoreUnavailableError):
            self._lock.give_up_waiting()
        return error

    # --- statement helpers ---------------------------------------------------------------

    async def _fetch(self, sql: str, params: Sequence[Any], *, small: bool = False) -> list[Any]:
        """Run one statement and return its rows (after any open transaction of another task).

        ``small``: the statement touches at most a few rows, so it may run inline.
        """
        if small and (rows := await self._run_small((Statement(sql, params),))) is not None:
            return rows[0]
        if self._lock.held:
            return await self._fetch_now(sql, params)
        async with self._lock.turn():
            return await self._fetch_now(sql, params)

    async def _read(self, sql: str, params: Sequence[Any], *, small: bool = False) -> list[Any]:
        """Run one query without waiting for the writer lock; return its rows.

        Inside this task's transaction it runs there (it must see the transaction's
        writes). Otherwise on the reader connection, or inline when ``small`` (one
        record): WAL readers see the last commit and never block the writer.
        """
        if self._lock.held or not self._reader.is_open:
            return await self._fetch(sql, params, small=small)
        if small and self._inline is not None and threading.get_ident() == self._inline_thread:
            rows = self._inline_read(sql, params)
            if rows is not None:
                await asyncio.sleep(0)  # as a trip to the thread would, let others run
                return rows
        try:
            return await self._reader.call(_fetch_all, sql, params)
        except sqlite3.Error as exc:
            raise _translate(exc, self.timeout) from exc

    def _inline_read(self, sql: str, params: Sequence[Any]) -> list[Any] | None:
        """One query on the inline connection; None when SQLite answered busy."""
        inline = self._inline
        assert inline is not None
        try:
            return inline.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            if (exc.sqlite_errorcode or 0) & 0xFF in BUSY_CODES:
                return None
            raise _translate(exc) from exc

    async def _fetch_now(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return await self._call(_fetch_all, sql, params)

    async def _run(self, *statements: Statement, background: bool = False) -> list[list[Any]]:
        """Run write statements in one hop to the database thread; return each one's rows.

        Several statements form one transaction (or join the caller's). Handing the
        thread one function for all of them, rather than a call per statement, is what
        makes a write, or a whole batch of them, cost one thread round trip.
        ``background``: a flush nobody waits for; it lets every other waiting write go first.
        """
        if (results := await self._run_small(statements, background)) is not None:
            return results
        try:
            if self._lock.held:  # inside this task's transaction
                return await self._thread.call(run_statements, statements, False)
            return await self._writes.run(statements, background=background)
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
        lock, writes = self._lock, self._writes
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
            if (exc.sqlite_errorcode or 0) & 0xFF in BUSY_CODES:
                return None
            raise _translate(exc) from exc
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
            async with self._lock.turn():
                await self._thread.call(_fetch_all, "PRAGMA wal_checkpoint(PASSIVE)")
            self.checkpoints += 1
        except Exception:
            logger.warning("WAL checkpoint of %s failed", self.path, exc_info=True)
        finally:
            self._checkpointing = None

    def _load_chats(self, rows: Iterable[Sequence[Any]]) -> list[models.Chat]:
        return self._chats.load(rows)

    async def _load_messages(
        self,
        rows: Sequence[Sequence[Any]],
        *,
        chat_uuid: UUID | None = None,
        small: bool = False,
    ) -> list[models.Message]:
        """Build messages and attach their tool calls and reasoning steps (two statements).

        With ``chat_uuid`` (a whole branch of one chat) children are selected by chat, which
        needs no list of message ids; otherwise by the messages' ids. ``small``: the
        children of one message, which may be read inline.
        """
        messages: list[models.Message] = await off_loop(rows, consume, self._messages.load, rows)
        if not messages:
            return messages
        tool_rows, reasoning_rows = await self._child_rows(
            [str(m.message_uuid) for m in messages], chat_uuid, small=small
        )
        await attach_rows(messages, self._tool_calls, tool_rows, self._reasonings, reasoning_rows)
        return messages

    async def _child_rows(
        self, message_uuids: list[str], chat_uuid: UUID | None, *, small: bool = False
    ) -> tuple[list[Any], list[Any]]:
        """The tool call rows and reasoning rows of some messages (of a whole chat, by
        ``chat_uuid``: that needs no list of ids)."""
        if chat_uuid is not None:
            where, param = " WHERE chat_uuid = ?", str(chat_uuid)
        else:
            where = " WHERE message_uuid IN (SELECT value FROM json_each(?))"
            param = json.dumps(message_uuids)
        tool_rows = await self._read(_TOOL_CALL_SELECT + where, (param,), small=small)
        reasoning_rows = await self._read(_REASONING_SELECT + where, (param,), small=small)
        return tool_rows, reasoning_rows

    # --- chats -----------------------------------------------------------------------------

    def _create_chat(self, chat_data: models.ChatCreate) -> tuple[list[Statement], _Finish]:
        values = chat_values(chat_data)
        # A random starting version: a chat deleted and created again under the
        # same uuid can never match a history cached for the one before.
        insert = Statement(_INSERT_CHAT, [*params(_PLANS.chat, values), secrets.randbits(62)])

        async def finish(results: list[list[Any]]) -> models.Chat:
            (rows,) = results
            if not rows:  # the thread's chat is soft-deleted: purge it, then create anew
                purge = Statement(
                    "DELETE FROM chats WHERE user_uuid = ? AND thread_id = ?"
                    " AND deleted_at IS NOT NULL",
                    (str(values["user_uuid"]), values["thread_id"]),
                )
                rows = (await self._run(purge, insert))[1]
            return self._load_chats(rows)[0]

        return [insert], finish

    @staticmethod
    def _chat_conditions(where: ChatFilter) -> tuple[list[str], list[Any]]:
        """The WHERE conditions of ``where`` and their parameters."""
        conditions: list[str] = []
        params: list[Any] = []
        for column, value in where.equalities():
            conditions.append(f"{column} = ?")
            params.append(_param(value))
        conditions.append("deleted_at IS NOT NULL" if where.deleted else "deleted_at IS NULL")
        for bound, op in ((where.deleted_after, ">="), (where.deleted_before, "<")):
            if bound is not None:
                conditions.append(f"deleted_at {op} ?")
                params.append(_ts(bound))
        if where.after is not None:
            conditions.append("(updated_at, chat_uuid) < (?, ?)")
            params += [_ts(where.after[0]), where.after[1]]
        if (pattern := where.name_like()) is not None:
            # LIKE ignores the case of ASCII letters.
            conditions.append("name LIKE ? ESCAPE '\\'")
            params.append(pattern)
        return conditions, params

    async def _select_chats(self, where: ChatFilter) -> Sequence[models.Chat]:
        conditions, params = self._chat_conditions(where)
        sql = _CHAT_SELECT + " WHERE " + " AND ".join(conditions)
        sql += " ORDER BY updated_at DESC, chat_uuid DESC"
        if where.limit is not None:
            sql += " LIMIT ?"
            params.append(where.limit)
        # A lookup by key reads one row: small enough to run inline.
        small = where.chat_uuid is not None or where.thread_id is not None
        return self._load_chats(await self._read(sql, params, small=small))

    def _chat_update(self, chat_uuid: UUID, assignments: str, params: Sequence[Any]) -> Statement:
        return Statement(
            "UPDATE chats SET " + assignments + ", updated_at = ? WHERE chat_uuid = ?"
            " RETURNING " + ", ".join(CHAT_COLUMNS),
            (*params, _ts(models.utcnow()), str(chat_uuid)),
        )

    async def _last_chat(self, results: list[list[Any]]) -> models.Chat | None:
        """The chat the last statement returned, or ``None``."""
        rows = results[-1]
        return self._load_chats(rows)[0] if rows else None

    def _chat_field_update(self, chat_uuid: UUID, field: str, value: Any) -> list[Statement]:
        encoded = CHAT_FIELD_ENCODERS[field](value)
        return [self._chat_update(chat_uuid, _CHAT_FIELD_SET[field], (encoded,))]

    def _active_leaf_update(self, chat_uuid: UUID, message_uuid: UUID) -> list[Statement]:
        check = Statement(
            "SELECT 1 FROM messages WHERE message_uuid = ? AND chat_uuid = ?",
            (str(message_uuid), str(chat_uuid)),
            missing=f"message {message_uuid} is not in chat {chat_uuid}",
        )
        # A leaf anywhere but the newest message means the active branch is no
        # longer "every message", so reads must walk the tree from now on.
        update = self._chat_update(
            chat_uuid,
            "has_branches = has_branches OR (active_leaf_uuid IS NOT ?1), active_leaf_uuid = ?1",
            (str(message_uuid),),
        )
        return [check, update]

    async def _select_tree(self, chat_uuid: UUID) -> list[TreeNode]:
        rows = await self._read(
            "SELECT message_uuid, parent_uuid, role, seq, agui_id, run_id FROM messages"
            " WHERE chat_uuid = ? ORDER BY seq",
            (str(chat_uuid),),
        )
        # A long chat's tree is tens of thousands of nodes: built off the event loop.
        return await off_loop(rows, consume, _tree_nodes, rows)

    async def _never_branched(self, chat_uuid: UUID) -> bool:
        rows = await self._read(
            "SELECT has_branches FROM chats WHERE chat_uuid = ?", (str(chat_uuid),), small=True
        )
        return bool(rows) and not rows[0][0]

    async def _select_siblings(
        self, chat_uuid: UUID, message_uuids: Sequence[UUID]
    ) -> list[TreeNode]:
        # A chat that never branched has no siblings (has_branches, as the branch read
        # relies on); otherwise SQLite scans the chat's rows for the wanted parents, on
        # the reader thread, instead of the loop building the whole tree.
        rows = await self._read(
            _SELECT_SIBLINGS, (str(chat_uuid), json.dumps([str(u) for u in message_uuids]))
        )
        return _tree_nodes(rows)

    @staticmethod
    def _root_update(chat_uuid: UUID, message_uuid: UUID) -> list[Statement]:
        # The message update bumps the chat's version (trigger); a second root means
        # reads must walk the tree from now on.
        return [
            Statement(
                "UPDATE messages SET parent_uuid = NULL WHERE message_uuid = ? AND chat_uuid = ?",
                (str(message_uuid), str(chat_uuid)),
            ),
            Statement("UPDATE chats SET has_branches = 1 WHERE chat_uuid = ?", (str(chat_uuid),)),
        ]

    def _deleted_at_update(self, where: ChatFilter, deleted_at: datetime | None) -> Statement:
        conditions, params = self._chat_conditions(where)
        return Statement(
            "UPDATE chats SET deleted_at = ? WHERE "
            + " AND ".join(conditions)
            + " RETURNING "
            + ", ".join(CHAT_COLUMNS),
            (None if deleted_at is None else _ts(deleted_at), *params),
        )

    @staticmethod
    def _chat_delete(chat_uuid: UUID) -> Statement:
        # Foreign keys cascade to messages, their tool calls and reasoning, and runs:
        # possibly many rows, so never on the event loop's thread.
        return Statement(
            "DELETE FROM chats WHERE chat_uuid = ? RETURNING " + ", ".join(CHAT_COLUMNS),
            (str(chat_uuid),),
            inline=False,
        )

    # --- messages -----------------------------------------------------------------------

    def _create_message(self, data: models.MessageCreate) -> tuple[list[Statement], _Finish]:
        statements, created = self._message_insert(data)

        async def finish(results: list[list[Any]]) -> models.Message:
            seq, parent = results[-1][0]
            return created_message(
                self.message_model, data, seq=seq, parent_uuid=parent, created_at=created
            )

        return statements, finish

    def _message_insert(self, data: models.MessageCreate) -> tuple[list[Statement], datetime]:
        """The statements creating a message (a parent check first when a parent is given)."""
        # The append hot path: read the DTO's fields from its dict and pass enums (str
        # subclasses) straight to the driver.
        fields = data.__dict__
        chat_uuid, parent_uuid = fields["chat_uuid"], fields["parent_uuid"]
        created = fields["created_at"] or models.utcnow()
        values = record_values(data, created)
        insert = Statement(_INSERT_MESSAGE, params(_PLANS.message, values))
        chat = str(chat_uuid)
        if parent_uuid is None:
            return [insert], created
        check = Statement(
            "SELECT 1 FROM messages WHERE message_uuid = ? AND chat_uuid = ?",
            (str(parent_uuid), chat),
            missing=f"parent message {parent_uuid} is not in chat {chat_uuid}",
        )
        return [check, insert], created

    def _row_update(
        self, table: str, key: str, uuid: UUID, update: Any, base_cls: Any, columns: Sequence[str]
    ) -> list[Statement]:
        base, extra = split_update(update, base_cls)
        assignments: list[str] = []
        params: list[Any] = []
        for column, value in base.items():
            if column in UPDATABLE[table]:
                assignments.append(f"{column} = ?")
                params.append(update_value(column, value, _ENCODERS))
        if extra:
            # Replace each extra field whole (json_set), as the in-memory backend does.
            values = json.loads(extra)
            assignments.append(
                "extra = json_set(COALESCE(extra, '{}')" + ", ?, json(?)" * len(values) + ")"
            )
            for name, value in values.items():
                params += [f'$."{name}"', json.dumps(value)]
        assignments.append("updated_at = ?")
        params.append(_ts(models.utcnow()))
        sql = (
            f"UPDATE {table} SET {', '.join(assignments)} WHERE {key} = ?"
            f" RETURNING {', '.join(columns)}"
        )
        return [Statement(sql, (*params, str(uuid)))]

    def _message_update(self, message_uuid: UUID, update: models.MessageUpdate) -> list[Statement]:
        return self._row_update(
            "messages", "message_uuid", message_uuid, update, models.MessageUpdate, MESSAGE_COLUMNS
        )

    async def _updated_message(self, results: list[list[Any]]) -> models.Message | None:
        messages = await self._load_messages(results[0])
        return messages[0] if messages else None

    async def _updated_tool_call(self, results: list[list[Any]]) -> models.ToolCall | None:
        loaded: list[models.ToolCall] = self._tool_calls.load(results[0])
        return loaded[0] if loaded else None

    async def _updated_reasoning(self, results: list[list[Any]]) -> models.Reasoning | None:
        loaded: list[models.Reasoning] = self._reasonings.load(results[0])
        return loaded[0] if loaded else None

    @staticmethod
    def _create_child(
        sql: str,
        plan: Plan,
        model: type[Any],
        data: models.MessageToolCallCreate | models.MessageReasoningCreate,
    ) -> tuple[list[Statement], _Finish]:
        """A tool call's or reasoning step's insert, and its result."""
        now = models.utcnow()
        values = record_values(data, now)
        missing = f"parent message {data.message_uuid} does not exist"

        async def finish(results: list[list[Any]]) -> Any:
            return created_child(model, data, seq=results[0][0][0], created_at=now)

        return [Statement(sql, params(plan, values), missing=missing)], finish

    def _tool_call_update(
        self, uuid: UUID, update: models.MessageToolCallUpdate
    ) -> list[Statement]:
        return self._row_update(
            "tool_calls", "uuid", uuid, update, models.MessageToolCallUpdate, TOOL_CALL_COLUMNS
        )

    def _reasoning_update(
        self, uuid: UUID, update: models.MessageReasoningUpdate
    ) -> list[Statement]:
        return self._row_update(
            "reasonings", "uuid", uuid, update, models.MessageReasoningUpdate, REASONING_COLUMNS
        )

    async def _find_message(self, key: MessageKey) -> models.Message | None:
        conditions: list[str] = []
        params: list[Any] = []
        for column, value in key.equalities():
            conditions.append(f"m.{column} = ?")
            params.append(_param(value))
        conditions.append(_CHAT_IS_LIVE)
        sql = _MESSAGE_SELECT + " WHERE " + " AND ".join(conditions) + " ORDER BY m.seq LIMIT 1"
        rows = await self._read(sql, params, small=True)
        messages = await self._load_messages(rows, small=True)
        return messages[0] if messages else None

    async def _find_tool_call(
        self, message_uuid: UUID, tool_call_id: str
    ) -> models.ToolCall | None:
        rows = await self._read(
            _TOOL_CALL_SELECT + " WHERE message_uuid = ? AND tool_call_id = ? LIMIT 1",
            (str(message_uuid), tool_call_id),
            small=True,
        )
        loaded: list[models.ToolCall] = self._tool_calls.load(rows)
        return loaded[0] if loaded else None

    def _in_transaction(self) -> bool:
        return self._lock.held

    async def _history_version(self, chat_uuid: UUID) -> Hashable | None:
        # The leaf too: moving it changes the branch without a new version. Whether the
        # chat ever branched tells the read which query it needs.
        flags = await self._read(
            "SELECT version, active_leaf_uuid, has_branches FROM chats"
            " WHERE chat_uuid = ? AND deleted_at IS NULL",
            (str(chat_uuid),),
            small=True,
        )
        return tuple(flags[0]) if flags else None

    async def _select_changed(
        self, chat_uuid: UUID, since: Hashable, version: Hashable
    ) -> tuple[list[Any], UUID | None] | None:
        assert isinstance(since, tuple) and isinstance(version, tuple)
        if version[0] < since[0]:  # a chat created again under the same uuid
            return None
        rows = await self._read(_CHANGED_SELECT, (str(chat_uuid), since[0]))
        leaf = None if version[1] is None else UUID(version[1])
        if not rows:
            return [], leaf
        uuid = self._entries.messages.column("message_uuid")
        children = await self._child_rows([row[uuid] for row in rows], None)
        return self._entries.entries(rows, *children), leaf

    async def _select_entries(self, chat_uuid: UUID, version: Hashable) -> list[Any]:
        assert isinstance(version, tuple)
        where = _BRANCH_FILTER if version[2] else "m.chat_uuid = ?1"
        rows = await self._read(
            _MESSAGE_SELECT + " WHERE " + where + " ORDER BY m.seq", [str(chat_uuid)]
        )
        if not rows:
            return []
        children = await self._child_rows([], chat_uuid)
        return await off_loop(rows, self._entries.entries, rows, *children)

    def _build_entries(self, entries: Sequence[Any]) -> list[models.Message]:
        return self._entries.build(entries)

    async def _select_branch(
        self, chat_uuid: UUID, page: BranchPage, version: Hashable | None
    ) -> list[models.Message]:
        if version is None:
            version = await self._history_version(chat_uuid)
            if version is None:
                return []
        assert isinstance(version, tuple)
        where = _BRANCH_FILTER if version[2] else "m.chat_uuid = ?1"
        params: list[Any] = [str(chat_uuid)]
        bounds, tail = branch_page(page, params, "?{}".format)
        rows = await self._read(_MESSAGE_SELECT + " WHERE " + where + bounds + tail, params)
        if page.newest_first:
            rows.reverse()
        # Children by chat need no list of ids, but read all the chat's: only for the
        # whole branch. A page (a run's new tail) reads its own messages' children.
        return await self._load_messages(rows, chat_uuid=chat_uuid if page.whole else None)

    async def _select_last_messages(self, chat_uuids: Sequence[UUID]) -> list[models.Message]:
        rows = await self._read(
            _MESSAGE_SELECT + " JOIN chats c ON c.active_leaf_uuid = m.message_uuid"
            " WHERE c.chat_uuid IN (SELECT value FROM json_each(?)) AND c.deleted_at IS NULL",
            (json.dumps([str(u) for u in chat_uuids]),),
        )
        return await self._load_messages(rows)

    # --- runs --------------------------------------------------------------------------

    @staticmethod
    def _run_insert(run: models.Run) -> Statement:
        values = {**run.__dict__, "format_version": models.FORMAT_VERSION}
        return Statement(_INSERT_RUN, params(_PLANS.run, values))

    @staticmethod
    def _heartbeat(owner: str, run_ids: Sequence[tuple[UUID, str]]) -> Statement:
        keys = json.dumps([[str(chat), run] for chat, run in run_ids])
        return Statement(
            "UPDATE runs SET heartbeat_at = ? WHERE owner = ? AND status = 'running'"
            " AND (chat_uuid, run_id) IN"
            " (SELECT value ->> 0, value ->> 1 FROM json_each(?))",
            (_ts(models.utcnow()), owner, keys),
        )

    @staticmethod
    def _run_finish(
        chat_uuid: UUID, run_id: str, status: models.RunStatus, error: str | None = None
    ) -> Statement:
        return Statement(
            "UPDATE runs SET status = ?, error = ?, updated_at = ?"
            " WHERE chat_uuid = ? AND run_id = ? RETURNING " + ", ".join(RUN_COLUMNS),
            (status.value, error, _ts(models.utcnow()), str(chat_uuid), run_id),
        )

    async def _select_runs(self, where: RunFilter) -> list[models.Run]:
        if where.run_id is not None:
            condition = "(status = 'running' OR run_id = ?)" if where.running else "run_id = ?"
            rows = await self._read(
                _RUN_SELECT + f" WHERE chat_uuid = ? AND {condition} ORDER BY heartbeat_at",
                (str(where.chat_uuid), where.run_id),
                small=True,
            )
            return [load_run(row) for row in rows]
        sql, args = _RUN_SELECT + " WHERE status = 'running'", list[str]()
        if where.chat_uuid is not None:
            sql += " AND chat_uuid = ?"
            args.append(str(where.chat_uuid))
        if where.stale_before is not None:
            sql += " AND heartbeat_at < ?"
            args.append(_ts(where.stale_before))
        rows = await self._read(
            sql + " ORDER BY heartbeat_at", tuple(args), small=where.chat_uuid is not None
        )
        return [load_run(row) for row in rows]

    @staticmethod
    def _run_records_finalize(
        chat_uuid: UUID, run_id: str, status: models.MessageStatus
    ) -> list[Statement]:
        params = (status.value, _ts(models.utcnow()), str(chat_uuid), run_id)
        set_ = " SET status = ?1, in_progress = 0, updated_at = ?2"
        children = [
            Statement(
                # Through the run's messages: the chat's other children are never read.
                f"UPDATE {table}{set_} WHERE in_progress = 1 AND message_uuid IN"
                " (SELECT message_uuid FROM messages WHERE chat_uuid = ?3 AND run_id = ?4)"
                " RETURNING 1",
                params,
            )
            for table in ("tool_calls", "reasonings")
        ]
        messages = Statement(
            "UPDATE messages"
            + set_
            + " WHERE chat_uuid = ?3 AND run_id = ?4 AND in_progress = 1 RETURNING 1",
            params,
        )
        return [*children, messages]

    # --- writes ----------------------------------------------------------------------

    def _plan(self, op: ops.Op) -> tuple[list[Statement], _Finish]:
        """The statements of one operation and what turns their rows into its result."""
        match op:
            case ops.CreateMessage(data):
                return self._create_message(data)
            case ops.UpdateMessage(message_uuid, update):
                return self._message_update(message_uuid, update), self._updated_message
            case ops.CreateToolCall(data):
                return self._create_child(
                    _INSERT_TOOL_CALL, _PLANS.tool_call, self.tool_call_model, data
                )
            case ops.UpdateToolCall(uuid, update):
                return self._tool_call_update(uuid, update), self._updated_tool_call
            case ops.CreateReasoning(data):
                return self._create_child(
                    _INSERT_REASONING, _PLANS.reasoning, self.reasoning_model, data
                )
            case ops.UpdateReasoning(uuid, update):
                return self._reasoning_update(uuid, update), self._updated_reasoning
            case ops.RenameChat() | ops.UpdateChatState() | ops.UpdateChatMetadata():
                return self._chat_field_update(op.chat_uuid, op.field, op.value), self._last_chat
            case ops.CreateChat(data):
                return self._create_chat(data)
            case ops.SetActiveLeaf(chat_uuid, message_uuid):
                return self._active_leaf_update(chat_uuid, message_uuid), self._last_chat
            case ops.MakeRoot(chat_uuid, message_uuid):
                return self._root_update(chat_uuid, message_uuid), _nothing
            case ops.SetDeletedAt(where, deleted_at):
                return [self._deleted_at_update(where, deleted_at)], self._last_chat
            case ops.DeleteChat(chat_uuid):
                return [self._chat_delete(chat_uuid)], self._last_chat
            case ops.StartRun(run):
                return [self._run_insert(run)], _first_run
            case ops.HeartbeatRuns(owner, run_ids):
                return [self._heartbeat(owner, run_ids)], _nothing
            case ops.FinishRun(chat_uuid, run_id, status, error):
                return [self._run_finish(chat_uuid, run_id, status, error)], _first_run
            case ops.FinalizeRunRecords(chat_uuid, run_id, status):
                return self._run_records_finalize(chat_uuid, run_id, status), _row_count
        raise AssertionError(f"unknown operation {op!r}")

    async def _apply(
        self, batch: Sequence[ops.Op], *, returning: bool = True, background: bool = False
    ) -> list[Any]:
        """Every operation's statements in one transaction and one hop to the database thread.

        ``background`` (a storage agent's flush): outside a transaction the batch waits
        behind the other writes that queue, so a new run's set-up goes first.
        """
        plans = [self._plan(op) for op in batch]
        statements = [statement for planned, _ in plans for statement in planned]
        if not returning:
            for statement in statements:
                statement.sql = _UNRETURNED.get(statement.sql, statement.sql)
        try:
            results = await self._run(*statements, background=background) if statements else []
        except ConflictError as exc:
            if _ONE_RUNNING_RUN not in str(exc):
                raise
            raise await self._run_live(batch) from exc
        if not returning:
            return []
        finished: list[Any] = []
        at = 0
        for planned, finish in plans:
            finished.append(await finish(results[at : at + len(planned)]))
            at += len(planned)
        return finished

    async def _run_live(self, batch: Sequence[ops.Op]) -> RunLiveError:
        """The refusal of a ``StartRun`` whose chat already has an exclusive running run."""
        chat_uuid = next(op.run.chat_uuid for op in batch if isinstance(op, ops.StartRun))
        # (Only a run's insert can break that index: no other write sets a run running.)
        live = await self._fetch(
            "SELECT run_id FROM runs WHERE chat_uuid = ? AND status = 'running' AND exclusive = 1",
            (str(chat_uuid),),
            small=True,
        )
        return RunLiveError(chat_uuid, live[0][0] if live else None)


async def _nothing(results: list[list[Any]]) -> None:
    return None


async def _first_run(results: list[list[Any]]) -> models.Run | None:
    rows = results[0]
    return load_run(rows[0]) if rows else None


async def _row_count(results: list[list[Any]]) -> int:
    return sum(len(rows) for rows in results)


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
                (version, _ts(models.utcnow())),
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


def _translate(exc: sqlite3.Error, timeout: float | None = None) -> Exception:
    """Map a driver error to threadstore's error tree (``timeout``: the store's)."""
    text = str(exc)
    if (exc.sqlite_errorcode or 0) & 0xFF in BUSY_CODES:
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
        if "FOREIGN KEY" in text or "NOT NULL constraint failed: messages.chat_uuid" in text:
            return NotFoundError(f"a referenced chat or message does not exist ({text})")
        if "UNIQUE" in text:
            return ConflictError(f"a record with this id already exists ({text})")
    return exc
