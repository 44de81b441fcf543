"""Stored history <-> AG-UI messages.

:func:`translate_messages` turns a chat's stored history into the AG-UI messages an
agent receives (or a client as a MESSAGES_SNAPSHOT); :func:`message_create_from_agui`
is the inverse for what a client may send. Pure and linear in the history. The rules
(order, roles, fields, ids) are in docs/architecture.md, "AG-UI conversion".
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Container, Iterable, Sequence
from typing import Any, Generic, TypeVar
from uuid import UUID

from ag_ui import core as ag
from pydantic import BaseModel

from threadstore.errors import InvalidInputError
from threadstore.models import (
    PARTS_METADATA_KEY,
    ContentPart,
    MediaPart,
    Message,
    MessageCreate,
    MessageStatus,
    Reasoning,
    Role,
    Summary,
    TextPart,
    ToolCall,
)

__all__ = [
    "AGUI_METADATA_KEY",
    "DEFAULT_MIME_TYPE",
    "SUBAGENT_METADATA_KEY",
    "SUBAGENT_NO_RESULT_ERROR",
    "TOOL_CALL_ID_METADATA_KEY",
    "TRANSLATION",
    "HistoryTranslator",
    "IdsAdded",
    "KeptTranslation",
    "Record",
    "message_create_from_agui",
    "replayed_tool_error",
    "summary_message",
    "tool_result_message_id",
    "tool_result_text",
    "translate_messages",
    "translate_with_records",
]

AGUI_METADATA_KEY = "agui"
"""Key of ``Message.metadata`` that holds the AG-UI message's own ``metadata``."""

TOOL_CALL_ID_METADATA_KEY = "tool_call_id"
"""Key of ``Message.metadata`` naming the tool call a stored ``tool`` message answers."""

DEFAULT_MIME_TYPE = "application/octet-stream"
"""MIME type sent for inline data whose stored part has none (AG-UI requires one)."""

_PART_ID_METADATA_KEY = "agui_id"

SUBAGENT_METADATA_KEY = "subagent_run_id"
"""Key of a record's ``metadata`` naming the sub-agent invocation that produced it."""

_Nested = TypeVar("_Nested", ToolCall, Reasoning)
_T = TypeVar("_T")

_MEDIA_PARTS: dict[str, type[ag.ImagePart | ag.AudioPart | ag.VideoPart | ag.DocumentPart]] = {
    "image": ag.ImagePart,
    "audio": ag.AudioPart,
    "video": ag.VideoPart,
    "document": ag.DocumentPart,
}


def tool_result_text(content: str | Sequence[Any]) -> tuple[str, bool]:
    """Return (text, as_json): text parts joined by newlines, or all parts as JSON if media."""
    if isinstance(content, str):
        return content, False
    parts: list[Any] = list(content)
    if all(isinstance(part, ag.TextPart) for part in parts):
        return "\n".join(part.text for part in parts), False
    return json.dumps([part.model_dump(mode="json", by_alias=True) for part in parts]), True


def tool_result_message_id(tool_call: ToolCall) -> str:
    """Return the AG-UI id of the tool message carrying ``tool_call``'s result."""
    return tool_call.result_message_id or f"{tool_call.tool_call_id}-result"


SUBAGENT_NO_RESULT_ERROR = "the sub-agent ended without a result for this call"
"""The error a finished sub-agent's call that never got a result replays with."""


def replayed_tool_error(tool_call: ToolCall, subagent_run_id: str | None) -> str | None:
    """The error ``tool_call``'s replayed result carries; ``None`` for none.

    A call's own ``error`` (a crash sets it on the calls it interrupts), else, for a
    sub-agent's call that ended without a result, :data:`SUBAGENT_NO_RESULT_ERROR`:
    nobody answers such a call later (a client answers the agent's own calls), and
    providers refuse a call left without a result.
    ``subagent_run_id`` is that of the message holding the call.
    """
    if tool_call.error is not None:
        return tool_call.error
    if (
        tool_call.content is not None
        or tool_call.result_message_id is not None
        or tool_call.in_progress
        or (subagent_run_id or tool_call.metadata.get(SUBAGENT_METADATA_KEY)) is None
    ):
        return None
    return SUBAGENT_NO_RESULT_ERROR


class IdsAdded(Generic[_T]):
    """Ids taken before (a container, left unchanged) plus those added since.

    The fold's known ids over the stored history's, and a translation's claims over a
    kept translation's (:meth:`HistoryTranslator.after`).
    """

    __slots__ = ("_added", "_stored")

    def __init__(self, stored: Container[_T]) -> None:
        self._stored = stored
        self._added: set[_T] = set()

    def __contains__(self, key: object) -> bool:
        return key in self._added or key in self._stored

    def add(self, key: _T) -> None:
        self._added.add(key)


