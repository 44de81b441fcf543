"""Typed domain models (pydantic v2) and the DTOs the store takes.

Every stored record carries ``format_version``; :data:`FORMAT_VERSION` is what this
code writes. Bytes fields serialize as base64 in JSON. Subclass a model to add
fields: the store keeps fields it does not know in an ``extra`` JSON document and
validates rows back into the model class it was configured with.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID, uuid4

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)

from threadstore._search_hits import SearchHit, SearchPage
from threadstore._seed_spellings import (
    ERROR_METADATA_KEY,
    alias,
    error_from_metadata,
    error_into_metadata,
    error_of,
    fixed_role,
)
from threadstore.binary_json import encode_value
from threadstore.keys import participant_id

__all__ = [
    "CITATION_EVENT_NAME",
    "ERROR_METADATA_KEY",
    "FORMAT_VERSION",
    "MAX_DATA_NAME_CHARS",
    "MAX_DATA_PAYLOAD_BYTES",
    "MAX_DATA_PAYLOAD_DEPTH",
    "NOT_ATTACHED",
    "PARTS_METADATA_KEY",
    "Chat",
    "ChatCreate",
    "ChatPage",
    "ContentPart",
    "ErasureReceipt",
    "ExpiredChat",
    "JsonObject",
    "JsonValue",
    "MediaPart",
    "Message",
    "MessageCreate",
    "MessagePublic",
    "MessageReasoningCreate",
    "MessageReasoningUpdate",
    "MessageStatus",
    "MessageToolCallCreate",
    "MessageToolCallUpdate",
    "MessageUpdate",
    "Reasoning",
    "RetentionPolicy",
    "Role",
    "Run",
    "RunStatus",
    "ScopedPolicy",
    "SearchHit",
    "SearchPage",
    "Summary",
    "SweepReport",
    "TextPart",
    "ToolCall",
    "utcnow",
]

FORMAT_VERSION = 1
"""The stored-record format this code writes. Older versions stay readable."""


PARTS_METADATA_KEY = "parts"
"""The ``metadata`` key of a record's place in its message's parts order.

