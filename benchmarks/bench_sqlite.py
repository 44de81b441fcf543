"""threadstore on SQLite, side by side with the raw driver and LangChain's SQL history.

Part 1 appends messages to one chat, one write each, then loads the whole history
many times, for three contenders on their own SQLite files with the same pragmas.
Part 2 fills a database with many users' chats and times the two catalog reads a
chat list needs, with the number of SQL statements each sends.

Run ``python benchmarks/bench_sqlite.py`` (``--quick`` for a small run). Needs the
``bench`` extra (langchain-community, sqlalchemy). Definitions: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sqlite3
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Protocol
from uuid import UUID

import aiosqlite

from common import Goal, Samples, collect_garbage, machine_line, markdown_table, rotated, timed
from threadstore import ChatCreate, MessageCreate, MessageStatus, Role, open_store
from threadstore.keys import chat_deduplication_key
from threadstore.models import FORMAT_VERSION
from threadstore.store.sqlite import BUSY_TIMEOUT_MS, SQLiteStore

PRAGMAS = (
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
)
"""The pragmas threadstore sets; every contender's connection gets the same."""

RUN_ID = "run-1"
WORDS = (
    "agent tool call result stream chat history message user assistant model token reply"
    " search weather answer context state branch reason step plan check output input"
).split()


@dataclass(frozen=True)
class Turn:
    """One message of the synthetic conversation every contender stores."""

    role: str
    content: str
    agui_id: str


def conversation(count: int, seed: int = 7) -> list[Turn]:
    """Alternate user and assistant turns of 20 to 120 words (about 130-800 characters)."""
    rng = random.Random(seed)
    return [
        Turn(
            role="user" if i % 2 == 0 else "assistant",
            content=" ".join(rng.choices(WORDS, k=rng.randint(20, 120))),
            agui_id=f"msg-{i}",
        )
        for i in range(count)
    ]


def stamp() -> str:
    """The same fixed-width UTC text threadstore stores its times as."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


class StatementLog:
    """The client statements an aiosqlite connection runs, seen through its trace hook.

    SQLite's trace hook also fires when a trigger's body starts, and Python reports
    that firing with the text of the statement that set the trigger off; so consecutive
    repeats of one text are one client statement, and only those are counted.
    """

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, sql: str) -> None:
        if not self.statements or self.statements[-1] != sql:
            self.statements.append(sql)

    async def count(self, store: SQLiteStore, action: Callable[[], Any]) -> int:
        """Return how many client statements awaiting ``action()`` sends to ``store``'s file."""
        self.statements = []
        await store.set_trace_callback(self)
        try:
            await action()
        finally:
            await store.set_trace_callback(None)
        return len(self.statements)


# --- part 1: the three contenders ----------------------------------------------------------


class Contender(Protocol):
    """One way of storing and loading a chat's messages."""

    name: str

    async def open(self, path: Path, extra_pragmas: Sequence[str] = ()) -> None:
        """Create the database at ``path`` and one empty chat."""

    async def append(self, turns: Sequence[Turn]) -> None:
        """Store each turn with its own write."""

    async def load(self) -> list[str]:
        """Load the whole history; return the contents oldest first."""

    async def close(self) -> None:
        """Release the connection."""


class Threadstore:
    """threadstore's SQLite backend through its public API."""

    name = "threadstore"
    query = ""
    """Options in the store's URL."""
    options: ClassVar[dict[str, Any]] = {}
    """Keyword options of ``open_store``."""

    async def open(self, path: Path, extra_pragmas: Sequence[str] = ()) -> None:
        self.store = await open_store(f"sqlite:///{path}{self.query}", **self.options)
        assert isinstance(self.store, SQLiteStore)
        for pragma in extra_pragmas:
            await self.store.executor.thread.call(sqlite3.Connection.execute, pragma)
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


_RAW_SCHEMA = (
    "CREATE TABLE chats (chat_uuid TEXT PRIMARY KEY, user_uuid TEXT NOT NULL,"
    " thread_id TEXT NOT NULL, created_at TEXT NOT NULL)",
    "CREATE TABLE messages (seq INTEGER PRIMARY KEY, message_uuid TEXT NOT NULL UNIQUE,"
    " chat_uuid TEXT NOT NULL REFERENCES chats (chat_uuid) ON DELETE CASCADE,"
    " parent_uuid TEXT, agui_id TEXT, role TEXT NOT NULL, name TEXT, content TEXT NOT NULL,"
    " content_parts TEXT, encrypted_value TEXT, activity_type TEXT, activity_content TEXT,"
    " status TEXT NOT NULL, in_progress INTEGER NOT NULL, step_name TEXT, run_id TEXT,"
    " metadata TEXT, extra TEXT, format_version INTEGER NOT NULL, created_at TEXT NOT NULL,"
    " updated_at TEXT NOT NULL)",
    "CREATE INDEX messages_by_chat ON messages (chat_uuid, seq)",
)

