"""A bounded cache of chat histories, kept per chat version and extended by appends.

Loading a chat's whole history is the hot read of every run (the history is
replayed into the agent) and of every page that shows a chat. A backend whose
chats carry a ``version`` moved in the same transaction as every change to their
messages, tool calls and reasoning, and whose rows record the version they last
changed at, answers a repeated read with one indexed lookup of that version, and a
read after a few writes with the rows changed since: :func:`extend_history` merges
them into the history kept, instead of reading and building the whole history
again. Anything but appends along the active branch (an edit, a branch switch, a
new root, a row the merge cannot place) makes the next read rebuild.

A :class:`KeptHistory` is shared, never mutated once built, and never handed to
callers that may change it: ``get_chat_messages`` returns copies, and
``Store.read_history`` a read-only view. Whatever an upper layer derives from a
history (an index of its ids, its AG-UI translation, the Agent Framework face's plain
readings) lives in ``derived`` and is extended along with it (see ``agui``'s history
state): appends extend it, and a change to messages at the history's end (a tool
result given to the last answer's call) keeps what it derived from the messages before
them (:class:`Rewindable`). The cache holds at most
``max_messages`` messages (least recently used chats are dropped first).

What a history keeps is untracked by the cyclic collector
(:func:`~threadstore.store._offload.untrack`): the messages a store reads to keep are
built untracked, and anything else a ``KeptHistory`` is given or appended is untracked
here, so a long history held in the cache costs no collection of the process anything.
Being plain data, it is freed by reference counting once dropped.
"""

from __future__ import annotations

import asyncio
import copy
from collections import OrderedDict
from collections.abc import Generator, Hashable, Iterator, Sequence, Sized
from typing import Any, Protocol, overload, runtime_checkable
from uuid import UUID

from threadstore.models import Message, Reasoning, ToolCall
from threadstore.store._codec import Constructor, constructor
from threadstore.store._offload import untrack

__all__ = [
    "DEFAULT_HISTORY_CACHE_MESSAGES",
    "HistoryCache",
    "HistoryView",
    "KeptHistory",
    "Rewindable",
    "copy_messages",
    "extend_history",
]

DEFAULT_HISTORY_CACHE_MESSAGES = 250_000
"""Default bound of a store's history cache, in messages (0 disables it)."""

_build_message: Constructor[Message] = constructor(Message)
_build = {ToolCall: constructor(ToolCall), Reasoning: constructor(Reasoning)}


def _copy_child(child: ToolCall | Reasoning) -> Any:
    fields = dict(child.__dict__)
    metadata = fields["metadata"]
    fields["metadata"] = copy.deepcopy(metadata) if metadata else {}
    return _build[type(child)](fields)


def _copy_message(message: Message) -> Message:
    # Ids, times, enums and strings are immutable and shared; containers are copied.
    fields = dict(message.__dict__)
    metadata = fields["metadata"]
    fields["metadata"] = copy.deepcopy(metadata) if metadata else {}
    for name in ("content_parts", "activity_content"):
        if fields[name] is not None:
            fields[name] = copy.deepcopy(fields[name])
    fields["tool_calls"] = [_copy_child(t) for t in fields["tool_calls"]]
    fields["reasonings"] = [_copy_child(r) for r in fields["reasonings"]]
    return _build_message(fields)


def copy_messages(messages: Sequence[Message]) -> list[Message]:
    """Return independent copies of ``messages`` (fast for the stock model classes).

    For messages a store read (the stock classes then have every field set, which the
    fast copy marks too).
    """
    stock = (Message, ToolCall, Reasoning)
    copies: list[Message] = []
    for message in messages:
        plain = type(message) is Message and all(
            type(c) in stock for c in (*message.tool_calls, *message.reasonings)
        )
        copies.append(_copy_message(message) if plain else message.model_copy(deep=True))
    return copies


