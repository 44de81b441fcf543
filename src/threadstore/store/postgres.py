"""The PostgreSQL backend, on asyncpg: for apps whose replicas share one database.

Every call outside a ``transaction()`` borrows a connection for its statements and
gives it back; a transaction keeps one connection for its whole block, and every
store call the same task makes inside the block runs on it. Concurrency is the
database's: each write is one statement that sets only the columns it was given,
creates are ``INSERT ... ON CONFLICT``, appends to one chat take its row lock so
they chain one after another, and nothing ever upserts a chat or a message, so a
late write to a deleted chat finds nothing to write to.

Whole histories are cached per store (``history_cache_messages``, as on SQLite) and
reused while their chat's ``version`` is unchanged: every statement that changes a
chat's messages, tool calls or reasoning moves that version in its own transaction,
so a writer in any process invalidates every reader's copy, and a repeated read is
one indexed lookup.

A store that made its own pool keeps the connections it borrowed, idle, between
calls instead of handing each back: asyncpg's release costs a shielded task and
several event-loop turns, about as much as the statement itself on small machines.
They return to the pool on error and on ``close()``. A pool the app passed in is
used plainly, so the store never sits on connections the app may need.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from datetime import datetime
from types import TracebackType
from typing import Any
from uuid import UUID

import asyncpg

from threadstore.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    MigrationError,
    NotFoundError,
    RunLiveError,
    StoreError,
)
from threadstore.models import (
    FORMAT_VERSION,
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
    Reasoning,
    Run,
    RunStatus,
    ToolCall,
    utcnow,
)
from threadstore.store import postgres_schema as sql
from threadstore.store.base import (
    BranchPage,
    ChatField,
    ChatFilter,
    MessageKey,
    Store,
    TreeNode,
)
from threadstore.store.history_cache import DEFAULT_HISTORY_CACHE_MESSAGES, HistoryCache
from threadstore.store.offload import off_loop
from threadstore.store.ops import UpdateMessage, Write
from threadstore.store.postgres_events import PostgresRunEvents
from threadstore.store.records import split_update
from threadstore.store.rows import RowLoader, attach_rows
from threadstore.store.sql import (
    CHAT_FIELD_ENCODERS,
    JSON_ENCODERS,
    UPDATABLE,
    InsertPlans,
    Plan,
    chat_values,
    created_child,
    created_message,
    load_run,
    params,
    record_values,
    update_value,
)

__all__ = ["PostgresStore"]

_CHAT_FIELDS: dict[str, str] = {"name": "name", "state": "state", "metadata": "metadata"}
"""The column of each directly set chat field (column names are only taken from here)."""

_CREATE_ATTEMPTS = 5
"""How often create_chat retries when the chat it conflicted with is deleted meanwhile."""

_Held = tuple[asyncpg.Connection, "asyncio.Task[Any] | None"]


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Pool reset hook: skip asyncpg's reset query on release.

    The store never changes session state (no SET, LISTEN, cursors or session
    advisory locks), and asyncpg still rolls back an open transaction itself, so
    the default ``RESET ALL`` round trip on every release would buy nothing.
    """


_UTC_ZONES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Zulu"})

_SESSION = {"application_name": "threadstore", "DateStyle": "ISO", "TimeZone": "UTC"}
"""Session settings of the store's own pool: ISO 8601 timestamps in UTC, which reads parse
faster than asyncpg decodes binary ones (see ``postgres_schema._select``)."""


def _iso_times(conn: asyncpg.Connection) -> bool:
    """Whether this session prints timestamps as ISO 8601 text in UTC, which reads can parse."""
    settings = conn.get_settings()
    return bool(
        getattr(settings, "DateStyle", "").startswith("ISO")
        and getattr(settings, "TimeZone", "") in _UTC_ZONES
    )


# asyncpg takes uuids, times and booleans as they are; JSON goes as text.
_PLANS = InsertPlans(JSON_ENCODERS)


