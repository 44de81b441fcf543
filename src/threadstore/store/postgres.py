"""The PostgreSQL backend, on asyncpg: for apps whose replicas share one database.

Connections (a call's own, or its task's ``transaction()``'s) are
``store/_postgres_connections.py``'s. Concurrency is the database's: each write is
one statement that sets only the columns it was given, creates are ``INSERT ... ON
CONFLICT``, appends to one chat take its row lock so they chain one after another,
and nothing ever upserts a chat or a message, so a late write to a deleted chat
finds nothing to write to.

Whole histories are cached per store (``history_cache_messages``, as on SQLite) and
reused while their chat's ``version`` is unchanged: every statement that changes a
chat's messages, tool calls or reasoning moves that version in its own transaction,
so a writer in any process invalidates every reader's copy, and a repeated read is
one indexed lookup.

Background flushes (a storage agent's ``apply_writes``) hold at most all but
:data:`FOREGROUND_CONNECTIONS` of the pool's connections at once; the rest wait for a
turn outside the pool. So a burst of other runs' flushes never takes the whole pool: a
run's set-up, a page read or an API write finds connections the flushes cannot hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from threadstore import models
from threadstore._steps import off_loop
from threadstore.errors import (
    ConfigurationError,
    ConflictError,
    MigrationError,
    NotFoundError,
    RunLiveError,
)
from threadstore.store import _postgres_schema as schema
from threadstore.store import _postgres_sql as sql
from threadstore.store import _sql as shared
from threadstore.store import ops
from threadstore.store._base import Store
from threadstore.store._history import DEFAULT_HISTORY_CACHE_MESSAGES, HistoryCache
from threadstore.store._postgres_connections import Connections, Lease, iso_times, translate
from threadstore.store._postgres_events import PostgresRunEvents
from threadstore.store._postgres_lifecycle import PostgresLifecycle
from threadstore.store._postgres_search import PostgresSearch
from threadstore.store._postgres_usage import PostgresUsage
from threadstore.store._queries import BranchPage, ChatFilter, MessageKey, RunFilter, TreeNode
from threadstore.store._records import split_update
from threadstore.store._rows import EntryLoader, RowLoader, attach_rows
from threadstore.store._timeouts import split_timeout

__all__ = ["FOREGROUND_CONNECTIONS", "PostgresStore"]

FOREGROUND_CONNECTIONS = 2
"""Connections of the pool that background flushes leave to other calls (module docstring).

