"""threadstore on PostgreSQL, side by side with raw asyncpg and langchain-postgres.

Appends messages to one chat, one write each, then loads the whole history many
times, for three contenders on the same server: threadstore's ``postgres`` backend
through its public API; asyncpg by hand on one connection, with the table and
indexes a careful developer would write (primary key, unique message id, a
``(chat, seq)`` index; one INSERT per message; a SELECT of the same columns); and
langchain-postgres's ``PostgresChatMessageHistory`` on a psycopg async connection.
Each repetition runs on a fresh database that is dropped afterwards.

Run ``python benchmarks/bench_postgres.py`` (``--quick`` for a small run; ``--url``
or ``THREADSTORE_TEST_POSTGRES_URL`` names the server). Needs the ``bench`` extra
(langchain-postgres, psycopg). Definitions: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench_sqlite import RUN_ID, Turn, conversation
from common import Goal, Samples, collect_garbage, machine_line, markdown_table, rotated, timed
from threadstore import ChatCreate, MessageCreate, MessageStatus, Role, open_store
from threadstore.keys import chat_deduplication_key
from threadstore.models import FORMAT_VERSION
from threadstore.store._postgres_sql import INSERT_MESSAGE, MESSAGE_INSERT

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def with_database(url: str, database: str) -> str:
    """Return ``url`` pointing at ``database`` instead of the one it names."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


@asynccontextmanager
async def fresh_database(server_url: str) -> AsyncIterator[str]:
    """Create a throwaway database; yield its URL; drop it afterwards."""
    name = f"ts_bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_url)
    try:
        # Identifiers cannot be bound as parameters; ``name`` is generated above.
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield with_database(server_url, name)
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


class Contender(Protocol):
    """One way of storing and loading a chat's messages."""

    name: str

    async def open(self, url: str, commit: str) -> None:
        """Create the tables at ``url`` and one empty chat; ``commit``: synchronous_commit."""

    async def append(self, turns: Sequence[Turn]) -> None:
        """Store each turn with its own write."""

    async def load(self) -> list[str]:
        """Load the whole history; return the contents oldest first."""

    async def close(self) -> None:
        """Release the connections."""


class StatementCounter:
    """Counts the statements sent on every connection of a pool (asyncpg query loggers)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, record: Any) -> None:
        self.count += 1

    async def attach(self, connection: asyncpg.Connection) -> None:
        """Pool ``init`` hook: log this connection's queries."""
        connection.add_query_logger(self)


class Threadstore:
    """threadstore's PostgreSQL backend through its public API, opened from its URL."""

    name = "threadstore"

    async def open(self, url: str, commit: str) -> None:
        # Session settings in the URL's query reach every connection of the store's pool.
        self.store = await open_store(f"{url}?synchronous_commit={commit}")
        chat = await self.store.create_chat(
            ChatCreate(user_uuid=uuid.uuid4(), thread_id="bench", name="bench")
        )
        self.chat_uuid = chat.chat_uuid

    async def append(self, turns: Sequence[Turn]) -> None:
        for turn in turns:
            await self.store.create_message(
                MessageCreate(
                    chat_uuid=self.chat_uuid,
                    role=Role(turn.role),
                    content=turn.content,
                    agui_id=turn.agui_id,
                    status=MessageStatus.COMPLETE,
                    in_progress=False,
                    run_id=RUN_ID,
                )
            )

    async def load(self) -> list[str]:
        return [m.content for m in await self.store.get_chat_messages(self.chat_uuid)]

    async def close(self) -> None:
        await self.store.close()


class ThreadstoreNoCache(Threadstore):
    """threadstore with its history cache off: every load reads the rows again."""

    name = "threadstore, history cache off"

    async def open(self, url: str, commit: str) -> None:
        self.store = await open_store(
            f"{url}?synchronous_commit={commit}", history_cache_messages=0
        )
        chat = await self.store.create_chat(
            ChatCreate(user_uuid=uuid.uuid4(), thread_id="bench", name="bench")
        )
        self.chat_uuid = chat.chat_uuid


