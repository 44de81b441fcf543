"""The repository contract suite, for threadstore's backends and for your own repository.

Any object with the methods of ``ChatRepositoryLike`` and ``MessageRepositoryLike`` is a
drop-in for the storage agent; this suite is how it proves it. Write an async generator
function that yields one fresh, empty repository, and put one line in a test module::

    TestMyRepository = threadstore.testing.contract_tests(my_repository)

Tests of ``RunRepositoryLike`` run when the repository implements it, and tests of the
rest of the :class:`~threadstore.Store` API when it is a ``Store``; the others skip.
Needs ``pytest`` and ``pytest-asyncio`` (the ``testing`` extra).
"""

import pytest

# Before the test modules are imported, so that their asserts explain a failure.
pytest.register_assert_rewrite(
    "threadstore.testing._suite",
    "threadstore.testing._branches",
    "threadstore.testing._chats",
    "threadstore.testing._concurrency",
    "threadstore.testing._messages",
    "threadstore.testing._nested",
    "threadstore.testing._runs",
    "threadstore.testing._search",
)

from threadstore.testing import (  # noqa: E402
    _branches,
    _chats,
    _concurrency,
    _messages,
    _nested,
    _runs,
    _search,
)
from threadstore.testing._suite import (  # noqa: E402
    AddMessage,
    ContractSuite,
    MakeChat,
    OpenRepository,
    OpenStore,
    Repository,
    RepositoryFactory,
    RunRepository,
    chat_maker,
    contract_tests,
    gather_tests,
    message_adder,
)

gather_tests(ContractSuite, [_chats, _messages, _nested, _runs, _concurrency, _branches, _search])

__all__ = [
    "AddMessage",
    "ContractSuite",
    "MakeChat",
    "OpenRepository",
    "OpenStore",
    "Repository",
    "RepositoryFactory",
    "RunRepository",
    "chat_maker",
    "contract_tests",
    "message_adder",
]
