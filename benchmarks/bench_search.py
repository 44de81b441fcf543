"""Full-text search: a two-word query in one user's chats, and what the index costs an append.

Part 1 fills a database (default: 1,000,000 messages in 10,000 chats of 1,000 users)
through threadstore's own schema with bulk SQL, then times ``store.search(user, "w1 w2")``
for random users, each query two words of one of that user's messages, newest first and
best match first, and prints p50 and p99 per backend (SQLite, PostgreSQL).

Part 2 appends messages one write each to two SQLite stores side by side, interleaved in
slices: threadstore as it is, and the same store with the search triggers dropped (no
index kept), and prints the ratio.

Run ``python benchmarks/bench_search.py`` (``--messages 100000`` for a smaller run;
``--backends sqlite`` without PostgreSQL; ``THREADSTORE_BENCH_POSTGRES_URL`` names a
server to create a database on). Definitions: docs/benchmarks.md, "Full-text search".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from common import Samples, machine_line, markdown_table, percentile, rotated, timed
from threadstore import ChatCreate, MessageCreate, Role, Store, open_store
from threadstore.keys import chat_deduplication_key
from threadstore.models import FORMAT_VERSION

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
SEARCH_TRIGGERS = (
    "messages_search_insert",
    "messages_search_update",
    "messages_search_delete",
    "tool_calls_search_insert",
    "tool_calls_search_update",
    "reasonings_search_insert",
    "reasonings_search_update",
)
"""The triggers that feed the SQLite index: dropped, the store keeps none."""


class Corpus:
    """Seeded synthetic text: pseudo-words with Zipf-like frequencies, 8 to 40 a message."""

    def __init__(self, words: int = 5000, seed: int = 11) -> None:
        self.random = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        vocabulary: set[str] = set()
        while len(vocabulary) < words:
            size = self.random.randint(3, 9)
            vocabulary.add("".join(self.random.choice(letters) for _ in range(size)))
        self.vocabulary = sorted(vocabulary)
        self.random.shuffle(self.vocabulary)
        weights = [1.0 / rank for rank in range(1, words + 1)]
        total = 0.0
        self.cumulative = []
        for weight in weights:
            total += weight
            self.cumulative.append(total)

    def message(self) -> list[str]:
        count = self.random.randint(8, 40)
        return self.random.choices(self.vocabulary, cum_weights=self.cumulative, k=count)


def layout(args: argparse.Namespace) -> Iterator[tuple[int, int, int]]:
    """(user index, chat index, messages) for every chat: chats spread over the users."""
    per_chat, extra = divmod(args.messages, args.chats)
    for chat in range(args.chats):
        yield chat % args.users, chat, per_chat + (1 if chat < extra else 0)


def user_uuid(index: int) -> uuid.UUID:
    return uuid.UUID(int=index + 1)


def generate(args: argparse.Namespace) -> Iterator[tuple[str, list[tuple[str, ...]], list[str]]]:
    """Per chat: its row values, its message rows, and one message's words (for queries).

    Rows are in the column order of the bulk inserts below; times as ISO text.
    """
    corpus = Corpus()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for user, chat, count in layout(args):
        chat_uuid = str(uuid.UUID(int=(1 << 64) + chat))
        owner = str(user_uuid(user))
        thread = f"thread-{chat}"
        parent = None
        rows = []
        sample: list[str] = []
        pick = corpus.random.randrange(max(1, count))
        for n in range(count):
            words = corpus.message()
            if n == pick:
                sample = words
            message_uuid = str(uuid.uuid4())
            at = (start + timedelta(seconds=chat * 1000 + n)).isoformat(timespec="microseconds")
            role = "user" if n % 2 == 0 else "assistant"
            rows.append((message_uuid, chat_uuid, parent, role, " ".join(words), at))
            parent = message_uuid
        created = start + timedelta(seconds=chat * 1000)
        chat_row = (
            chat_uuid,
            owner,
            thread,
            chat_deduplication_key(uuid.UUID(owner), thread),
            f"chat {chat}",
            created.isoformat(timespec="microseconds"),
        )
        yield chat_row, rows, sample  # type: ignore[misc]


# --- loading ---------------------------------------------------------------------------


def load_sqlite(path: Path, args: argparse.Namespace) -> dict[int, list[list[str]]]:
    """Bulk-insert the corpus into a migrated SQLite file; the search triggers index it."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA foreign_keys = ON")
    samples: dict[int, list[list[str]]] = {}
    done, started = 0, time.perf_counter()
    conn.execute("BEGIN")
    for chat_row, rows, sample in generate(args):
        user = int(uuid.UUID(chat_row[1])) - 1
        samples.setdefault(user, []).append(sample)
        conn.execute(
            "INSERT INTO chats (chat_uuid, user_uuid, thread_id, dedup_key, name, format_version,"
            " created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
            (*chat_row[:5], FORMAT_VERSION, chat_row[5]),
        )
        conn.executemany(
            "INSERT INTO messages (message_uuid, chat_uuid, parent_uuid, role, content, status,"
            " in_progress, format_version, created_at, updated_at)"
            " VALUES (?1, ?2, ?3, ?4, ?5, 'complete', 0, ?6, ?7, ?7)",
            [(*row[:5], FORMAT_VERSION, row[5]) for row in rows],
        )
        done += len(rows)
        if done % 50_000 < len(rows):
            conn.execute("COMMIT")
            conn.execute("BEGIN")
            rate = done / (time.perf_counter() - started)
            print(f"  sqlite: {done:,} messages ({rate:,.0f}/s)", file=sys.stderr)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return samples