async def count_statements(url: str, turns: Sequence[Turn]) -> tuple[int, int, int]:
    """Statements of one ``create_message``, a first and a repeated ``get_chat_messages``.

    Counted on a second store over an instrumented pool whose release sends nothing,
    as the store's own pool does.
    """
    counter = StatementCounter()
    pool = await asyncpg.create_pool(
        url, min_size=1, max_size=1, init=counter.attach, reset=_no_reset
    )
    store = await open_store(url, pool=pool, setup=False)
    try:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="count"))
        for turn in turns[:-1]:
            await store.create_message(
                MessageCreate(chat_uuid=chat.chat_uuid, content=turn.content)
            )
        before = counter.count
        await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="last"))
        appended = counter.count - before
        counts = [appended]
        for _ in range(2):
            before = counter.count
            await store.get_chat_messages(chat.chat_uuid)
            counts.append(counter.count - before)
        return counts[0], counts[1], counts[2]
    finally:
        await store.close()
        await pool.close()


async def _no_reset(connection: asyncpg.Connection) -> None:
    """Pool reset hook that sends nothing."""


_RAW_SCHEMA = """
CREATE TABLE raw_chats (
    chat_uuid uuid PRIMARY KEY, user_uuid uuid NOT NULL, thread_id text NOT NULL,
    created_at timestamptz NOT NULL);
CREATE TABLE raw_messages (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_uuid uuid NOT NULL UNIQUE,
    chat_uuid uuid NOT NULL REFERENCES raw_chats (chat_uuid) ON DELETE CASCADE,
    parent_uuid uuid, agui_id text, role text NOT NULL, name text, content text NOT NULL,
    content_parts json, encrypted_value text, activity_type text, activity_content json,
    status text NOT NULL, in_progress boolean NOT NULL, step_name text, run_id text,
    metadata jsonb, extra jsonb, format_version integer NOT NULL,
    created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL);
CREATE INDEX raw_messages_by_chat ON raw_messages (chat_uuid, seq);
"""

_RAW_COLUMNS = (
    "seq, message_uuid, chat_uuid, parent_uuid, agui_id, role, name, content, content_parts,"
    " encrypted_value, activity_type, activity_content, status, in_progress, step_name, run_id,"
    " metadata, extra, format_version, created_at, updated_at"
)

_RAW_INSERT = (
    "INSERT INTO raw_messages (message_uuid, chat_uuid, parent_uuid, agui_id, role, content,"
    " status, in_progress, run_id, format_version, created_at, updated_at)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)"
)

_RAW_SELECT = f"SELECT {_RAW_COLUMNS} FROM raw_messages WHERE chat_uuid = $1 ORDER BY seq"


class RawDriver:
    """asyncpg by hand on one connection: the same row per message, the minimum of indexes."""

    name = "raw asyncpg"

    async def open(self, url: str, commit: str) -> None:
        self.conn = await asyncpg.connect(url, server_settings={"synchronous_commit": commit})
        await self.conn.execute(_RAW_SCHEMA)
        self.chat_uuid = uuid.uuid4()
        await self.conn.execute(
            "INSERT INTO raw_chats VALUES ($1, $2, $3, $4)",
            self.chat_uuid,
            uuid.uuid4(),
            "bench",
            datetime.now(UTC),
        )
        self.parent: uuid.UUID | None = None

    async def append(self, turns: Sequence[Turn]) -> None:
        for turn in turns:
            message_uuid = uuid.uuid4()
            await self.conn.execute(
                _RAW_INSERT,
                message_uuid,
                self.chat_uuid,
                self.parent,
                turn.agui_id,
                turn.role,
                turn.content,
                "complete",
                False,
                RUN_ID,
                FORMAT_VERSION,
                datetime.now(UTC),
            )
            self.parent = message_uuid

    async def load(self) -> list[str]:
        rows = await self.conn.fetch(_RAW_SELECT, self.chat_uuid)
        return [row[7] for row in rows]

    async def close(self) -> None:
        await self.conn.close()


