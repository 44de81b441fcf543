"""What the fold produces: records of messages, tool calls and reasoning steps, and the run.

Plain data with no behaviour beyond :class:`ContentBuffer`, the append-only text every
streamed record grows, kept O(1) amortized per delta so folding costs O(content).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from uuid import UUID

from threadstore.models import ContentPart, MessageStatus, Role, RunStatus

__all__ = ["Changes", "ContentBuffer", "FoldRecord", "RecordKind", "RunInfo"]


class ContentBuffer:
    """Text grown by appending deltas: O(1) amortized per append, joined once per read.

    Unread deltas are also joined once they outnumber ``len(text) / 128`` (and 256), so
    a stream nobody reads meanwhile (a stalled store) holds about its text, not one
    string object per delta; each join copies at most ~128 characters per append since
    the last one.
    """

    __slots__ = ("_joined", "_limit", "_parts")

    def __init__(self, text: str = "") -> None:
        self._parts: list[str] = [text] if text else []
        self._joined: str | None = text
        self._limit = _MIN_UNJOINED

    def append(self, delta: str) -> None:
        if delta:
            self._parts.append(delta)
            self._joined = None
            if len(self._parts) > self._limit:
                self._join()

    def replace(self, text: str) -> None:
        self._parts = [text] if text else []
        self._joined = text

    @property
    def text(self) -> str:
        """The content so far (joined and cached; the chunks collapse into one)."""
        if self._joined is None:
            self._join()
        assert self._joined is not None
        return self._joined

    def _join(self) -> None:
        joined = self._joined = "".join(self._parts)
        self._parts = [joined]
        self._limit = max(_MIN_UNJOINED, len(joined) >> 7)


_MIN_UNJOINED = 256
"""Unread deltas a :class:`ContentBuffer` keeps apart before joining them anyway."""


class RecordKind(StrEnum):
    """What a fold record becomes in the store."""

    MESSAGE = "message"
    TOOL_CALL = "tool_call"
    REASONING = "reasoning"


@dataclass(eq=False, slots=True)
class FoldRecord:
    """One message, tool call or reasoning step as the run has produced it so far."""

    key: str
    kind: RecordKind
    order: int
    """Production order within the run."""
    agui_id: str | None = None
    """Message id, tool call id, or reasoning message id."""
    parent_key: str | None = None
    """For tool calls and reasoning steps: the key of the message holding them."""
    role: Role | None = None
    name: str | None = None
    text: ContentBuffer = field(default_factory=ContentBuffer)
    """Message content, reasoning content, or tool call arguments."""
    content_parts: list[ContentPart] | None = None
    result: str | None = None
    result_message_id: str | None = None
    encrypted_value: str | None = None
    activity_type: str | None = None
    activity_content: dict[str, Any] | None = None
    status: MessageStatus = MessageStatus.ACTIVE
    in_progress: bool = True
    step_name: str | None = None
    subagent_run_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    owned: bool = True
    """False for a stored record of an earlier run that this run only updates."""
    implicit: bool = False
    """An assistant message opened only to hold tool calls."""
    uuid: UUID | None = None
    """The store uuid, once the shell (or the stored record) has one."""
    version: int = 0
    """Bumped on every change; the writer compares it with what it has written."""
    content_version: int = 0
    """Bumped when ``text``/``content_parts``/``activity_content``/``result`` change."""

    @property
    def content(self) -> str:
        return self.text.text


@dataclass(slots=True)
class RunInfo:
    """What the fold knows about the run itself."""

    run_id: str
    thread_id: str | None = None
    parent_run_id: str | None = None
    started: bool = False
    status: RunStatus | None = None
    """Terminal status announced in-band (RUN_FINISHED / RUN_ERROR), if any."""
    outcome: dict[str, Any] | None = None
    usage: list[dict[str, Any]] | None = None
    """``RUN_FINISHED.usage`` / ``RUN_ERROR.usage``: the run's token totals per model."""
    usage_reports: list[Any] = field(default_factory=list)
    """The values of the run's ``CUSTOM`` usage events (``threadstore.usage``), in order."""
    result: Any = None
    error: str | None = None
    error_code: str | None = None


@dataclass(slots=True)
class Changes:
    """What happened since the last :meth:`ConversationFold.take_changes`."""

    opened: list[FoldRecord] = field(default_factory=list)
    closed: list[FoldRecord] = field(default_factory=list)
    boundary: bool = False
    warnings: list[str] = field(default_factory=list)
