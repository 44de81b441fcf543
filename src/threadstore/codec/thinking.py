"""The THINKING_* events AG-UI 1.0 dropped, and their REASONING_* twins.

Producers written against AG-UI 0.x still send them: :func:`parse_event` reads any
event JSON, these included, and :class:`ThinkingTranslator` maps them to REASONING_*
events with ids that are deterministic per run, so a replayed stream persists to the
same records (docs/architecture.md, "The retired THINKING_* events").
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args

from ag_ui.core import (
    BaseEvent,
    Event,
    EventType,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunStartedEvent,
)
from pydantic import BaseModel, ValidationError

from threadstore.errors import InvalidInputError

__all__ = [
    "THINKING_TITLE_METADATA_KEY",
    "ThinkingEndEvent",
    "ThinkingEvent",
    "ThinkingStartEvent",
    "ThinkingTextMessageContentEvent",
    "ThinkingTextMessageEndEvent",
    "ThinkingTextMessageStartEvent",
    "ThinkingTranslator",
    "parse_event",
    "to_reasoning_event",
    "to_reasoning_events",
]

THINKING_TITLE_METADATA_KEY = "title"
"""Where a THINKING_START ``title`` lands in the translated REASONING_START's metadata."""


# ``BaseEvent.type`` is typed as ``EventType``, which has no THINKING_* members in 1.0
# and cannot be extended, so each legacy class narrows ``type`` to a plain string.


class ThinkingStartEvent(BaseEvent):
    """Deprecated 0.x event: the agent started a thinking block."""

    type: Literal["THINKING_START"] = "THINKING_START"  # type: ignore[assignment]
    title: str | None = None


class ThinkingEndEvent(BaseEvent):
    """Deprecated 0.x event: the agent finished a thinking block."""

    type: Literal["THINKING_END"] = "THINKING_END"  # type: ignore[assignment]


class ThinkingTextMessageStartEvent(BaseEvent):
    """Deprecated 0.x event: a thinking text message started."""

    type: Literal["THINKING_TEXT_MESSAGE_START"] = "THINKING_TEXT_MESSAGE_START"  # type: ignore[assignment]


class ThinkingTextMessageContentEvent(BaseEvent):
    """Deprecated 0.x event: a fragment of the current thinking text message."""

    type: Literal["THINKING_TEXT_MESSAGE_CONTENT"] = "THINKING_TEXT_MESSAGE_CONTENT"  # type: ignore[assignment]
    delta: str


class ThinkingTextMessageEndEvent(BaseEvent):
    """Deprecated 0.x event: the current thinking text message ended."""

    type: Literal["THINKING_TEXT_MESSAGE_END"] = "THINKING_TEXT_MESSAGE_END"  # type: ignore[assignment]


ThinkingEvent = (
    ThinkingStartEvent
    | ThinkingEndEvent
    | ThinkingTextMessageStartEvent
    | ThinkingTextMessageContentEvent
    | ThinkingTextMessageEndEvent
)
"""Any of the deprecated THINKING_* events."""

_THINKING_CLASSES: tuple[type[BaseEvent], ...] = get_args(ThinkingEvent)


def _wire_type(cls: type[BaseEvent]) -> str:
    default = cls.model_fields["type"].default
    return str(default.value if isinstance(default, EventType) else default)


_EVENT_CLASSES: dict[str, type[BaseEvent]] = {
    _wire_type(cls): cls for cls in (*get_args(get_args(Event)[0]), *_THINKING_CLASSES)
}


def parse_event(data: Mapping[str, Any] | str | bytes) -> BaseEvent:
    """Parse one AG-UI event (camelCase or snake_case JSON) into its ``ag_ui.core`` class.

    Raises :class:`~threadstore.errors.InvalidInputError` for malformed JSON, a
    payload that is not an object, an unknown ``type`` or fields that fail validation.
    """
    payload: Any = data
    if isinstance(data, str | bytes):
        try:
            payload = json.loads(data)
        except ValueError as exc:
            raise InvalidInputError(f"AG-UI event is not valid JSON: {exc}") from exc
    if not isinstance(payload, Mapping):
        raise InvalidInputError(f"AG-UI event must be a JSON object, got {type(payload).__name__}")
    event_type = payload.get("type")
    if not isinstance(event_type, str):
        raise InvalidInputError("AG-UI event has no string 'type' field")
    cls = _EVENT_CLASSES.get(event_type)
    if cls is None:
        raise InvalidInputError(f"unknown AG-UI event type {event_type!r}")
    try:
        return cls.model_validate(payload)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<event>'}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        raise InvalidInputError(f"invalid {event_type} event: {problems}") from exc


def to_reasoning_event(event: ThinkingEvent, message_id: str) -> BaseEvent:
    """Return the REASONING_* event equivalent to one THINKING_* event, with ``message_id``."""
    # The base fields a translated event keeps from its source.
    base: dict[str, Any] = {
        "timestamp": event.timestamp,
        "raw_event": event.raw_event,
        "metadata": event.metadata,
    }
    if isinstance(event, ThinkingStartEvent):
        if event.title is not None:
            base["metadata"] = {**(event.metadata or {}), THINKING_TITLE_METADATA_KEY: event.title}
        return ReasoningStartEvent(message_id=message_id, **base)
    if isinstance(event, ThinkingEndEvent):
        return ReasoningEndEvent(message_id=message_id, **base)
    if isinstance(event, ThinkingTextMessageStartEvent):
        return ReasoningMessageStartEvent(message_id=message_id, **base)
    if isinstance(event, ThinkingTextMessageContentEvent):
        return ReasoningMessageContentEvent(message_id=message_id, delta=event.delta, **base)
    return ReasoningMessageEndEvent(message_id=message_id, **base)


class ThinkingTranslator:
    """Translate one run's THINKING_* events to REASONING_* events with synthesized ids.

    Feed it every event of the run in order; anything that is not a THINKING_* event
    comes back unchanged. The ids are those the stream's one reading
    (:class:`~threadstore.codec._stream.StreamReader`) gives: ``thinking-<run id>-<n>``.
    """

    def __init__(self, run_id: str | None = None) -> None:
        # Imported here: the reader's module imports this one's event classes.
        from threadstore.codec._stream import StreamReader

        self._reader = StreamReader(run_id if run_id is not None else uuid.uuid4().hex)

    def __call__(self, event: BaseEvent) -> BaseEvent:
        if isinstance(event, (RunStartedEvent, *_THINKING_CLASSES)):
            # (A new run restarts the id sequence under its own run id.)
            self._reader, (event,) = self._reader.read(event)
        return event


def to_reasoning_events(events: Iterable[BaseEvent], run_id: str | None = None) -> list[BaseEvent]:
    """Translate a stream's THINKING_* events to REASONING_* events; others pass unchanged.

    Ids correlate only within this call; to translate a live stream event by event,
    keep one :class:`ThinkingTranslator` for the run instead.
    """
    if isinstance(events, BaseModel):
        raise TypeError("to_reasoning_events takes a sequence of events; wrap one event in a list")
    translate = ThinkingTranslator(run_id)
    return [translate(event) for event in events]
