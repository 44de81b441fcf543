"""A run manager for replicas sharing one PostgreSQL database.

:class:`DistributedRunManager` is a :class:`StreamPersistenceManager` that, on a
:class:`~threadstore.store.postgres.PostgresStore`, also relays every run's events to
the ``run_events`` table (:mod:`threadstore.agui._relay`), so ``resume`` in any process
follows a run from any event id, live, with no gap and no duplicate; cancels a run of
another process (a ``NOTIFY`` to it); refuses a run another process runs for the same
user, thread and run id; and in ``sweep`` deletes the relayed events of runs finished
``event_retention`` seconds ago and settles at once the runs of an owner whose process
is gone (:func:`~threadstore.agui._owners.owner_gone`), never taking one for live.

Thread ids are chosen by clients and unique only per user, so the methods that take
them also take the caller's ``user_uuid`` and only reach that user's runs; code that
holds a chat uuid it trusts uses :meth:`resume_chat_run` and :meth:`cancel_chat_run`.
On any other store it is the plain in-process manager. Call
:meth:`~DistributedRunManager.start` (or use ``async with``) before the first run.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Self
from uuid import UUID

from ag_ui.core import BaseEvent, RunAgentInput

from threadstore.agui._manager import StreamPersistenceManager
from threadstore.agui._owners import owner_gone, process_owner
from threadstore.agui._run_handle import AgentT, RunHandle, RunKey, user_of
from threadstore.errors import ConflictError, InvalidInputError
from threadstore.models import Chat, Run, RunStatus, utcnow
from threadstore.store import Store

if TYPE_CHECKING:
    from threadstore.agui._relay import EventPump, EventRelay

__all__ = ["DistributedRunManager"]

NumberedEvents = AsyncGenerator[tuple[int, BaseEvent], None]


def _chat_uuid_of(handle: RunHandle[Any]) -> UUID | None:
    chat = getattr(handle.agent, "chat", None)
    return chat.chat_uuid if isinstance(chat, Chat) else None


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
        refuse_live_elsewhere: bool = True,
        **options: Any,
    ) -> None:
        if options.get("owner") is None:
            options["owner"] = process_owner()  # one whose death other processes can see
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
        self.refuse_live_elsewhere = refuse_live_elsewhere
        """Whether :meth:`run` first reads the store for the same run live in another process.

        A caller that checks that itself before every run it starts (the server's run
        gate, which also refuses a run id that ran already) turns it off: one read less
        before each run's first event.
        """
        self._pumps: dict[RunKey, EventPump] = {}
        self.relayed_batches = 0
        """How many INSERTs carried finished runs' events (one shared by n runs counts n)."""
        self.relay: EventRelay | None = None
        """The PostgreSQL relay, or ``None`` on other stores."""
        run_events = None if store is None else store.run_events()
        if run_events is not None:
            from threadstore.agui._relay import EventRelay

            self.relay = EventRelay(
                run_events,
                flush_interval=relay_flush_interval,
                batch_size=relay_batch_size,
            )
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

    # --- running ---------------------------------------------------------------------------

    async def run(self, input: RunAgentInput, *args: Any, **kwargs: Any) -> RunHandle[AgentT]:
        """Start a run as the base manager does and relay its events to the store.

        Also raises :class:`~threadstore.errors.ConflictError` when another process
        records the same user's run ``(thread_id, run_id)`` running (heartbeat fresh):
        two producers of one run would interleave its event log.
        """
        self._check_open()
        agent = self._factory(*args, **kwargs)
        if self.refuse_live_elsewhere:
            await self._refuse_if_live_elsewhere(input, agent)
        handle = self._launch(input, agent)  # refuses a run live here
        if self.relay is not None:
            await self._relay_events(handle)
        return handle

    async def _refuse_if_live_elsewhere(self, input: RunAgentInput, agent: AgentT) -> None:
        user = user_of(agent)
        if user is None or self._store is None:
            return
        if self.relay is not None:
            owner = await self.relay.live_elsewhere(
                user,
                input.thread_id,
                input.run_id,
                owner=self.owner,
                fresh_within=self._fresh_within,
            )
        else:  # SQLite: processes sharing the file see each other's run records
            chat = await self._store.get_chat_by_thread_id(user, input.thread_id)
            run = None if chat is None else await self._store.get_run(chat.chat_uuid, input.run_id)
            if run is None or run.owner == self.owner or not self.beating(run):
                return
            owner = run.owner
        if owner is not None:
            raise ConflictError(
                f"run {input.run_id} of thread {input.thread_id} is already live in another process"
            )

    def beating(self, run: Run) -> bool:
        """Whether ``run`` is recorded running with a heartbeat fresh enough to be live
        (and an owner not known to be gone: :meth:`gone`)."""
        fresh_since = utcnow() - timedelta(seconds=self._fresh_within)
        return (
            run.status == RunStatus.RUNNING
            and run.heartbeat_at >= fresh_since
            and not self.gone(run)
        )

    def gone(self, run: Run) -> bool:
        """Whether ``run`` is recorded running by a process that is surely gone."""
        return (
            run.status == RunStatus.RUNNING
            and owner_gone(run.owner)
            and self._local_chat_run(run.chat_uuid, run.run_id) is None
        )

    async def _relay_events(self, handle: RunHandle[AgentT]) -> None:
        from threadstore.agui._relay import EventPump

        assert self.relay is not None
        key = handle.key
        previous = self._pumps.pop(key, None)
        if previous is not None:
            await previous.wait()
        pump = EventPump(self.relay, handle)
        self._pumps[key] = pump
        pump.done_callback(lambda: self._pump_done(key, pump))

    def _pump_done(self, key: RunKey, pump: EventPump) -> None:
        self.relayed_batches += pump.batches
        if self._pumps.get(key) is pump:
            del self._pumps[key]

    def _local_chat_run(self, chat_uuid: UUID, run_id: str) -> RunHandle[AgentT] | None:
        """This process's run ``run_id`` of the chat (live or retained), if any."""
        for handle in self._runs.values():
            if handle.run_id == run_id and _chat_uuid_of(handle) == chat_uuid:
                return handle
        return None

    # --- cancel ----------------------------------------------------------------------------

    async def cancel_anywhere(
        self, thread_id: str, run_id: str, *, user_uuid: UUID, wait: bool = False
    ) -> bool:
        """Cancel the user's run here, or ask the process running it; True if it was live.

        Only runs of ``user_uuid``'s own thread ``thread_id`` are reached. With
        ``wait``, returns once the run has stopped (its records are then final) or
        its process stopped heartbeating.
        """
        handle = self.get(thread_id, run_id, user_uuid=user_uuid)
        if handle is not None:
            return await self._cancel_local(handle, wait)
        chat_uuid = await self._relayed_chat(user_uuid, thread_id)
        return chat_uuid is not None and await self.cancel_chat_run(chat_uuid, run_id, wait=wait)

    async def cancel_chat_run(self, chat_uuid: UUID, run_id: str, *, wait: bool = False) -> bool:
        """Cancel the run ``run_id`` of the chat wherever it runs; True if it was live.

        For callers that already checked who owns ``chat_uuid``: this does not.
        ``wait`` is as in :meth:`cancel_anywhere`; while waiting for another
        process, the request is repeated every ``relay.liveness_interval`` seconds,
        in case that process's listening connection was being re-established.
        """
        handle = self._local_chat_run(chat_uuid, run_id)
        if handle is not None:
            return await self._cancel_local(handle, wait)
        if self.relay is None:
            return False
        return await self.relay.request_cancel(
            chat_uuid, run_id, fresh_within=self._fresh_within, wait=wait
        )

    async def cancel_chat_runs(self, chat_uuid: UUID, *, wait: bool = True) -> int:
        """Cancel every live run of the chat, here and in other processes; how many were live."""
        cancelled = 0
        for handle in self.live_runs():
            if _chat_uuid_of(handle) == chat_uuid:
                cancelled += await self._cancel_local(handle, wait)
        if self.relay is not None:
            for run_id in await self.relay.live_runs(chat_uuid, fresh_within=self._fresh_within):
                if self._local_chat_run(chat_uuid, run_id) is None:
                    cancelled += await self.cancel_chat_run(chat_uuid, run_id, wait=wait)
        return cancelled

    @staticmethod
    async def _cancel_local(handle: RunHandle[AgentT], wait: bool) -> bool:
        cancelled = handle.cancel()
        if wait:
            await handle.wait()
        return cancelled

    def _cancel_requested(self, chat_uuid: UUID, run_id: str) -> None:
        for handle in self.live_runs():
            if handle.run_id == run_id and _chat_uuid_of(handle) == chat_uuid:
                handle.cancel()

    # --- resume ----------------------------------------------------------------------------

    async def resume(
        self, thread_id: str, run_id: str, after: int = 0, *, user_uuid: UUID
    ) -> NumberedEvents | None:
        """Follow the user's run's ``(event_id, event)`` after ``after``, wherever it runs.

        Only runs of ``user_uuid``'s own thread ``thread_id`` are reached. A run
        known here is read from memory (each event once stored, with
        ``durable_delivery``); otherwise from the store's relayed events. ``None``
        when no process has recorded the run for this user.
        """
        handle = self.get(thread_id, run_id, user_uuid=user_uuid)
        if handle is not None:
            return self.stream(handle, after)
        chat_uuid = await self._relayed_chat(user_uuid, thread_id)
        return None if chat_uuid is None else await self.resume_chat_run(chat_uuid, run_id, after)

    async def _relayed_chat(self, user_uuid: UUID, thread_id: str) -> UUID | None:
        """The user's chat of ``thread_id``, where runs of other processes are relayed."""
        if self.relay is None or self._store is None:
            return None
        chat = await self._store.get_chat_by_thread_id(user_uuid, thread_id)
        return None if chat is None else chat.chat_uuid

    async def resume_chat_run(
        self, chat_uuid: UUID, run_id: str, after: int = 0
    ) -> NumberedEvents | None:
        """Follow the run ``run_id`` of the chat after ``after``, wherever it runs.

        For callers that already checked who owns ``chat_uuid``: this does not.
        Raises :class:`~threadstore.errors.InvalidInputError` (or its
        :class:`~threadstore.agui._manager.EventsDroppedError`) before the first
        event when ``after`` cannot be served.
        """
        handle = self._local_chat_run(chat_uuid, run_id)
        if handle is not None:
            return self.stream(handle, after)
        if self.relay is None:
            return None
        return await self.relay.resume(chat_uuid, run_id, after)

    def stream(self, handle: RunHandle[AgentT], after: int = 0) -> NumberedEvents:
        """The events after ``after`` of a run of this process, as :meth:`resume` delivers them."""
        stream = handle.numbered_events(after)
        pump = self._pumps.get(handle.key)
        if self.durable_delivery and pump is not None and pump.handle is handle:
            return pump.durable(stream)
        return stream

    async def live_chat_runs(self, chat_uuid: UUID) -> list[str]:
        """Ids of the chat's runs live here or in another process, newest first."""
        local = [h.run_id for h in self.live_runs() if _chat_uuid_of(h) == chat_uuid]
        if self.relay is None:
            return local[::-1]
        remote = await self.relay.live_runs(chat_uuid, fresh_within=self._fresh_within)
        return [*local[::-1], *(run_id for run_id in remote if run_id not in local)]

    # --- upkeep ----------------------------------------------------------------------------

    async def sweep(self, stale_after: float = 30.0) -> int:
        """Sweep stale runs as the base manager does, and the runs of gone owners however
        fresh their heartbeat (:meth:`gone`); then prune old relayed events."""
        swept = await super().sweep(stale_after)
        swept += await self.settle_gone()
        if self.relay is not None:
            await self.relay.prune(self.event_retention)
        return swept

    async def settle_gone(self) -> int:
        """Finalize as interrupted, now, every run whose owner's process is gone; how many."""
        store = self._require_store()
        settled = 0
        waiting = {} if self.outbox is None else self.outbox.pending_runs()
        for run in await store.get_stale_runs(utcnow()):  # every run recorded running
            # A run whose writes wait in the outbox ends when they are drained.
            if self.gone(run) and (run.chat_uuid, run.run_id) not in waiting:
                await self.end_stale_run(run)
                settled += 1
        return settled

    async def close(self) -> None:
        """Cancel live runs, finish relaying their events, and stop listening."""
        pumps = list(self._pumps.values())
        await super().close()
        for pump in pumps:
            await pump.wait()
        self._pumps.clear()
        if self.relay is not None:
            await self.relay.close()
