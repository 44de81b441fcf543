"""Auto-persist: wrap any AG-UI agent so each run saves its chat into a ``ChatStore``.

:class:`ChatPersistingAgent` forwards the inner agent's events unchanged and as they
come, folds them with the chat engine (:func:`~threadstore.chat.apply_event`), and saves
the full canonical history — ``input.messages`` followed by what the run produced —
through :func:`~threadstore.chatstore.save_chat` at each terminal boundary:

- after forwarding ``RUN_FINISHED``: a completed run, or a run paused on a client-side
  tool call (its call is saved without a result; the next run's input brings it);
- after forwarding ``RUN_ERROR``, and when the inner agent raises (then the exception
  propagates unchanged): what the run produced before the failure is saved;
- when the stream ends in any other way (no terminal event, the consumer closing it,
  cancellation) and something was not saved yet.

Saving is best effort: a ``save_chat`` that raises is logged on this module's logger
and changes nothing in the stream. The consumer has each event before the save it
triggers starts, but the stream ends only once that save has returned.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from ag_ui.core import BaseEvent, Message, RunAgentInput, RunErrorEvent, RunFinishedEvent

from threadstore.agui._run_handle import AGUIAgentLike
from threadstore.chat import (
    AssistantTurn,
    apply_event,
    canonical_from_ui,
    create_assistant_turn,
    seal_assistant_turn,
)
from threadstore.chatstore import ChatRecord, ChatStore, Scope, save_chat

__all__ = ["ChatPersistOptions", "ChatPersistingAgent"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChatPersistOptions:
    """Where and as whose a run's chat is saved (the seed's ``chat`` call option).

    ``chat_id`` ``None`` uses each run's ``thread_id``. ``parent_id`` is the chat this one
    was forked from, recorded on every saved record.
    """

    store: ChatStore
    chat_id: str | None
    scope: Scope
    parent_id: str | None = None


class ChatPersistingAgent:
    """An AG-UI agent that streams like ``inner`` and saves each run's chat; see the module."""

    def __init__(self, inner: AGUIAgentLike, options: ChatPersistOptions) -> None:
        self.inner = inner
        self.options = options
        self.name: str = getattr(inner, "name", type(inner).__name__)

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        """Yield ``inner``'s events for ``input`` unchanged; save the chat at each boundary."""
        run = _PersistedRun(self.options, input)
        stream: AsyncIterator[BaseEvent] | None = None
        try:
            stream = self.inner.run(input)
            async for event in stream:
                run.fold(event)
                yield event
                if isinstance(event, RunFinishedEvent | RunErrorEvent):
                    await run.save()
        finally:
            # Close the inner stream first, as the bare agent's consumer would have.
            aclose = getattr(stream, "aclose", None)
            try:
                if aclose is not None:
                    await aclose()
            finally:
                if run.unsaved:
                    await run.save()


class _PersistedRun:
    """One run's folded turn and what its saves need."""

    def __init__(self, options: ChatPersistOptions, input: RunAgentInput) -> None:
        self.options = options
        self.chat_id = options.chat_id if options.chat_id is not None else input.thread_id
        self.history: tuple[Message, ...] = tuple(input.messages)
        # The engine names the turn after the first assistant message the stream names.
        self.turn: AssistantTurn = create_assistant_turn(f"{input.run_id}-assistant")
        self.unsaved = True
        """Whether something (the input, at first) has not been offered to the store yet."""

    def fold(self, event: BaseEvent) -> None:
        self.turn = apply_event(self.turn, event)
        self.unsaved = True

    async def save(self) -> None:
        self.unsaved = False
        produced = canonical_from_ui([seal_assistant_turn(self.turn).message])
        record = ChatRecord(
            chat_id=self.chat_id,
            scope=self.options.scope,
            messages=(*self.history, *produced),
            parent_id=self.options.parent_id,
        )
        try:
            await save_chat(self.options.store, record)
        except Exception:
            logger.exception("saving chat %r failed; the run goes on", self.chat_id)