A list of entries, each ``{"n": <position in the run>, "type": ...}``. On a message:
``text`` (``start``: where the segment begins in its content; it runs to the next text
entry's start or the end), ``step-start`` (``step``, ``name``: listed on the message
opened after it, or on the run's last one), ``data`` (an activity message itself; or,
with ``name``, optional ``id`` and ``payload``, a ``CUSTOM`` event, listed on the agent's
current message like a step) and ``citation`` (``citation``: a ``CUSTOM`` event named
:data:`CITATION_EVENT_NAME`). A payload over the bounds below is stored without it
(``omitted``: why); an event whose name or id is over them is not listed. On a reasoning
step: ``reasoning`` (``start`` within the step's content, or ``encrypted``). On a tool
call: ``tool``. ``n`` orders the entries of every
record of one run, so messages streamed interleaved read back interleaved.
"""

CITATION_EVENT_NAME = "citation"
"""A ``CUSTOM`` event with this name is a citation (its value verbatim), not a data part."""

MAX_DATA_PAYLOAD_BYTES = 1024 * 1024
"""Largest ``CUSTOM`` payload stored in a parts order, as JSON (1 MiB, as one input message)."""

MAX_DATA_PAYLOAD_DEPTH = 64
"""Deepest nesting of objects and arrays in a stored ``CUSTOM`` payload (as in a request)."""

MAX_DATA_NAME_CHARS = 256
"""Longest ``CUSTOM`` event name (and string id) stored in a parts order, as a request's ids."""


NOT_ATTACHED = UUID(int=0)
"""The ``message_uuid`` of a tool call or reasoning step built on its own, not yet stored
under a message (the seed layer's nested models had no parent field; the store sets it)."""


def utcnow() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


class Role(StrEnum):
    """Who produced a message; mirrors the AG-UI message roles."""

    DEVELOPER = "developer"
    SYSTEM = "system"
    ASSISTANT = "assistant"
    USER = "user"
    TOOL = "tool"
    REASONING = "reasoning"
    ACTIVITY = "activity"


class MessageStatus(StrEnum):
    """Lifecycle status of a message, tool call or reasoning step."""

    ACTIVE = "active"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    ERRORED = "errored"


class RunStatus(StrEnum):
    """Lifecycle status of an agent run."""

    RUNNING = "running"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    ERRORED = "errored"


class _Model(BaseModel):
    """Shared configuration: bytes as base64 in JSON, unknown keys ignored on read."""

    model_config = ConfigDict(
        ser_json_bytes="base64",
        val_json_bytes="base64",
        extra="ignore",
    )


# --- content parts -----------------------------------------------------------------


JsonObject = Annotated[
    dict[str, Any], PlainSerializer(encode_value, return_type=dict[str, Any], when_used="json")
]
"""A free-form object field: in JSON text, bytes anywhere in it are written as the
binary-safe codec's tag (``{"$deuzBytes": "<base64>"}``, :mod:`threadstore.binary_json`)."""

JsonValue = Annotated[Any, PlainSerializer(encode_value, return_type=Any, when_used="json")]
"""A free-form value field, written to JSON text like :data:`JsonObject`."""


class TextPart(_Model):
    """A text part of a multi-part message."""

    type: Literal["text"] = "text"
    text: str
    metadata: JsonObject | None = None


class MediaPart(_Model):
    """An image, audio, video or document part; inline bytes or a reference."""

    type: Literal["image", "audio", "video", "document"]
    source: Literal["data", "url", "file"] = "data"
    data: bytes | None = None
    """Inline payload (``source == "data"``); base64 in JSON."""
    value: str | None = None
    """URL or provider file id (``source`` ``url`` / ``file``)."""
    mime_type: str | None = None
    provider: str | None = None
    metadata: JsonObject | None = None


ContentPart = Annotated[TextPart | MediaPart, Field(discriminator="type")]
"""One part of a multi-part message, tagged by ``type``."""


# --- stored records ------------------------------------------------------------------


class ToolCall(_Model):
    """A tool call made by (and nested in) an assistant message, with its result.

    Every field has a default, as in the seed layer, so ``ToolCall(name="search")``
    builds one; its ``role`` is always ``tool``.
    """

    format_version: int = FORMAT_VERSION
    uuid: UUID = Field(default_factory=uuid4)
    message_uuid: UUID = NOT_ATTACHED
    tool_call_id: str = ""
    """The AG-UI tool call id."""
    name: str = ""
    arguments: str = ""
    content: str | None = None
    """The tool's result, once known."""
    result_message_id: str | None = None
    """AG-UI id of the tool-result message that carried ``content``."""
    error: str | None = None
    status: MessageStatus = MessageStatus.ACTIVE
    in_progress: bool = True
    step_name: str | None = None
    seq: int = 0
    """Position among the message's tool calls and reasoning steps (set by the store)."""
    metadata: JsonObject = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="before")
    @classmethod
    def _seed_role(cls, data: Any) -> Any:
        return fixed_role(data, Role.TOOL)

    @property
    def role(self) -> Role:
        """Always :attr:`Role.TOOL` (the seed layer's field, read-only here)."""
        return Role.TOOL


class Reasoning(_Model):
    """A reasoning step nested in a message; every field has a default, as in the seed layer."""

    format_version: int = FORMAT_VERSION
    uuid: UUID = Field(default_factory=uuid4)
    message_uuid: UUID = NOT_ATTACHED
    agui_id: str | None = None
    """The AG-UI reasoning message id, when the producer sent one."""
    name: str | None = None
    content: str = ""
    encrypted_value: str | None = None
    status: MessageStatus = MessageStatus.ACTIVE
    in_progress: bool = True
    step_name: str | None = None
    seq: int = 0
    """Position among the message's tool calls and reasoning steps (set by the store)."""
    metadata: JsonObject = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="before")
    @classmethod
    def _seed_error(cls, data: Any) -> Any:
        return error_into_metadata(fixed_role(data, Role.REASONING))

    @property
    def role(self) -> Role:
        """Always :attr:`Role.REASONING` (the seed layer's field, read-only here)."""
        return Role.REASONING

    @property
    def error(self) -> str | None:
        """Why the run that wrote this step failed (``metadata["error"]``), if it did.

        A plain property, not serialized: the stored shape of a reasoning step stays as
        it was, and ``metadata`` already carries the text.
        """
        return error_of(self.metadata)


