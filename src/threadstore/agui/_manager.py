"""Run AG-UI agents in the background so their streams survive client disconnects.

:class:`StreamPersistenceManager` builds a fresh agent per run, drains its stream on a
producer task into a numbered in-memory log and returns a
:class:`~threadstore.agui.RunHandle` (``agui/_run_handle.py``), which readers follow.
What the manager uses of an agent beyond ``run()`` is declared by Protocols, here and
beside the handle. See docs/architecture.md, "The run manager".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Generic, Protocol, Self, runtime_checkable
from uuid import UUID

from ag_ui.core import (
    RunAgentInput,
)

from threadstore import _telemetry
from threadstore.agui._outbox import Outbox
from threadstore.agui._owners import default_owner
from threadstore.agui._run_handle import (
    AgentT,
    RunHandle,
    RunKey,
)
from threadstore.errors import ConfigurationError, ConflictError, InvalidInputError
from threadstore.models import Chat, MessageStatus, Run, RunStatus, utcnow
from threadstore.store import RunRepositoryLike, Store

__all__ = ["RecordedAgent", "RegisteringAgent", "StreamPersistenceManager", "default_owner"]

logger = logging.getLogger(__name__)


@runtime_checkable
class RecordedAgent(Protocol):
    """An agent whose run is recorded in a store: the manager heartbeats and sweeps it.

    The manager reads ``chat`` once the agent has resolved it, and fills ``owner`` in
    with its own when it is ``None`` (the store takes heartbeats from the run's owner).
    """

    chat: Chat | None
    owner: str | None


@runtime_checkable
class RegisteringAgent(Protocol):
    """An agent that records its run in ``run_repo``; the manager gives it its store if None."""

    run_repo: RunRepositoryLike | None


class StreamPersistenceManager(Generic[AgentT]):
    """Run AG-UI agents so their output survives client disconnects; see the module doc.

    If ``store`` is given, an agent built with ``run_repo=None`` / ``owner=None`` gets
    the store and this manager's ``owner`` (so its run is recorded) and ``outbox``, one
    heartbeat task refreshes the run records of the live runs every ``heartbeat_interval``, and
    :meth:`sweep` finalizes runs whose process stopped heartbeating. With
    ``expose_exceptions=False`` the ``RUN_ERROR`` of an agent that raised says only that
    the run failed (the exception goes to the log), for servers facing untrusted clients.
    """

    owner: str
    """Identifies this manager's process in run records."""

    def __init__(
        self,
        agent_factory: Callable[..., AgentT],
        *,
        retention: float = 60.0,
        store: Store | None = None,
        owner: str | None = None,
        heartbeat_interval: float = 5.0,
        max_buffered_events: int | None = None,
        expose_exceptions: bool = True,
        outbox: Outbox | None = None,
    ) -> None:
        if retention < 0:
            raise InvalidInputError(f"retention must be >= 0, got {retention}")
        if heartbeat_interval <= 0:
            raise InvalidInputError(f"heartbeat_interval must be > 0, got {heartbeat_interval}")
        if max_buffered_events is not None and max_buffered_events < 1:
            raise InvalidInputError(
                f"max_buffered_events must be >= 1 or None, got {max_buffered_events}"
            )
        self._factory = agent_factory
        self._retention = retention
        self._store = store
        self.owner = owner or default_owner()
        self._heartbeat_interval = heartbeat_interval
        self._max_buffered = max_buffered_events
        self._expose_exceptions = expose_exceptions
        self.outbox = outbox
        """Where runs' writes wait while the store is away; given to every agent that has
        an ``outbox`` attribute left ``None`` (the caller opens and closes it)."""
        self._runs: dict[RunKey, RunHandle[AgentT]] = {}
        # The live ones of _runs, which also holds every finished run for its retention:
        # each POST asks for the live runs, and a busy server retains thousands.
        self._live: dict[RunKey, RunHandle[AgentT]] = {}
        self._forget_timers: dict[RunKey, asyncio.TimerHandle] = {}
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._stop_heartbeat = asyncio.Event()
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- runs ------------------------------------------------------------------------

    async def run(self, input: RunAgentInput, *args: Any, **kwargs: Any) -> RunHandle[AgentT]:
        """Start ``agent_factory(*args, **kwargs)`` on ``input`` and return the run's handle.

        Raises :class:`~threadstore.errors.ConflictError` when a run of the same user
        with the same ``(thread_id, run_id)`` is still live; a finished, retained one
        is replaced. The agent is built before that check, because its ``user_uuid``
        decides which runs it can conflict with; a rejected agent never runs.
        """
        self._check_open()
        return self._launch(input, self._factory(*args, **kwargs))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("StreamPersistenceManager is closed")

    def _launch(self, input: RunAgentInput, agent: AgentT) -> RunHandle[AgentT]:
        """Register a run of ``agent`` on ``input`` and start its producer."""
        self._check_open()
        handle = RunHandle(
            input.thread_id, input.run_id, agent, max_buffered_events=self._max_buffered
        )
        handle.expose_exceptions = self._expose_exceptions
        key = handle.key
        existing = self._runs.get(key)
        if existing is not None and not existing.done:
            raise ConflictError(f"run {input.run_id} of thread {input.thread_id} is already live")
        if self._store is not None:
            self._adopt(agent)
        self._cancel_forget_timer(key)
        self._runs[key] = self._live[key] = handle
        handle._start(input, self._run_finished)
        self._ensure_heartbeat()
        return handle

    def _adopt(self, agent: AgentT) -> None:
        """Give an agent left without them the store as run registry and this owner."""
        # Without a run record there is nothing to heartbeat or sweep, and the store
        # only accepts heartbeats from the owner recorded on the run.
        if isinstance(agent, RegisteringAgent) and agent.run_repo is None:
            agent.run_repo = self._store
        if isinstance(agent, RecordedAgent) and agent.owner is None:
            agent.owner = self.owner
        if self.outbox is not None and getattr(agent, "outbox", self) is None:
            agent.outbox = self.outbox  # type: ignore[attr-defined]

    def outbox_depth(self) -> int:
        """Entries waiting in the outbox for the store (0 without one)."""
        return 0 if self.outbox is None else self.outbox.depth

    def cancel(self, thread_id: str, run_id: str, *, user_uuid: UUID | None = None) -> bool:
        """Cancel the live run ``(thread_id, run_id)``; False when finished or unknown.

        ``user_uuid`` is as in :meth:`get`.
        """
        handle = self.get(thread_id, run_id, user_uuid=user_uuid)
        return handle is not None and handle.cancel()

    def get(
        self, thread_id: str, run_id: str, *, user_uuid: UUID | None = None
    ) -> RunHandle[AgentT] | None:
        """Return the run's handle while it is live or retained, else ``None``.

        With ``user_uuid``, only that user's run is found: pass it whenever the ids
        come from a client. Without it, the one run with these ids, whoever it
        belongs to (for apps whose manager serves a single user); raises
        :class:`~threadstore.errors.ConflictError` when several users have one.
        """
        if user_uuid is not None:
            return self._runs.get((user_uuid, thread_id, run_id))
        found = [h for h in self._runs.values() if h.thread_id == thread_id and h.run_id == run_id]
        if len(found) > 1:
            raise ConflictError(
                f"several users have run {run_id} of thread {thread_id}; pass user_uuid"
            )
        return found[0] if found else None

    def live_runs(self) -> list[RunHandle[AgentT]]:
        """Return the handles of the runs still producing."""
        return list(self._live.values())

    async def forget_user(self, user_uuid: UUID) -> int:
        """Cancel the user's live runs and drop every run of theirs kept for resumes.

        An erasure's hook (``store.chats.add_erasure_hook``): afterwards no event of theirs
        is served from this process. Returns how many runs it dropped.
        """
        handles = [handle for key, handle in self._runs.items() if key[0] == user_uuid]
        for handle in handles:
            handle.cancel()
        await asyncio.gather(*(handle.wait() for handle in handles))
        for handle in handles:
            self.discard(handle)
        return len(handles)

    def _run_finished(self, handle: RunHandle[AgentT]) -> None:
        key = handle.key
        if self._live.get(key) is handle:
            del self._live[key]
        if self._runs.get(key) is not handle:
            return
        if self._retention == 0 or self._closed:
            self._forget(key, handle)
            return
        loop = asyncio.get_running_loop()
        self._forget_timers[key] = loop.call_later(self._retention, self._forget, key, handle)

    def _forget(self, key: RunKey, handle: RunHandle[AgentT]) -> None:
        if self._runs.get(key) is handle:
            del self._runs[key]
            self._forget_timers.pop(key, None)
        if self._live.get(key) is handle:
            del self._live[key]

    def _cancel_forget_timer(self, key: RunKey) -> None:
        timer = self._forget_timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    # --- heartbeat and sweep -------------------------------------------------------------

    def _ensure_heartbeat(self) -> None:
        if self._store is None:
            return
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.create_task(
                self._heartbeat_loop(), name="threadstore-run-heartbeat"
            )

    async def _heartbeat_loop(self) -> None:
        # Ends by itself once no run is live, so a manager that is never closed
        # leaves no task behind; run() starts a new one when needed.
        while True:
            try:
                await asyncio.wait_for(self._stop_heartbeat.wait(), self._heartbeat_interval)
                return
            except TimeoutError:
                pass
            if not self.live_runs():
                return
            try:
                await self.heartbeat()
            except Exception:
                logger.warning("run heartbeat failed; retrying next interval", exc_info=True)

    async def heartbeat(self) -> None:
        """Refresh the store's heartbeat of every live run now (the heartbeat task's beat)."""
        store = self._require_store()
        by_owner: dict[str, list[tuple[UUID, str]]] = {}
        for handle in self.live_runs():
            agent = handle.agent
            if not isinstance(agent, RecordedAgent) or agent.chat is None:
                continue  # the run record does not exist before the chat is resolved
            chat_uuid = agent.chat.chat_uuid
            if self.outbox is not None:  # a run started while the store was away
                chat_uuid = self.outbox.real_chat(chat_uuid)
            owner = agent.owner if agent.owner is not None else self.owner
            by_owner.setdefault(owner, []).append((chat_uuid, handle.run_id))
        for owner, run_keys in by_owner.items():
            await store.heartbeat_runs(owner, run_keys)

    async def sweep(self, stale_after: float = 30.0) -> int:
        """Finalize runs whose heartbeat is older than ``stale_after`` seconds as interrupted.

        Their still-in-progress records become ``interrupted`` and the run record is
        finished ``interrupted``. This manager's own live runs are left alone. Returns
        how many runs were swept.
        """
        if stale_after <= 0:
            raise InvalidInputError(f"stale_after must be > 0, got {stale_after}")
        with _telemetry.span("threadstore.sweep_runs"):
            return await self._sweep(stale_after)

    async def _sweep(self, stale_after: float) -> int:
        store = self._require_store()
        older_than = utcnow() - timedelta(seconds=stale_after)
        live = self.live_runs()
        live_keys = {(h.thread_id, h.run_id) for h in live}
        live_chat_runs = {
            (chat.chat_uuid, h.run_id)
            for h in live
            if isinstance(h.agent, RecordedAgent) and (chat := h.agent.chat) is not None
        }
        if self.outbox is not None:
            # A run whose writes wait in the outbox is not dead: its end is on its way.
            live_chat_runs.update(self.outbox.pending_runs())
        swept = 0
        for run in await store.get_stale_runs(older_than):
            if (run.chat_uuid, run.run_id) in live_chat_runs or (
                run.owner == self.owner and (run.thread_id, run.run_id) in live_keys
            ):
                continue
            await self.end_stale_run(run)
            swept += 1
        return swept

    async def end_stale_run(self, run: Run) -> None:
        """Finalize ``run``, whose owner stopped heartbeating, as :meth:`sweep` does.

        Its still-in-progress records become ``interrupted`` and the run record is
        finished ``interrupted``, which frees its chat for a new run.
        """
        store = self._require_store()
        async with store.transaction():
            await store.finalize_run_records(run.chat_uuid, run.run_id, MessageStatus.INTERRUPTED)
            await store.finish_run(
                run.chat_uuid,
                run.run_id,
                RunStatus.INTERRUPTED,
                error=f"owner {run.owner} stopped heartbeating",
            )

    def discard(self, handle: RunHandle[AgentT]) -> None:
        """Forget ``handle`` now instead of retaining it: for a run refused before it began,
        whose id a client may use again."""
        key = handle.key
        self._cancel_forget_timer(key)
        self._forget(key, handle)

    def _require_store(self) -> Store:
        if self._store is None:
            raise ConfigurationError("this StreamPersistenceManager was created without a store")
        return self._store

    # --- shutdown ----------------------------------------------------------------------

    async def close(self) -> None:
        """Cancel every live run, wait for them to finish, and stop the heartbeat."""
        self._closed = True
        live = self.live_runs()
        for handle in live:
            handle.cancel()
        await asyncio.gather(*(handle.wait() for handle in live))
        self._stop_heartbeat.set()
        if self._heartbeat_task is not None:
            await self._heartbeat_task
            self._heartbeat_task = None
        for timer in self._forget_timers.values():
            timer.cancel()
        self._forget_timers.clear()
        self._runs.clear()
        self._live.clear()