A pool of at most this many connections lets flushes take one connection at a time.
"""

_CREATE_ATTEMPTS = 5
"""How often create_chat retries when the chat it conflicted with is deleted meanwhile."""

_SETUP_TIMEOUT = 3600.0
"""Seconds a migration statement may take (the store's timeout is for ordinary calls)."""


# asyncpg takes uuids, times and booleans as they are; JSON goes as text.
_PLANS = shared.InsertPlans(shared.JSON_ENCODERS)


def _arg(args: list[Any], value: Any) -> str:
    """Append a statement's next parameter to ``args``; its placeholder."""
    args.append(value)
    return f"${len(args)}"


class PostgresStore(Store):
    """Store backed by a PostgreSQL database through an asyncpg pool."""

    timeout: float
    _search: PostgresSearch

    def __init__(
        self,
        url: str = "postgresql://localhost/threadstore",
        *,
        pool: asyncpg.Pool | None = None,
        min_size: int = 1,
        max_size: int = 10,
        history_cache_messages: int = DEFAULT_HISTORY_CACHE_MESSAGES,
        timeout: float | None = None,
        search_language: str | None = None,
        **model_classes: Any,
    ) -> None:
        super().__init__(**model_classes)
        if not url.lower().startswith(("postgres://", "postgresql://")):
            raise ConfigurationError(f"not a PostgreSQL URL: {url!r}")
        self.url, self.timeout = split_timeout(url, timeout)
        """The URL the pool connects to, and the seconds any one statement, connection or
        wait for a connection may take before :class:`StoreUnavailableError` (the
        ``timeout`` keyword, else ``?timeout=`` in the URL, else 5)."""
        self.connections = Connections(
            self.url, self.timeout, pool=pool, min_size=min_size, max_size=max_size
        )
        self._flush_slots: asyncio.Semaphore | None = None
        """Turns of background flushes at the pool (set when the pool is known)."""
        self.history_cache: HistoryCache | None = (
            HistoryCache(history_cache_messages) if history_cache_messages else None
        )
        """Histories read before, reused while their chat's version is unchanged."""
        self._chats = RowLoader(self.chat_model, models.Chat, sql.CHAT_COLUMNS, self.codecs.chat)
        self._messages = RowLoader(
            self.message_model, models.Message, sql.MESSAGE_ROW, self.codecs.message
        )
        self._tool_calls = RowLoader(
            self.tool_call_model, models.ToolCall, sql.TOOL_CALL_COLUMNS, self.codecs.tool_call
        )
        self._reasonings = RowLoader(
            self.reasoning_model, models.Reasoning, sql.REASONING_COLUMNS, self.codecs.reasoning
        )
        self._entries = EntryLoader(self._messages, self._tool_calls, self._reasonings)
        self._run_events = PostgresRunEvents(self)
        self._lifecycle = PostgresLifecycle(self)
        self._search = PostgresSearch(self, search_language)
        """Full-text search; ``search_language``: its text search configuration (``setup``
        sets it; ``None`` keeps the database's, ``simple`` at first)."""
        self._usage = PostgresUsage(self)

    def run_events(self) -> PostgresRunEvents:
        """The relayed run-events log in this database (shared by every process using it)."""
        return self._run_events

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def pool(self) -> asyncpg.Pool:
        """The asyncpg pool the store runs on (its own, or the one the app passed in)."""
        return self.connections.pool

    async def connect(self) -> None:
        """Create the connection pool (a no-op when the app passed its own)."""
        await self.connections.connect()

    async def close(self) -> None:
        """Close the pool if the store created it; an app's own pool stays open."""
        await self._search.stop()
        self._flush_slots = None
        await self.connections.close()

    async def setup(self) -> None:
        """Apply pending migrations in order, each recorded in ``threadstore_migrations``.

        An advisory lock serializes concurrent calls (several processes starting at
        once); each one after the first finds nothing left to do.
        """
        wait = _SETUP_TIMEOUT  # another process's migrations, then ours, may take long
        async with self.borrow() as conn, conn.transaction():
            await conn.execute(schema.LOCK_MIGRATIONS, schema.MIGRATION_LOCK_KEY, timeout=wait)
            if not await conn.fetchval(schema.MIGRATIONS_TABLE_EXISTS, timeout=wait):
                await conn.execute(schema.CREATE_MIGRATIONS_TABLE, timeout=wait)
            current = int(await conn.fetchval(schema.SCHEMA_VERSION, timeout=wait))
            if current > len(schema.MIGRATIONS):
                raise MigrationError(
                    f"database schema version {current} is newer than this threadstore"
                    f" ({len(schema.MIGRATIONS)}); upgrade threadstore"
                )
            for version in range(current + 1, len(schema.MIGRATIONS) + 1):
                await conn.execute(schema.MIGRATIONS[version - 1], timeout=wait)
                await conn.execute(schema.RECORD_MIGRATION, version, models.utcnow(), timeout=wait)
        await self._search.start()

    async def schema_version(self) -> int:
        """Return the highest applied migration (0 for an empty database)."""
        async with self._connection() as conn:
            if not await conn.fetchval(schema.MIGRATIONS_TABLE_EXISTS):
                return 0
            return int(await conn.fetchval(schema.SCHEMA_VERSION))

    def transaction(self) -> AbstractAsyncContextManager[None]:
        return self.connections.transaction()

    def _in_transaction(self) -> bool:
        return self.connections.in_transaction()

    def _connection(self) -> Lease:
        """The current task's transaction connection, or one leased for this call."""
        return self.connections.lease(join=True)

    def borrow(self) -> Lease:
        """``async with`` a connection for the block: a kept idle one, else one from the pool.

        Also for statements on this store's schema made outside its methods (the
        run-events log): a direct ``pool.acquire()`` could wait on connections the
        store keeps idle.
        """
        return self.connections.lease(join=False)

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
            raise translate(exc) from exc
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
            raise translate(exc) from exc
        return rows

    async def _messages_with_children(
        self, conn: asyncpg.Connection, rows: Sequence[asyncpg.Record]
    ) -> list[models.Message]:
        """Build messages (rows in ``MESSAGE_ROW`` order) with their tool calls and reasoning.

        Two more statements fetch the children by their parents' ids, only when some
        message has any.
        """
        messages: list[models.Message] = await off_loop(rows, self._messages.load, rows)
        tool_rows, reasoning_rows = await self._child_rows(conn, rows)
        if tool_rows or reasoning_rows:
            await attach_rows(
                messages, self._tool_calls, tool_rows, self._reasonings, reasoning_rows
            )
        return messages

    async def _child_rows(
        self, conn: asyncpg.Connection, rows: Sequence[asyncpg.Record]
    ) -> tuple[list[asyncpg.Record], list[asyncpg.Record]]:
        """The tool call rows and reasoning rows of the messages of ``rows`` that have any."""
        uuid = self._entries.messages.column("message_uuid")
        parents = [row[uuid] for row in rows if row[-1]]
        if not parents:
            return [], []
        where = " WHERE message_uuid = ANY($1::uuid[])"
        iso = iso_times(conn)
        tool_rows = await self._fetch_on(conn, sql.TOOL_CALL_SELECT[iso] + where, parents)
        reasoning_rows = await self._fetch_on(conn, sql.REASONING_SELECT[iso] + where, parents)
        return tool_rows, reasoning_rows

    async def _read_entries(self, suffix: str, *args: Any, planned: bool = False) -> list[Any]:
        """The history entries (``store/_history.py``) of the messages ``suffix`` selects."""
        async with self._connection() as conn:
            query = sql.MESSAGE_SELECT[iso_times(conn)] + suffix
            rows = await (self._fetch_planned if planned else self._fetch_on)(conn, query, *args)
            tool_rows, reasoning_rows = await self._child_rows(conn, rows)
            return await off_loop(rows, self._entries.entries, rows, tool_rows, reasoning_rows)

    async def _read_messages(
        self, suffix: str, *args: Any, reverse: bool = False
    ) -> list[models.Message]:
        """Messages selected by ``suffix`` (joins, WHERE...), with their children."""
        async with self._connection() as conn:
            query = sql.MESSAGE_SELECT[iso_times(conn)] + suffix
            rows = await self._fetch_on(conn, query, *args)
            if reverse:
                rows.reverse()
            return await self._messages_with_children(conn, rows)

    async def _select(self, forms: dict[bool, str], suffix: str, *args: Any) -> list[Any]:
        """Rows of a read given in its two forms (see ``_postgres_sql``), then ``suffix``."""
        async with self._connection() as conn:
            return await self._fetch_on(conn, forms[iso_times(conn)] + suffix, *args)

    # --- chats ---------------------------------------------------------------------------

    async def _create_chat(self, chat_data: models.ChatCreate) -> models.Chat:
        values = shared.chat_values(chat_data)
        args = shared.params(_PLANS.chat, values)
        thread = values["user_uuid"], values["thread_id"]
        live = " WHERE user_uuid = $1 AND thread_id = $2 AND deleted_at IS NULL"
        async with self._connection() as conn:
            for _ in range(_CREATE_ATTEMPTS):
                rows = await self._fetch_on(conn, sql.INSERT_CHAT, *args)
                if not rows:
                    # Another caller created this thread first: return its chat, unless
                    # it was deleted in between, in which case insert again.
                    rows = await self._fetch_on(
                        conn, sql.CHAT_SELECT[iso_times(conn)] + live, *thread
                    )
                if not rows:  # it may be soft-deleted: its thread is free, purge it
                    await self._fetch_on(conn, sql.PURGE_DELETED_THREAD, *thread)
                if rows:
                    chat: models.Chat = self._chats.load(rows)[0]
                    return chat
        raise ConflictError(
            f"thread {values['thread_id']!r} kept being created and deleted concurrently"
        )

    @staticmethod
    def _chat_conditions(where: ChatFilter, args: list[Any]) -> str:
        """The WHERE conditions of ``where``; their parameters are appended to ``args``."""
        conditions = [f"{column} = {_arg(args, value)}" for column, value in where.equalities()]
        conditions.append("deleted_at IS NOT NULL" if where.deleted else "deleted_at IS NULL")
        for bound, op in ((where.deleted_after, ">="), (where.deleted_before, "<")):
            if bound is not None:
                conditions.append(f"deleted_at {op} {_arg(args, bound)}")
        if where.after is not None:
            at, uuid = _arg(args, where.after[0]), _arg(args, UUID(where.after[1]))
            conditions.append(f"(updated_at, chat_uuid) < ({at}, {uuid})")
        if (pattern := where.name_like()) is not None:
            conditions.append(f"c.name ILIKE {_arg(args, pattern)} ESCAPE '\\'")
        return " AND ".join(conditions)

    async def _select_chats(self, where: ChatFilter) -> Sequence[models.Chat]:
        args: list[Any] = []
        suffix = " WHERE " + self._chat_conditions(where, args)
        suffix += " ORDER BY c.updated_at DESC, c.chat_uuid DESC"
        if where.limit is not None:
            suffix += f" LIMIT {_arg(args, where.limit)}"
        return self._chats.load(await self._select(sql.CHAT_SELECT, suffix, *args))

    async def _write_chat(self, query: str, *args: Any) -> models.Chat | None:
        """The chat a write returned, or ``None``."""
        rows = await self._fetch(query, *args)
        return self._chats.load(rows)[0] if rows else None

    async def _set_chat_field(self, chat_uuid: UUID, field: str, value: Any) -> models.Chat | None:
        # One UPDATE of one column: concurrent renames serialize on the row lock and
        # the last one wins whole; no read-modify-write can lose a concurrent change.
        encoded = shared.CHAT_FIELD_ENCODERS[field](value)  # (only a known field is a column)
        query = f"UPDATE chats SET {field} = $1, updated_at = $2 WHERE chat_uuid = $3"
        return await self._write_chat(
            query + sql.CHAT_RETURNING, encoded, models.utcnow(), chat_uuid
        )

    async def _select_tree(self, chat_uuid: UUID) -> list[TreeNode]:
        rows = await self._fetch(sql.SELECT_TREE, chat_uuid)
        return [TreeNode(*row) for row in rows]

    async def _never_branched(self, chat_uuid: UUID) -> bool:
        rows = await self._fetch("SELECT has_branches FROM chats WHERE chat_uuid = $1", chat_uuid)
        return bool(rows) and not rows[0][0]

    async def _select_siblings(
        self, chat_uuid: UUID, message_uuids: Sequence[UUID]
    ) -> list[TreeNode]:
        # A chat that never branched has no siblings (has_branches, as the branch read
        # relies on); otherwise only the wanted parents' children are read.
        rows = await self._fetch(sql.SELECT_SIBLINGS, chat_uuid, list(message_uuids))
        return [TreeNode(*row) for row in rows]

    async def _set_active_leaf(self, chat_uuid: UUID, message_uuid: UUID) -> models.Chat | None:
        chat = await self._write_chat(sql.SET_ACTIVE_LEAF, chat_uuid, message_uuid, models.utcnow())
        if chat is None:
            raise NotFoundError(f"message {message_uuid} is not in chat {chat_uuid}")
        return chat

    async def _soft_delete(
        self, where: ChatFilter, deleted_at: datetime | None
    ) -> models.Chat | None:
        args: list[Any] = [deleted_at]
        conditions = self._chat_conditions(where, args)
        query = "UPDATE chats c SET deleted_at = $1 WHERE " + conditions + sql.CHAT_RETURNING
        return await self._write_chat(query, *args)

    # --- messages ------------------------------------------------------------------------

    async def _create_message(self, data: models.MessageCreate) -> models.Message:
        # The append hot path: the DTO's fields from its dict, enums (str subclasses)
        # as they are, and no extras to split off a stock DTO.
        fields = data.__dict__
        created = fields["created_at"] or models.utcnow()
        values = shared.record_values(data, created)
        async with self._connection() as conn:
            rows = await self._fetch_on(
                conn, sql.INSERT_MESSAGE, *shared.params(_PLANS.message, values)
            )
            if not rows:
                await self._explain_missing_insert(conn, data)
        seq, parent = rows[0]
        return shared.created_message(
            self.message_model, data, seq=seq, parent_uuid=parent, created_at=created
        )

    async def _explain_missing_insert(
        self, conn: asyncpg.Connection, data: models.MessageCreate
    ) -> None:
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
        args: list[Any] = []
        assignments = [
            f"{column} = {_arg(args, shared.update_value(column, value, shared.JSON_ENCODERS))}"
            for column, value in base.items()
            if column in shared.UPDATABLE[table]
        ]
        if extra:
            # jsonb || replaces each given key whole, in place: a concurrent patch of
            # other extra fields is never read back and lost.
            assignments.append(
                f"extra = COALESCE(extra, '{{}}'::jsonb) || {_arg(args, extra)}::jsonb"
            )
        assignments.append(f"updated_at = {_arg(args, models.utcnow())}")
        query = sql.versioned_update(table, key, ", ".join(assignments), _arg(args, uuid), columns)
        return query, args

    async def _update_message(
        self, message_uuid: UUID, update: models.MessageUpdate, returning: bool
    ) -> models.Message | None:
        query, args = self._update_statement(
            "messages", "message_uuid", message_uuid, update, models.MessageUpdate, sql.MESSAGE_ROW
        )
        async with self._connection() as conn:
            rows = await self._fetch_on(conn, query, *args)
            if not returning:
                # Nobody reads the result: the message's tool calls and reasoning
                # steps, which it would carry, are not read.
                return None
            messages = await self._messages_with_children(conn, rows)
        return messages[0] if messages else None

    async def _insert_child(
        self,
        query: str,
        plan: shared.Plan,
        model: type[Any],
        data: models.MessageToolCallCreate | models.MessageReasoningCreate,
    ) -> Any:
        """Insert a tool call or reasoning step; return it."""
        kind = "tool call" if isinstance(data, models.MessageToolCallCreate) else "reasoning"
        now = models.utcnow()
        values = shared.record_values(data, now)
        async with self._connection() as conn:
            rows = await self._fetch_on(conn, query, *shared.params(plan, values))
            if not rows:
                if not (await self._fetch_on(conn, sql.MESSAGE_EXISTS, data.message_uuid))[0][0]:
                    raise NotFoundError(f"parent message {data.message_uuid} does not exist")
                raise ConflictError(f"{kind} {data.uuid} already exists")
        return shared.created_child(model, data, seq=int(rows[0][0]), created_at=now)

    async def _update_child(self, op: ops.UpdateToolCall | ops.UpdateReasoning) -> Any:
        """Patch a tool call or reasoning step; return it, or ``None`` when unknown."""
        table, base_cls, columns = shared.CHILD_UPDATES[type(op)]
        loader = self._tool_calls if table == "tool_calls" else self._reasonings
        uuid, update = op.uuid, op.update
        query, args = self._update_statement(table, "uuid", uuid, update, base_cls, columns)
        loaded = loader.load(await self._fetch(query, *args))
        return loaded[0] if loaded else None

    async def _find_message(self, key: MessageKey) -> models.Message | None:
        pairs = key.equalities()
        conditions = [f"m.{column} = ${i}" for i, (column, _) in enumerate(pairs, 1)]
        conditions.append(sql.CHAT_IS_LIVE)
        suffix = " WHERE " + " AND ".join(conditions) + " ORDER BY m.seq LIMIT 1"
        messages = await self._read_messages(suffix, *(value for _, value in pairs))
        return messages[0] if messages else None

    async def _find_tool_call(
        self, message_uuid: UUID, tool_call_id: str
    ) -> models.ToolCall | None:
        rows = await self._select(
            sql.TOOL_CALL_SELECT,
            " WHERE message_uuid = $1 AND tool_call_id = $2 LIMIT 1",
            message_uuid,
            tool_call_id,
        )
        loaded: list[models.ToolCall] = self._tool_calls.load(rows)
        return loaded[0] if loaded else None

    async def _history_version(self, chat_uuid: UUID) -> Hashable | None:
        # The leaf too: an extended history must end where the chat's branch ends.
        rows = await self._fetch(sql.CHAT_VERSION, chat_uuid)
        return (int(rows[0][0]), rows[0][1]) if rows else None

    async def _select_changed(
        self, chat_uuid: UUID, since: Hashable, version: Hashable
    ) -> tuple[list[Any], UUID | None] | None:
        assert isinstance(since, tuple) and isinstance(version, tuple)
        entries = await self._read_entries(sql.CHANGED_SINCE, chat_uuid, since[0], planned=True)
        return entries, version[1]

    async def _select_branch(
        self, chat_uuid: UUID, page: BranchPage, version: Hashable | None
    ) -> list[models.Message]:
        args: list[Any] = [chat_uuid]
        bounds, tail = shared.branch_page(page, args, "${}".format)
        suffix = " WHERE " + sql.BRANCH_FILTER + bounds + tail
        return await self._read_messages(suffix, *args, reverse=page.newest_first)

    async def _select_entries(self, chat_uuid: UUID, version: Hashable) -> list[Any]:
        return await self._read_entries(
            " WHERE " + sql.BRANCH_FILTER + " ORDER BY m.seq", chat_uuid
        )

    def _build_entries(self, entries: Sequence[Any]) -> list[models.Message]:
        return self._entries.build(entries)

    async def _select_last_messages(self, chat_uuids: Sequence[UUID]) -> list[models.Message]:
        return await self._read_messages(sql.LAST_MESSAGES, list(chat_uuids))

    # --- runs ----------------------------------------------------------------------------

    async def _start_run(self, run: models.Run) -> models.Run:
        async with self._connection() as conn:
            values = {**run.__dict__, "format_version": models.FORMAT_VERSION}
            try:
                rows = await conn.fetch(sql.INSERT_RUN, *shared.params(_PLANS.run, values))
            except asyncpg.UniqueViolationError as exc:
                if exc.constraint_name != sql.ONE_RUNNING_RUN:
                    raise translate(exc) from exc
                # On a connection of its own: a transaction this call joined has failed.
                async with self.borrow() as other:
                    live = await other.fetchval(sql.RUNNING_RUN_OF_CHAT, run.chat_uuid)
                raise RunLiveError(run.chat_uuid, live) from exc
            except asyncpg.PostgresError as exc:
                raise translate(exc) from exc
            if not rows:
                query = sql.RUN_SELECT + sql.BY_RUN_KEY
                rows = await self._fetch_on(conn, query, run.chat_uuid, run.run_id)
        if not rows:
            raise NotFoundError(f"chat {run.chat_uuid} does not exist")
        return shared.load_run(rows[0])

    async def _select_runs(self, where: RunFilter) -> list[models.Run]:
        if where.run_id is not None:
            rows = await self._fetch(
                sql.RUNS_FOR_START if where.running else sql.RUN_SELECT + sql.BY_RUN_KEY,
                where.chat_uuid,
                where.run_id,
            )
        elif where.chat_uuid is None:
            rows = await self._fetch(sql.STALE_RUNS, where.stale_before)
        else:
            rows = await self._fetch(sql.RUNNING_RUNS_OF_CHAT, where.chat_uuid, where.stale_before)
        return [shared.load_run(row) for row in rows]

    # --- writes ----------------------------------------------------------------------

    async def _apply(
        self, batch: Sequence[ops.Op], *, returning: bool = True, background: bool = False
    ) -> list[Any]:
        if background and not self._in_transaction():
            async with self._flush_turn():
                return await self._apply_now(batch, returning)
        return await self._apply_now(batch, returning)

    def _flush_turn(self) -> asyncio.Semaphore:
        """A background flush's turn: all but ``FOREGROUND_CONNECTIONS`` connections at once."""
        slots = self._flush_slots
        if slots is None:
            # Read off the pool (the app's own has its own size), once it is there.
            size = self.pool.get_max_size()
            slots = self._flush_slots = asyncio.Semaphore(max(1, size - FOREGROUND_CONNECTIONS))
        return slots

    async def _apply_now(self, batch: Sequence[ops.Op], returning: bool) -> list[Any]:
        # Each operation is one statement (or a few on one connection); several share
        # one transaction.
        if len(batch) == 1:
            return [await self._write(batch[0], returning)]
        async with self.transaction():
            return [await self._write(op, returning) for op in batch]

    async def _write(self, op: ops.Op, returning: bool) -> Any:
        """Apply one operation; return its result."""
        match op:
            case ops.CreateMessage(data):
                return await self._create_message(data)
            case ops.UpdateMessage(message_uuid, update):
                return await self._update_message(message_uuid, update, returning)
            case ops.CreateToolCall(data):
                return await self._insert_child(
                    sql.INSERT_TOOL_CALL, _PLANS.tool_call, self.tool_call_model, data
                )
            case ops.CreateReasoning(data):
                return await self._insert_child(
                    sql.INSERT_REASONING, _PLANS.reasoning, self.reasoning_model, data
                )
            case ops.UpdateToolCall() | ops.UpdateReasoning():
                return await self._update_child(op)
            case ops.RenameChat() | ops.UpdateChatState() | ops.UpdateChatMetadata():
                return await self._set_chat_field(op.chat_uuid, op.field, op.value)
            case ops.CreateChat(data):
                return await self._create_chat(data)
            case ops.SetActiveLeaf(chat_uuid, message_uuid):
                return await self._set_active_leaf(chat_uuid, message_uuid)
            case ops.MakeRoot(chat_uuid, message_uuid):
                await self._fetch(sql.MAKE_ROOT, chat_uuid, message_uuid)
                return None
            case ops.SetDeletedAt(where, deleted_at):
                return await self._soft_delete(where, deleted_at)
            case ops.DeleteChat(chat_uuid):
                # Foreign keys cascade to messages, their tool calls and reasoning, and runs.
                return await self._write_chat(sql.DELETE_CHAT, chat_uuid)
            case ops.StartRun(run):
                return await self._start_run(run)
            case ops.HeartbeatRuns(owner, run_ids):
                chats, runs = [chat for chat, _ in run_ids], [run for _, run in run_ids]
                await self._fetch(sql.HEARTBEAT_RUNS, models.utcnow(), owner, chats, runs)
                return None
            case ops.FinishRun(chat_uuid, run_id, status, error):
                args = (status.value, error, models.utcnow(), chat_uuid, run_id)
                rows = await self._fetch(sql.FINISH_RUN, *args)
                return shared.load_run(rows[0]) if rows else None
            case ops.FinalizeRunRecords(chat_uuid, run_id, status):
                at = models.utcnow()
                rows = await self._fetch(
                    sql.FINALIZE_RUN_RECORDS, status.value, at, chat_uuid, run_id
                )
                return int(rows[0][0])
        raise AssertionError(f"unknown operation {op!r}")
