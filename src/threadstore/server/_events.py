"""The AG-UI events every run of this server opens and closes with, stamped when made."""

from __future__ import annotations

import time

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    ReasoningEndEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunFinishedEvent,
    RunStartedEvent,
)


def now_ms() -> int:
    """An event's timestamp: milliseconds since the epoch."""
    return int(time.time() * 1000)


def run_started(thread_id: str, run_id: str) -> RunStartedEvent:
    """RUN_STARTED, naming the protocol version the run speaks."""
    return RunStartedEvent(
        thread_id=thread_id, run_id=run_id, protocol_version=PROTOCOL_VERSION, timestamp=now_ms()
    )


def run_finished(thread_id: str, run_id: str) -> RunFinishedEvent:
    """RUN_FINISHED: the run ended well."""
    return RunFinishedEvent(thread_id=thread_id, run_id=run_id, timestamp=now_ms())


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
