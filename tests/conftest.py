"""Shared fixtures: one ``store`` fixture parametrized over every backend.

``memory``, ``sqlite`` and ``sqlite-thread`` (SQLite with inline calls off) always
run. ``postgres`` runs when ``THREADSTORE_TEST_POSTGRES_URL`` names a server the tests
may create databases on; each test then gets an empty, migrated database
(``postgres_support.clean_database``). A SQLite test gets a copy of a database file
migrated once per test process, which is cheaper than migrating a new file
(docs/benchmarks.md, "How a test gets its database").
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, Protocol

import pytest
from hypothesis import HealthCheck, settings

import threadstore
from postgres_support import clean_database, drop_clean_database, fresh_database, server_url
from threadstore import Store
from threadstore.testing import AddMessage, MakeChat, chat_maker, message_adder

# The suite runs in parallel worker processes on a machine that may be busy: how fast
# hypothesis generates its data says nothing about the code under test.
settings.register_profile("threadstore", suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("threadstore")

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    # Every statement through the store's database thread, none inline on the event loop.
    pytest.param("sqlite-thread", id="sqlite-thread"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture
def quiet_search_indexer(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's background search indexer waits an hour after a write, not a second.

    For tests that count a call's statements: the indexer would otherwise run its
    batch whenever that second falls, maybe inside the counted call. Searches still
    index what is pending first.
    """
    monkeypatch.setattr("threadstore.store._sqlite_search.FLUSH_INTERVAL", 3600.0)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite database file, migrated by the code under test once per process."""
    path = tmp_path_factory.mktemp("sqlite-template") / "threadstore.db"

    async def migrate() -> None:
        store = await threadstore.open_store(f"sqlite:///{path}")
        await store.close()

    asyncio.run(migrate())
    # Closing the last connection folded the write-ahead log into the file.
    assert not path.with_name(f"{path.name}-wal").exists()
    return path


@pytest.fixture(params=BACKENDS)
async def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> AsyncIterator[str]:
    """The URL of an empty store of each backend kind."""
    backend: str = request.param
    if backend == "memory":
        yield "memory://"
    elif backend in ("sqlite", "sqlite-thread"):
        path = tmp_path / "threadstore.db"
        shutil.copyfile(sqlite_template, path)
        yield f"sqlite:///{path}" + ("?inline=off" if backend == "sqlite-thread" else "")
    else:
        async with clean_database(server_url()) as url:
            yield url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An open, migrated, empty store; closed after the test."""
    opened = await threadstore.open_store(store_url)
    try:
        yield opened
    finally:
        await opened.close()


class StoreOpener(Protocol):
    """Opens another store on the test's database, e.g. with custom model classes."""

    def __call__(self, **options: Any) -> Awaitable[Store]: ...


@pytest.fixture
async def open_test_store(store_url: str) -> AsyncIterator[StoreOpener]:
    """Open extra stores on the test's database (``memory://`` gives a new, empty one).

    Pass ``chat_model=``, ``message_model=``, ``tool_call_model=`` or
    ``reasoning_model=`` to open it with subclassed models. Every store opened
    here is closed after the test.
    """
    opened: list[Store] = []

    async def open_one(**options: Any) -> Store:
        new = await threadstore.open_store(store_url, **options)
        opened.append(new)
        return new

    try:
        yield open_one
    finally:
        for each in reversed(opened):
            await each.close()


@pytest.fixture
def make_chat(store: Store) -> MakeChat:
    """Create a chat in ``store``; a fresh user and thread unless given."""
    return chat_maker(store)


@pytest.fixture
def add_message(store: Store) -> AddMessage:
    """Append a message to a chat in ``store`` (on its active branch unless a parent is given)."""
    return message_adder(store)


REQUIRE_POSTGRES_ENV = "THREADSTORE_REQUIRE_POSTGRES"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """In CI (``THREADSTORE_REQUIRE_POSTGRES=1``) a skipped PostgreSQL test is a failure."""
    outcome = yield
    report = outcome.get_result()
    if (
        os.environ.get(REQUIRE_POSTGRES_ENV) == "1"
        and report.skipped
        # An expected failure is reported as skipped too; it did run.
        and not hasattr(report, "wasxfail")
        and item.get_closest_marker("postgres") is not None
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"PostgreSQL test skipped although {REQUIRE_POSTGRES_ENV}=1: {report.longrepr}"
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Drop this process's PostgreSQL test database."""
    asyncio.run(drop_clean_database())


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
async def server_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh, migrated database on each backend a server process runs on (SQLite, PostgreSQL)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'threadstore.db'}"
    else:
        async with fresh_database(server_url()) as url:
            # Migrated before any server starts, so several can start on it at once.
            await (await threadstore.open_store(url)).close()
            yield url
        return
    await (await threadstore.open_store(url)).close()
    yield url


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the browser tests last.

    pytest-playwright keeps Playwright's sync API, and the event loop it runs, alive for
    the rest of the session once a browser test has started; an asyncio test after that
    could not start its own loop. Moving them to the end keeps every order of files safe.
    """
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """End with one line saying why tests skipped: how many for each reason.

    The summary's own list (``-rs``) would give each skip a line of its own, dozens of
    them for a machine without PostgreSQL, Node or Chromium.
    """
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        counts = ", ".join(f"{count} {reason}" for reason, count in reasons.most_common())
        terminalreporter.write_line(f"skipped {reasons.total()}: {counts}")
