"""How a test gets an empty, migrated database: the ways compared, per test.

PostgreSQL: a new database, migrated, then dropped (what the tests did); a clone of a
migrated template (``CREATE DATABASE … TEMPLATE``), then dropped; ``TRUNCATE`` of every
table of one migrated database; ``DELETE`` of every row and a restart of every sequence
(what the tests do, ``tests/postgres_support.py``). Each way then opens and closes a
store on the database, as a test does. SQLite: a new file, migrated, against a copy of a
file migrated once (``tests/conftest.py``). Each way writes one chat with one message
first, as a test leaves behind.

Run ``python benchmarks/bench_test_databases.py`` (``--rounds N``; ``--url`` or
``THREADSTORE_TEST_POSTGRES_URL`` names the server). Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

import threadstore
from common import machine_line
from threadstore import ChatCreate, MessageCreate

TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> $1"
SEQUENCES = "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
# Referrers first, so no foreign key is in the way.
DELETE_ORDER = ("tool_calls", "reasonings", "run_events", "runs", "messages", "chats")


def at(url: str, database: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


async def use(url: str) -> None:
    """Open a store, write what a small test writes, close it."""
    store = await threadstore.open_store(url)
    try:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id="t"))
        await store.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="x"))
    finally:
        await store.close()


async def measure(rounds: int, step: Callable[[], Awaitable[None]]) -> float:
    """Median seconds of ``step`` over ``rounds``."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        await step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def postgres(server: str, rounds: int) -> dict[str, float]:
    admin = await asyncpg.connect(server)
    template = f"ts_bench_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE DATABASE "{template}"')
    await use(at(server, template))
    conn = await asyncpg.connect(at(server, template))
    tables = [row[0] for row in await conn.fetch(TABLES, "threadstore_migrations")]
    sequences = [row[0] for row in await conn.fetch(SEQUENCES)]

    async def create_migrate_drop() -> None:
        name = f"ts_bench_{uuid.uuid4().hex[:12]}"
        await admin.execute(f'CREATE DATABASE "{name}"')
        await use(at(server, name))
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')

    async def clone_drop() -> None:
        name = f"ts_bench_{uuid.uuid4().hex[:12]}"
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        await use(at(server, name))
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')

    async def truncate() -> None:
        await conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
        await use(at(server, template))

    async def delete() -> None:
        async with conn.transaction():
            for table in DELETE_ORDER:
                await conn.execute(f"DELETE FROM {table}")
            for sequence in sequences:
                await conn.execute(f"ALTER SEQUENCE {sequence} RESTART")
        await use(at(server, template))

    try:
        figures = {
            "create, migrate, drop": await measure(rounds, create_migrate_drop),
            "truncate": await measure(rounds, truncate),
            "delete rows (chosen)": await measure(rounds, delete),
        }
        await conn.close()  # CREATE ... TEMPLATE needs the template free of sessions
        figures["clone template, drop"] = await measure(rounds, clone_drop)
        return figures
    finally:
        await conn.close()
        await admin.execute(f'DROP DATABASE "{template}" WITH (FORCE)')
        await admin.close()


async def sqlite(rounds: int) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp())
    template = folder / "template.db"
    await use(f"sqlite:///{template}")

    async def new_file() -> None:
        await use(f"sqlite:///{folder / uuid.uuid4().hex}.db")

    async def copy() -> None:
        path = folder / f"{uuid.uuid4().hex}.db"
        shutil.copyfile(template, path)
        await use(f"sqlite:///{path}")

    try:
        return {
            "new file, migrate": await measure(rounds, new_file),
            "copy of a migrated file (chosen)": await measure(rounds, copy),
        }
    finally:
        shutil.rmtree(folder)


def table(title: str, figures: dict[str, float]) -> str:
    first = next(iter(figures.values()))
    lines = [f"| {title} | ms per test | vs the first |", "|---|---:|---:|"]
    lines += [f"| {name} | {s * 1000:.1f} | {s / first:.2f}x |" for name, s in figures.items()]
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--url", default=os.environ.get("THREADSTORE_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    print(machine_line(), f"· median of {args.rounds}")
    print()
    print(table("SQLite", await sqlite(args.rounds)))
    if args.url:
        print()
        print(table("PostgreSQL", await postgres(args.url, args.rounds)))


if __name__ == "__main__":
    asyncio.run(main())