@runtime_checkable
class Rewindable(Protocol):
    """Something derived from a kept history that can be had for a prefix of it."""

    def rewinding(self, length: int, dropped: Sequence[Message]) -> Generator[None, None, Any]:
        """Steps that make a new one, derived from the history's first ``length`` alone.

        ``dropped``: the messages it was also derived from, the history's from ``length``
        on (as they were then). Each ``yield`` is a turn of the event loop given back
        between copies of long maps; the generator returns the new one, or ``None`` when
        ``self`` was fed meanwhile (then its copies may disagree: build it again).
        ``self`` must not change: views of the history it was derived from may still
        use it.
        """
        ...


class KeptHistory:
    """A chat's whole history at one version, shared read-only by every reader.

    ``messages`` only ever grows at its end, and only through :func:`extend_history`
    when the new version's changes are appends: a :class:`HistoryView` of its first
    ``n`` messages stays exact. Any other change builds a new ``KeptHistory``.
    """

    __slots__ = ("_replaces", "derived", "messages", "positions", "version")

    def __init__(
        self, version: Hashable, messages: list[Message], positions: dict[int, int] | None = None
    ) -> None:
        self._replaces: tuple[KeptHistory, int] | None = None
        untrack(messages)
        self.version = version
        self.messages = messages
        if positions is None:
            positions = {m.message_uuid.int: index for index, m in enumerate(messages)}
        self.positions = positions
        """Where each message stands in ``messages``, by uuid (as an int: a dict of ints
        is one the collector does not track)."""
        self.derived: dict[Hashable, Any] = {}
        """What upper layers derive from ``messages`` and extend along with it."""

    def view(self) -> HistoryView:
        """The history as it is now: later appends do not show in the view."""
        return HistoryView(self, len(self.messages))

    async def settle(self) -> None:
        """Take over what was derived from the history this one replaced, rewound.

        For a history :func:`extend_history` made by replacing messages, before anyone
        reads it: each :class:`Rewindable` item is rewound to before the first message
        replaced, a step of it per turn of the event loop (a step copies a map as long
        as the history); the rest is left to be built again. A no-op for any other
        history.
        """
        if self._replaces is None:
            return
        replaced, first = self._replaces
        self._replaces = None
        for key, value in list(replaced.derived.items()):
            if not isinstance(value, Rewindable):
                continue
            steps = value.rewinding(first, replaced.messages[first:])
            while True:
                await asyncio.sleep(0)
                try:
                    next(steps)
                except StopIteration as done:
                    if done.value is not None:
                        self.derived[key] = done.value
                    break


class HistoryView(Sequence[Message]):
    """The first ``len(view)`` messages of a :class:`KeptHistory`, read-only and not copied.

    The messages are the kept ones: a caller must not change them (copy one first).
    """

    __slots__ = ("_length", "kept")

    def __init__(self, kept: KeptHistory, length: int) -> None:
        self.kept = kept
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            return self.kept.messages[start:stop:step]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self.kept.messages[index]

    def __iter__(self) -> Iterator[Message]:
        messages = self.kept.messages
        for index in range(self._length):
            yield messages[index]

    def prefix(self, length: int) -> HistoryView:
        """The view of this one's first ``length`` messages (what was kept of them serves it)."""
        if not 0 <= length <= self._length:
            raise IndexError(f"a prefix of {length} messages of a view of {self._length}")
        return HistoryView(self.kept, length)

    def position(self, message_uuid: UUID) -> int | None:
        """Where ``message_uuid`` stands in this view, or ``None`` when it is not in it."""
        index = self.kept.positions.get(message_uuid.int)
        return index if index is not None and index < self._length else None


