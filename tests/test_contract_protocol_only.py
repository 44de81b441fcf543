"""The shipped contract suite, run the documented way, on a repository of the Protocols only.

``DictRepository`` implements the chat, message and run Protocols and nothing of the
``Store`` API, so its full-Store tests skip and everything else must pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import threadstore.testing
from dict_repository import DictRepository


async def dict_repository() -> AsyncIterator[DictRepository]:
    """A fresh, empty repository for each test."""
    yield DictRepository()


TestDictRepository = threadstore.testing.contract_tests(dict_repository)
