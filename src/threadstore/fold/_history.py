"""What a run needs to know of the chat's stored history: ids it holds, calls still open.

:class:`HistoryIndex` keeps the same facts for a history that grows at its end, so a
run on a long chat does not pass over its whole history to learn them. It is kept as
long as a store keeps the history (:data:`HISTORY_INDEX`), so it holds what the cyclic
collector does not track: dicts and lists of strings and ints; only the few tool calls
still waiting for a result are held in tracked lists.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple
from uuid import UUID

from threadstore.codec import (
    SUBAGENT_METADATA_KEY,
    IdsAdded,
    replayed_tool_error,
    tool_result_message_id,
)
from threadstore.models import Message, Role, ToolCall
from threadstore.store import Derivation

__all__ = [
    "HISTORY_INDEX",
    "HistoryIndex",
    "HistoryLookup",
    "IdsAdded",
    "pending_tool_calls",
    "stored_ids",
]


def stored_ids(messages: Iterable[Message]) -> set[str]:
    """Every id a client may echo for stored history: AG-UI ids, uuids, tool call and result ids."""
    return {key for message in messages for key in _echoable(message)}


def _echoable(message: Message) -> Iterator[str]:
    """The ids a client may echo for ``message`` (:func:`stored_ids` of it alone)."""
    yield str(message.message_uuid)
    if message.agui_id:
        yield message.agui_id
    subagent = message.metadata.get(SUBAGENT_METADATA_KEY)
    for call in message.tool_calls:
        yield call.tool_call_id
        yield str(call.uuid)
        # Every result a replay lists, including one it gives an unanswered call.
        if (
            call.result_message_id
            or call.content is not None
            or replayed_tool_error(call, subagent) is not None
        ):
            yield tool_result_message_id(call)
    for step in message.reasonings:
        yield str(step.uuid)
        if step.agui_id:
            yield step.agui_id


def pending_tool_calls(messages: Iterable[Message]) -> dict[str, ToolCall]:
    """Stored tool calls that have no result yet, by AG-UI tool call id."""
    return {
        call.tool_call_id: call
        for message in messages
        for call in message.tool_calls
        if call.content is None and call.result_message_id is None
    }


class HistoryIndex:
    """:func:`stored_ids`, :func:`pending_tool_calls` and more, kept as a history grows.

    Fed the messages of a history that only grows at its end, it answers for any
    prefix of it (:meth:`at`) without a pass over the history: every entry records the
    position of the message it came from, and an answer for the first ``n`` messages
    ignores entries from later ones. A history changed anywhere but at its end needs a
    new index.
    """

    __slots__ = ("assistant", "count", "ids", "messages", "pending", "uuids")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self.count = 0
        """How many messages were fed."""
        self.ids: dict[str, int] = {}
        """:func:`stored_ids`: each id, with where it was first stored."""
        self.messages: dict[str, int] = {}
        """Each message's AG-UI id (or uuid), with where it was first stored."""
        self.pending: dict[str, list[tuple[int, ToolCall]]] = {}
        """:func:`pending_tool_calls`: each id's calls with where their messages stand, in
        the order stored (a prefix answers with the last of its own, as the reference)."""
        self.assistant: dict[str, int | tuple[int, ...]] = {}
        """Where the assistant messages with each AG-UI id stand: one position, or the
        positions of several in the order they were stored."""
        self.uuids: list[int] = []
        """Each message's uuid (as an int), by position."""
        self.feed(messages)

    def feed(self, messages: Iterable[Message]) -> None:
        """Index ``messages``, the ones stored after those fed before."""
        first = self.ids.setdefault
        assistant = self.assistant
        for message in messages:
            at = self.count
            self.count += 1
            self.uuids.append(message.message_uuid.int)
            for key in _echoable(message):
                first(key, at)
            if message.agui_id:
                self.messages.setdefault(message.agui_id, at)
                if message.role == Role.ASSISTANT:
                    before = assistant.get(message.agui_id)
                    if before is None:
                        assistant[message.agui_id] = at
                    else:  # an id stored again (rare): a tuple of ints
                        held = before if isinstance(before, tuple) else (before,)
                        assistant[message.agui_id] = (*held, at)
            self.messages.setdefault(str(message.message_uuid), at)
            for call in message.tool_calls:
                if call.content is None and call.result_message_id is None:
                    self.pending.setdefault(call.tool_call_id, []).append((at, call))

    def rewound(self, length: int, dropped: Sequence[Message]) -> HistoryIndex:
        """A new index of the first ``length`` messages; this one is unchanged.

        ``dropped``: the messages from ``length`` on, as fed. Only their entries are
        taken out of copies of the maps, so the cost is theirs, not the history's.
        """
        fed = self.count
        count = min(length, fed)
        rewound = HistoryIndex()
        rewound.count = count
        # ``dict.copy``, not ``dict(...)``: the maps hold deleted slots after a first rewind,
        # and the constructor then re-inserts every key (several times slower).
        rewound.ids = self.ids.copy()
        rewound.messages = self.messages.copy()
        rewound.assistant = self.assistant.copy()
        rewound.pending = {key: list(calls) for key, calls in self.pending.items()}
        rewound.uuids.extend(self.uuids[:count])
        for message in dropped[: fed - count]:
            keys = [*_echoable(message), str(message.message_uuid)]
            for positions in (rewound.ids, rewound.messages):
                for key in keys:
                    if positions.get(key, -1) >= count:
                        del positions[key]
            if message.agui_id and message.agui_id in rewound.assistant:
                held = rewound.assistant[message.agui_id]
                held = held if isinstance(held, tuple) else (held,)
                left = tuple(at for at in held if at < count)
                if not left:
                    del rewound.assistant[message.agui_id]
                else:
                    rewound.assistant[message.agui_id] = left if len(left) > 1 else left[0]
            for call in message.tool_calls:
                calls = rewound.pending.get(call.tool_call_id)
                if calls is not None:
                    calls[:] = [(at, kept) for at, kept in calls if at < count]
                    if not calls:
                        del rewound.pending[call.tool_call_id]
        return rewound

    def at(self, length: int) -> HistoryLookup:
        """What the first ``length`` messages fed hold (``length`` <= :attr:`count`)."""
        return HistoryLookup(
            _Before(self.ids, length),
            _pending_before(self.pending, length),
            _Assistants(self.assistant, length, self.uuids),
            _Before(self.messages, length),
        )


