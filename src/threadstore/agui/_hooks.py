"""What a run's persister is configured and extended with: its timing, its hooks.

:class:`PersisterConfig` says when a persister flushes and how it retries;
:class:`BuildHooks` is what it asks its storage agent when a record opens or a message
ends; :data:`EventHandler` is an agent's own handler of an event class, and :data:`CATEGORIES`
the seed's category handlers a storage agent dispatches to.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ag_ui import core as ag
from pydantic import BaseModel

from threadstore.codec import thinking
from threadstore.fold import ConversationFold
from threadstore.models import Chat, MessageCreate

__all__ = ["CATEGORIES", "BuildHooks", "EventHandler", "PersisterConfig"]


EventHandler = Callable[[ConversationFold, Chat, ag.BaseEvent], Awaitable[None]]
"""A storage agent's own handler of an event class, awaited instead of the default fold."""


class BuildHooks(Protocol):
    """What the persister asks its storage agent when a record opens or a message ends."""

    def build_message_create(
        self, state: ConversationFold, chat: Chat, agui_id: str | None, role: Any
    ) -> MessageCreate: ...

    def build_tool_call_create(
        self, state: ConversationFold, chat: Chat, message_uuid: Any, tool_call_id: str, name: str
    ) -> BaseModel: ...

    def build_reasoning_create(
        self,
        state: ConversationFold,
        chat: Chat,
        message_uuid: Any,
        agui_id: str | None,
        name: str | None,
    ) -> BaseModel: ...

    def message_update_fields(
        self, state: ConversationFold, event: ag.BaseEvent | None
    ) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class PersisterConfig:
    """When a persister flushes and how it retries (see ``StorageAgent``'s attributes)."""

    checkpoint_interval: float = 1.0
    min_flush_interval: float = 0.25
    retry_base_delay: float = 0.05
    retry_max_delay: float = 2.0
    final_flush_deadline: float = 30.0

    def backoff(self, failures: int) -> float:
        """Seconds to wait before the retry that follows ``failures`` failures in a row.

        Capped before it is computed, so an outage of any length never overflows it.
        """
        doublings = min(max(failures - 1, 0), 64)
        return float(min(self.retry_max_delay, self.retry_base_delay * 2.0**doublings))


CATEGORIES: dict[str, tuple[type[ag.BaseEvent], ...]] = {
    "handle_run_lifecycle": (ag.RunStartedEvent, ag.RunFinishedEvent, ag.RunErrorEvent),
    "handle_step": (ag.StepStartedEvent, ag.StepFinishedEvent),
    "handle_text_message": (
        ag.TextMessageStartEvent,
        ag.TextMessageContentEvent,
        ag.TextMessageEndEvent,
        ag.TextMessageChunkEvent,
    ),
    "handle_tool_call": (
        ag.ToolCallStartEvent,
        ag.ToolCallArgsEvent,
        ag.ToolCallEndEvent,
        ag.ToolCallResultEvent,
        ag.ToolCallChunkEvent,
    ),
    "handle_reasoning": (
        ag.ReasoningStartEvent,
        ag.ReasoningMessageStartEvent,
        ag.ReasoningMessageContentEvent,
        ag.ReasoningMessageEndEvent,
        ag.ReasoningMessageChunkEvent,
        ag.ReasoningEndEvent,
        ag.ReasoningEncryptedValueEvent,
        thinking.ThinkingStartEvent,
        thinking.ThinkingEndEvent,
        thinking.ThinkingTextMessageStartEvent,
        thinking.ThinkingTextMessageContentEvent,
        thinking.ThinkingTextMessageEndEvent,
    ),
    "handle_state": (ag.StateSnapshotEvent, ag.StateDeltaEvent),
    "handle_messages_snapshot": (ag.MessagesSnapshotEvent,),
    "handle_activity": (ag.ActivitySnapshotEvent, ag.ActivityDeltaEvent),
    "handle_subagent": (ag.SubagentStartedEvent, ag.SubagentFinishedEvent, ag.SubagentErrorEvent),
}
"""The seed's category handlers and the event classes each one owns."""