class Message(_Model):
    """One message of a chat: a node of the chat's message tree.

    The seed layer's names are accepted on input: ``step`` (``step_name``),
    ``timestamp`` (``created_at``), ``v`` (``format_version``) and ``chat_id``
    (``chat_uuid``); ``v``, ``timestamp``, ``step`` and ``chat_id`` read as properties.
    """

    format_version: int = Field(
        default=FORMAT_VERSION, validation_alias=alias("format_version", "v")
    )
    message_uuid: UUID
    chat_uuid: UUID = Field(validation_alias=alias("chat_uuid", "chat_id"))
    parent_uuid: UUID | None = None
    """The previous message on this branch; ``None`` for a root."""
    agui_id: str | None = None
    role: Role = Role.USER
    name: str | None = None
    content: str = ""
    content_parts: list[ContentPart] | None = None
    """Multi-part content (images, documents...) when the message had it."""
    encrypted_value: str | None = None
    activity_type: str | None = None
    activity_content: JsonObject | None = None
    status: MessageStatus = MessageStatus.ACTIVE
    in_progress: bool = True
    step_name: str | None = Field(default=None, validation_alias=alias("step_name", "step"))
    run_id: str | None = None
    """The AG-UI run that produced the message."""
    seq: int = 0
    """Increases with every message created (set by the store); the pagination cursor."""
    metadata: JsonObject = Field(default_factory=dict)
    created_at: datetime = Field(
        default_factory=utcnow, validation_alias=alias("created_at", "timestamp")
    )
    updated_at: datetime = Field(default_factory=utcnow)
    error: str | None = None
    """Why the run that wrote this message failed, if it did."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    reasonings: list[Reasoning] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _old_error(cls, data: Any) -> Any:
        return error_from_metadata(data)

    @property
    def v(self) -> int:
        """The seed layer's name for :attr:`format_version`."""
        return self.format_version

    @property
    def timestamp(self) -> datetime:
        """The seed layer's name for :attr:`created_at`."""
        return self.created_at

    @property
    def step(self) -> str | None:
        """The seed layer's name for :attr:`step_name`."""
        return self.step_name

    @property
    def chat_id(self) -> UUID:
        """The seed layer's name for :attr:`chat_uuid`."""
        return self.chat_uuid


class Chat(_Model):
    """A conversation owned by one user (optionally scoped to a tenant/app)."""

    format_version: int = FORMAT_VERSION
    chat_uuid: UUID
    user_uuid: UUID
    thread_id: str
    """The AG-UI thread id; unique per user."""
    name: str | None = None
    tenant_id: str | None = None
    app_id: str | None = None
    dedup_key: str
    active_leaf_uuid: UUID | None = None
    """The newest message of the active branch."""
    forked_from_chat_uuid: UUID | None = None
    forked_from_message_uuid: UUID | None = None
    state: JsonValue = None
    """The latest AG-UI state (after STATE_SNAPSHOT / STATE_DELTA)."""
    metadata: JsonObject = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @property
    def participants(self) -> list[str]:
        """The chat's participants as the seed layer lists them: its user's participant id.

        The agent is not a participant; see :func:`threadstore.keys.participant_id`.
        """
        return [participant_id(self.user_uuid)]


class Run(_Model):
    """One agent run: who owns it and whether it is still alive."""

    format_version: int = FORMAT_VERSION
    chat_uuid: UUID
    thread_id: str
    run_id: str
    parent_run_id: str | None = None
    status: RunStatus = RunStatus.RUNNING
    owner: str | None = None
    """Identifies the process running it (host:pid:nonce)."""
    heartbeat_at: datetime = Field(default_factory=utcnow)
    error: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    exclusive: bool = True
    """Whether the run continues the chat's leaf, so it holds the chat: a chat has at most
    one exclusive run running (``start_run`` raises ``RunLiveError``). A run that branches
    (regenerate, edit) hangs its messages under its own branch point and is not."""


class MessagePublic(_Model):
    """The seed layer's read view of a message, under its field names.

    Flat and non-recursive: the message's own fields and its tool calls and reasoning
    steps as they are, nothing of the tree it hangs in (parent, branch) or its children.
    """

    message_uuid: UUID
    chat_id: UUID
    agui_id: str | None = None
    role: Role = Role.USER
    name: str = ""
    content: str = ""
    step: str | None = None
    in_progress: bool = True
    status: MessageStatus = MessageStatus.ACTIVE
    error: str | None = None
    timestamp: datetime = Field(default_factory=utcnow)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    reasonings: list[Reasoning] = Field(default_factory=list)

    @classmethod
    def from_message(cls, message: Message) -> MessagePublic:
        """Build the read view of a stored :class:`Message` (its seed-named properties)."""
        fields = {name: getattr(message, name) for name in cls.model_fields}
        return cls(**fields | {"name": message.name or ""})


