"""Chat histories kept between reads: compact entries per chat version, extended by appends.

Loading a chat's whole history is the hot read of every run (the history is replayed
into the agent) and of every page that shows a chat. A backend whose chats carry a
``version`` moved in the same transaction as every change to their messages, tool calls
and reasoning, and whose rows record the version they last changed at, answers a
repeated read with one indexed lookup of that version, and a read after a few writes
with the rows changed since: :func:`extended` merges them into the history kept,
instead of reading it all again. Anything but appends along the active branch and
changes of messages in place (an edit, a branch switch, a new root) makes the next read
start over.

What is kept is what the database returned: one compact *entry* per message (the row
and its children's rows, as tuples of strings and numbers), which the cyclic collector
stops tracking by itself, so a long history held in the cache costs a full collection of
the process nothing. A :class:`HistoryView` builds fresh models from the entries on
each access: what a caller gets is its own.

What upper layers derive from a history (an index of its ids, its AG-UI translation,
a face's readings) is a :class:`Derivation`, kept with the history and fed the messages
it grows by, from the models built while reading them; a change in place rewinds it to
before the first message changed. The cache holds at most ``max_messages`` messages
(least recently used chats are dropped first).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence, Sized
from typing import Any, Protocol, TypeVar, cast, overload
from uuid import UUID

from threadstore.models import Message

__all__ = [
    "DEFAULT_HISTORY_CACHE_MESSAGES",
    "STEP_MESSAGES",
    "Builder",
    "Derivation",
    "Entry",
    "HistoryCache",
    "HistoryView",
    "KeptHistory",
    "extended",
    "kept_history",
]

DEFAULT_HISTORY_CACHE_MESSAGES = 250_000
"""Default bound of a store's history cache, in messages (0 disables it)."""

STEP_MESSAGES = 200
"""Messages built from entries in one step of a long history, between turns of the loop."""

Entry = tuple[Any, ...]
"""A backend's compact form of one message with its tool calls and reasoning."""

Builder = Callable[[Sequence[Any]], list[Message]]
"""A backend's function from entries to new models, one message per entry, in order."""

_T = TypeVar("_T")


class Derivation(Protocol[_T]):
    """Something derived from a history that grows at its end, kept with the history.

    Implementations are module-level objects; the history keeps one value per derivation.
    """

    def start(self) -> _T:
        """The value for an empty history."""
        ...

    def feed(self, value: _T, messages: Sequence[Message]) -> None:
        """Grow ``value`` in place by ``messages``, the ones after those fed before.

        A value grown this way must still answer for every shorter length it answered
        for: views of the history taken before it grew keep reading it.
        """
        ...

    def rewound(self, value: _T, length: int, dropped: Sequence[Message]) -> _T | None:
        """A new value derived from the history's first ``length`` messages alone.

        ``dropped``: the messages it was also fed, from ``length`` on. ``value`` must not
        change (views of the history it was derived from may still use it); ``None``
        when it cannot be rewound (it is then built again).
        """
        ...


class KeptHistory:
    """A chat's whole history at one version, shared by every reader.

    ``entries`` only ever grows at its end (:func:`extended` appends): a
    :class:`HistoryView` of its first ``n`` messages stays exact. A change in place
    makes a new ``KeptHistory``, and this one is ``retired``: never extended again.
    """

    __slots__ = ("build", "derived", "entries", "positions", "retired", "version")

    def __init__(
        self,
        version: Hashable,
        build: Builder,
        entries: list[Any],
        positions: dict[int, int],
        derived: dict[Derivation[Any], Any],
    ) -> None:
        self.version = version
        self.build = build
        """Makes models of ``entries``."""
        self.entries = entries
        self.positions = positions
        """Where each message stands, by its uuid as an int."""
        self.derived = derived
        """Each derivation's value, grown with ``entries``."""
        self.retired = False
        """Replaced by a new history: no read extends this one, so its derivations stay
        as its views saw them (and the new history's may share their unchanged parts)."""

    def view(self) -> HistoryView:
        """The history as it is now: later appends do not show in the view."""
        return HistoryView(self, len(self.entries))


class HistoryView(Sequence[Message]):
    """The first ``len(view)`` messages of a :class:`KeptHistory`: models built on access.

    Every access builds new models, so what it returns is the caller's; iterate once
    (or slice) rather than index message by message on a long history.
    """

    __slots__ = ("_kept", "_length")

    def __init__(self, kept: KeptHistory, length: int) -> None:
        self._kept = kept
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            return self._kept.build(self._kept.entries[start:stop:step])
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._kept.build(self._kept.entries[index : index + 1])[0]

    def __iter__(self) -> Iterator[Message]:
        for start in range(0, self._length, STEP_MESSAGES):
            yield from self[start : min(start + STEP_MESSAGES, self._length)]

    @property
    def version(self) -> Hashable:
        """The chat version the history was read at."""
        return self._kept.version

    def prefix(self, length: int) -> HistoryView:
        """The view of this one's first ``length`` messages (their derivations serve it)."""
        if not 0 <= length <= self._length:
            raise IndexError(f"a prefix of {length} messages of a view of {self._length}")
        return HistoryView(self._kept, length)

    def position(self, message_uuid: UUID) -> int | None:
        """Where ``message_uuid`` stands in this view, or ``None`` when it is not in it."""
        index = self._kept.positions.get(message_uuid.int)
        return index if index is not None and index < self._length else None

    def derived(self, derivation: Derivation[_T]) -> _T:
        """The value of ``derivation`` kept with the history (read with it, see
        ``Store.read_history``); it answers for longer histories too."""
        try:
            return cast(_T, self._kept.derived[derivation])
        except KeyError:
            raise LookupError(f"{derivation!r} was not derived: pass it to read_history") from None


