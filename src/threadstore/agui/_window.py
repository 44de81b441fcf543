"""Which part of a chat's stored history the agent is given.

By default the agent gets the whole translated history (it replaces
``input.messages``), as the seed did. A :class:`HistoryWindow` keeps only the last
turns instead: the last ``max_turns`` user turns, and/or as many of the last turns
as fit in ``max_chars`` characters. It cuts only where a user message starts a turn,
so a tool call never loses its result and a reasoning step never loses its message:
both are stored inside the message they belong to and go or stay with it. The
latest turn is always given whole, even beyond the budget. What the window leaves
out stays stored, in the API and on the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from threadstore.errors import InvalidInputError
from threadstore.lifecycle import message_chars
from threadstore.models import Message, Role

__all__ = ["HistoryWindow", "message_chars"]


@dataclass(frozen=True, slots=True)
class HistoryWindow:
    """The last turns of the history: at most ``max_turns`` of them, at most ``max_chars``."""

    max_turns: int | None = None
    """User turns given (a turn: a user message and everything after it up to the next)."""
    max_chars: int | None = None
    """Character budget of the turns given (:func:`message_chars`); the latest is always whole."""

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_chars"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidInputError(f"HistoryWindow.{name} must be at least 1, got {value}")

    def select(self, history: Sequence[Message]) -> Sequence[Message]:
        """The stored messages the agent is given: ``history``, or a suffix starting a turn."""
        turns = chars = 0
        kept: int | None = None  # where the window starts: the oldest turn kept so far
        for index in range(len(history) - 1, -1, -1):
            chars += message_chars(history[index])
            if history[index].role is not Role.USER:
                continue
            turns += 1
            if (self.max_turns is None or turns <= self.max_turns) and (
                self.max_chars is None or chars <= self.max_chars
            ):
                kept = index
                continue
            # Over the window: cut before this turn (the latest turn is given whole).
            return history[index if kept is None else kept :]
        return history  # every turn fits (and whatever came before the first one)
