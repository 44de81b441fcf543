"""PostgreSQL databases for tests: one migrated database per test process, emptied per use.

A new database per test (create, migrate, drop) or a clone of a migrated template (the
drop dominates) cost most of the PostgreSQL tests' time; ``TRUNCATE`` makes new files
for every table. Deleting a test's few rows is far cheaper (the figures and their command:
docs/benchmarks.md, "How a test gets its database"). So each test process makes one
database, migrated by the code under test (a change of the migrations is picked up by the
next run), deletes every row and restarts every sequence before each test that asks for
it, and drops the database when the session ends. The name is random, so several test
processes can share one server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import pytest

import threadstore

POSTGRES_URL_ENV = "THREADSTORE_TEST_POSTGRES_URL"

MIGRATIONS_TABLE = "threadstore_migrations"

_LIST_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> $1"

_LIST_REFERENCES = (
    "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
    " WHERE contype = 'f' AND conrelid <> confrelid"
)

_LIST_SEQUENCES = "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"

# A connection a finished test left open (a child process, a leaked pool) would block
# TRUNCATE; end it, as DROP DATABASE ... WITH (FORCE) did.
_END_OTHER_SESSIONS = (
    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def server_url() -> str:
    """The PostgreSQL server the tests may create databases on; skip the test without one."""
    url = os.environ.get(POSTGRES_URL_ENV)
    if not url:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set; this test needs a PostgreSQL server")
    return url


def with_database(url: str, database: str) -> str:
    """Return ``url`` pointing at ``database`` instead of the one it names."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


class _ProcessDatabase:
    """This process's migrated database: its name, its tables, and whether a test holds it."""

    def __init__(self) -> None:
        self.server: str | None = None
        self.name = f"ts_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.tables: list[str] = []  # rows are deleted in this order: referrers first
        self.sequences: list[str] = []
        self.in_use = False

    async def create(self, server: str) -> None:
        import asyncpg

        admin = await asyncpg.connect(server)
        try:
            # Identifiers cannot be bound as parameters; the name is generated above.
            await admin.execute(f'CREATE DATABASE "{self.name}"')
        finally:
            await admin.close()
        self.server = server  # from here on, the session's end drops it
        store = await threadstore.open_store(with_database(server, self.name))
        await store.close()
        conn = await asyncpg.connect(with_database(server, self.name))
        try:
            tables = [row[0] for row in await conn.fetch(_LIST_TABLES, MIGRATIONS_TABLE)]
            references = [(row[0], row[1]) for row in await conn.fetch(_LIST_REFERENCES)]
            self.tables = _referrers_first(tables, references)
            self.sequences = [row[0] for row in await conn.fetch(_LIST_SEQUENCES)]
        finally:
            await conn.close()

    async def empty(self) -> None:
        import asyncpg

        assert self.server is not None
        conn = await asyncpg.connect(with_database(self.server, self.name))
        try:
            await conn.execute(_END_OTHER_SESSIONS)
            async with conn.transaction():
                for table in self.tables:
                    await conn.execute(f'DELETE FROM "{table}"')
                for sequence in self.sequences:
                    await conn.execute(f'ALTER SEQUENCE "{sequence}" RESTART')
        finally:
            await conn.close()

    async def drop(self) -> None:
        import asyncpg

        if self.server is None:
            return
        admin = await asyncpg.connect(self.server)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await admin.close()
        self.server = None


def _referrers_first(tables: list[str], references: list[tuple[str, str]]) -> list[str]:
    """Order ``tables`` so that each comes before every table it references."""
    ordered: list[str] = []
    remaining = list(tables)
    while remaining:
        # A table can go once no remaining table still references it.
        free = [t for t in remaining if not any(r == t and s in remaining for s, r in references)]
        if not free:
            raise RuntimeError(f"reference cycle among {remaining}")
        ordered.extend(free)
        remaining = [t for t in remaining if t not in free]
    return ordered


_process_database = _ProcessDatabase()


@asynccontextmanager
async def clean_database(server: str) -> AsyncIterator[str]:
    """Yield the URL of a migrated database with no rows; one test at a time per process."""
    if _process_database.in_use:
        raise RuntimeError("the clean database is in use; use fresh_database() for a second one")
    if _process_database.server is None:
        await _process_database.create(server)
    else:
        await _process_database.empty()
    _process_database.in_use = True
    try:
        yield with_database(server, _process_database.name)
    finally:
        _process_database.in_use = False


async def drop_clean_database() -> None:
    """Drop this process's database (at the end of the session)."""
    await _process_database.drop()


@asynccontextmanager
async def fresh_database(server: str) -> AsyncIterator[str]:
    """Create an empty database without the schema; yield its URL; drop it afterwards.

    For tests of migrations themselves; every other test takes :func:`clean_database`.
    """
    import asyncpg

    name = f"ts_test_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield with_database(server, name)
    finally:
        admin = await asyncpg.connect(server)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