_RAW_COLUMNS = (
    "seq, message_uuid, chat_uuid, parent_uuid, agui_id, role, name, content, content_parts,"
    " encrypted_value, activity_type, activity_content, status, in_progress, step_name, run_id,"
    " metadata, extra, format_version, created_at, updated_at"
)

_RAW_INSERT = (
    "INSERT INTO messages (message_uuid, chat_uuid, parent_uuid, agui_id, role, content,"
    " status, in_progress, run_id, format_version, created_at, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

_RAW_SELECT = f"SELECT {_RAW_COLUMNS} FROM messages WHERE chat_uuid = ? ORDER BY seq"


class RawDriver:
    """aiosqlite with the same pragmas and the same row per message, written by hand."""

    name = "raw aiosqlite"

    async def open(self, path: Path, extra_pragmas: Sequence[str] = ()) -> None:
        self.conn = await aiosqlite.connect(path, isolation_level=None)
        for pragma in (*PRAGMAS, *extra_pragmas):
            await self.conn.execute(pragma)
        for statement in _RAW_SCHEMA:
            await self.conn.execute(statement)
        self.chat_uuid = str(uuid.uuid4())
        await self.conn.execute(
            "INSERT INTO chats VALUES (?, ?, ?, ?)",
            (self.chat_uuid, str(uuid.uuid4()), "bench", stamp()),
        )
        self.parent: str | None = None

    def next_row(self, turn: Turn) -> tuple[Any, ...]:
        """The values of ``turn``'s row, its parent the previous message's."""
        message_uuid, now = str(uuid.uuid4()), stamp()
        row = (
            message_uuid,
            self.chat_uuid,
            self.parent,
            turn.agui_id,
            turn.role,
            turn.content,
            "complete",
            0,
            RUN_ID,
            FORMAT_VERSION,
            now,
            now,
        )
        self.parent = message_uuid
        return row

    async def append(self, turns: Sequence[Turn]) -> None:
        for turn in turns:
            await self.conn.execute_insert(_RAW_INSERT, self.next_row(turn))

    async def load(self) -> list[str]:
        rows = await self.conn.execute_fetchall(_RAW_SELECT, (self.chat_uuid,))
        return [row[7] for row in rows]

    async def close(self) -> None:
        await self.conn.close()


class RawSameSchema(RawDriver):
    """aiosqlite writing and reading the very rows threadstore stores, in its schema.

    The schema (tables, indexes and the trigger keeping each chat's active leaf and
    activity time) comes from threadstore's own migration, so the difference to
    threadstore is only what threadstore does in Python around the same statements.
    """

    name = "raw aiosqlite, threadstore schema"

    async def open(self, path: Path, extra_pragmas: Sequence[str] = ()) -> None:
        schema = await open_store(f"sqlite:///{path}")
        await schema.close()
        self.conn = await aiosqlite.connect(path, isolation_level=None)
        for pragma in (*PRAGMAS, *extra_pragmas):
            await self.conn.execute(pragma)
        self.chat_uuid = str(uuid.uuid4())
        user = uuid.uuid4()
        await self.conn.execute(
            "INSERT INTO chats (chat_uuid, user_uuid, thread_id, dedup_key, name,"
            " format_version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.chat_uuid,
                str(user),
                "bench",
                chat_deduplication_key(user, "bench"),
                "bench",
                FORMAT_VERSION,
                stamp(),
                stamp(),
            ),
        )
        self.parent = None


class ThreadstoreNoCache(Threadstore):
    """threadstore with its history cache turned off: every load reads every row."""

    name = "threadstore, history cache off"
    options: ClassVar[dict[str, Any]] = {"history_cache_messages": 0}


class ThreadstoreThread(Threadstore):
    """threadstore with inline calls off: every statement through its database thread."""

    name = "threadstore, inline off"
    query = "?inline=off"


