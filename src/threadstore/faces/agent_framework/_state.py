"""Typed provider state in a framework session: the seed's ``ProviderSessionState<T>``.

A provider is shared by every session, so what belongs to one session (its chat's
thread id) lives in the session's ``state``, under the provider's key, as JSON the
session serializes with it. :class:`ProviderSessionState` reads and writes that entry
as a typed model instead of a bare dict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from agent_framework import AgentSession
from pydantic import BaseModel, ValidationError

__all__ = ["ProviderSessionState", "ThreadstoreSessionState"]

StateT = TypeVar("StateT", bound=BaseModel)


class ThreadstoreSessionState(BaseModel):
    """What :class:`~threadstore.faces.agent_framework.ThreadstoreHistoryProvider` keeps."""

    thread_id: str | None = None
    """The thread id of the chat holding the session's history (set on first use)."""


class ProviderSessionState(Generic[StateT]):
    """A provider's typed state in a session, under ``state_key`` (the seed's helper).

    ``state_initializer`` makes the state of a session that has none yet. The entry is
    the model's JSON form, updated in place, so the dict the framework hands a provider's
    hooks stays the session's own and a serialized session carries it.
    """

    def __init__(
        self,
        model: type[StateT],
        state_initializer: Callable[[AgentSession | None], StateT],
        state_key: str,
    ) -> None:
        self.model = model
        self.state_initializer = state_initializer
        self.state_key = state_key

    def read(self, entry: dict[str, Any]) -> StateT | None:
        """The state held in ``entry`` (the session's dict under the key), or ``None``.

        An entry that is not this model's (hand-edited, another version's) reads as
        ``None`` too, so the state is made anew rather than failing every run.
        """
        try:
            return self.model.model_validate(entry) if entry else None
        except ValidationError:
            return None

    def write(self, entry: dict[str, Any], state: StateT) -> None:
        """Write ``state`` into ``entry`` in place."""
        entry.update(state.model_dump(mode="json", exclude_none=True))

    def get_or_initialize_state(self, session: AgentSession) -> StateT:
        """Return the session's state, making and saving it first when it has none."""
        entry = session.state.setdefault(self.state_key, {})
        state = self.read(entry)
        if state is None:
            state = self.state_initializer(session)
            self.write(entry, state)
        return state

    def save_state(self, session: AgentSession, state: StateT) -> None:
        """Save ``state`` as the session's state for this provider."""
        self.write(session.state.setdefault(self.state_key, {}), state)