class ChatPage(_Model):
    """One page of a chat listing; pass ``next_cursor`` back to get the next page."""

    items: list[Chat]
    next_cursor: str | None = None


# --- DTOs ------------------------------------------------------------------------------


class ChatCreate(_Model):
    """What ``create_chat`` needs; ``user_uuid`` and ``thread_id`` are required."""

    user_uuid: UUID | None = None
    thread_id: str | None = None
    name: str | None = None
    tenant_id: str | None = None
    app_id: str | None = None
    chat_uuid: UUID = Field(default_factory=uuid4)
    forked_from_chat_uuid: UUID | None = None
    forked_from_message_uuid: UUID | None = None
    state: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class MessageCreate(_Model):
    """What ``create_message`` needs; ``chat_uuid`` is required.

    ``parent_uuid=None`` appends to the chat's active branch. ``role`` defaults to
    ``user``, as in the seed layer. The seed's names ``chat_id``, ``step`` and
    ``timestamp`` are accepted; ``v`` is refused, since the store writes
    ``format_version`` itself.
    """

    chat_uuid: UUID | None = Field(default=None, validation_alias=alias("chat_uuid", "chat_id"))
    role: Role = Role.USER
    content: str = ""
    agui_id: str | None = None
    parent_uuid: UUID | None = None
    name: str | None = None
    content_parts: list[ContentPart] | None = None
    encrypted_value: str | None = None
    activity_type: str | None = None
    activity_content: dict[str, Any] | None = None
    status: MessageStatus = MessageStatus.ACTIVE
    in_progress: bool = True
    step_name: str | None = Field(default=None, validation_alias=alias("step_name", "step"))
    run_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    message_uuid: UUID = Field(default_factory=uuid4)
    created_at: datetime | None = Field(
        default=None, validation_alias=alias("created_at", "timestamp")
    )
    error: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _seed_names(cls, data: Any) -> Any:
        if isinstance(data, dict) and "v" in data:
            raise ValueError("MessageCreate takes no 'v': the store writes format_version itself")
        return error_from_metadata(data)


class MessageUpdate(_Model):
    """A patch of a message's own fields: only explicitly-set, non-None fields apply.

    The seed's ``step`` is accepted for ``step_name``. ``agui_id`` names a message
    that had none (the storage agent's message holding reasoning, once the answer it
    precedes names itself); it never renames one.
    """

    agui_id: str | None = None
    content: str | None = None
    content_parts: list[ContentPart] | None = None
    name: str | None = None
    encrypted_value: str | None = None
    activity_content: dict[str, Any] | None = None
    status: MessageStatus | None = None
    in_progress: bool | None = None
    step_name: str | None = Field(default=None, validation_alias=alias("step_name", "step"))
    metadata: dict[str, Any] | None = None
    error: str | None = None


class MessageToolCallCreate(_Model):
    """What ``create_message_tool_call`` needs; ``message_uuid`` names the parent."""

    message_uuid: UUID
    tool_call_id: str
    name: str
    arguments: str = ""
    content: str | None = None
    result_message_id: str | None = None
    error: str | None = None
    status: MessageStatus = MessageStatus.ACTIVE
    in_progress: bool = True
    step_name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    uuid: UUID = Field(default_factory=uuid4)


class MessageToolCallUpdate(_Model):
    """A patch of a tool call: only explicitly-set, non-None fields apply."""

    name: str | None = None
    arguments: str | None = None
    content: str | None = None
    result_message_id: str | None = None
    error: str | None = None
    status: MessageStatus | None = None
    in_progress: bool | None = None
    step_name: str | None = None
    metadata: dict[str, Any] | None = None


class MessageReasoningCreate(_Model):
    """What ``create_message_reasoning`` needs; ``message_uuid`` names the parent.

    The seed's ``error`` is kept in ``metadata`` (read back as ``Reasoning.error``).
    """

    message_uuid: UUID
    agui_id: str | None = None
    name: str | None = None
    content: str = ""
    encrypted_value: str | None = None
    status: MessageStatus = MessageStatus.ACTIVE
    in_progress: bool = True
    step_name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    uuid: UUID = Field(default_factory=uuid4)

    @model_validator(mode="before")
    @classmethod
    def _seed_error(cls, data: Any) -> Any:
        return error_into_metadata(data)


