"""The seed layer's replay shape: each AG-UI message of a history with its record's status.

:func:`extended_messages` is :func:`~threadstore.codec.translate_messages` (same
messages, same order and ids) with each message widened into an
:class:`ExtendedBaseMessage` carrying the bookkeeping of the stored record it comes
from: ``in_progress``, ``status``, ``error`` and ``uuid``, the record's own id (the
AG-UI ``id`` may be the producer's). AG-UI messages allow extra fields, so a consumer
that knows only AG-UI reads them as plain messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from ag_ui import core as ag

from threadstore.codec._messages import translate_with_records
from threadstore.models import Message, MessageStatus

__all__ = ["ExtendedBaseMessage", "extended_messages"]


class ExtendedBaseMessage(ag.BaseMessage):
    """An AG-UI message widened with its stored record's status (the seed layer's class)."""

    in_progress: bool
    """Whether the record is still streaming."""
    status: MessageStatus | None = None
    error: str | None = None
    """Why the run that wrote the record failed, if it did."""
    tool_calls: list[ag.ToolCall] | None = None
    """An assistant message's tool calls."""
    tool_call_id: str | None = None
    """A tool result's call id."""
    uuid: str | None = None
    """The record's own id (``message_uuid``, or a tool call's or reasoning step's ``uuid``)."""


def extended_messages(messages: Sequence[Message]) -> list[ExtendedBaseMessage]:
    """Translate stored history as :func:`translate_messages` does, each message extended."""
    out, sources = translate_with_records(messages)
    extended: list[ExtendedBaseMessage] = []
    for message, record in zip(out, sources, strict=True):
        fields = message.model_dump(exclude_none=True)
        fields.update(
            in_progress=record.in_progress,
            status=record.status,
            # A tool result keeps the error its replay gives it (its call's, or why none came).
            error=fields.get("error", record.error),
            uuid=str(record.message_uuid if isinstance(record, Message) else record.uuid),
        )
        extended.append(ExtendedBaseMessage.model_validate(fields))
    return extended