async def load_postgres(url: str, args: argparse.Namespace) -> dict[int, list[list[str]]]:
    """COPY the corpus into a migrated database with triggers off, then index it as the
    background indexing does (one set-based insert) and build the GIN index once."""
    import asyncpg

    conn = await asyncpg.connect(url)
    samples: dict[int, list[list[str]]] = {}
    try:
        await conn.execute("SET session_replication_role = replica")
        started, done = time.perf_counter(), 0
        chats, messages = [], []
        for chat_row, rows, sample in generate(args):
            user = int(uuid.UUID(chat_row[1])) - 1
            samples.setdefault(user, []).append(sample)
            at = datetime.fromisoformat(chat_row[5])
            chats.append(
                (
                    uuid.UUID(chat_row[0]),
                    uuid.UUID(chat_row[1]),
                    *chat_row[2:5],
                    uuid.UUID(rows[-1][0]) if rows else None,
                    FORMAT_VERSION,
                    at,
                    at,
                )
            )
            for row in rows:
                made = datetime.fromisoformat(row[5])
                messages.append(
                    (
                        uuid.UUID(row[0]),
                        uuid.UUID(row[1]),
                        None if row[2] is None else uuid.UUID(row[2]),
                        row[3],
                        row[4],
                        "complete",
                        False,
                        FORMAT_VERSION,
                        made,
                        made,
                    )
                )
            if len(messages) >= 50_000:
                done += await _copy(conn, chats, messages)
                chats, messages = [], []
                rate = done / (time.perf_counter() - started)
                print(f"  postgres: {done:,} messages ({rate:,.0f}/s)", file=sys.stderr)
        await _copy(conn, chats, messages)
        await conn.execute("SET session_replication_role = DEFAULT")
        definition = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'search_docs_words'"
        )
        await conn.execute("DROP INDEX search_docs_words")
        await conn.execute(
            "INSERT INTO search_docs (message_uuid, doc)"
            " SELECT s.message_uuid, threadstore_search_doc(threadstore_search_language(), s)"
            " FROM search_sources s",
            timeout=3600,
        )
        await conn.execute("SET maintenance_work_mem = '512MB'")
        await conn.execute(definition, timeout=3600)
        await conn.execute("VACUUM ANALYZE", timeout=3600)
    finally:
        await conn.close()
    return samples


