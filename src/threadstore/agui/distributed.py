"""A run manager for replicas sharing one PostgreSQL database.

:class:`DistributedRunManager` is a :class:`StreamPersistenceManager` that, on a
:class:`~threadstore.store.postgres.PostgresStore`, also

- relays every run's events to the ``run_events`` table (see
  :mod:`threadstore.agui.relay`), so :meth:`~DistributedRunManager.resume` in any
  process follows a run from any event id, live, with no gap and no duplicate;
- cancels runs of other processes: :meth:`~DistributedRunManager.cancel_anywhere`
  finds the run in the runs table (running, heartbeat fresh) and sends a
  ``NOTIFY``; the process running it cancels it at once;
- deletes relayed events of finished runs after ``event_retention`` seconds, in
  :meth:`~DistributedRunManager.sweep`.

On any other store it is the plain in-process manager: cross-process cancel and
resume need PostgreSQL. Call :meth:`~DistributedRunManager.start` (or use
``async with``) before the first run.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any, Self
from uuid import UUID

from ag_ui.core import BaseEvent, RunAgentInput

from threadstore.agui.manager import AgentT, RunHandle, StreamPersistenceManager
from threadstore.errors import InvalidInputError
from threadstore.models import Chat
from threadstore.store.base import Store

if TYPE_CHECKING:
    from threadstore.agui.relay import EventPump, EventRelay

__all__ = ["DistributedRunManager"]


def _is_postgres(store: Store | None) -> bool:
    # A PostgresStore implies its module is loaded; looking it up there keeps apps on
    # the embedded backends from importing asyncpg through this module.
    module = sys.modules.get("threadstore.store.postgres")
    return module is not None and isinstance(store, module.PostgresStore)


class DistributedRunManager(StreamPersistenceManager[AgentT]):
    """A :class:`StreamPersistenceManager` whose runs can be resumed and cancelled anywhere."""

    def __init__(
        self,
        agent_factory: Callable[..., AgentT],
        *,
        store: Store | None = None,
        event_retention: float = 300.0,
        relay_flush_interval: float = 0.05,
        relay_batch_size: int = 256,
        durable_delivery: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(agent_factory, store=store, **options)
        if event_retention < 0:
            raise InvalidInputError(f"event_retention must be >= 0, got {event_retention}")
        if relay_flush_interval <= 0 or relay_batch_size < 1:
            raise InvalidInputError(
                "relay_flush_interval must be > 0 and relay_batch_size >= 1, got "
                f"{relay_flush_interval} and {relay_batch_size}"
            )
        self.event_retention = event_retention
        """Seconds the relayed events of a finished run are kept for late readers."""
        self.durable_delivery = durable_delivery
        """Whether :meth:`resume` of a run running here holds each event until it is stored.

        With it, no event a client received can be lost with this process (``kill -9``
        included); it costs the client up to ``relay_flush_interval`` of latency.
        """
        self._flush_interval = relay_flush_interval
        self._batch_size = relay_batch_size
        self._pumps: dict[tuple[str, str], EventPump] = {}
        self.relayed_batches = 0
        """How many event batches (one INSERT each) finished relays wrote."""
        self.relay: EventRelay | None = None
        """The PostgreSQL relay, or ``None`` on other stores."""
        if _is_postgres(store):
            from threadstore.agui.relay import EventRelay

            self.relay = EventRelay(store)  # type: ignore[arg-type]  # checked just above
            self.relay.on_cancel = self._cancel_requested

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def start(self) -> None:
        """Start listening for cancel requests and appended events (PostgreSQL only)."""
        if self.relay is not None:
            await self.relay.start()

    @property
    def _fresh_within(self) -> float:
        # A beat may be one interval late plus the time the store took to write it.
        return 3 * self._heartbeat_interval

    async def run(self, input: RunAgentInput, *args: Any, **kwargs: Any) -> RunHandle[AgentT]:
        """Start a run as the base manager does and relay its events to the store."""
        handle = await super().run(input, *args, **kwargs)
        if self.relay is not None:
            from threadstore.agui.relay import EventPump

            key = (handle.thread_id, handle.run_id)
            previous = self._pumps.pop(key, None)
            if previous is not None:
                await previous.wait()
            pump = EventPump(
                self.relay,
                handle,
                flush_interval=self._flush_interval,
                batch_size=self._batch_size,
            )
            self._pumps[key] = pump
            pump.done_callback(lambda: self._pump_done(key, pump))
        return handle

    def _pump_done(self, key: tuple[str, str], pump: EventPump) -> None:
        self.relayed_batches += pump.batches
        if self._pumps.get(key) is pump:
            del self._pumps[key]

    async def cancel_anywhere(self, thread_id: str, run_id: str) -> bool:
        """Cancel the run here, or ask the process running it; True if it was live anywhere."""
        if self.cancel(thread_id, run_id):
            return True
        if self.relay is None:
            return False
        return await self.relay.request_cancel(thread_id, run_id, fresh_within=self._fresh_within)

    def _cancel_requested(self, chat_uuid: UUID, run_id: str) -> None:
        for handle in self.live_runs():
            chat = getattr(handle.agent, "chat", None)
            if handle.run_id == run_id and isinstance(chat, Chat) and chat.chat_uuid == chat_uuid:
                handle.cancel()

    async def resume(
        self, thread_id: str, run_id: str, after: int = 0
    ) -> AsyncGenerator[tuple[int, BaseEvent], None] | None:
        """Follow the run's ``(event_id, event)`` after ``after``, wherever it runs.

        A run known here is read from memory (each event once stored, with
        ``durable_delivery``); otherwise from the store's relayed events. ``None``
        when no process has recorded the run.
        """
        handle = self.get(thread_id, run_id)
        if handle is not None:
            stream = handle.numbered_events(after)
            pump = self._pumps.get((thread_id, run_id))
            if self.durable_delivery and pump is not None and pump.handle is handle:
                return pump.durable(stream)
            return stream
        if self.relay is None:
            return None
        if after < 0:
            raise InvalidInputError(f"after must be >= 0, got {after}")
        chat_uuid = await self.relay.find_chat(thread_id, run_id)
        if chat_uuid is None:
            return None
        return self.relay.follow(chat_uuid, run_id, after)

    async def sweep(self, stale_after: float = 30.0) -> int:
        """Sweep stale runs as the base manager does, then prune old relayed events."""
        swept = await super().sweep(stale_after)
        if self.relay is not None:
            await self.relay.prune(self.event_retention)
        return swept

    async def close(self) -> None:
        """Cancel live runs, finish relaying their events, and stop listening."""
        pumps = list(self._pumps.values())
        await super().close()
        for pump in pumps:
            await pump.wait()
        self._pumps.clear()
        if self.relay is not None:
            await self.relay.close()
