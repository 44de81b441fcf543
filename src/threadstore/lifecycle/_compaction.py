"""Where a chat may be compacted, how far, and what the summary says: pure, on stored messages.

A summary covers a span of the active branch, from its first message up to a *cut*;
agents are then given the summary and the messages from the cut on. A cut is only
made where nothing that belongs together falls on both sides of it:

- a tool call and its result: a result stored on the call goes with its message
  anyway; a result stored as a message of its own (role ``tool``) must not be cut off
  from the message that made the call, and a call still waiting for its result keeps
  every message from it on out of the summary (the result may come in the next run);
- a reasoning block and its message: a message of role ``reasoning`` (older
  histories) stays with the answer after it.

Among the cuts that are allowed, one before a user message (a turn's start) is
preferred, so the agent never starts on an answer whose question was summarized.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from uuid import UUID

from threadstore.errors import InvalidInputError
from threadstore.models import Message, MessageStatus, Role, Summary, ToolCall

__all__ = [
    "TOOL_CALL_ID_KEY",
    "CompactionPlan",
    "CompactionPolicy",
    "Summarizer",
    "applicable_summary",
    "deterministic_summary",
    "message_chars",
    "message_tokens",
    "plan_compaction",
    "safe_cuts",
    "summarize",
    "summarizer_name",
]

TOOL_CALL_ID_KEY = "tool_call_id"
"""Key of a stored ``tool`` message's metadata naming the call it answers."""

Summarizer = Callable[[Sequence[Message], Summary | None], str | Awaitable[str]]
"""Writes a summary: ``summarizer(messages, previous)`` returns its text (sync or async).

``messages`` are the messages newly covered, oldest first; ``previous`` is the summary
they continue (the new one stands for both), or ``None``. A summarizer may be an LLM
call; :func:`deterministic_summary` is one for tests and demos.
"""

_STEP = 200
"""Messages looked at between two turns of the event loop, on a long history."""


def message_chars(message: Message) -> int:
    """Characters a stored message puts before the model: text, tool calls, reasoning."""
    size = len(message.content or "")
    for part in message.content_parts or ():
        size += len(getattr(part, "text", None) or "")
    for call in message.tool_calls:
        size += len(call.name) + len(call.arguments or "") + len(call.content or "")
    for step in message.reasonings:
        size += len(step.content or "")
    return size


def message_tokens(message: Message) -> int:
    """An estimate of the tokens a stored message costs: a token per 4 characters."""
    return (message_chars(message) + 3) // 4


def _waiting(call: ToolCall) -> bool:
    """Whether a call may still get its result (an interrupted or failed one will not)."""
    return (
        call.content is None
        and call.result_message_id is None
        and call.error is None
        and call.status in (MessageStatus.ACTIVE, MessageStatus.COMPLETE)
    )


async def safe_cuts(history: Sequence[Message], start: int = 0) -> tuple[list[int], list[int]]:
    """Where the messages of ``history`` from ``start`` on may be cut, and which of those
    cuts start a user turn: positions ``i`` (``start < i <= len``), ascending.

    A cut at ``i`` puts ``history[start:i]`` in the summary. On a long history the
    messages are read a step at a time, the event loop given back between steps.
    """
    cuts: list[int] = []
    turns: list[int] = []
    waiting: dict[str, int] = {}
    previous: Message | None = None
    for offset in range(start, len(history), _STEP):
        if offset > start:
            await asyncio.sleep(0)
        for at, message in enumerate(history[offset : offset + _STEP], offset):
            if (
                previous is not None
                and not waiting
                and message.role is not Role.TOOL
                and previous.role is not Role.REASONING
            ):
                cuts.append(at)
                if message.role is Role.USER:
                    turns.append(at)
            _absorb(message, waiting)
            previous = message
    if previous is not None and not waiting and previous.role is not Role.REASONING:
        cuts.append(len(history))
    return cuts, turns


