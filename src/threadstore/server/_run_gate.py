"""Which runs ``POST /agui`` may start: each run id once, one live run per thread.

A client that retries a POST whose answer it lost must not make the agent answer
twice, so a ``(thread, run id)`` the store or this process already knows is refused
with a 409 naming where its events and messages are. Two runs on one thread at once
would interleave their messages in the chat, so a thread with a live run, in this
process or (by its fresh heartbeat in the store) in another, refuses a second one with
a 409 naming the live run. In one process the check and the start are atomic. Between
processes the store decides: it holds one running run per chat (a unique index), and
the storage agent writes its run record before anything else of the run, so of two
processes starting runs on one thread at once, one is refused with nothing stored: with
a 409 when its set-up writes come before its stream (a run that stores tool results),
else in its stream, as ``RUN_STARTED`` then ``RUN_ERROR`` with code
``RUN_LIVE`` (the storage agent starts such a run while its writes go on). Either way its
run id stays free.
A run left running by an owner that stopped heartbeating, or whose process is gone
(same host, its pid no longer runs), does not hold the thread: it is finalized as
interrupted, as the sweep would, and the new run starts. Posting such a run's own id
again answers that it ran (interrupted), with where its events and messages are.
A run of a user or chat whose usage budget is spent is refused with a 402
(``budget_exceeded``) before its agent is called.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote
from uuid import UUID

from ag_ui.core import RunAgentInput

from threadstore.agui import RunHandle, StorageAgent
from threadstore.errors import ConflictError, StoreUnavailableError
from threadstore.models import Chat, RunStatus
from threadstore.server._deps import ServerState

__all__ = ["RunConflictError", "RunGate"]


class RunConflictError(ConflictError):
    """A run the gate refused: ``code`` says why, ``fields`` go into the 409 body."""

    def __init__(self, message: str, *, code: str, fields: dict[str, Any]) -> None:
        super().__init__(message)
        self.code = code
        self.fields = fields


def _events_url(thread_id: str, run_id: str) -> str:
    return f"/agui/threads/{quote(thread_id, safe='')}/runs/{quote(run_id, safe='')}/events"


async def _check_budget(state: ServerState, user: UUID, chat_uuid: UUID | None) -> None:
    """Raise ``BudgetExceededError`` when the user's or the chat's budget is spent."""
    if state.store.usage.kept:
        await state.store.usage.check_budget(user, chat_uuid)


def _refused(handle: RunHandle[Any]) -> bool:
    """Whether the run was refused before it wrote anything: its id is still free."""
    return isinstance(handle.agent, StorageAgent) and handle.agent.refused_by is not None


@dataclass
class RunGate:
    """Starts runs for ``POST /agui`` once they pass the checks in the module doc."""

    _locks: dict[tuple[UUID, str], tuple[asyncio.Lock, int]] = field(default_factory=dict)

    async def start(
        self, state: ServerState, user: UUID, run_input: RunAgentInput
    ) -> RunHandle[Any]:
        """Start the run, or raise :class:`RunConflictError`."""
        key = (user, run_input.thread_id)
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                try:
                    chat = await self._check(state, user, run_input)
                except StoreUnavailableError:
                    if state.manager.outbox is None or state.manager.outbox.full:
                        raise
                    # The run starts on the client's messages; its set-up and writes wait
                    # in the outbox, and its stream says so (threadstore.history_skipped).
                    chat = None
                handle = await state.manager.run(run_input, user, chat)
                await self._claimed(state, handle, run_input)
                return handle
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    async def _check(self, state: ServerState, user: UUID, run_input: RunAgentInput) -> Chat | None:
        """Refuse the run as the module doc says; the thread's chat, as read for that."""
        thread_id, run_id = run_input.thread_id, run_input.run_id
        outbox = state.manager.outbox
        if outbox is not None and outbox.full:
            # The store is away and nothing more can wait for it here: fail fast (503).
            raise StoreUnavailableError(
                f"the store is unavailable and the outbox is full ({outbox.size} of "
                f"{outbox.max_bytes} bytes waiting); try again once it drains"
            )
        for handle in state.manager.live_runs():
            if handle.user_uuid == user and handle.thread_id == thread_id:
                raise self._live(thread_id, handle.run_id, run_id)
        retained = state.manager.get(thread_id, run_id, user_uuid=user)
        if retained is not None and not _refused(retained):
            raise self._ran(thread_id, run_id, retained.outcome or RunStatus.COMPLETE, None)
        chat = await state.store.get_chat_by_thread_id(user, thread_id)
        if chat is None:
            await _check_budget(state, user, None)
            return None
        # One read: this run id's record, if any, and the chat's running runs.
        runs = await state.store.runs.get_running_runs(chat.chat_uuid, with_run=run_id)
        run = next((run for run in runs if run.run_id == run_id), None)
        if run is not None:
            if run.status == RunStatus.RUNNING:
                if state.manager.beating(run):
                    raise self._live(thread_id, run_id, run_id)
                if state.manager.gone(run):  # settled now, not by a sweep later
                    await state.manager.end_stale_run(run)
                    run = await state.store.get_run(chat.chat_uuid, run_id) or run
            raise self._ran(thread_id, run_id, run.status, chat.chat_uuid)
        for other in runs:
            if state.manager.beating(other):
                raise self._live(thread_id, other.run_id, run_id)
            # Its owner stopped heartbeating or is gone: it would hold the chat until a sweep.
            await state.manager.end_stale_run(other)
        # Before the agent is called: a spent budget answers 402 (budget_exceeded).
        await _check_budget(state, user, chat.chat_uuid)
        return chat

    async def _claimed(
        self, state: ServerState, handle: RunHandle[Any], run_input: RunAgentInput
    ) -> None:
        """Wait until the run's agent is set up (its writes under way, or done) or refused."""
        agent = handle.agent
        if not isinstance(agent, StorageAgent):
            return
        # Set by the agent once set up or refused, and by the handle if the run ends first.
        await agent.set_up.wait()
        refused = agent.refused_by
        if refused is None:
            return
        # Another process started a run on the thread between _check and this one's
        # start: the store kept this one out before it wrote anything.
        state.manager.discard(handle)
        live = refused.live_run_id
        if live is not None:
            raise self._live(run_input.thread_id, live, run_input.run_id)
        raise RunConflictError(
            f"thread {run_input.thread_id} had a live run when {run_input.run_id} started;"
            " it has ended since: start the run again",
            code="run_live",
            fields={"thread_id": run_input.thread_id},
        )

    @staticmethod
    def _live(thread_id: str, live_run_id: str, run_id: str) -> RunConflictError:
        url = _events_url(thread_id, live_run_id)
        if live_run_id == run_id:
            message = f"run {run_id} of thread {thread_id} is already live; follow it at {url}"
        else:
            message = (
                f"thread {thread_id} already has a live run, {live_run_id}: one run at a time "
                f"per thread. Follow it at {url}, or cancel it and start {run_id} again"
            )
        return RunConflictError(
            message,
            code="run_live",
            fields={"thread_id": thread_id, "run_id": live_run_id, "events_url": url},
        )

    @staticmethod
    def _ran(
        thread_id: str, run_id: str, status: RunStatus, chat_uuid: UUID | None
    ) -> RunConflictError:
        url = _events_url(thread_id, run_id)
        message = (
            f"run {run_id} of thread {thread_id} already ran ({status}); a run id runs once. "
            f"Its events replay at {url} for a while after it ends"
        )
        fields: dict[str, Any] = {
            "thread_id": thread_id,
            "run_id": run_id,
            "status": str(status),
            "events_url": url,
        }
        if chat_uuid is not None:
            message += f", its messages are at /api/chats/{chat_uuid}/messages"
            fields["messages_url"] = f"/api/chats/{chat_uuid}/messages"
        return RunConflictError(message, code="run_exists", fields=fields)