class RawSameSchema(RawDriver):
    """asyncpg by hand on one connection, writing the very rows threadstore writes.

    The tables come from threadstore's own migration; each append sends threadstore's
    own statement (the message row, and the chat's active leaf, activity time and
    version in the same statement) with the same values; a load selects the same
    columns in the same order. The difference to threadstore is only what threadstore
    does around the statements: its models, its pool and its error handling.
    """

    name = "raw asyncpg, threadstore schema"

    async def open(self, url: str, commit: str) -> None:
        self.conn = await asyncpg.connect(url, server_settings={"synchronous_commit": commit})
        schema = await open_store(url)  # creates threadstore's tables if need be
        await schema.close()
        self.chat_uuid = uuid.uuid4()
        user, now = uuid.uuid4(), datetime.now(UTC)
        await self.conn.execute(
            "INSERT INTO chats (chat_uuid, user_uuid, thread_id, dedup_key, name,"
            " format_version, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
            self.chat_uuid,
            user,
            "bench-raw",
            chat_deduplication_key(user, "bench-raw"),
            "bench",
            FORMAT_VERSION,
            now,
        )

    async def append(self, turns: Sequence[Turn]) -> None:
        for turn in turns:
            values = dict.fromkeys(MESSAGE_INSERT.names)  # threadstore's parameters, in order
            values.update(
                message_uuid=uuid.uuid4(),
                chat_uuid=self.chat_uuid,
                agui_id=turn.agui_id,
                role=turn.role,
                content=turn.content,
                status="complete",
                in_progress=False,
                run_id=RUN_ID,
                format_version=FORMAT_VERSION,
                created_at=datetime.now(UTC),
            )
            await self.conn.fetch(INSERT_MESSAGE, *values.values())

    async def load(self) -> list[str]:
        rows = await self.conn.fetch(_SAME_SCHEMA_SELECT, self.chat_uuid)
        return [row[7] for row in rows]


_SAME_SCHEMA_SELECT = f"SELECT {_RAW_COLUMNS} FROM messages WHERE chat_uuid = $1 ORDER BY seq"


class LangChain:
    """langchain-postgres's PostgresChatMessageHistory on a psycopg async connection."""

    name = "langchain-postgres"

    async def open(self, url: str, commit: str) -> None:
        import psycopg
        from langchain_core.messages import AIMessage, HumanMessage
        from langchain_postgres import PostgresChatMessageHistory

        self.conn = await psycopg.AsyncConnection.connect(
            url, options=f"-c synchronous_commit={commit}"
        )
        await PostgresChatMessageHistory.acreate_tables(self.conn, "lc_messages")
        self.history = PostgresChatMessageHistory(
            "lc_messages", str(uuid.uuid4()), async_connection=self.conn
        )
        self.kinds = {"user": HumanMessage, "assistant": AIMessage}

    async def append(self, turns: Sequence[Turn]) -> None:
        for turn in turns:
            await self.history.aadd_messages(
                [self.kinds[turn.role](content=turn.content, id=turn.agui_id)]
            )

    async def load(self) -> list[str]:
        return [str(m.content) for m in await self.history.aget_messages()]

    async def close(self) -> None:
        await self.conn.close()