async def _copy(
    conn: object, chats: list[tuple[object, ...]], messages: list[tuple[object, ...]]
) -> int:
    await conn.copy_records_to_table(  # type: ignore[attr-defined]
        "chats",
        records=chats,
        columns=[
            "chat_uuid",
            "user_uuid",
            "thread_id",
            "dedup_key",
            "name",
            "active_leaf_uuid",
            "format_version",
            "created_at",
            "updated_at",
        ],
    )
    await conn.copy_records_to_table(  # type: ignore[attr-defined]
        "messages",
        records=messages,
        columns=[
            "message_uuid",
            "chat_uuid",
            "parent_uuid",
            "role",
            "content",
            "status",
            "in_progress",
            "format_version",
            "created_at",
            "updated_at",
        ],
    )
    return len(messages)


# --- part 1: queries -------------------------------------------------------------------


def queries(
    samples: dict[int, list[list[str]]], count: int, seed: int = 5
) -> list[tuple[int, str]]:
    """``count`` (user, "w1 w2") pairs: two distinct words of one of the user's messages."""
    rng = random.Random(seed)
    users = sorted(samples)
    made = []
    while len(made) < count:
        user = rng.choice(users)
        words = sorted(set(rng.choice(samples[user])))
        if len(words) >= 2:
            made.append((user, " ".join(rng.sample(words, 2))))
    return made


async def time_queries(
    store: Store, name: str, asked: list[tuple[int, str]], results: Samples
) -> dict[str, float]:
    hits = 0
    for order in ("newest", "best"):
        for user, text in asked[:10]:  # warm the caches first, as a running server would be
            await store.search(user_uuid(user), text, order=order)  # type: ignore[arg-type]
        for user, text in asked:
            started = time.perf_counter()
            page = await store.search(user_uuid(user), text, order=order)  # type: ignore[arg-type]
            results.add(f"{name}/{order}", time.perf_counter() - started)
            hits += len(page.items)
    return {"hits per query": hits / (2 * len(asked))}


async def part_one(args: argparse.Namespace, root: Path) -> None:
    results = Samples()
    rows = []
    for backend in args.backends:
        started = time.perf_counter()
        if backend == "sqlite":
            path = root / "search.db"
            for old in root.glob("search.db*"):
                old.unlink()
            async with await open_store(f"sqlite:///{path}"):
                pass
            samples = load_sqlite(path, args)
            url = f"sqlite:///{path}"
            size = sum(p.stat().st_size for p in root.glob("search.db*")) / 2**20
        else:
            url, size = await _postgres_database(args), 0.0
            async with await open_store(url):
                pass
            samples = await load_postgres(url, args)
        asked = queries(samples, args.queries)
        async with await open_store(url) as store:
            assert store._search is not None
            await store._search.wait_indexed()  # SQLite: index what the load left pending
            loaded = time.perf_counter() - started
            if backend == "postgres":
                size = await _postgres_size(store)
            extra = await time_queries(store, backend, asked, results)
        for order in ("newest", "best"):
            values = sorted(results.values[f"{backend}/{order}"])
            rows.append(
                [
                    backend,
                    order,
                    f"{percentile(values, 50) * 1e3:.2f}",
                    f"{percentile(values, 99) * 1e3:.2f}",
                    f"{max(values) * 1e3:.2f}",
                    f"{extra['hits per query']:.1f}",
                    f"{loaded:.0f}",
                    f"{size:,.0f}",
                ]
            )
        print(f"  {backend} done", file=sys.stderr)
    print(
        f"\n## Search: {args.messages:,} messages, {args.chats:,} chats, {args.users:,} users;"
        f" {args.queries} two-word queries per order, one user each, limit 20\n"
    )
    print(
        markdown_table(
            [
                "backend",
                "order",
                "p50 (ms)",
                "p99 (ms)",
                "max (ms)",
                "hits/query",
                "load (s)",
                "database (MiB)",
            ],
            rows,
        )
    )
    print("\ngoal: p50 <= 20 ms and p99 <= 100 ms on each backend")