class MessageReasoningUpdate(_Model):
    """A patch of a reasoning step: only explicitly-set, non-None fields apply.

    The seed's ``error`` goes into ``metadata`` and so needs it (it is replaced whole).
    """

    name: str | None = None
    content: str | None = None
    encrypted_value: str | None = None
    status: MessageStatus | None = None
    in_progress: bool | None = None
    step_name: str | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _seed_error(cls, data: Any) -> Any:
        return error_into_metadata(data, update=True)


# --- a conversation's life: summaries, retention, erasure --------------------------------


class Summary(_Model):
    """What an agent is given instead of a span of a chat's active branch.

    Compaction never changes a message: the summary is a record of its own, covering the
    messages from ``first_message_uuid`` to ``last_message_uuid`` (both on the branch it
    was made on). Agents get the newest summary whose span is on the active branch, then
    the messages after it; people still see every message. Removing the summary (or
    switching to a branch it is not on) undoes it.
    """

    format_version: int = FORMAT_VERSION
    summary_uuid: UUID = Field(default_factory=uuid4)
    chat_uuid: UUID
    first_message_uuid: UUID
    """The oldest message the summary stands for."""
    last_message_uuid: UUID
    """The newest message the summary stands for; agents get the messages after it."""
    last_seq: int
    """``seq`` of the newest message covered: the tail is the branch after it."""
    message_count: int
    """How many messages of the branch the span holds."""
    content: str
    summarizer: str | None = None
    """Which summarizer wrote it (its name), for audit."""
    metadata: JsonObject = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)

    @property
    def agui_id(self) -> str:
        """The id of the AG-UI message an agent is given for it."""
        return f"summary-{self.summary_uuid}"


class RetentionPolicy(_Model):
    """How long chats are kept: global, or for one user or one chat (``None`` inherits).

    A chat's policy is its own fields, else its user's, else the global policy's. A
    legal hold on the chat or on its user exempts it from every expiry and purge.
    """

    idle_ttl: float | None = Field(default=None, gt=0)
    """Seconds without activity (``updated_at``) after which a chat is deleted."""
    absolute_ttl: float | None = Field(default=None, gt=0)
    """Seconds after its creation after which a chat is deleted, active or not."""
    keep_run_logs: int | None = Field(default=None, ge=0)
    """Relayed event logs kept per chat: those of its newest N runs (PostgreSQL)."""
    deleted_window: float | None = Field(default=None, gt=0)
    """Seconds a soft-deleted chat stays restorable before it is purged."""
    legal_hold: bool = False
    """Nothing of the chat (or of the user's chats) expires while set."""

    def over(self, fallback: RetentionPolicy) -> RetentionPolicy:
        """This policy, each unset field taken from ``fallback``; a hold from either."""
        fields = {
            name: value if value is not None else getattr(fallback, name)
            for name, value in self.model_dump(exclude={"legal_hold"}).items()
        }
        return RetentionPolicy(**fields, legal_hold=self.legal_hold or fallback.legal_hold)


class ErasureReceipt(_Model):
    """What ``forget_user`` removed: counts per kind, when and by whom; never content."""

    receipt_uuid: UUID = Field(default_factory=uuid4)
    user_uuid: UUID
    requested_by: str | None = None
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime = Field(default_factory=utcnow)
    counts: dict[str, int] = Field(default_factory=dict)
    """Rows (and kept copies) removed, by kind: chats, messages, tool_calls, ..."""


class ScopedPolicy(_Model):
    """A stored retention policy and whom it is for (``global``: ``scope_uuid`` is nil)."""

    scope: Literal["global", "user", "chat"]
    scope_uuid: UUID
    policy: RetentionPolicy


class ExpiredChat(_Model):
    """A chat a retention sweep deletes, and why."""

    chat_uuid: UUID
    user_uuid: UUID
    reason: Literal["idle", "absolute", "deleted"]


class SweepReport(_Model):
    """What a retention sweep removed (or, dry, would remove)."""

    chats: int = 0
    messages: int = 0
    run_events: int = 0
    reasons: dict[str, int] = Field(default_factory=dict)
    """Chats by why they expired: ``idle``, ``absolute``, ``deleted``."""
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime = Field(default_factory=utcnow)