class _Rewound(Generic[_T]):
    """A set: ``base`` less ``removed``, plus what is added since; ``base`` is not changed.

    What a rewound :class:`HistoryTranslator` keeps of its claimed ids and fed messages:
    made in the cost of what the rewind drops, not of the whole history. The translator
    it came from is never fed again (``store/_history.py`` retires the history it
    served: ``KeptHistory.retired``), so sharing its set is safe. See :func:`_rewound`.
    """

    __slots__ = ("_added", "_base", "_removed")

    def __init__(self, base: set[_T], removed: set[_T], added: set[_T]) -> None:
        self._base, self._removed, self._added = base, removed, added

    def __contains__(self, key: object) -> bool:
        return key in self._added or (key in self._base and key not in self._removed)

    def add(self, key: _T) -> None:
        """Note ``key`` as taken."""
        self._added.add(key)


def _rewound(current: set[_T] | _Rewound[_T], dropped: Iterable[_T]) -> set[_T] | _Rewound[_T]:
    """``current`` without ``dropped``, over the same plain set (one layer at most).

    Once the layer's own entries outgrow a quarter of the base it becomes a plain set
    again: that copy is paid once per so many changes, not at every rewind.
    """
    gone = set(dropped)
    if isinstance(current, _Rewound):
        base, removed, added = current._base, current._removed | gone, current._added - gone
    else:
        base, removed, added = current, gone, set()
    if len(removed) + len(added) > len(base) // 4:
        return {key for key in base if key not in removed} | added
    return _Rewound(base, removed, added)


class _Ids:
    """Hands out ids, never the same one twice."""

    __slots__ = ("_used",)

    def __init__(self, used: set[str] | IdsAdded[str] | _Rewound[str] | None = None) -> None:
        self._used = set() if used is None else used

    def claim(self, preferred: str, fallback: UUID) -> str | None:
        for candidate in (preferred, str(fallback)):
            if candidate not in self._used:
                self._used.add(candidate)
                return candidate
        return None


def _source_to_agui(part: MediaPart) -> ag.DataSource | ag.UrlSource | ag.FileSource:
    if part.source == "data":
        if part.data is not None:
            value = base64.b64encode(part.data).decode("ascii")
        elif part.value is not None:
            value = part.value  # already base64 text
        else:
            raise InvalidInputError(f"{part.type} part with inline source has no data")
        return ag.DataSource(value=value, mime_type=part.mime_type or DEFAULT_MIME_TYPE)
    if part.value is None:
        raise InvalidInputError(f"{part.type} part with {part.source} source has no value")
    if part.source == "url":
        return ag.UrlSource(value=part.value, mime_type=part.mime_type)
    return ag.FileSource(value=part.value, provider=part.provider, mime_type=part.mime_type)


def _part_to_agui(part: ContentPart) -> ag.ContentPart:
    part_id = (part.metadata or {}).get(_PART_ID_METADATA_KEY)
    part_id = part_id if isinstance(part_id, str) else None
    if isinstance(part, TextPart):
        return ag.TextPart(text=part.text, id=part_id)
    return _MEDIA_PARTS[part.type](source=_source_to_agui(part), id=part_id)


def _content(message: Message) -> str | list[ag.ContentPart]:
    if message.content_parts is None:
        return message.content
    return [_part_to_agui(part) for part in message.content_parts]


def _by_seq(items: list[_Nested]) -> list[_Nested]:
    # ``sorted`` is stable, so records with equal seq keep their stored order.
    return sorted(items, key=lambda item: item.seq)


def _has_own_form(message: Message) -> bool:
    """Whether the message itself (nested records aside) has an AG-UI form."""
    if message.role is Role.REASONING:
        return (
            not message.reasonings or bool(message.content) or message.encrypted_value is not None
        )
    if message.role is Role.TOOL:
        return isinstance(message.metadata.get(TOOL_CALL_ID_METADATA_KEY), str)
    if message.role is Role.ASSISTANT and message.agui_id is None and message.reasonings:
        # A message that only holds a turn's reasoning (no answer followed it): a client
        # saw reasoning messages and nothing else, so nothing else replays.
        return bool(
            message.content
            or message.content_parts
            or message.tool_calls
            or message.encrypted_value is not None
        )
    return True


