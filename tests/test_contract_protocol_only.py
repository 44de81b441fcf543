"""The shipped contract suite, run the documented way, on a repository of the Protocols only.

``DictRepository`` implements the chat, message and run Protocols and nothing of the
``Store`` API, so its full-Store tests skip and everything else must pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import threadstore.testing
from dict_repository import DictRepository

pytest_plugins = ["pytester"]


async def dict_repository() -> AsyncIterator[DictRepository]:
    """A fresh, empty repository for each test."""
    yield DictRepository()


TestDictRepository = threadstore.testing.contract_tests(dict_repository)


REPOSITORIES = """
from threadstore.testing import contract_tests
from dict_repository import DictRepository


class LeakyRepository(DictRepository):
    # Lists every user's chats to anyone: the suite must notice.
    async def get_all_chats(self, user_uuid=None):
        return await super().get_all_chats()


class MissingRepository:
    # Has none of the Protocols' methods.
    pass


async def my_repository():
    yield {name}()


TestMine = contract_tests(my_repository)
"""


def run_suite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str
) -> pytest.RunResult:
    """Run the suite in a new pytest process, as a user would, on the repository ``name``."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    pytester.makepyfile(test_user=REPOSITORIES.format(name=name))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")


def test_the_suite_fails_a_repository_that_shows_users_each_others_chats(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_suite(pytester, monkeypatch, "LeakyRepository")

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["FAILED *::test_get_all_chats_for_a_user_never_includes_another_users_chats*"]
    )


def test_the_suite_names_the_methods_a_repository_lacks(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_suite(pytester, monkeypatch, "MissingRepository")
    suite = threadstore.testing.contract_tests(_no_repository)
    contract = [name for name in dir(suite) if name.startswith("test_")]

    outcomes = result.parseoutcomes()
    # Every test of the suite errors (a parametrized one once per case): none passes,
    # fails or skips.
    assert outcomes.get("errors", 0) >= len(contract)
    assert not {"passed", "failed", "skipped", "xfailed"} & set(outcomes)
    result.stdout.fnmatch_lines(["*MissingRepository does not implement*lacks create_chat*"])


BACKEND_PRIMITIVES = {
    "setup",
    "close",
    "transaction",
    "_apply",
    "_select_chats",
    "_select_branch",
    "_select_tree",
    "_find_message",
    "_find_tool_call",
    "_select_runs",
    "_select_last_messages",
}


def test_a_backend_implements_eleven_primitives_and_store_the_rest() -> None:
    from threadstore.store._base import Store
    from threadstore.store._contract import (
        ChatRepositoryLike,
        MessageRepositoryLike,
        RunRepositoryLike,
    )
    from threadstore.store.memory import MemoryStore
    from threadstore.store.postgres import PostgresStore
    from threadstore.store.sqlite import SQLiteStore

    assert set(Store.__abstractmethods__) == BACKEND_PRIMITIVES
    protocol_methods = {
        name
        for protocol in (ChatRepositoryLike, MessageRepositoryLike, RunRepositoryLike)
        for name in vars(protocol)
        if not name.startswith("_")
    }
    public = {name for name in vars(Store) if not name.startswith("_")} | protocol_methods
    for backend in (MemoryStore, SQLiteStore, PostgresStore):
        # Every public method, the Protocols' included, is written once, in Store.
        overridden = public & set(vars(backend)) - {"setup", "close", "transaction"}
        assert overridden <= {"connect", "schema_version", "run_events"}, backend


async def _no_repository() -> AsyncIterator[None]:
    yield None