class RawInline(RawSameSchema):
    """sqlite3 on the event loop's thread (no worker thread), in threadstore's schema.

    The floor for threadstore's inline path: the same rows and statements with
    nothing around them, blocking the loop for each one and never yielding.
    """

    name = "raw sqlite3 on the event loop, threadstore schema"

    async def open(self, path: Path, extra_pragmas: Sequence[str] = ()) -> None:
        await super().open(path, extra_pragmas)
        self.inline = sqlite3.connect(path, isolation_level=None)
        for pragma in (*PRAGMAS, *extra_pragmas):
            self.inline.execute(pragma)

    async def append(self, turns: Sequence[Turn]) -> None:
        for turn in turns:
            self.inline.execute(_RAW_INSERT, self.next_row(turn))

    async def load(self) -> list[str]:
        rows = self.inline.execute(_RAW_SELECT, (self.chat_uuid,)).fetchall()
        return [row[7] for row in rows]

    async def close(self) -> None:
        self.inline.close()
        await super().close()


class LangChain:
    """langchain-community's SQLChatMessageHistory on a SQLAlchemy engine, same pragmas."""

    name = "langchain SQLChatMessageHistory"

    async def open(self, path: Path, extra_pragmas: Sequence[str] = ()) -> None:
        from langchain_core.messages import AIMessage, HumanMessage
        from sqlalchemy import create_engine, event

        with warnings.catch_warnings():
            # The package warns that it is being sunset; it is still the one users run.
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.chat_message_histories import SQLChatMessageHistory

        self.engine = create_engine(f"sqlite:///{path}")

        @event.listens_for(self.engine, "connect")
        def set_pragmas(dbapi_conn: sqlite3.Connection, _record: object) -> None:
            for pragma in (*PRAGMAS, *extra_pragmas):
                dbapi_conn.execute(pragma)

        self.history = SQLChatMessageHistory(session_id="bench", connection=self.engine)
        self.kinds = {"user": HumanMessage, "assistant": AIMessage}

    async def append(self, turns: Sequence[Turn]) -> None:
        for turn in turns:
            self.history.add_message(self.kinds[turn.role](content=turn.content, id=turn.agui_id))

    async def load(self) -> list[str]:
        return [str(m.content) for m in self.history.messages]

    async def close(self) -> None:
        self.engine.dispose()


def slug(name: str) -> str:
    """A file-name-safe form of a contender's name."""
    return re.sub(r"\W+", "-", name).strip("-")


def contenders() -> list[Contender]:
    """A fresh, unopened instance of each contender."""
    return [
        Threadstore(),
        ThreadstoreNoCache(),
        ThreadstoreThread(),
        RawSameSchema(),
        RawInline(),
        RawDriver(),
        LangChain(),
    ]


