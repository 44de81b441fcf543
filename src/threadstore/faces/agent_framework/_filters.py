"""Filters for the history a provider loads (the seed's ``ProvideOutputMessageFilter``)."""

from __future__ import annotations

from agent_framework import Message as AFMessage

from threadstore.faces.agent_framework._convert import call_ids
from threadstore.faces.agent_framework._history import MessageFilter

__all__ = ["keep_last_messages"]


def keep_last_messages(count: int) -> MessageFilter:
    """Return a filter keeping at most the last ``count`` messages, tool calls with results.

    The cut moves later past any message holding a result whose call would be cut
    off, since a model rejects a tool result without its call; a call is never kept
    without its results, because results come after their call.
    """
    if count < 1:
        raise ValueError(f"keep_last_messages needs a count of at least 1, got {count}")

    def keep_last(messages: list[AFMessage]) -> list[AFMessage]:
        start = max(len(messages) - count, 0)
        while start < len(messages) and not _closed(messages[start:]):
            start += 1
        return messages[start:]

    return keep_last


def _closed(window: list[AFMessage]) -> bool:
    """Whether every tool result in ``window`` has its call in ``window`` too."""
    calls: set[str] = set()
    for message in window:
        calls |= call_ids(message, "function_call")
    return all(call_ids(message, "function_result") <= calls for message in window)
