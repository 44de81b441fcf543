"""The cuts behind regenerate and edit-and-resend, on both views of a chat at once."""

from __future__ import annotations

from dataclasses import dataclass

import ag_ui.core as ag

from threadstore.chat._types import UIMessage

__all__ = ["ChatHistory", "branch_before_user_message", "drop_trailing_assistant"]

_TRAILING_ROLES = frozenset({"assistant", "tool", "reasoning", "activity"})
"""Canonical roles of an assistant turn (what regenerate drops)."""


@dataclass(frozen=True, slots=True)
class ChatHistory:
    """The two views of one conversation: what is rendered and what is sent to the agent."""

    ui: tuple[UIMessage, ...]
    canonical: tuple[ag.Message, ...]


def drop_trailing_assistant(history: ChatHistory) -> ChatHistory:
    """Regenerate: drop the trailing assistant turn from both views (no-op if none trails)."""
    ui_end = len(history.ui)
    while ui_end and history.ui[ui_end - 1].role == "assistant":
        ui_end -= 1
    canonical_end = len(history.canonical)
    while canonical_end and history.canonical[canonical_end - 1].role in _TRAILING_ROLES:
        canonical_end -= 1
    if ui_end == len(history.ui) and canonical_end == len(history.canonical):
        return history
    return ChatHistory(history.ui[:ui_end], history.canonical[:canonical_end])


def branch_before_user_message(history: ChatHistory, message_id: str) -> ChatHistory | None:
    """Edit-and-resend: both views cut just before the user message ``message_id``.

    The canonical cut is found by the user turn's ordinal (the n-th user message),
    never by array index, since one UI turn may be several canonical messages.
    ``None`` when ``message_id`` is not a user message of ``history.ui``.
    """
    ordinal = 0
    for index, message in enumerate(history.ui):
        if message.id == message_id:
            if message.role != "user":
                return None
            return ChatHistory(history.ui[:index], history.canonical[: _nth_user(history, ordinal)])
        if message.role == "user":
            ordinal += 1
    return None


def _nth_user(history: ChatHistory, ordinal: int) -> int:
    """The index of the ``ordinal``-th user message in the canonical view (or its end)."""
    seen = 0
    for index, message in enumerate(history.canonical):
        if message.role == "user":
            if seen == ordinal:
                return index
            seen += 1
    return len(history.canonical)