async def repetition(
    args: argparse.Namespace, rep: int, turns: Sequence[Turn], root: Path, samples: Samples
) -> tuple[int, int]:
    """One repetition on fresh files; return threadstore's statements per append and load."""
    expected = [t.content for t in turns]
    chunk = max(1, len(turns) // 20)
    async with AsyncExitStack() as stack:
        racers = contenders()
        for racer in racers:
            folder = root / f"rep{rep}-{slug(racer.name)}"
            folder.mkdir()
            await racer.open(folder / "history.db")
            stack.push_async_callback(racer.close)
        totals = dict.fromkeys((r.name for r in racers), 0.0)
        # Slices of the append interleave, so a burst of noise hits every contender.
        for index, start in enumerate(range(0, len(turns), chunk)):
            batch = turns[start : start + chunk]
            for racer in rotated(racers, rep + index):
                totals[racer.name] += await timed(partial(racer.append, batch))
        for name, total in totals.items():
            samples.add(f"{name}/append", total)
        for racer in racers:
            if await racer.load() != expected:
                raise SystemExit(f"{racer.name} did not return the stored history")
        collect_garbage()
        for index in range(args.loads):
            for racer in rotated(racers, rep + index):
                samples.add(f"{racer.name}/load", await timed(racer.load))
        return await history_statements(racers[0], turns[0])


async def wal_pages(root: Path, turns: Sequence[Turn]) -> dict[str, float]:
    """WAL pages each contender writes per appended message (untimed, deterministic).

    Automatic checkpoints are off for this pass only, so the WAL keeps every page
    written; a second connection then reads the WAL's length in pages.
    """
    pages: dict[str, float] = {}
    for racer in contenders():
        path = root / f"wal-{slug(racer.name)}.db"
        await racer.open(path, extra_pragmas=("PRAGMA wal_autocheckpoint = 0",))
        store = getattr(racer, "store", None)
        if isinstance(store, SQLiteStore):
            store.executor.checkpoint_every_writes = 0  # the inline path's own checkpoints too
        try:
            await racer.append(turns[:1])
            probe = sqlite3.connect(path)
            try:
                probe.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                await racer.append(turns[1:])
                _, frames, _ = probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                probe.close()
        finally:
            await racer.close()
        pages[racer.name] = frames / (len(turns) - 1)
    return pages


async def run_history(args: argparse.Namespace, root: Path) -> list[Goal]:
    """Part 1: interleaved appends and loads; print the table and the ratios."""
    turns = conversation(args.messages)
    samples = Samples()
    statements = (0, 0)
    for rep in range(args.reps):
        statements = await repetition(args, rep, turns, root, samples)
        print(f"  repetition {rep + 1}/{args.reps} done", file=sys.stderr)
    pages = await wal_pages(root, turns[: min(len(turns), 501)])

    names = [racer.name for racer in contenders()]
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
            f"{pages[n]:.1f}",
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
                "WAL pages/append",
            ],
            rows,
        )
    )
    print(
        f"\nthreadstore statements: create_message = {statements[0]},"
        f" get_chat_messages ({args.messages:,} messages) = {statements[1]}\n"
    )
    threadstore, uncached, thread, raw, floor, minimal, langchain = names
    print(
        "For information, against a minimal hand-made table (no tree, no activity order,"
        f" fewer indexes): append {append[minimal] / append[threadstore]:.2f}x,"
        f" load {load[threadstore] / load[minimal]:.2f}x (cache on),"
        f" {load[uncached] / load[minimal]:.2f}x (cache off); load with the cache off"
        f" against the same schema: {load[uncached] / load[raw]:.2f}x\n"
    )
    print(
        "For information, appends: threadstore with inline calls off against raw aiosqlite"
        f" {append[raw] / append[thread]:.2f}x; threadstore against raw sqlite3 on the event"
        f" loop {append[floor] / append[threadstore]:.2f}x\n"
    )
    return [
        Goal("append throughput threadstore/raw", append[raw] / append[threadstore], 0.8),
        Goal("append throughput threadstore/langchain", append[langchain] / append[threadstore], 2),
        Goal("full load time threadstore/raw", load[threadstore] / load[raw], 1.5, at_least=False),
        Goal("full load time langchain/threadstore", load[langchain] / load[threadstore], 3),
    ]


async def history_statements(contender: Contender, turn: Turn) -> tuple[int, int]:
    """Statements of one more ``create_message`` and of one full ``get_chat_messages``."""
    assert isinstance(contender, Threadstore) and isinstance(contender.store, SQLiteStore)
    log = StatementLog()
    store = contender.store
    appended = await log.count(store, partial(contender.append, [turn]))
    loaded = await log.count(store, contender.load)
    return appended, loaded


# --- part 2: a large catalog of chats -----------------------------------------------------------

_BULK_CHAT = (
    "INSERT INTO chats (chat_uuid, user_uuid, thread_id, dedup_key, name, format_version,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_BULK_MESSAGE = (
    "INSERT INTO messages (message_uuid, chat_uuid, parent_uuid, agui_id, role, content, status,"
    " in_progress, run_id, format_version, created_at, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, 'complete', 0, ?, ?, ?, ?)"
)


async def build_catalog(path: Path, chats: int, users: int) -> tuple[list[UUID], list[UUID], float]:
    """Fill threadstore's own schema with ``chats`` chats of ``users`` users, two messages each.

    The schema comes from threadstore's migrations (``open_store``); the rows go in
    with ``executemany`` in one transaction on a plain sqlite3 connection, and the
    message trigger keeps each chat's active leaf and activity time as the API would.
    """
    started = time.perf_counter()
    store = await open_store(f"sqlite:///{path}")
    await store.close()
    rng = random.Random(11)
    user_ids = [UUID(int=rng.getrandbits(128), version=4) for _ in range(users)]
    chat_ids = [UUID(int=rng.getrandbits(128), version=4) for _ in range(chats)]
    epoch = datetime(2025, 1, 1, tzinfo=UTC)
    chat_rows: list[tuple[Any, ...]] = []
    message_rows: list[tuple[Any, ...]] = []
    for index, chat_id in enumerate(chat_ids):
        user = user_ids[index % users]
        thread = f"thread-{index}"
        created = (epoch + timedelta(seconds=index)).isoformat(timespec="microseconds")
        chat = str(chat_id)
        chat_rows.append(
            (
                chat,
                str(user),
                thread,
                chat_deduplication_key(user, thread),
                f"chat {index}",
                FORMAT_VERSION,
                created,
                created,
            )
        )
        question, answer = str(uuid.uuid4()), str(uuid.uuid4())
        run = f"run-{index}"
        for message, parent, role, text in (
            (question, None, "user", "a question"),
            (answer, question, "assistant", "an answer"),
        ):
            row = (message, chat, parent, role[0], role, text, run, FORMAT_VERSION, created)
            message_rows.append((*row, created))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.executemany(_BULK_CHAT, chat_rows)
        conn.executemany(_BULK_MESSAGE, message_rows)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return user_ids, chat_ids, time.perf_counter() - started