def _own_message(message: Message, message_id: str) -> ag.Message:
    """Translate the message itself, nested records aside (see :func:`_has_own_form`)."""
    agui = message.metadata.get(AGUI_METADATA_KEY)
    common: dict[str, Any] = {
        "id": message_id,
        "name": message.name,
        "encrypted_value": message.encrypted_value,
        "metadata": agui if isinstance(agui, dict) else None,
    }
    role = message.role
    if role is Role.USER:
        return ag.UserMessage(content=_content(message), **common)
    if role is Role.SYSTEM:
        return ag.SystemMessage(content=message.content, **common)
    if role is Role.DEVELOPER:
        return ag.DeveloperMessage(content=message.content, **common)
    if role is Role.ASSISTANT:
        tool_calls = [
            ag.ToolCall(
                id=call.tool_call_id,
                function=ag.FunctionCall(name=call.name, arguments=call.arguments),
                # Where the fold keeps a call's REASONING_ENCRYPTED_VALUE (tool calls
                # have no column for it); providers need it back to continue.
                encrypted_value=call.metadata.get("encrypted_value"),
            )
            for call in _by_seq(message.tool_calls)
        ]
        # A sub-agent's words stay attributed to it, never replayed as the agent's own.
        subagent = message.metadata.get(SUBAGENT_METADATA_KEY)
        return ag.AssistantMessage(
            content=message.content,
            tool_calls=tool_calls or None,
            subagent_run_id=subagent,
            **common,
        )
    if role is Role.REASONING:
        return ag.ReasoningMessage(
            id=message_id, content=message.content, encrypted_value=message.encrypted_value
        )
    if role is Role.TOOL:
        return ag.ToolMessage(
            id=message_id,
            content=_content(message),
            tool_call_id=message.metadata[TOOL_CALL_ID_METADATA_KEY],
            encrypted_value=message.encrypted_value,
        )
    return ag.ActivityMessage(
        id=message_id,
        activity_type=message.activity_type or "",
        content=message.activity_content or {},
    )


def summary_message(summary: Summary) -> ag.SystemMessage:
    """The AG-UI message an agent is given in place of the messages ``summary`` covers."""
    return ag.SystemMessage(id=summary.agui_id, content=summary.content)


def translate_messages(messages: Sequence[Message]) -> list[ag.Message]:
    """Translate stored history (oldest first) into AG-UI messages; see the module docstring."""
    translator = HistoryTranslator()
    translator.feed(messages)
    return translator.out


def translate_with_records(messages: Sequence[Message]) -> tuple[list[ag.Message], list[Record]]:
    """:func:`translate_messages`, and beside it the stored record each message comes from."""
    out: list[ag.Message] = []
    sources: list[Record] = []
    _translate_onto(out, messages, _Ids(), set(), sources)
    return out, sources


class HistoryTranslator:
    """:func:`translate_messages`, fed a history in pieces: the next messages at a time.

    Feeding a history's messages in any number of calls gives exactly what translating
    it at once gives (ids claimed earlier stay claimed), so a history that only grows
    at its end is translated once, however many runs replay it. :attr:`out` is the
    translator's own: hand out copies of the list.
    """

    __slots__ = ("_ids", "_seen", "out")

    def __init__(self) -> None:
        self._ids = _Ids()
        self._seen: set[int] | _Rewound[int] = set()
        """The uuids (as ints) of the messages fed."""
        self.out: list[ag.Message] = []
        """The translation of every message fed so far."""

    def feed(self, messages: Iterable[Message]) -> None:
        """Translate ``messages``, the ones after those fed before, onto :attr:`out`."""
        _translate_onto(self.out, messages, self._ids, self._seen)

    def rewound(self, length: int, dropped: Sequence[Message]) -> HistoryTranslator:
        """A new translator as this one was before ``dropped`` were fed; this one is unchanged.

        ``dropped``: the messages fed last, whose translation is :attr:`out` from
        ``length`` on. Every id a message claimed is the id of an AG-UI message it added
        there, so taking those back out is exact. The new translator's sets are layers over
        this one's (:func:`_rewound`): feed this one no more.
        """
        rewound = HistoryTranslator()
        used = self._ids._used
        assert not isinstance(used, IdsAdded)  # only :meth:`after` claims over another's
        rewound._ids = _Ids(_rewound(used, (message.id for message in self.out[length:])))
        rewound._seen = _rewound(self._seen, (message.message_uuid.int for message in dropped))
        rewound.out = self.out[:length]
        return rewound

    def after(self, messages: Iterable[Message]) -> list[ag.Message]:
        """What feeding ``messages`` next would add to :attr:`out`, leaving this translator as is.

        For messages not stored yet: a run's input, translated after a kept history
        without claiming their ids in it.
        """
        out: list[ag.Message] = []
        _translate_onto(out, messages, _Ids(IdsAdded(self._ids._used)), IdsAdded(self._seen))
        return out


