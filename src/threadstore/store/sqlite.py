"""The SQLite backend (the embedded default): statements for every primitive of the Store.

What SQL each read and write is, built here; how it runs (the database threads, the
writer lock, writes committed together, small calls on the event loop's thread) is the
executor's (``store/_sqlite_executor.py``), chosen when the store opens. Several
processes may share one file.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any
from uuid import UUID

from threadstore import models
from threadstore._steps import consume, off_loop
from threadstore.errors import ConflictError, RunLiveError
from threadstore.store import _sqlite_runs as runs
from threadstore.store import _sqlite_sql as queries
from threadstore.store import ops
from threadstore.store._base import Store
from threadstore.store._history import DEFAULT_HISTORY_CACHE_MESSAGES, HistoryCache
from threadstore.store._queries import BranchPage, ChatFilter, MessageKey, RunFilter, TreeNode
from threadstore.store._records import split_update
from threadstore.store._rows import EntryLoader, RowLoader, attach_rows
from threadstore.store._sql import (
    CHAT_COLUMNS,
    CHAT_FIELD_ENCODERS,
    CHILD_UPDATES,
    MESSAGE_COLUMNS,
    REASONING_COLUMNS,
    TOOL_CALL_COLUMNS,
    UPDATABLE,
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
from threadstore.store._sqlite_executor import (
    BUSY_TIMEOUT_MS,
    CHECKPOINT_EVERY_WRITES,
    INLINE_MAX_BYTES,
    INLINE_MAX_STATEMENTS,
    SQLiteExecutor,
    sqlite_options,
    sqlite_path,
)
from threadstore.store._sqlite_lifecycle import SQLiteLifecycle
from threadstore.store._sqlite_search import SQLiteSearch
from threadstore.store._sqlite_sql import key_param, ts
from threadstore.store._sqlite_usage import SQLiteUsage
from threadstore.store._sqlite_writes import Statement
from threadstore.store._timeouts import split_timeout

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CHECKPOINT_EVERY_WRITES",
    "INLINE_MAX_BYTES",
    "INLINE_MAX_STATEMENTS",
    "SQLiteStore",
    "sqlite_options",
    "sqlite_path",
]

_Finish = Callable[[list[list[Any]]], Awaitable[Any]]
"""Turns the rows of an operation's statements into its result."""

_CHAT_RETURNING = " RETURNING " + ", ".join(CHAT_COLUMNS)