async def run_catalog(args: argparse.Namespace, root: Path) -> None:
    """Part 2: list one user's chats and read 100 chats' last messages in a big database."""
    path = root / "catalog.db"
    user_ids, chat_ids, build = await build_catalog(path, args.chats, args.users)
    print(
        f"## Catalog: {args.chats:,} chats of {args.users:,} users (two messages each);"
        f" built in {build:.1f} s with executemany into threadstore's schema\n"
    )
    store = await open_store(f"sqlite:///{path}")
    assert isinstance(store, SQLiteStore)
    # Rows written around the store are indexed for search in the background once it
    # opens; the catalog is timed (and its statements counted) after that is done.
    while await store.messages.search_backlog():
        await asyncio.sleep(0.1)
    rng = random.Random(5)
    samples = Samples()
    per_user = args.chats // args.users
    try:
        for _ in range(args.calls):
            user = rng.choice(user_ids)
            page = await store.chats.list_chats(user)
            if len(page.items) != min(per_user, 50):
                raise SystemExit(f"list_chats returned {len(page.items)} chats")
            samples.add("list", await timed(partial(store.chats.list_chats, user)))
            chosen = rng.sample(chat_ids, 100)
            samples.add("last", await timed(partial(store.get_last_messages, chosen)))
        if len(await store.get_last_messages(chosen)) != 100:
            raise SystemExit("get_last_messages did not return one message per chat")
        log = StatementLog()
        listed = await log.count(store, partial(store.chats.list_chats, user))
        last = await log.count(store, partial(store.get_last_messages, chosen))
    finally:
        await store.close()
    rows = [
        [
            f"`list_chats(user)` ({per_user} chats)",
            f"{samples.median('list') * 1e3:.3f}",
            str(listed),
        ],
        [
            "`get_last_messages` (100 chats)",
            f"{samples.median('last') * 1e3:.3f}",
            str(last),
        ],
    ]
    print(markdown_table(["call", f"median of {args.calls} (ms)", "SQL statements"], rows))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Read the sizes; ``--quick`` shrinks every one of them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a small run (a few seconds)")
    parser.add_argument("--messages", type=int, help="messages appended per contender")
    parser.add_argument("--loads", type=int, help="full loads per contender and repetition")
    parser.add_argument("--reps", type=int, help="interleaved repetitions")
    parser.add_argument("--chats", type=int, help="chats in the catalog database")
    parser.add_argument("--users", type=int, help="users owning those chats")
    parser.add_argument("--calls", type=int, help="timed calls per catalog read")
    args = parser.parse_args(argv)
    defaults = (
        {"messages": 200, "loads": 10, "reps": 2, "chats": 10_000, "users": 1_000, "calls": 50}
        if args.quick
        else {"messages": 2000, "loads": 50, "reps": 5, "chats": 100_000, "users": 10_000}
        | {"calls": 200}
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


async def main(argv: Sequence[str] | None = None) -> int:
    """Run both parts and print Markdown ready for docs/benchmarks.md."""
    args = parse_args(argv)
    print(f"# threadstore vs raw aiosqlite vs LangChain on SQLite\n\n{machine_line()}")
    print(f"sqlite {sqlite3.sqlite_version} · aiosqlite {aiosqlite.__version__}")
    with tempfile.TemporaryDirectory(prefix="threadstore-bench-") as folder:
        goals = await run_history(args, Path(folder))
        for goal in goals:
            print(goal.line())
        print()
        await run_catalog(args, Path(folder))
    return 0 if all(goal.met for goal in goals) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
