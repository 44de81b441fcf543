"""threadstore's own backends run the shipped contract suite (``threadstore.testing``).

Every backend of ``conftest.BACKENDS`` runs every tier: the chat and message Protocols,
the run registry and the full Store API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import threadstore
from threadstore import Store
from threadstore.testing import ContractSuite, OpenRepository


class TestBackends(ContractSuite):
    """The suite on memory, SQLite (inline calls on and off) and PostgreSQL."""

    @pytest.fixture
    def open_repository(self, store_url: str) -> OpenRepository:
        @asynccontextmanager
        async def open_one(**options: Any) -> AsyncIterator[Store]:
            store = await threadstore.open_store(store_url, **options)
            try:
                yield store
            finally:
                await store.close()

        return open_one