async def _postgres_database(args: argparse.Namespace) -> str:
    import asyncpg

    server = os.environ.get("THREADSTORE_BENCH_POSTGRES_URL", DEFAULT_POSTGRES)
    name = f"ts_bench_search_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')  # a generated name, never input
    finally:
        await admin.close()
    args.drop.append((server, name))
    return server.rsplit("/", 1)[0] + f"/{name}"


async def _postgres_size(store: Store) -> float:
    rows = await store._fetch("SELECT pg_database_size(current_database())")  # type: ignore[attr-defined]
    return float(rows[0][0]) / 2**20


async def drop_databases(args: argparse.Namespace) -> None:
    import asyncpg

    for server, name in args.drop:
        admin = await asyncpg.connect(server)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


# --- part 2: what the index costs an append --------------------------------------------


async def part_two(args: argparse.Namespace, root: Path) -> None:
    corpus = Corpus(seed=3)
    texts = [" ".join(corpus.message() * 3) for _ in range(args.appends)]  # 24 to 120 words
    results = Samples()
    for rep in range(args.reps):
        stores: dict[str, Store] = {}
        chats = {}
        for name in ("with search", "without search"):
            path = root / f"append-{rep}-{name.replace(' ', '-')}.db"
            store = await open_store(f"sqlite:///{path}")
            if name == "without search":
                conn = sqlite3.connect(path)
                for trigger in SEARCH_TRIGGERS:
                    conn.execute(f"DROP TRIGGER {trigger}")  # names from the schema, above
                conn.close()
            stores[name] = store
            chats[name] = await store.create_chat(
                ChatCreate(user_uuid=uuid.uuid4(), thread_id="append")
            )
        totals = dict.fromkeys(stores, 0.0)
        chunk = max(1, len(texts) // 20)
        for index, start in enumerate(range(0, len(texts), chunk)):
            batch = texts[start : start + chunk]
            for name in rotated(list(stores), rep + index):
                totals[name] += await timed(
                    partial(_append, stores[name], chats[name].chat_uuid, batch)
                )
        # What the index costs includes indexing what was appended (the background
        # indexer's batches ran meanwhile; the rest now).
        search = stores["with search"]._search
        assert search is not None
        totals["with search"] += await timed(search.wait_indexed)
        for name, total in totals.items():
            results.add(name, total / len(texts))
        for store in stores.values():
            await store.close()
        print(f"  append repetition {rep + 1}/{args.reps} done", file=sys.stderr)
    with_index, without = results.median("with search"), results.median("without search")
    print(
        f"\n## Append: {args.appends:,} messages (24 to 120 words) one write each,"
        f" {args.reps} interleaved repetitions, medians\n"
    )
    print(
        markdown_table(
            ["store", "per append (µs)"],
            [
                ["with the search index", f"{with_index * 1e6:.0f}"],
                ["search triggers dropped", f"{without * 1e6:.0f}"],
            ],
        )
    )
    print(f"\nindex cost: {with_index / without:.2f}x the append (goal: at most 1.20x)")


async def _append(store: Store, chat_uuid: uuid.UUID, texts: list[str]) -> None:
    for n, text in enumerate(texts):
        await store.create_message(
            MessageCreate(
                chat_uuid=chat_uuid, role=Role.USER if n % 2 == 0 else Role.ASSISTANT, content=text
            )
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--chats", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--appends", type=int, default=2_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--part", choices=["all", "search", "append"], default="all")
    parser.add_argument("--folder", help="Keep the SQLite files here (default: a temporary one).")
    args = parser.parse_args()
    args.backends = [b for b in args.backends.split(",") if b]
    args.chats = min(args.chats, args.messages)
    args.users = min(args.users, args.chats)
    args.drop = []
    print(machine_line())
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.folder or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            if args.part in ("all", "search"):
                await part_one(args, folder)
            if args.part in ("all", "append"):
                await part_two(args, folder)
        finally:
            await drop_databases(args)


if __name__ == "__main__":
    asyncio.run(main())