class _Lease:
    """``async with`` a connection of a store (see ``PostgresStore._connection``).

    A class rather than a generator-based context manager: every store call enters one.
    """

    __slots__ = ("_conn", "_join", "_pool", "_store")

    def __init__(self, store: PostgresStore, *, join: bool) -> None:
        self._store = store
        self._join = join
        self._pool: asyncpg.Pool | None = None

    async def __aenter__(self) -> asyncpg.Connection:
        store = self._store
        if self._join:
            held = store._held.get()
            if held is not None and held[1] is asyncio.current_task():
                return held[0]
        self._pool = pool = store.pool
        self._conn: asyncpg.Connection = await store._checkout(pool)
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pool is not None:
            await self._store._give_back(self._pool, self._conn, clean=exc_type is None)


class PostgresStore(Store):
    """Store backed by a PostgreSQL database through an asyncpg pool."""

    def __init__(
        self,
        url: str = "postgresql://localhost/threadstore",
        *,
        pool: asyncpg.Pool | None = None,
        min_size: int = 1,
        max_size: int = 10,
        history_cache_messages: int = DEFAULT_HISTORY_CACHE_MESSAGES,
        **models: Any,
    ) -> None:
        super().__init__(**models)
        if not url.lower().startswith(("postgres://", "postgresql://")):
            raise ConfigurationError(f"not a PostgreSQL URL: {url!r}")
        self.url = url
        self._pool = pool
        self._owns_pool = pool is None
        self._idle: list[asyncpg.Connection] = []
        self._waiting = 0
        self._min_size = min_size
        self._max_size = max_size
        self.history_cache: HistoryCache | None = (
            HistoryCache(history_cache_messages) if history_cache_messages else None
        )
        """Histories read before, reused while their chat's version is unchanged."""
        self._held: ContextVar[_Held | None] = ContextVar(
            f"threadstore_pg_{id(self)}", default=None
        )
        self._chats = RowLoader(self.chat_model, Chat, sql.CHAT_COLUMNS, self.codecs.chat)
        self._messages = RowLoader(
            self.message_model, Message, sql.MESSAGE_ROW, self.codecs.message
        )
        self._tool_calls = RowLoader(
            self.tool_call_model, ToolCall, sql.TOOL_CALL_COLUMNS, self.codecs.tool_call
        )
        self._reasonings = RowLoader(
            self.reasoning_model, Reasoning, sql.REASONING_COLUMNS, self.codecs.reasoning
        )
        self._run_events = PostgresRunEvents(self)

    def run_events(self) -> PostgresRunEvents:
        """The relayed run-events log in this database (shared by every process using it)."""
        return self._run_events

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def pool(self) -> asyncpg.Pool:
        """The asyncpg pool the store runs on (its own, or the one the app passed in)."""
        if self._pool is None:
            raise ConfigurationError("the store is not connected: use open_store() or connect()")
        return self._pool

    async def connect(self) -> None:
        """Create the connection pool (a no-op when the app passed its own)."""
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=self._min_size,
                max_size=self._max_size,
                reset=_keep_session,
                server_settings=_SESSION,
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise ConfigurationError(f"cannot connect to {self.url!r}: {exc}") from exc

    async def close(self) -> None:
        """Close the pool if the store created it; an app's own pool stays open."""
        pool, self._pool = self._pool, None
        idle, self._idle = self._idle, []
        if pool is None:
            return
        for conn in idle:
            await pool.release(conn)
        if self._owns_pool:
            await pool.close()

    async def setup(self) -> None:
        """Apply pending migrations in order, each recorded in ``threadstore_migrations``.

        An advisory lock serializes concurrent calls (several processes starting at
        once); each one after the first finds nothing left to do.
        """
        async with self.borrow() as conn, conn.transaction():
            await conn.execute(sql.LOCK_MIGRATIONS, sql.MIGRATION_LOCK_KEY)
            if not await conn.fetchval(sql.MIGRATIONS_TABLE_EXISTS):
                await conn.execute(sql.CREATE_MIGRATIONS_TABLE)
            current = int(await conn.fetchval(sql.SCHEMA_VERSION))
            if current > len(sql.MIGRATIONS):
                raise MigrationError(
                    f"database schema version {current} is newer than this threadstore"
                    f" ({len(sql.MIGRATIONS)}); upgrade threadstore"
                )
            for version in range(current + 1, len(sql.MIGRATIONS) + 1):
                await conn.execute(sql.MIGRATIONS[version - 1])
                await conn.execute(sql.RECORD_MIGRATION, version, utcnow())

    async def schema_version(self) -> int:
        """Return the highest applied migration (0 for an empty database)."""
        async with self._connection() as conn:
            if not await conn.fetchval(sql.MIGRATIONS_TABLE_EXISTS):
                return 0
            return int(await conn.fetchval(sql.SCHEMA_VERSION))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        if self._in_transaction():
            yield
            return
        async with self.borrow() as conn, conn.transaction():
            token = self._held.set((conn, asyncio.current_task()))
            try:
                yield
            finally:
                self._held.reset(token)

    # --- connections -----------------------------------------------------------------------

    def _in_transaction(self) -> bool:
        """Whether the current task is inside this store's ``transaction()``."""
        held = self._held.get()
        return held is not None and held[1] is asyncio.current_task()

    def _connection(self) -> _Lease:
        """The current task's transaction connection, or one borrowed for this call."""
        return _Lease(self, join=True)

    def borrow(self) -> _Lease:
        """``async with`` a connection for the block: a kept idle one, else one from the pool.

        Also for statements on this store's schema made outside its methods (the
        run-events log): a direct ``pool.acquire()`` could wait on connections the
        store keeps idle.
        """
        return _Lease(self, join=False)

    async def _give_back(self, pool: asyncpg.Pool, conn: asyncpg.Connection, clean: bool) -> None:
        # Keep it only while no call of this store waits on the pool: a kept connection
        # is one the pool cannot hand to anyone. After an error the pool resets it, or
        # replaces it if it broke.
        if (
            clean
            and self._owns_pool
            and pool is self._pool
            and not self._waiting
            and not conn.is_in_transaction()
        ):
            self._idle.append(conn)
        else:
            await pool.release(conn)

    async def _checkout(self, pool: asyncpg.Pool) -> asyncpg.Connection:
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
            conn = await pool.acquire()
        finally:
            self._waiting -= 1
        return conn

    # --- statement helpers ---------------------------------------------------------------

    async def _fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self._connection() as conn:
            return await self._fetch_on(conn, query, *args)

    async def _fetch_on(
        self, conn: asyncpg.Connection, query: str, *args: Any
    ) -> list[asyncpg.Record]:
        try:
            rows: list[asyncpg.Record] = await conn.fetch(query, *args)
        except asyncpg.PostgresError as exc:
            raise _translate(exc) from exc
        return rows

    async def _fetch_planned(
        self, conn: asyncpg.Connection, query: str, *args: Any
    ) -> list[asyncpg.Record]:
        """:meth:`_fetch_on` with a statement prepared for this call, planned for its values.

        A cached statement gets a plan generic over its parameters after a few calls; for
        a range whose selectivity depends on the value (``chat_version > $2``) that plan
        reads the whole chat.
        """
        try:
            statement = await conn.prepare(query)
            rows: list[asyncpg.Record] = await statement.fetch(*args)
        except asyncpg.PostgresError as exc:
            raise _translate(exc) from exc
        return rows

    async def _messages_with_children(
        self, conn: asyncpg.Connection, rows: Sequence[asyncpg.Record]
    ) -> list[Message]:
        """Build messages (rows in ``MESSAGE_ROW`` order) with their tool calls and reasoning.

        Two more statements fetch the children by their parents' ids, only when some
        message has any.
        """
        messages: list[Message] = await off_loop(rows, self._messages.load, rows)
        parents = [m.message_uuid for m, row in zip(messages, rows, strict=True) if row[-1]]
        if not parents:
            return messages
        where = " WHERE message_uuid = ANY($1::uuid[])"
        iso = _iso_times(conn)
        tool_rows = await self._fetch_on(conn, sql.TOOL_CALL_SELECT[iso] + where, parents)
        reasoning_rows = await self._fetch_on(conn, sql.REASONING_SELECT[iso] + where, parents)
        await attach_rows(messages, self._tool_calls, tool_rows, self._reasonings, reasoning_rows)
        return messages

    async def _read_messages(self, suffix: str, *args: Any) -> list[Message]:
        """Messages selected by ``suffix`` (joins, WHERE...), with their children."""
        async with self._connection() as conn:
            query = sql.MESSAGE_SELECT[_iso_times(conn)] + suffix
            rows = await self._fetch_on(conn, query, *args)
            return await self._messages_with_children(conn, rows)

    async def _select(self, forms: dict[bool, str], suffix: str, *args: Any) -> list[Any]:
        """Rows of a read given in its two forms (see ``postgres_schema``), then ``suffix``."""
        async with self._connection() as conn:
            return await self._fetch_on(conn, forms[_iso_times(conn)] + suffix, *args)

    # --- chats ---------------------------------------------------------------------------

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        values = chat_values(chat_data)
        args = params(_PLANS.chat, values)
        async with self._connection() as conn:
            for _ in range(_CREATE_ATTEMPTS):
                rows = await self._fetch_on(conn, sql.INSERT_CHAT, *args)
                if not rows:
                    # Another caller created this thread first: return its chat, unless
                    # it was deleted in between, in which case insert again.
                    rows = await self._fetch_on(
                        conn,
                        sql.CHAT_SELECT[_iso_times(conn)]
                        + " WHERE user_uuid = $1 AND thread_id = $2 AND deleted_at IS NULL",
                        values["user_uuid"],
                        values["thread_id"],
                    )
                if not rows:  # it may be soft-deleted: its thread is free, purge it
                    await self._fetch_on(
                        conn, sql.PURGE_DELETED_THREAD, values["user_uuid"], values["thread_id"]
                    )
                if rows:
                    chat: Chat = self._chats.load(rows)[0]
                    return chat
        raise ConflictError(
            f"thread {values['thread_id']!r} kept being created and deleted concurrently"
        )

    @staticmethod
    def _chat_conditions(where: ChatFilter, args: list[Any]) -> list[str]:
        """The WHERE conditions of ``where``; their parameters are appended to ``args``."""
        conditions: list[str] = []
        for column, value in where.equalities():
            args.append(value)
            conditions.append(f"{column} = ${len(args)}")
        conditions.append("deleted_at IS NOT NULL" if where.deleted else "deleted_at IS NULL")
        for bound, op in ((where.deleted_after, ">="), (where.deleted_before, "<")):
            if bound is not None:
                args.append(bound)
                conditions.append(f"deleted_at {op} ${len(args)}")
        if where.after is not None:
            args += [where.after[0], UUID(where.after[1])]
            conditions.append(f"(updated_at, chat_uuid) < (${len(args) - 1}, ${len(args)})")
        if (pattern := where.name_like()) is not None:
            args.append(pattern)
            conditions.append(f"c.name ILIKE ${len(args)} ESCAPE '\\'")
        return conditions

    async def _select_chats(self, where: ChatFilter) -> Sequence[Chat]:
        args: list[Any] = []
        suffix = " WHERE " + " AND ".join(self._chat_conditions(where, args))
        suffix += " ORDER BY c.updated_at DESC, c.chat_uuid DESC"
        if where.limit is not None:
            args.append(where.limit)
            suffix += f" LIMIT ${len(args)}"
        chats: list[Chat] = self._chats.load(await self._select(sql.CHAT_SELECT, suffix, *args))
        return chats

    async def _set_chat_field(self, chat_uuid: UUID, field: ChatField, value: Any) -> Chat | None:
        # One UPDATE of one column: concurrent renames serialize on the row lock and
        # the last one wins whole; no read-modify-write can lose a concurrent change.
        rows = await self._fetch(
            f"UPDATE chats SET {_CHAT_FIELDS[field]} = $1, updated_at = $2 WHERE chat_uuid = $3"
            + sql.CHAT_RETURNING,
            CHAT_FIELD_ENCODERS[field](value),
            utcnow(),
            chat_uuid,
        )
        return self._chats.load(rows)[0] if rows else None

    async def _select_tree(self, chat_uuid: UUID) -> list[TreeNode]:
        rows = await self._fetch(sql.SELECT_TREE, chat_uuid)
        return [TreeNode(*row) for row in rows]

    async def _make_root(self, chat_uuid: UUID, message_uuid: UUID) -> None:
        await self._fetch(sql.MAKE_ROOT, chat_uuid, message_uuid)

    async def set_active_leaf(self, chat_uuid: UUID, message_uuid: UUID) -> Chat | None:
        rows = await self._fetch(sql.SET_ACTIVE_LEAF, chat_uuid, message_uuid, utcnow())
        if not rows:
            raise NotFoundError(f"message {message_uuid} is not in chat {chat_uuid}")
        chat: Chat = self._chats.load(rows)[0]
        return chat

    async def _set_deleted_at(self, where: ChatFilter, deleted_at: datetime | None) -> Chat | None:
        args: list[Any] = [deleted_at]
        conditions = self._chat_conditions(where, args)
        rows = await self._fetch(
            "UPDATE chats c SET deleted_at = $1 WHERE "
            + " AND ".join(conditions)
            + sql.CHAT_RETURNING,
            *args,
        )
        return self._chats.load(rows)[0] if rows else None

    async def _delete_chat(self, chat_uuid: UUID) -> Chat | None:
        # Foreign keys cascade to messages, their tool calls and reasoning, and runs.
        rows = await self._fetch(sql.DELETE_CHAT, chat_uuid)
        if self.history_cache is not None:
            self.history_cache.discard(chat_uuid)
        return self._chats.load(rows)[0] if rows else None

    # --- messages ------------------------------------------------------------------------

    async def create_message(self, message_data: MessageCreate) -> Message:
        data = message_data
        # The append hot path: the DTO's fields from its dict, enums (str subclasses)
        # as they are, and no extras to split off a stock DTO.
        fields = data.__dict__
        if fields["chat_uuid"] is None:
            raise NotFoundError("MessageCreate.chat_uuid is required")
        created = fields["created_at"] or utcnow()
        values = record_values(data, created)
        async with self._connection() as conn:
            rows = await self._fetch_on(conn, sql.INSERT_MESSAGE, *params(_PLANS.message, values))
            if not rows:
                await self._explain_missing_insert(conn, data)
        seq, parent = rows[0]
        return created_message(
            self.message_model, data, seq=seq, parent_uuid=parent, created_at=created
        )

    async def _explain_missing_insert(self, conn: asyncpg.Connection, data: MessageCreate) -> None:
        """Raise the error that made INSERT_MESSAGE write nothing."""
        rows = await self._fetch_on(
            conn, sql.MESSAGE_INSERT_DIAGNOSIS, data.chat_uuid, data.message_uuid
        )
        chat_exists, uuid_taken = rows[0]
        if not chat_exists:
            raise NotFoundError(f"chat {data.chat_uuid} does not exist")
        if uuid_taken:
            raise ConflictError(f"message {data.message_uuid} already exists")
        raise NotFoundError(f"parent message {data.parent_uuid} is not in chat {data.chat_uuid}")

    @staticmethod
    def _update_statement(
        table: str, key: str, uuid: UUID, update: Any, base_cls: Any, columns: Sequence[str]
    ) -> tuple[str, list[Any]]:
        """Return an UPDATE that sets only the update's explicitly-set fields, and its args.

        The statement also moves the chat's version and returns ``columns``.
        """
        base, extra = split_update(update, base_cls)
        assignments: list[str] = []
        args: list[Any] = []
        for column, value in base.items():
            if column in UPDATABLE[table]:
                args.append(update_value(column, value, JSON_ENCODERS))
                assignments.append(f"{column} = ${len(args)}")
        if extra:
            # jsonb || replaces each given key whole, in place: a concurrent patch of
            # other extra fields is never read back and lost.
            args.append(extra)
            assignments.append(f"extra = COALESCE(extra, '{{}}'::jsonb) || ${len(args)}::jsonb")
        args.append(utcnow())
        assignments.append(f"updated_at = ${len(args)}")
        args.append(uuid)
        query = sql.versioned_update(table, key, ", ".join(assignments), f"${len(args)}", columns)
        return query, args

    async def update_message(self, message_uuid: UUID, update: MessageUpdate) -> Message | None:
        query, args = self._update_statement(
            "messages", "message_uuid", message_uuid, update, MessageUpdate, sql.MESSAGE_ROW
        )
        async with self._connection() as conn:
            rows = await self._fetch_on(conn, query, *args)
            messages = await self._messages_with_children(conn, rows)
        return messages[0] if messages else None

    async def _apply_write(self, write: Write) -> None:
        if not isinstance(write, UpdateMessage):
            await super()._apply_write(write)
            return
        # The batch returns nothing: the message's tool calls and reasoning steps,
        # which update_message reads back to return it whole, are not read.
        message_uuid, update = write.message_uuid, write.update
        query, args = self._update_statement(
            "messages", "message_uuid", message_uuid, update, MessageUpdate, sql.MESSAGE_ROW
        )
        async with self._connection() as conn:
            await self._fetch_on(conn, query, *args)

    async def create_message_tool_call(self, data: MessageToolCallCreate) -> ToolCall:
        seq, now = await self._insert_child(sql.INSERT_TOOL_CALL, _PLANS.tool_call, data)
        tool_call: ToolCall = created_child(self.tool_call_model, data, seq=seq, created_at=now)
        return tool_call

    async def _insert_child(
        self, query: str, plan: Plan, data: MessageToolCallCreate | MessageReasoningCreate
    ) -> tuple[int, datetime]:
        """Insert a tool call or reasoning step; return its ``seq`` and creation time."""
        kind = "tool call" if isinstance(data, MessageToolCallCreate) else "reasoning"
        now = utcnow()
        values = record_values(data, now)
        async with self._connection() as conn:
            rows = await self._fetch_on(conn, query, *params(plan, values))
            if not rows:
                if not (await self._fetch_on(conn, sql.MESSAGE_EXISTS, data.message_uuid))[0][0]:
                    raise NotFoundError(f"parent message {data.message_uuid} does not exist")
                raise ConflictError(f"{kind} {data.uuid} already exists")
        return int(rows[0][0]), now

    async def update_message_tool_call(
        self, uuid: UUID, update: MessageToolCallUpdate
    ) -> ToolCall | None:
        query, args = self._update_statement(
            "tool_calls", "uuid", uuid, update, MessageToolCallUpdate, sql.TOOL_CALL_COLUMNS
        )
        rows = await self._fetch(query, *args)
        loaded: list[ToolCall] = self._tool_calls.load(rows)
        return loaded[0] if loaded else None

    async def create_message_reasoning(self, data: MessageReasoningCreate) -> Reasoning:
        seq, now = await self._insert_child(sql.INSERT_REASONING, _PLANS.reasoning, data)
        reasoning: Reasoning = created_child(self.reasoning_model, data, seq=seq, created_at=now)
        return reasoning

    async def update_message_reasoning(
        self, uuid: UUID, update: MessageReasoningUpdate
    ) -> Reasoning | None:
        query, args = self._update_statement(
            "reasonings", "uuid", uuid, update, MessageReasoningUpdate, sql.REASONING_COLUMNS
        )
        rows = await self._fetch(query, *args)
        loaded: list[Reasoning] = self._reasonings.load(rows)
        return loaded[0] if loaded else None

    async def _find_message(self, key: MessageKey) -> Message | None:
        conditions: list[str] = []
        args: list[Any] = []
        for column, value in key.equalities():
            args.append(value)
            conditions.append(f"m.{column} = ${len(args)}")
        conditions.append(sql.CHAT_IS_LIVE)
        suffix = " WHERE " + " AND ".join(conditions) + " ORDER BY m.seq LIMIT 1"
        messages = await self._read_messages(suffix, *args)
        return messages[0] if messages else None

    async def get_tool_call_by_agui_id(
        self, message_uuid: UUID, tool_call_id: str
    ) -> ToolCall | None:
        rows = await self._select(
            sql.TOOL_CALL_SELECT,
            " WHERE message_uuid = $1 AND tool_call_id = $2 LIMIT 1",
            message_uuid,
            tool_call_id,
        )
        loaded: list[ToolCall] = self._tool_calls.load(rows)
        return loaded[0] if loaded else None

    async def _history_version(self, chat_uuid: UUID) -> Hashable | None:
        # The leaf too: an extended history must end where the chat's branch ends.
        rows = await self._fetch(sql.CHAT_VERSION, chat_uuid)
        return (int(rows[0][0]), rows[0][1]) if rows else None

    async def _select_changed(
        self, chat_uuid: UUID, since: Hashable, version: Hashable
    ) -> tuple[list[Message], UUID | None] | None:
        assert isinstance(since, tuple) and isinstance(version, tuple)
        async with self._connection() as conn:
            query = sql.MESSAGE_SELECT[_iso_times(conn)] + sql.CHANGED_SINCE
            rows = await self._fetch_planned(conn, query, chat_uuid, since[0])
            return await self._messages_with_children(conn, rows), version[1]

    async def _select_branch(
        self, chat_uuid: UUID, page: BranchPage, version: Hashable | None
    ) -> list[Message]:
        where = sql.BRANCH_FILTER
        args: list[Any] = [chat_uuid]
        if page.after is not None:
            args.append(page.after)
            where += f" AND m.seq > ${len(args)}"
        if page.before is not None:
            args.append(page.before)
            where += f" AND m.seq < ${len(args)}"
        suffix = " WHERE " + where
        suffix += " ORDER BY m.seq DESC" if page.newest_first else " ORDER BY m.seq"
        if page.limit is not None:
            args.append(page.limit)
            suffix += f" LIMIT ${len(args)}"
        async with self._connection() as conn:
            rows = await self._fetch_on(conn, sql.MESSAGE_SELECT[_iso_times(conn)] + suffix, *args)
            if page.newest_first:
                rows.reverse()
            return await self._messages_with_children(conn, rows)

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        if not chat_uuids:
            return {}
        messages = await self._read_messages(sql.LAST_MESSAGES, chat_uuids)
        return {m.chat_uuid: m for m in messages}

    # --- runs ----------------------------------------------------------------------------

    async def start_run(self, run: Run) -> Run:
        async with self._connection() as conn:
            values = {**run.__dict__, "format_version": FORMAT_VERSION}
            try:
                rows = await conn.fetch(sql.INSERT_RUN, *params(_PLANS.run, values))
            except asyncpg.UniqueViolationError as exc:
                if exc.constraint_name != sql.ONE_RUNNING_RUN:
                    raise _translate(exc) from exc
                # On a connection of its own: a transaction this call joined has failed.
                async with self.borrow() as other:
                    live = await other.fetchval(sql.RUNNING_RUN_OF_CHAT, run.chat_uuid)
                raise RunLiveError(run.chat_uuid, live) from exc
            except asyncpg.PostgresError as exc:
                raise _translate(exc) from exc
            if not rows:
                rows = await self._fetch_on(
                    conn,
                    sql.RUN_SELECT + " WHERE chat_uuid = $1 AND run_id = $2",
                    run.chat_uuid,
                    run.run_id,
                )
        if not rows:
            raise NotFoundError(f"chat {run.chat_uuid} does not exist")
        return load_run(rows[0])

    async def heartbeat_runs(self, owner: str, run_ids: Sequence[tuple[UUID, str]]) -> None:
        if not run_ids:
            return
        await self._fetch(
            sql.HEARTBEAT_RUNS,
            utcnow(),
            owner,
            [chat for chat, _ in run_ids],
            [run for _, run in run_ids],
        )

    async def finish_run(
        self, chat_uuid: UUID, run_id: str, status: RunStatus, error: str | None = None
    ) -> Run | None:
        rows = await self._fetch(sql.FINISH_RUN, status.value, error, utcnow(), chat_uuid, run_id)
        return load_run(rows[0]) if rows else None

    async def get_run(self, chat_uuid: UUID, run_id: str) -> Run | None:
        rows = await self._fetch(
            sql.RUN_SELECT + " WHERE chat_uuid = $1 AND run_id = $2", chat_uuid, run_id
        )
        return load_run(rows[0]) if rows else None

    async def get_stale_runs(self, older_than: datetime) -> Sequence[Run]:
        rows = await self._fetch(sql.STALE_RUNS, older_than)
        return [load_run(row) for row in rows]

    async def finalize_run_records(
        self, chat_uuid: UUID, run_id: str, status: MessageStatus
    ) -> int:
        rows = await self._fetch(
            sql.FINALIZE_RUN_RECORDS, status.value, utcnow(), chat_uuid, run_id
        )
        return int(rows[0][0])


def _translate(exc: asyncpg.PostgresError) -> Exception:
    """Map a server error to threadstore's error tree."""
    if isinstance(exc, asyncpg.UndefinedTableError):
        return MigrationError(f"{exc}: the schema is missing; run `threadstore migrate` or setup()")
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
