"""The name a new chat gets from its first user message, as the seed layer names it."""

from __future__ import annotations

import re
from collections.abc import Iterable

import ag_ui.core as ag

__all__ = ["CHAT_NAME_LIMIT", "chat_name_from_messages", "chat_name_from_text"]

CHAT_NAME_LIMIT = 100
"""Longest name a chat gets from its first message (the seed layer's bound)."""

_WORD_LEEWAY = 30
"""Cut at the last word end before the limit only if that loses at most this much."""

_SPACE = re.compile(r"\s+")
_WORD_END = re.compile(r"\w(?!\w)|[^\w\s]")


def chat_name_from_text(text: str) -> str | None:
    """``text`` trimmed (whitespace runs as one space) and bounded on a word end; None if blank."""
    name = _SPACE.sub(" ", text).strip()
    if not name:
        return None
    if len(name) <= CHAT_NAME_LIMIT:
        return name
    head = name[: CHAT_NAME_LIMIT + 1]
    # A word that runs past the limit is left out whole, unless that loses too much.
    ends = [m.end() for m in _WORD_END.finditer(head) if m.end() <= CHAT_NAME_LIMIT]
    cut = ends[-1] if ends and CHAT_NAME_LIMIT - ends[-1] <= _WORD_LEEWAY else CHAT_NAME_LIMIT
    return name[:cut].rstrip()


def chat_name_from_messages(messages: Iterable[ag.Message]) -> str | None:
    """The name of a chat whose first run sends ``messages``: its first user text, bounded."""
    for message in messages:
        if isinstance(message, ag.UserMessage):
            content = message.content
            if not isinstance(content, str):
                parts = (part.text for part in content if isinstance(part, ag.TextInputContent))
                content = " ".join(parts)
            name = chat_name_from_text(content)
            if name is not None:
                return name
    return None
