"""Compaction after runs, off their path: chats over a budget get a summary in the background.

A storage agent given a :class:`BackgroundCompactor` asks it, once a run's records are
final, to look at the run's chat; the compactor summarizes chats whose agent input is
over its :class:`~threadstore.lifecycle.CompactionPolicy`, one at a time, on a task it
owns. A summarizer may be a model call that takes seconds: no run and no client waits
for it. A chat asked for again before its turn is looked at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Self
from uuid import UUID

from threadstore.errors import NotFoundError
from threadstore.lifecycle import CompactionPolicy
from threadstore.models import Summary
from threadstore.store import Store

__all__ = ["BackgroundCompactor"]

logger = logging.getLogger("threadstore.compaction")


class BackgroundCompactor:
    """Compacts the chats it is asked about when they are over ``policy``'s budget.

    Use with ``async with`` (or :meth:`close`): the task it owns is awaited on close.
    """

    def __init__(self, store: Store, policy: CompactionPolicy) -> None:
        self.store = store
        self.policy = policy
        self.made: list[Summary] = []
        """The summaries this compactor made, oldest first (the last 100)."""
        self._pending: dict[UUID, None] = {}
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    def request(self, chat_uuid: UUID) -> None:
        """Look at ``chat_uuid`` soon (returns at once)."""
        if self._closed:
            return
        self._pending[chat_uuid] = None
        self._idle.clear()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._work())

    async def drain(self) -> None:
        """Return once every chat asked about so far was looked at."""
        await self._idle.wait()

    async def _work(self) -> None:
        while self._pending:
            chat_uuid = next(iter(self._pending))
            del self._pending[chat_uuid]
            try:
                made = await self.store.branches.compact_over_budget(chat_uuid, self.policy)
            except NotFoundError:
                continue  # deleted meanwhile
            except Exception:
                logger.warning("compacting chat %s failed", chat_uuid, exc_info=True)
                continue
            if made is not None:
                self.made = [*self.made[-99:], made]
                logger.info("compacted chat %s: %d messages", chat_uuid, made.message_count)
        self._idle.set()

    async def close(self) -> None:
        """Finish the chat being compacted, drop the others, and stop."""
        self._closed = True
        self._pending.clear()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        self._idle.set()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
