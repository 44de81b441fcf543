"""A bounded cache of chat histories, valid for exactly one chat version.

Loading a chat's whole history is the hot read of every run (the history is
replayed into the agent) and of every page that shows a chat. A backend whose
chats carry a ``version`` bumped in the same transaction as every change to their
messages, tool calls and reasoning can answer a repeated read with one indexed
lookup of that version: if it still matches, the history read before is exact.

The cache never hands out the objects it keeps: every hit returns fresh copies,
so callers may mutate what they get. It holds at most ``max_messages`` messages
(least recently used chats are dropped first).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence, Sized
from typing import Any
from uuid import UUID

from threadstore.models import Message, Reasoning, ToolCall
from threadstore.store.codec import Constructor, constructor

__all__ = ["DEFAULT_HISTORY_CACHE_MESSAGES", "HistoryCache", "copy_messages"]

DEFAULT_HISTORY_CACHE_MESSAGES = 50_000
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


class HistoryCache:
    """Histories by chat, each tagged with the chat version it was read at."""

    def __init__(self, max_messages: int = DEFAULT_HISTORY_CACHE_MESSAGES) -> None:
        self.max_messages = max_messages
        self._entries: OrderedDict[UUID, tuple[Any, list[Message]]] = OrderedDict()
        self._size = 0
        self.hits = 0
        self.misses = 0

    def get(self, chat_uuid: UUID, version: Any) -> list[Message] | None:
        """Return copies of the history read at ``version``, or ``None``."""
        kept = self.kept(chat_uuid, version)
        return None if kept is None else copy_messages(kept)

    def kept(self, chat_uuid: UUID, version: Any) -> list[Message] | None:
        """The history read at ``version`` as kept, or ``None``: copy it before handing it out."""
        entry = self._entries.get(chat_uuid)
        if entry is None or entry[0] != version:
            self.misses += 1
            return None
        self._entries.move_to_end(chat_uuid)
        self.hits += 1
        return entry[1]

    def put(self, chat_uuid: UUID, version: Any, messages: Sequence[Message]) -> None:
        """Keep copies of ``messages`` as the history at ``version``."""
        self.keep(chat_uuid, version, copy_messages(messages))

    def fits(self, messages: Sized) -> bool:
        """Whether a history this long is kept at all."""
        return len(messages) <= self.max_messages

    def keep(self, chat_uuid: UUID, version: Any, messages: list[Message]) -> None:
        """Keep ``messages`` themselves (a copy nobody else holds) as the history at ``version``."""
        self.discard(chat_uuid)
        if not self.fits(messages):
            return
        self._entries[chat_uuid] = (version, messages)
        self._size += len(messages)
        while self._size > self.max_messages:
            _, (_, evicted) = self._entries.popitem(last=False)
            self._size -= len(evicted)

    def discard(self, chat_uuid: UUID) -> None:
        """Forget a chat's history."""
        entry = self._entries.pop(chat_uuid, None)
        if entry is not None:
            self._size -= len(entry[1])