def _absorb(message: Message, waiting: dict[str, int]) -> None:
    """Note the calls ``message`` leaves waiting, and those it answers."""
    if message.role is Role.TOOL:
        answered = message.metadata.get(TOOL_CALL_ID_KEY)
        if isinstance(answered, str) and answered in waiting:
            waiting[answered] -= 1
            if not waiting[answered]:
                del waiting[answered]
    for call in message.tool_calls:
        if _waiting(call):
            waiting[call.tool_call_id] = waiting.get(call.tool_call_id, 0) + 1


def applicable_summary(
    summaries: Sequence[Summary], position: Callable[[UUID], int | None]
) -> tuple[Summary, int] | None:
    """The newest summary whose span is on this branch, and where its last message stands.

    ``summaries`` newest first; ``position`` tells where a message stands on the branch
    (``None``: not on it).
    """
    for summary in summaries:
        last = position(summary.last_message_uuid)
        if last is not None and position(summary.first_message_uuid) is not None:
            return summary, last
    return None


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """A compaction worked out on a history: what the new summary covers and is told."""

    first: int
    """Where the span starts (the previous summary's start, or the branch's first message)."""
    new: int
    """The first message the previous summary did not cover: the summarizer reads from here."""
    cut: int
    """The span ends before this message; agents get the messages from here on."""
    previous: Summary | None


async def plan_compaction(
    history: Sequence[Message],
    summaries: Sequence[Summary],
    *,
    keep_messages: int | None = None,
    keep_tokens: int | None = None,
) -> CompactionPlan | None:
    """Where to compact ``history`` so that at least ``keep_messages`` messages (or
    ``keep_tokens`` tokens) stay out of the summary; ``None`` when no cut would cover
    anything new.

    With neither, everything up to the last allowed cut is covered. Of the allowed cuts
    that keep enough, the last one before a user message is taken, else the last one.
    """
    for name, value in (("keep_messages", keep_messages), ("keep_tokens", keep_tokens)):
        if value is not None and value < 0:
            raise InvalidInputError(f"{name} must be at least 0, got {value}")
    positions = _positions(history)
    found = applicable_summary(summaries, positions)
    previous, new = (found[0], found[1] + 1) if found else (None, 0)
    if new >= len(history):
        return None
    first = positions(previous.first_message_uuid) if previous else 0
    assert first is not None
    limit = len(history)
    if keep_messages is not None:
        limit = min(limit, len(history) - keep_messages)
    if keep_tokens is not None:
        limit = min(limit, await _tokens_limit(history, new, keep_tokens))
    cuts, turns = await safe_cuts(history, new)
    chosen = [c for c in turns if c <= limit] or [c for c in cuts if c <= limit]
    if not chosen:
        return None
    return CompactionPlan(first, new, chosen[-1], previous)


async def _tokens_limit(history: Sequence[Message], new: int, keep_tokens: int) -> int:
    """The last position from which the messages to the end hold at least ``keep_tokens``."""
    kept = 0
    at = len(history)
    while at > new and kept < keep_tokens:
        step = history[max(new, at - _STEP) : at]
        for message in reversed(step):
            if kept >= keep_tokens:
                break
            at -= 1
            kept += message_tokens(message)
        await asyncio.sleep(0)
    return at if kept >= keep_tokens else new


def _positions(history: Sequence[Message]) -> Callable[[UUID], int | None]:
    """Where a message stands in ``history``: the kept view's index, else one built now."""
    position = getattr(history, "position", None)
    if position is not None:
        found: Callable[[UUID], int | None] = position
        return found
    index = {message.message_uuid: at for at, message in enumerate(history)}
    return index.get


def summarizer_name(summarizer: Summarizer) -> str:
    """The name a summary records for the summarizer that wrote it."""
    name = getattr(summarizer, "__name__", None)
    return name if isinstance(name, str) else type(summarizer).__name__