def _pending_before(
    pending: dict[str, list[tuple[int, ToolCall]]], length: int
) -> dict[str, ToolCall]:
    """Each id's last pending call among the first ``length`` messages."""
    out: dict[str, ToolCall] = {}
    for tool_call_id, calls in pending.items():
        for at, call in reversed(calls):
            if at < length:
                out[tool_call_id] = call
                break
    return out


class _Before:
    """The keys of a position map whose entries come from the first ``length`` messages."""

    __slots__ = ("_length", "_map")

    def __init__(self, positions: Mapping[str, int | tuple[int, ...]], length: int) -> None:
        self._map, self._length = positions, length

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None  # type: ignore[arg-type]

    def get(self, key: str) -> int | None:
        """Where the entry for ``key`` stands (the last within the length, of several)."""
        found = self._map.get(key)
        if isinstance(found, tuple):
            return next((at for at in reversed(found) if at < self._length), None)
        return found if found is not None and found < self._length else None


class _Assistants(_Before):
    """:class:`_Before` over assistant messages, answering with their uuids."""

    __slots__ = ("_uuids",)

    def __init__(
        self, positions: Mapping[str, int | tuple[int, ...]], length: int, uuids: list[int]
    ) -> None:
        super().__init__(positions, length)
        self._uuids = uuids

    def get(self, key: str) -> UUID | None:  # type: ignore[override]
        """The uuid of the last stored assistant message with AG-UI id ``key``."""
        at = super().get(key)
        return None if at is None else UUID(int=self._uuids[at])


class HistoryLookup(NamedTuple):
    """What a run's fold and screening need to know of the history it starts from."""

    ids: Container[str]
    """Every id a client may echo for the stored history (:func:`stored_ids`)."""
    pending: dict[str, ToolCall]
    """Stored tool calls waiting for a result, by tool call id (the caller's own copy)."""
    assistant: _Assistants
    """``get(agui_id)``: the uuid of the stored assistant message with that AG-UI id."""
    messages: _Before
    """``get(id)``: where the stored message with that AG-UI id (or uuid) stands."""


class _IndexDerivation:
    """:class:`HistoryIndex` as a store keeps it with a history (``store.Derivation``)."""

    def start(self) -> HistoryIndex:
        return HistoryIndex()

    def feed(self, value: HistoryIndex, messages: Sequence[Message]) -> None:
        value.feed(messages)

    def rewound(self, value: HistoryIndex, length: int, dropped: Sequence[Message]) -> HistoryIndex:
        return value.rewound(length, dropped)


HISTORY_INDEX: Derivation[HistoryIndex] = _IndexDerivation()
"""The history index a store keeps with a chat's history: ``read_history(chat, HISTORY_INDEX)``."""