def extend_history(
    kept: KeptHistory, version: Hashable, changed: Sequence[Message], leaf: UUID | None
) -> KeptHistory | None:
    """``kept`` brought to ``version`` from the messages ``changed`` since, or ``None``.

    ``changed`` is every message of the chat (any branch) written since ``kept``'s
    version, or whose tool calls or reasoning were, with its children, by ``seq``;
    ``leaf`` is the chat's active leaf at ``version``. Messages not kept yet must chain
    from the last kept one to ``leaf``, each the parent of the next: they are
    appended. A kept message that changed without moving in the tree is replaced (a
    new :class:`KeptHistory`, since views of the old one must not change; await its
    :meth:`~KeptHistory.settle` before handing it out); one read
    again unchanged (a backend may return rows written at the kept version) is not. Anything
    else (a new branch, a moved leaf, a new root) returns ``None``: read it all again.
    """
    appended: list[Message] = []
    replaced: dict[int, Message] = {}
    messages = kept.messages
    for message in changed:
        index = kept.positions.get(message.message_uuid.int)
        if index is None:
            appended.append(message)
        elif messages[index].parent_uuid != message.parent_uuid:
            return None
        elif messages[index] != message:  # a row read again unchanged is no change
            replaced[index] = message
    tip = messages[-1].message_uuid if messages else None
    last_seq = messages[-1].seq if messages else None
    for message in appended:
        if message.parent_uuid != tip or (last_seq is not None and message.seq <= last_seq):
            return None
        tip, last_seq = message.message_uuid, message.seq
    if tip != leaf:
        return None
    if replaced:
        return _replaced(kept, version, replaced, appended)
    # Appends only: the same list grows, so what was derived from it can grow too.
    untrack(*appended)
    for message in appended:
        kept.positions[message.message_uuid.int] = len(messages)
        messages.append(message)
    kept.version = version
    return kept


def _replaced(
    kept: KeptHistory, version: Hashable, replaced: dict[int, Message], appended: list[Message]
) -> KeptHistory:
    """A new history: ``kept`` with messages ``replaced`` in place and ``appended``.

    Every message keeps its uuid and its place, so the positions are copied, not built.
    What was derived from ``kept`` is rewound to before the first message replaced by
    :meth:`KeptHistory.settle`, which the caller awaits: the usual change is at the end,
    where a rewind costs little and a rebuild would cost the whole history.
    """
    messages = kept.messages
    fresh = list(messages)
    for index, message in replaced.items():
        fresh[index] = message
    positions = dict(kept.positions)
    for message in appended:
        positions[message.message_uuid.int] = len(fresh)
        fresh.append(message)
    built = KeptHistory(version, fresh, positions)
    built._replaces = (kept, min(replaced))
    return built


class HistoryCache:
    """Kept histories by chat, least recently used dropped first beyond the bound."""

    def __init__(self, max_messages: int = DEFAULT_HISTORY_CACHE_MESSAGES) -> None:
        self.max_messages = max_messages
        self._entries: OrderedDict[UUID, KeptHistory] = OrderedDict()
        self._sizes: dict[UUID, int] = {}
        self._size = 0
        self.hits = 0
        """Reads answered by a history kept at the chat's version."""
        self.extensions = 0
        """Reads answered by a kept history and the rows changed since it."""
        self.misses = 0
        """Reads that built the whole history."""

    def entry(self, chat_uuid: UUID) -> KeptHistory | None:
        """The history kept for a chat, whatever its version."""
        kept = self._entries.get(chat_uuid)
        if kept is not None:
            self._entries.move_to_end(chat_uuid)
        return kept

    def fits(self, messages: Sized) -> bool:
        """Whether a history this long is kept at all."""
        return len(messages) <= self.max_messages

    def keep(self, chat_uuid: UUID, kept: KeptHistory) -> None:
        """Keep ``kept`` (or note that it grew) as the chat's history."""
        size = len(kept.messages)
        if not self.fits(kept.messages):
            self.discard(chat_uuid)
            return
        self._size += size - self._sizes.get(chat_uuid, 0)
        self._sizes[chat_uuid] = size
        self._entries[chat_uuid] = kept
        self._entries.move_to_end(chat_uuid)
        while self._size > self.max_messages:
            evicted, _ = self._entries.popitem(last=False)
            self._size -= self._sizes.pop(evicted)

    def discard(self, chat_uuid: UUID) -> None:
        """Forget a chat's history."""
        if self._entries.pop(chat_uuid, None) is not None:
            self._size -= self._sizes.pop(chat_uuid)