Record = Message | ToolCall | Reasoning
"""A stored record an AG-UI message of the translation comes from."""


def _translate_onto(
    out: list[ag.Message],
    messages: Iterable[Message],
    ids: _Ids,
    seen: set[int] | IdsAdded[int] | _Rewound[int],
    sources: list[Record] | None = None,
) -> None:
    """Append the translation of ``messages`` to ``out``, claiming their ids in ``ids``.

    With ``sources``, the record each appended message comes from is appended to it too.
    """
    for message in messages:
        key = message.message_uuid.int
        if key in seen:
            continue
        seen.add(key)
        # The message claims its id before its nested records: if a producer reused
        # the id, the reasoning step or tool result is the one that falls back to
        # its UUID.
        message_id = None
        if _has_own_form(message):
            message_id = ids.claim(
                message.agui_id or str(message.message_uuid), message.message_uuid
            )
        subagent = message.metadata.get(SUBAGENT_METADATA_KEY)
        before, after = _reasoning_sides(message)
        for step in before:
            _append_reasoning(out, ids, step, subagent, sources)
        if message_id is not None:
            out.append(_own_message(message, message_id))
            if sources is not None:
                sources.append(message)
        for step in after:
            _append_reasoning(out, ids, step, subagent, sources)
        for call in _by_seq(message.tool_calls):
            error = replayed_tool_error(call, subagent)
            if call.content is None and error is None:
                continue
            result_id = ids.claim(tool_result_message_id(call), call.uuid)
            if result_id is not None:
                # An empty result replays as the seed layer replays it: a model given
                # an empty tool message may take the call as not answered.
                empty = f"Completed {call.name}" if error is None else ""
                out.append(
                    ag.ToolMessage(
                        id=result_id,
                        content=call.content or empty,
                        tool_call_id=call.tool_call_id,
                        error=error,
                        subagent_run_id=subagent,
                    )
                )
                if sources is not None:
                    sources.append(call)


def _first_place(metadata: dict[str, Any], kind: str) -> int | None:
    """Where a record's first entry of ``kind`` sits in its message's parts order."""
    order = metadata.get(PARTS_METADATA_KEY)
    places = [
        e["n"]
        for e in order or ()
        if isinstance(e, dict) and e.get("type") == kind and isinstance(e.get("n"), int)
    ]
    return min(places, default=None)


def _reasoning_sides(message: Message) -> tuple[list[Reasoning], list[Reasoning]]:
    """The message's reasoning steps that came before its text, and those that came after.

    An AG-UI client lists a reasoning message where it started: before the answer it
    precedes, after an answer that was already streaming. Without a parts order (rows
    written before it was kept), every step goes before the message.
    """
    steps = _by_seq(message.reasonings)
    text_at = _first_place(message.metadata, "text")
    if text_at is None:
        return steps, []
    after = [s for s in steps if (_first_place(s.metadata, "reasoning") or -1) > text_at]
    return [s for s in steps if s not in after], after


def _append_reasoning(
    out: list[ag.Message],
    ids: _Ids,
    step: Reasoning,
    subagent: str | None,
    sources: list[Record] | None,
) -> None:
    step_id = ids.claim(step.agui_id or str(step.uuid), step.uuid)
    if step_id is not None:
        out.append(
            ag.ReasoningMessage(
                id=step_id,
                content=step.content,
                encrypted_value=step.encrypted_value,
                subagent_run_id=subagent,
            )
        )
        if sources is not None:
            sources.append(step)


# --- client -> store -----------------------------------------------------------------


