"""The one append plan: what to write so that a chat holds the messages it is given.

Every face that saves messages hands its own messages over as :class:`Record` s (one
message with its tool calls) or as AG-UI messages, and gets back the typed writes that
store them, sent as one batch: :func:`append_writes` for messages that only add to the
chat, :func:`plan_append` for a whole conversation compared with the stored branch
from the point where they diverge.

:func:`plan_append` compares the given AG-UI messages with the AG-UI translation kept
with the stored history (``codec.TRANSLATION``), message by message, until they differ:
a stored message reads back as several AG-UI messages (its reasoning steps, itself, its
tool results) and is kept only when the given list has all of them, in order. What the
given list adds after that is the plan's; a tool message answers a call still waiting
for its result (stored, or created by the plan) rather than becoming a message.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import ag_ui.core as ag

from threadstore.codec import (
    AGUI_METADATA_KEY,
    TOOL_CALL_ID_METADATA_KEY,
    KeptTranslation,
    message_create_from_agui,
    tool_result_text,
)
from threadstore.errors import InvalidInputError
from threadstore.models import (
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    Role,
    ToolCall,
)
from threadstore.store import Write
from threadstore.store.ops import CreateMessage, CreateReasoning, CreateToolCall, UpdateToolCall

__all__ = ["AppendPlan", "Record", "append_writes", "plan_append", "record_from_agui"]


@dataclass(slots=True)
class Record:
    """One message to store, with its tool calls, its reasoning steps and the results it
    gives to calls (by tool call id: the result's text)."""

    message: MessageCreate
    calls: list[MessageToolCallCreate] = field(default_factory=list)
    reasonings: list[MessageReasoningCreate] = field(default_factory=list)
    results: list[tuple[str, str]] = field(default_factory=list)


def append_writes(
    records: Iterable[Record],
    parent: UUID | None = None,
    calls: Mapping[str, UUID] | None = None,
) -> list[Write]:
    """The writes that store ``records`` in order, each under the one before.

    ``parent``: what the first hangs under (``None``: the chat's active leaf). A result
    goes on the call it names: one of ``calls`` (stored calls by tool call id) or one an
    earlier record creates; a result for no known call is not written.
    """
    known = dict(calls or {})
    writes: list[Write] = []
    for record in records:
        create = record.message
        if parent is not None and create.parent_uuid is None:
            create = create.model_copy(update={"parent_uuid": parent})
        writes.append(CreateMessage(create))
        writes.extend(CreateToolCall(call) for call in record.calls)
        writes.extend(CreateReasoning(step) for step in record.reasonings)
        known.update((call.tool_call_id, call.uuid) for call in record.calls)
        writes.extend(
            UpdateToolCall(known[call_id], MessageToolCallUpdate(content=text))
            for call_id, text in record.results
            if call_id in known
        )
        parent = create.message_uuid
    return writes


@dataclass(slots=True)
class AppendPlan:
    """What a given conversation changes: the stored messages it keeps and what it adds."""

    kept: int
    """How many stored messages (a prefix of the active branch) the given list keeps."""
    records: list[Record]
    """New messages after them, in order."""
    results: list[tuple[UUID, MessageToolCallUpdate]]
    """Results for stored calls that were waiting for one, by the call's uuid."""

    def writes(self, parent: UUID | None) -> list[Write]:
        """The plan as one batch; ``parent``: the last stored message kept."""
        results: list[Write] = [UpdateToolCall(call, update) for call, update in self.results]
        return [*results, *append_writes(self.records, parent)]


def plan_append(
    chat_uuid: UUID,
    stored: KeptTranslation,
    length: int,
    given: Sequence[ag.Message],
    pending: Callable[[int], Mapping[str, ToolCall]] | None = None,
) -> AppendPlan:
    """The plan that makes the chat's branch of ``length`` messages read as ``given``.

    ``stored`` is the translation kept with the branch; ``pending(n)`` gives the calls of
    its first ``n`` messages still waiting for a result (``HistoryIndex.at(n).pending``),
    asked once the kept prefix is known. The comparison stops at the first difference
    (and costs a pointer comparison for a message handed back as it was read).
    """
    out = stored.translator.out
    ends = stored.ends[:length]
    limit = min(len(given), ends[-1] if ends else 0)
    at = 0
    while at < limit and (given[at] is out[at] or _same(given[at], out[at])):
        at += 1
    kept = bisect.bisect_right(ends, at)
    accounted = ends[kept - 1] if kept else 0
    plan = _Plan(chat_uuid, pending(kept) if pending is not None else {})
    for message in given[accounted:]:
        plan.add(message)
    return AppendPlan(kept, plan.records, plan.results)


def _same(given: Any, stored: Any) -> bool:
    """Whether a given message is the stored one (as the store reads it back).

    Same class (so same role) and id; the same text where both hold text (parts are
    matched by id alone); an answer's tool call ids, a tool result's call.
    """
    kind = given.__class__
    if given.id != stored.id or kind is not stored.__class__:
        return False
    mine, theirs = given.content, stored.content
    if kind is ag.AssistantMessage:
        if (mine or "") != (theirs or ""):
            return False
        mine_calls, their_calls = given.tool_calls or (), stored.tool_calls or ()
        return len(mine_calls) == len(their_calls) and all(
            a.id == b.id for a, b in zip(mine_calls, their_calls, strict=True)
        )
    if kind is ag.ToolMessage and given.tool_call_id != stored.tool_call_id:
        return False
    return mine.__class__ is not str or theirs.__class__ is not str or mine == theirs


class _Plan:
    """The records of AG-UI messages appended in order, and the results they give."""

    def __init__(self, chat_uuid: UUID, pending: Mapping[str, ToolCall]) -> None:
        self.chat_uuid = chat_uuid
        self.records: list[Record] = []
        self.results: list[tuple[UUID, MessageToolCallUpdate]] = []
        self.stored_calls: dict[str, UUID] = {key: call.uuid for key, call in pending.items()}
        self.new_calls: dict[str, tuple[int, int]] = {}
        """Calls created by this plan still without a result: (record index, call index)."""

    def add(self, message: ag.Message) -> None:
        if isinstance(message, ag.ToolMessage) and self._answer(message):
            return
        record = record_from_agui(message, self.chat_uuid)
        for index, call in enumerate(record.calls):
            self.new_calls[call.tool_call_id] = (len(self.records), index)
        self.records.append(record)

    def _answer(self, message: ag.ToolMessage) -> bool:
        """Make ``message`` the result of the call it answers, if that call awaits one."""
        text, _ = tool_result_text(message.content)
        result = {"content": text, "result_message_id": message.id, "error": message.error}
        stored = self.stored_calls.pop(message.tool_call_id, None)
        if stored is not None:
            update = MessageToolCallUpdate(
                **result, status=MessageStatus.COMPLETE, in_progress=False
            )
            self.results.append((stored, update))
            return True
        new = self.new_calls.pop(message.tool_call_id, None)
        if new is not None:
            at, index = new
            calls = self.records[at].calls
            calls[index] = calls[index].model_copy(update=result)
            return True
        return False


def record_from_agui(message: ag.Message, chat_uuid: UUID) -> Record:
    """The stored form of one AG-UI message, complete: a message and its tool calls.

    A tool message becomes a message naming its call (for one no call awaits).
    """
    if isinstance(message, ag.UserMessage | ag.SystemMessage | ag.DeveloperMessage):
        return Record(message_create_from_agui(message, chat_uuid, None))
    common: dict[str, Any] = {
        "chat_uuid": chat_uuid,
        "agui_id": message.id,
        "status": MessageStatus.COMPLETE,
        "in_progress": False,
    }
    if isinstance(message, ag.AssistantMessage):
        create = MessageCreate(
            **common,
            role=Role.ASSISTANT,
            content=message.content or "",
            name=message.name,
            encrypted_value=message.encrypted_value,
            metadata={AGUI_METADATA_KEY: message.metadata} if message.metadata else {},
        )
        calls = [
            MessageToolCallCreate(
                message_uuid=create.message_uuid,
                tool_call_id=call.id,
                name=call.function.name,
                arguments=call.function.arguments,
                status=MessageStatus.COMPLETE,
                in_progress=False,
                # Where the storage agent keeps a call's encrypted value, read back from there.
                metadata={"encrypted_value": call.encrypted_value}
                if call.encrypted_value is not None
                else {},
            )
            for call in message.tool_calls or ()
        ]
        return Record(create, calls)
    if isinstance(message, ag.ReasoningMessage):
        create = MessageCreate(
            **common,
            role=Role.REASONING,
            content=message.content,
            encrypted_value=message.encrypted_value,
        )
        return Record(create)
    if isinstance(message, ag.ToolMessage):
        text, _ = tool_result_text(message.content)
        create = MessageCreate(
            **common,
            role=Role.TOOL,
            content=text,
            encrypted_value=message.encrypted_value,
            metadata={TOOL_CALL_ID_METADATA_KEY: message.tool_call_id},
        )
        return Record(create)
    if isinstance(message, ag.ActivityMessage):
        create = MessageCreate(
            **common,
            role=Role.ACTIVITY,
            activity_type=message.activity_type,
            activity_content=message.content,
        )
        return Record(create)
    raise InvalidInputError(f"message {message.id!r} has a role no store keeps: {message.role!r}")