async def summarize(
    summarizer: Summarizer, messages: Sequence[Message], previous: Summary | None
) -> str:
    """Call ``summarizer`` (sync or async) and check that it wrote text."""
    written = summarizer(messages, previous)
    text = await written if inspect.isawaitable(written) else written
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"the summarizer returned no summary text (got {text!r})")
    return text


_QUOTE_CHARS = 160
"""Characters of each message the deterministic summary quotes."""

_QUOTED_MESSAGES = 40
"""Messages the deterministic summary quotes (the newest of those it covers)."""

_PREVIOUS_CHARS = 2_000
"""Characters of the earlier summary the deterministic summary keeps."""


def deterministic_summary(messages: Sequence[Message], previous: Summary | None) -> str:
    """A summary without a model, the same for the same messages: for tests and demos.

    The start of the previous summary's text, then one line for each of the newest
    :data:`_QUOTED_MESSAGES` messages: its role, the start of its text, and the tools it
    called. Its size is bounded, however many messages it covers.
    """
    lines = []
    if previous is not None:
        lines.append(_clipped(previous.content, _PREVIOUS_CHARS))
    lines.append(f"Summary of {len(messages)} earlier message(s):")
    if len(messages) > _QUOTED_MESSAGES:
        lines.append(f"- ({len(messages) - _QUOTED_MESSAGES} older message(s) not quoted)")
    for message in messages[-_QUOTED_MESSAGES:]:
        calls = ", ".join(call.name for call in message.tool_calls)
        tools = f" [called {calls}]" if calls else ""
        text = _clipped(" ".join(message.content.split()), _QUOTE_CHARS)
        lines.append(f"- {message.role}: {text}{tools}")
    return "\n".join(lines)


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """When a chat is compacted by itself, and how much stays out of the summary.

    A chat is compacted once what its agent is given (the summary, then the messages
    after it) holds more than ``max_messages`` messages or ``max_tokens`` tokens
    (:func:`message_tokens`); then at least ``keep_messages`` messages (and
    ``keep_tokens`` tokens) stay out of the new summary. ``per_chat`` replaces the
    policy for the chats it names.
    """

    summarizer: Summarizer = deterministic_summary
    max_messages: int | None = None
    max_tokens: int | None = None
    keep_messages: int = 20
    keep_tokens: int | None = None
    name: str | None = None
    """The summarizer's name recorded on each summary (default: its ``__name__``)."""
    per_chat: dict[UUID, CompactionPolicy] | None = None

    def __post_init__(self) -> None:
        for field in ("max_messages", "max_tokens", "keep_messages", "keep_tokens"):
            value = getattr(self, field)
            if value is not None and value < 0:
                raise InvalidInputError(f"CompactionPolicy.{field} must be >= 0, got {value}")
        if self.max_messages is not None and self.max_messages <= self.keep_messages:
            raise InvalidInputError(
                f"CompactionPolicy.max_messages ({self.max_messages}) must be more than"
                f" keep_messages ({self.keep_messages}), or compaction would never end"
            )

    def for_chat(self, chat_uuid: UUID) -> CompactionPolicy:
        """The policy that applies to ``chat_uuid``."""
        return (self.per_chat or {}).get(chat_uuid, self)

    @property
    def summarizer_name(self) -> str:
        """What summaries made under this policy record as their summarizer."""
        return self.name or summarizer_name(self.summarizer)

    async def over_budget(self, tail: Sequence[Message]) -> bool:
        """Whether an agent given ``tail`` (after the summary) is over this policy's budget."""
        if self.max_messages is not None and len(tail) > self.max_messages:
            return True
        if self.max_tokens is None:
            return False
        total = 0
        for start in range(0, len(tail), _STEP):
            total += sum(message_tokens(m) for m in tail[start : start + _STEP])
            if total > self.max_tokens:
                return True
            await asyncio.sleep(0)
        return False