class SQLiteStore(Store):
    """Store backed by one SQLite database file."""

    timeout: float
    _search: SQLiteSearch

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
        for this store's writer before :class:`~threadstore.errors.StoreUnavailableError`
        (the ``timeout`` keyword, else ``?timeout=`` in the URL, else 5)."""
        self.path = sqlite_path(self.url)
        if inline is None:
            inline = sqlite_options(self.url).get("inline", True)
        self.executor = SQLiteExecutor(self.path, inline=inline, timeout=self.timeout)
        """How the store's statements run (``store/_sqlite_executor.py``); ``inline=False``
        or ``?inline=off`` in the URL sends every statement to a thread."""
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
        self._lifecycle = SQLiteLifecycle(self)
        self._search = SQLiteSearch(self)
        self._usage = SQLiteUsage(self)

    # --- lifecycle ---------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the database file and set the pragmas every connection needs."""
        await self.executor.open()

    async def close(self) -> None:
        await self._search.stop()
        await self.executor.close()

    async def set_trace_callback(self, callback: Callable[[str], object] | None) -> None:
        """Call ``callback`` with the text of every statement the store runs (None: stop).

        Covers every connection; SQLite also reports each trigger body it starts.
        """
        await self.executor.set_trace_callback(callback)

    async def setup(self) -> None:
        """Apply pending migrations in order, each recorded in ``threadstore_migrations``."""
        await self.executor.migrate()
        await self._search.start()

    async def schema_version(self) -> int:
        """Return the highest applied migration (0 for an empty database)."""
        return await self.executor.applied_version()

    def transaction(self) -> AbstractAsyncContextManager[None]:
        return self.executor.transaction()

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
        tool_rows = await self.executor.read(
            queries.TOOL_CALL_SELECT + where, (param,), small=small
        )
        reasoning_rows = await self.executor.read(
            queries.REASONING_SELECT + where, (param,), small=small
        )
        return tool_rows, reasoning_rows

    # --- chats -----------------------------------------------------------------------------

    def _create_chat(self, chat_data: models.ChatCreate) -> tuple[list[Statement], _Finish]:
        values = chat_values(chat_data)
        # A random starting version: a chat deleted and created again under the
        # same uuid can never match a history cached for the one before.
        insert = Statement(
            queries.INSERT_CHAT, [*params(queries.PLANS.chat, values), secrets.randbits(62)]
        )

        async def finish(results: list[list[Any]]) -> models.Chat:
            (rows,) = results
            if not rows:  # the thread's chat is soft-deleted: purge it, then create anew
                purge = Statement(
                    "DELETE FROM chats WHERE user_uuid = ? AND thread_id = ?"
                    " AND deleted_at IS NOT NULL",
                    (str(values["user_uuid"]), values["thread_id"]),
                )
                rows = (await self.executor.run(purge, insert))[1]
            return self._load_chats(rows)[0]

        return [insert], finish

    @staticmethod
    def _chat_conditions(where: ChatFilter) -> tuple[str, list[Any]]:
        """The WHERE conditions of ``where`` and their parameters."""
        conditions = [f"{column} = ?" for column, _ in where.equalities()]
        params = [key_param(value) for _, value in where.equalities()]
        conditions.append("deleted_at IS NOT NULL" if where.deleted else "deleted_at IS NULL")
        for bound, op in ((where.deleted_after, ">="), (where.deleted_before, "<")):
            if bound is not None:
                conditions.append(f"deleted_at {op} ?")
                params.append(ts(bound))
        if where.after is not None:
            conditions.append("(updated_at, chat_uuid) < (?, ?)")
            params += [ts(where.after[0]), where.after[1]]
        if (pattern := where.name_like()) is not None:
            # LIKE ignores the case of ASCII letters.
            conditions.append("name LIKE ? ESCAPE '\\'")
            params.append(pattern)
        return " AND ".join(conditions), params

    async def _select_chats(self, where: ChatFilter) -> Sequence[models.Chat]:
        conditions, params = self._chat_conditions(where)
        sql = (
            queries.CHAT_SELECT
            + " WHERE "
            + conditions
            + " ORDER BY updated_at DESC, chat_uuid DESC"
        )
        if where.limit is not None:
            sql += " LIMIT ?"
            params.append(where.limit)
        # A lookup by key reads one row: small enough to run inline.
        small = where.chat_uuid is not None or where.thread_id is not None
        return self._load_chats(await self.executor.read(sql, params, small=small))

    def _chat_update(self, chat_uuid: UUID, assignments: str, params: Sequence[Any]) -> Statement:
        sql = "UPDATE chats SET " + assignments + ", updated_at = ? WHERE chat_uuid = ?"
        return Statement(sql + _CHAT_RETURNING, (*params, ts(models.utcnow()), str(chat_uuid)))

    async def _last_chat(self, results: list[list[Any]]) -> models.Chat | None:
        """The chat the last statement returned, or ``None``."""
        rows = results[-1]
        return self._load_chats(rows)[0] if rows else None

    def _chat_field_update(self, chat_uuid: UUID, field: str, value: Any) -> list[Statement]:
        encoded = CHAT_FIELD_ENCODERS[field](value)
        return [self._chat_update(chat_uuid, queries.CHAT_FIELD_SET[field], (encoded,))]

    def _active_leaf_update(self, chat_uuid: UUID, message_uuid: UUID) -> list[Statement]:
        check = _in_chat(message_uuid, chat_uuid, "message")
        # A leaf anywhere but the newest message means the active branch is no
        # longer "every message", so reads must walk the tree from now on.
        update = self._chat_update(
            chat_uuid,
            "has_branches = has_branches OR (active_leaf_uuid IS NOT ?1), active_leaf_uuid = ?1",
            (str(message_uuid),),
        )
        return [check, update]

    async def _select_tree(self, chat_uuid: UUID) -> list[TreeNode]:
        rows = await self.executor.read(
            "SELECT message_uuid, parent_uuid, role, seq, agui_id, run_id FROM messages"
            " WHERE chat_uuid = ? ORDER BY seq",
            (str(chat_uuid),),
        )
        # A long chat's tree is tens of thousands of nodes: built off the event loop.
        return await off_loop(rows, consume, queries.tree_nodes, rows)

    async def _never_branched(self, chat_uuid: UUID) -> bool:
        rows = await self.executor.read(
            "SELECT has_branches FROM chats WHERE chat_uuid = ?", (str(chat_uuid),), small=True
        )
        return bool(rows) and not rows[0][0]

    async def _select_siblings(
        self, chat_uuid: UUID, message_uuids: Sequence[UUID]
    ) -> list[TreeNode]:
        # A chat that never branched has no siblings (has_branches, as the branch read
        # relies on); otherwise SQLite scans the chat's rows for the wanted parents, on
        # the reader thread, instead of the loop building the whole tree.
        rows = await self.executor.read(
            queries.SELECT_SIBLINGS, (str(chat_uuid), json.dumps([str(u) for u in message_uuids]))
        )
        return queries.tree_nodes(rows)

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
        sql = "UPDATE chats SET deleted_at = ? WHERE " + conditions + _CHAT_RETURNING
        return Statement(sql, (None if deleted_at is None else ts(deleted_at), *params))

    @staticmethod
    def _chat_delete(chat_uuid: UUID) -> Statement:
        # Foreign keys cascade to messages, their tool calls and reasoning, and runs:
        # possibly many rows, so never on the event loop's thread.
        sql = "DELETE FROM chats WHERE chat_uuid = ?" + _CHAT_RETURNING
        return Statement(sql, (str(chat_uuid),), inline=False)

    # --- messages -----------------------------------------------------------------------

    def _create_message(self, data: models.MessageCreate) -> tuple[list[Statement], _Finish]:
        # The append hot path: read the DTO's fields from its dict and pass enums (str
        # subclasses) straight to the driver.
        fields = data.__dict__
        chat_uuid, parent_uuid = fields["chat_uuid"], fields["parent_uuid"]
        created = fields["created_at"] or models.utcnow()
        values = record_values(data, created)
        statements = [Statement(queries.INSERT_MESSAGE, params(queries.PLANS.message, values))]
        if parent_uuid is not None:  # checked first
            statements.insert(0, _in_chat(parent_uuid, chat_uuid, "parent message"))

        async def finish(results: list[list[Any]]) -> models.Message:
            seq, parent = results[-1][0]
            return created_message(
                self.message_model, data, seq=seq, parent_uuid=parent, created_at=created
            )

        return statements, finish

    def _row_update(
        self, table: str, key: str, uuid: UUID, update: Any, base_cls: Any, columns: Sequence[str]
    ) -> list[Statement]:
        base, extra = split_update(update, base_cls)
        updated = [(column, value) for column, value in base.items() if column in UPDATABLE[table]]
        assignments = [f"{column} = ?" for column, _ in updated]
        params = [update_value(column, value, queries.ENCODERS) for column, value in updated]
        if extra:
            # Replace each extra field whole (json_set), as the in-memory backend does.
            values = json.loads(extra)
            assignments.append(
                "extra = json_set(COALESCE(extra, '{}')" + ", ?, json(?)" * len(values) + ")"
            )
            for name, value in values.items():
                params += [f'$."{name}"', json.dumps(value)]
        assignments.append("updated_at = ?")
        params.append(ts(models.utcnow()))
        sql = (
            f"UPDATE {table} SET {', '.join(assignments)} WHERE {key} = ?"
            f" RETURNING {', '.join(columns)}"
        )
        return [Statement(sql, (*params, str(uuid)))]

    async def _updated_message(self, results: list[list[Any]]) -> models.Message | None:
        messages = await self._load_messages(results[0])
        return messages[0] if messages else None

    def _child_update(
        self, op: ops.UpdateToolCall | ops.UpdateReasoning
    ) -> tuple[list[Statement], _Finish]:
        """A tool call's or reasoning step's patch, and the patched record (``None`` if unknown)."""
        table, base_cls, columns = CHILD_UPDATES[type(op)]
        loader = self._tool_calls if table == "tool_calls" else self._reasonings

        async def finish(results: list[list[Any]]) -> Any:
            loaded = loader.load(results[0])
            return loaded[0] if loaded else None

        return self._row_update(table, "uuid", op.uuid, op.update, base_cls, columns), finish

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

    async def _find_message(self, key: MessageKey) -> models.Message | None:
        pairs = key.equalities()
        conditions = [f"m.{column} = ?" for column, _ in pairs] + [queries.CHAT_IS_LIVE]
        where = " WHERE " + " AND ".join(conditions) + " ORDER BY m.seq LIMIT 1"
        params = [key_param(value) for _, value in pairs]
        rows = await self.executor.read(queries.MESSAGE_SELECT + where, params, small=True)
        messages = await self._load_messages(rows, small=True)
        return messages[0] if messages else None

    async def _find_tool_call(
        self, message_uuid: UUID, tool_call_id: str
    ) -> models.ToolCall | None:
        rows = await self.executor.read(
            queries.TOOL_CALL_SELECT + " WHERE message_uuid = ? AND tool_call_id = ? LIMIT 1",
            (str(message_uuid), tool_call_id),
            small=True,
        )
        loaded: list[models.ToolCall] = self._tool_calls.load(rows)
        return loaded[0] if loaded else None

    def _in_transaction(self) -> bool:
        return self.executor.held

    async def _history_version(self, chat_uuid: UUID) -> Hashable | None:
        # The leaf too: moving it changes the branch without a new version. Whether the
        # chat ever branched tells the read which query it needs.
        flags = await self.executor.read(
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
        rows = await self.executor.read(queries.CHANGED_SELECT, (str(chat_uuid), since[0]))
        leaf = None if version[1] is None else UUID(version[1])
        if not rows:
            return [], leaf
        uuid = self._entries.messages.column("message_uuid")
        children = await self._child_rows([row[uuid] for row in rows], None)
        return self._entries.entries(rows, *children), leaf

    @staticmethod
    def _branch_select(version: Hashable) -> str:
        """The messages of the active branch of chat ``?1``, at its history ``version``."""
        assert isinstance(version, tuple)
        where = queries.BRANCH_FILTER if version[2] else "m.chat_uuid = ?1"
        return queries.MESSAGE_SELECT + " WHERE " + where

    async def _select_entries(self, chat_uuid: UUID, version: Hashable) -> list[Any]:
        sql = self._branch_select(version) + " ORDER BY m.seq"
        rows = await self.executor.read(sql, [str(chat_uuid)])
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
        params: list[Any] = [str(chat_uuid)]
        bounds, tail = branch_page(page, params, "?{}".format)
        rows = await self.executor.read(self._branch_select(version) + bounds + tail, params)
        if page.newest_first:
            rows.reverse()
        # Children by chat need no list of ids, but read all the chat's: only for the
        # whole branch. A page (a run's new tail) reads its own messages' children.
        return await self._load_messages(rows, chat_uuid=chat_uuid if page.whole else None)

    async def _select_last_messages(self, chat_uuids: Sequence[UUID]) -> list[models.Message]:
        rows = await self.executor.read(
            queries.MESSAGE_SELECT + " JOIN chats c ON c.active_leaf_uuid = m.message_uuid"
            " WHERE c.chat_uuid IN (SELECT value FROM json_each(?)) AND c.deleted_at IS NULL",
            (json.dumps([str(u) for u in chat_uuids]),),
        )
        return await self._load_messages(rows)

    # --- runs --------------------------------------------------------------------------

    async def _select_runs(self, where: RunFilter) -> list[models.Run]:
        if where.run_id is not None:
            condition = "(status = 'running' OR run_id = ?)" if where.running else "run_id = ?"
            sql = queries.RUN_SELECT + f" WHERE chat_uuid = ? AND {condition}"
            args = [str(where.chat_uuid), where.run_id]
        else:
            sql, args = queries.RUN_SELECT + " WHERE status = 'running'", []
            if where.chat_uuid is not None:
                sql += " AND chat_uuid = ?"
                args.append(str(where.chat_uuid))
            if where.stale_before is not None:
                sql += " AND heartbeat_at < ?"
                args.append(ts(where.stale_before))
        small = where.chat_uuid is not None
        rows = await self.executor.read(sql + " ORDER BY heartbeat_at", args, small=small)
        return [load_run(row) for row in rows]

    # --- writes ----------------------------------------------------------------------

    def _plan(self, op: ops.Op) -> tuple[list[Statement], _Finish]:
        """The statements of one operation and what turns their rows into its result."""
        match op:
            case ops.CreateMessage(data):
                return self._create_message(data)
            case ops.UpdateMessage(uuid, update):
                cls, columns = models.MessageUpdate, MESSAGE_COLUMNS
                patch = self._row_update("messages", "message_uuid", uuid, update, cls, columns)
                return patch, self._updated_message
            case ops.CreateToolCall(data):
                return self._create_child(
                    queries.INSERT_TOOL_CALL, queries.PLANS.tool_call, self.tool_call_model, data
                )
            case ops.UpdateToolCall() | ops.UpdateReasoning():
                return self._child_update(op)
            case ops.CreateReasoning(data):
                return self._create_child(
                    queries.INSERT_REASONING, queries.PLANS.reasoning, self.reasoning_model, data
                )
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
                return [runs.run_insert(run)], _first_run
            case ops.HeartbeatRuns(owner, run_ids):
                return [runs.heartbeat(owner, run_ids)], _nothing
            case ops.FinishRun(chat_uuid, run_id, status, error):
                return [runs.run_finish(chat_uuid, run_id, status, error)], _first_run
            case ops.FinalizeRunRecords(chat_uuid, run_id, status):
                return runs.run_records_finalize(chat_uuid, run_id, status), _row_count
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
                statement.sql = queries.UNRETURNED.get(statement.sql, statement.sql)
        try:
            results = (
                await self.executor.run(*statements, background=background) if statements else []
            )
            self._search.written()
        except ConflictError as exc:
            if queries.ONE_RUNNING_RUN not in str(exc):
                raise
            raise await self._run_live(batch) from exc
        if not returning:
            return []
        rows = iter(results)  # each operation's finish takes its own statements' rows
        return [await finish([next(rows) for _ in planned]) for planned, finish in plans]

    async def _run_live(self, batch: Sequence[ops.Op]) -> RunLiveError:
        """The refusal of a ``StartRun`` whose chat already has an exclusive running run."""
        chat_uuid = next(op.run.chat_uuid for op in batch if isinstance(op, ops.StartRun))
        # (Only a run's insert can break that index: no other write sets a run running.)
        live = await self.executor.fetch(
            "SELECT run_id FROM runs WHERE chat_uuid = ? AND status = 'running' AND exclusive = 1",
            (str(chat_uuid),),
            small=True,
        )
        return RunLiveError(chat_uuid, live[0][0] if live else None)


def _in_chat(message_uuid: UUID, chat_uuid: UUID, what: str) -> Statement:
    """A check that fails with ``NotFoundError`` unless the message is in the chat."""
    return Statement(
        "SELECT 1 FROM messages WHERE message_uuid = ? AND chat_uuid = ?",
        (str(message_uuid), str(chat_uuid)),
        missing=f"{what} {message_uuid} is not in chat {chat_uuid}",
    )


async def _nothing(results: list[list[Any]]) -> None:
    return None


async def _first_run(results: list[list[Any]]) -> models.Run | None:
    rows = results[0]
    return load_run(rows[0]) if rows else None


async def _row_count(results: list[list[Any]]) -> int:
    return sum(len(rows) for rows in results)