async def run_repetition(
    args: argparse.Namespace, rep: int, turns: Sequence[Turn], samples: Samples
) -> tuple[int, int, int] | None:
    """One repetition on a fresh database; the first also counts threadstore's statements."""
    expected = [t.content for t in turns]
    chunk = max(1, args.messages // 20)
    async with fresh_database(args.url) as url:
        contenders: list[Contender] = [
            Threadstore(),
            ThreadstoreNoCache(),
            RawSameSchema(),
            RawDriver(),
            LangChain(),
        ]
        for contender in contenders:
            await contender.open(url, args.synchronous_commit)
        try:
            totals = dict.fromkeys((c.name for c in contenders), 0.0)
            # Slices of the append interleave, so a burst of noise hits every contender.
            for index, start in enumerate(range(0, args.messages, chunk)):
                batch = turns[start : start + chunk]
                for contender in rotated(contenders, rep + index):
                    totals[contender.name] += await timed(partial(contender.append, batch))
            for name, total in totals.items():
                samples.add(f"{name}/append", total)
            for contender in contenders:
                if await contender.load() != expected:
                    raise SystemExit(f"{contender.name} did not return the stored history")
            collect_garbage()
            for index in range(args.loads):
                for contender in rotated(contenders, rep + index):
                    samples.add(f"{contender.name}/load", await timed(contender.load))
        finally:
            for contender in contenders:
                await contender.close()
        return await count_statements(url, turns) if rep == 0 else None


async def run_history(args: argparse.Namespace) -> list[Goal]:
    """Interleaved appends and loads; print the table and the ratios."""
    turns = conversation(args.messages)
    samples = Samples()
    statements = (0, 0, 0)
    for rep in range(args.reps):
        statements = await run_repetition(args, rep, turns, samples) or statements
        print(f"  repetition {rep + 1}/{args.reps} done", file=sys.stderr)

    names = [
        Threadstore.name,
        ThreadstoreNoCache.name,
        RawSameSchema.name,
        RawDriver.name,
        LangChain.name,
    ]
    append = {n: samples.median(f"{n}/append") for n in names}
    load = {n: samples.median(f"{n}/load") for n in names}
    rows = [
        [
            n,
            f"{append[n]:.3f}",
            f"{args.messages / append[n]:,.0f}",
            f"{append[n] / args.messages * 1e6:.0f}",
            f"{load[n] * 1e3:.2f}",
            f"{load[n] / args.messages * 1e6:.2f}",
        ]
        for n in names
    ]
    print(
        f"\n## History: {args.messages:,} messages appended one write each,"
        f" then {args.loads} full loads; {args.reps} interleaved repetitions, medians\n"
    )
    print(
        markdown_table(
            [
                "contender",
                f"append {args.messages:,} (s)",
                "messages/s",
                "µs/append",
                "full load (ms)",
                "µs/row loaded",
            ],
            rows,
        )
    )
    print(
        f"\nthreadstore statements: create_message = {statements[0]},"
        f" get_chat_messages ({args.messages:,} messages) = {statements[1]} the first time,"
        f" {statements[2]} while the chat is unchanged\n"
    )
    threadstore, uncached, raw, minimal, langchain = names
    print(
        f"For information, with the history cache off: full load time threadstore/raw"
        f" {load[uncached] / load[raw]:.2f}x, langchain/threadstore"
        f" {load[langchain] / load[uncached]:.2f}x\n"
    )
    print(
        "For information, against a minimal hand-made table (one row per message, no chat"
        f" row to keep current): append {append[minimal] / append[threadstore]:.2f}x,"
        f" load {load[threadstore] / load[minimal]:.2f}x; raw asyncpg on that table against"
        f" langchain-postgres: append {append[langchain] / append[minimal]:.2f}x\n"
    )
    return [
        Goal("append throughput threadstore/raw", append[raw] / append[threadstore], 0.8),
        Goal("append throughput threadstore/langchain", append[langchain] / append[threadstore], 2),
        Goal("full load time threadstore/raw", load[threadstore] / load[raw], 1.5, at_least=False),
        Goal("full load time langchain/threadstore", load[langchain] / load[threadstore], 2),
    ]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Read the sizes; ``--quick`` shrinks every one of them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a small run (a few seconds)")
    parser.add_argument("--url", help="server to create throwaway databases on")
    parser.add_argument("--messages", type=int, help="messages appended per contender")
    parser.add_argument("--loads", type=int, help="full loads per contender and repetition")
    parser.add_argument("--reps", type=int, help="interleaved repetitions")
    parser.add_argument(
        "--synchronous-commit",
        choices=("on", "off"),
        default="on",
        help="the same synchronous_commit for every contender's session (default: on)",
    )
    args = parser.parse_args(argv)
    defaults = (
        {"messages": 200, "loads": 10, "reps": 2}
        if args.quick
        else {"messages": 2000, "loads": 50, "reps": 5}
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.url is None:
        args.url = os.environ.get("THREADSTORE_TEST_POSTGRES_URL", DEFAULT_URL)
    return args


async def server_version(url: str) -> str:
    """The server's version line, for the report header."""
    conn = await asyncpg.connect(url)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


async def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print Markdown ready for docs/benchmarks.md."""
    args = parse_args(argv)
    print(f"# threadstore vs raw asyncpg vs langchain-postgres\n\n{machine_line()}")
    print(
        f"PostgreSQL {await server_version(args.url)} · asyncpg {asyncpg.__version__}"
        f" · synchronous_commit={args.synchronous_commit} for every contender"
    )
    goals = await run_history(args)
    for goal in goals:
        print(goal.line())
    return 0 if all(goal.met for goal in goals) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