def _part_from_agui(part: ag.ContentPart) -> ContentPart:
    part_metadata = {_PART_ID_METADATA_KEY: part.id} if part.id is not None else None
    if isinstance(part, ag.TextPart):
        return TextPart(text=part.text, metadata=part_metadata)
    source = part.source
    common: dict[str, Any] = {
        "type": part.type,
        "mime_type": source.mime_type,
        "metadata": part_metadata,
    }
    if isinstance(source, ag.DataSource):
        try:
            data = base64.b64decode(source.value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidInputError(f"{part.type} part data is not valid base64") from exc
        return MediaPart(source="data", data=data, **common)
    if isinstance(source, ag.UrlSource):
        return MediaPart(source="url", value=source.value, **common)
    return MediaPart(source="file", value=source.value, provider=source.provider, **common)


def message_create_from_agui(
    message: ag.Message, chat_uuid: UUID, run_id: str | None
) -> MessageCreate:
    """Build the DTO that persists a client-sent user, system or developer message.

    Raises :class:`~threadstore.errors.InvalidInputError` for any other role or for
    inline part data that is not valid base64.
    """
    if not isinstance(message, ag.UserMessage | ag.SystemMessage | ag.DeveloperMessage):
        raise InvalidInputError(
            f"a client may only send user, system or developer messages to be stored; "
            f"message {message.id!r} has role {message.role!r}"
        )
    content = message.content
    parts: list[ContentPart] | None = None
    if not isinstance(content, str):
        parts = [_part_from_agui(part) for part in content]
        content = "\n".join(part.text for part in parts if isinstance(part, TextPart))
    return MessageCreate(
        chat_uuid=chat_uuid,
        role=Role(message.role),
        agui_id=message.id,
        name=message.name,
        content=content,
        content_parts=parts,
        encrypted_value=message.encrypted_value,
        status=MessageStatus.COMPLETE,
        in_progress=False,
        run_id=run_id,
        metadata={AGUI_METADATA_KEY: message.metadata} if message.metadata else {},
    )


class KeptTranslation:
    """A kept history's translation, and where each message's part of it ends.

    What it keeps lives as long as the history is cached, so each AG-UI model in it
    shares its set of set fields with every other model set alike (:func:`_share_fields`).
    """

    __slots__ = ("ends", "translator")

    def __init__(self, translator: HistoryTranslator | None = None) -> None:
        self.translator = translator or HistoryTranslator()
        self.ends: list[int] = []

    def feed(self, messages: Sequence[Message]) -> None:
        translator, ends = self.translator, self.ends
        out = translator.out
        for message in messages:
            start = len(out)
            translator.feed((message,))
            for made in out[start:]:
                _share_fields(made)
            ends.append(len(out))

    def upto(self, length: int) -> list[ag.Message]:
        """A new list of the translation of the first ``length`` messages."""
        return self.translator.out[: self.ends[length - 1]] if length else []


_SHARED_FIELDS: dict[frozenset[str], set[str]] = {}
"""One set of field names per combination the kept translations' models were given."""

_SHARED_FIELDS_MAX = 1024


def _share_fields(model: BaseModel) -> None:
    """Give ``model`` and the models nested in it the shared set equal to their own.

    A pydantic model carries the names of its set fields as a set of its own: over a
    long history the kept translation held more of those sets than models, each one
    more for the cyclic collector to scan at every full collection. A model read as
    kept is never changed (its readers share it), so an equal shared set says the
    same; the state goes back through the copy protocol (``__getstate__`` /
    ``__setstate__``), pydantic's public way in. The nested models are those in its
    fields and in lists in its fields (tool calls and their functions, content parts).
    """
    for value in model.__dict__.values():
        if isinstance(value, BaseModel):
            _share_fields(value)
        elif value.__class__ is list:
            for item in value:
                if isinstance(item, BaseModel):
                    _share_fields(item)
    names = model.__pydantic_fields_set__
    key = frozenset(names)
    shared = _SHARED_FIELDS.get(key)
    if shared is None:
        if len(_SHARED_FIELDS) >= _SHARED_FIELDS_MAX:  # only a bound: shapes are few
            return
        shared = _SHARED_FIELDS.setdefault(key, set(names))
    if shared is not names:
        state = model.__getstate__()
        state["__pydantic_fields_set__"] = shared
        model.__setstate__(state)


class _TranslationDerivation:
    """The AG-UI translation a store keeps with a history (a ``store.Derivation``)."""

    def start(self) -> KeptTranslation:
        return KeptTranslation()

    def feed(self, value: KeptTranslation, messages: Sequence[Message]) -> None:
        value.feed(messages)

    def rewound(
        self, value: KeptTranslation, length: int, dropped: Sequence[Message]
    ) -> KeptTranslation:
        kept = min(length, len(value.ends))
        end = value.ends[kept - 1] if kept else 0
        rewound = KeptTranslation(value.translator.rewound(end, dropped[: len(value.ends) - kept]))
        rewound.ends.extend(value.ends[:kept])
        return rewound


TRANSLATION = _TranslationDerivation()
"""The translation kept with a chat's history: ``read_history(chat, TRANSLATION)``."""