async def kept_history(
    version: Hashable,
    build: Builder,
    entries: list[Any],
    derivations: Sequence[Derivation[Any]],
    *,
    derived: dict[Derivation[Any], Any] | None = None,
    positions: dict[int, int] | None = None,
) -> KeptHistory:
    """A history of ``entries``: their positions and ``derivations`` from the models built.

    A long history is built a step of :data:`STEP_MESSAGES` at a time, the event loop
    given back between steps; the models live for a step only. ``derived`` and
    ``positions``: what is known already (the rest is fed from the start).
    """
    values = dict(derived or {})
    missing = [d for d in derivations if d not in values]
    for derivation in missing:
        values[derivation] = derivation.start()
    if positions is None:
        positions = {}
    elif not missing:
        return KeptHistory(version, build, entries, positions, values)
    known = bool(positions)
    for start in range(0, len(entries), STEP_MESSAGES):
        if start:
            await asyncio.sleep(0)
        messages = build(entries[start : start + STEP_MESSAGES])
        if not known:
            for at, message in enumerate(messages, start):
                positions[message.message_uuid.int] = at
        for derivation in missing:
            derivation.feed(values[derivation], messages)
    return KeptHistory(version, build, entries, positions, values)


def extended(
    kept: KeptHistory,
    version: Hashable,
    changed: Sequence[tuple[Any, Message]],
    leaf: UUID | None,
) -> KeptHistory | None:
    """``kept`` brought to ``version`` from the messages ``changed`` since, or ``None``.

    ``changed`` is every message of the chat (any branch) written since ``kept``'s
    version, or whose tool calls or reasoning were, with its children, by ``seq``: each
    entry with the model built of it. ``leaf`` is the chat's active leaf at
    ``version``. Messages not kept yet must chain from the last kept one to ``leaf``,
    each the parent of the next: they are appended, to ``kept`` itself. A kept message
    that changed without moving in the tree is replaced: a new :class:`KeptHistory`
    (views of the old one must not change), its derivations rewound to before the first
    message replaced. One read again unchanged (a backend may return rows written at the
    kept version) is no change. Anything else (a new branch, a moved leaf, a new root)
    returns ``None``: read it all again.
    """
    appended: list[tuple[Any, Message]] = []
    replaced: dict[int, tuple[Any, Message]] = {}
    entries, positions = kept.entries, kept.positions
    tip: Message | None = None
    for entry, message in changed:
        index = positions.get(message.message_uuid.int)
        if index is None:
            appended.append((entry, message))
        elif entries[index] != entry:
            replaced[index] = (entry, message)
    if entries:
        tip = kept.build(entries[-1:])[0]
    tip_uuid, last_seq = (tip.message_uuid, tip.seq) if tip is not None else (None, None)
    for index, (_, message) in replaced.items():
        old = kept.build(entries[index : index + 1])[0]
        if old.parent_uuid != message.parent_uuid:
            return None
    for _, message in appended:
        if message.parent_uuid != tip_uuid or (last_seq is not None and message.seq <= last_seq):
            return None
        tip_uuid, last_seq = message.message_uuid, message.seq
    if tip_uuid != leaf:
        return None
    if replaced:
        kept = _replaced(kept, replaced)
    for entry, message in appended:
        positions = kept.positions
        positions[message.message_uuid.int] = len(kept.entries)
        kept.entries.append(entry)
    new = [message for _, message in appended]
    if new:
        for derivation, value in kept.derived.items():
            derivation.feed(value, new)
    kept.version = version
    return kept


def _replaced(kept: KeptHistory, replaced: dict[int, tuple[Any, Message]]) -> KeptHistory:
    """A new history: ``kept`` with messages ``replaced`` in place, derivations rewound.

    Every message keeps its uuid and its place, so the positions are copied, not built.
    Each derivation is rewound to before the first message replaced and fed the messages
    from there: the usual change is at the end, where a rewind costs little and a
    rebuild would cost the whole history. One that cannot be rewound is dropped (the
    next read that wants it builds it).
    """
    first = min(replaced)
    entries = list(kept.entries)
    for index, (entry, _) in replaced.items():
        entries[index] = entry
    dropped = kept.build(kept.entries[first:])
    fresh = kept.build(entries[first:])
    derived: dict[Derivation[Any], Any] = {}
    for derivation, value in kept.derived.items():
        rewound = derivation.rewound(value, first, dropped)
        if rewound is not None:
            derivation.feed(rewound, fresh)
            derived[derivation] = rewound
    kept.retired = True  # a read that began on it starts over from the cache
    return KeptHistory(kept.version, kept.build, entries, kept.positions.copy(), derived)


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
        size = len(kept.entries)
        if not self.fits(kept.entries):
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
