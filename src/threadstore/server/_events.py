"""The reasoning events the server's own agents open and close a step with, stamped when made."""

from __future__ import annotations

from ag_ui.core import (
    BaseEvent,
    ReasoningEndEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
)

from threadstore.codec import now_ms


def reasoning_opened(message_id: str) -> list[BaseEvent]:
    """A reasoning step and its one message begin."""
    return [
        ReasoningStartEvent(message_id=message_id, timestamp=now_ms()),
        ReasoningMessageStartEvent(message_id=message_id, timestamp=now_ms()),
    ]


def reasoning_closed(message_id: str) -> list[BaseEvent]:
    """A reasoning step's message, and the step, end."""
    return [
        ReasoningMessageEndEvent(message_id=message_id, timestamp=now_ms()),
        ReasoningEndEvent(message_id=message_id, timestamp=now_ms()),
    ]
