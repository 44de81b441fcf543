"""``ThreadstoreSessionStore``: whole Agent Framework sessions kept durably in a store.

A session is stored as its ``AgentSession.to_dict()`` in the ``state`` of the user's
chat whose thread id is the session store key: with the history provider's default
key (the session id), one chat holds both the session and its history.
"""

from __future__ import annotations

import warnings
from typing import Any
from uuid import UUID

from agent_framework import AgentSession, SessionStore

from threadstore.faces.agent_framework._scope import ChatScope
from threadstore.store import Store

__all__ = ["SESSION_STATE_KEY", "ThreadstoreSessionStore"]

SESSION_STATE_KEY = "agent_framework_session"
"""Key of the chat state that holds the serialized session."""

# The framework marks SessionStore experimental and warns on every subclass; the
# warning is for our class's author, not for each application importing it.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"\[SESSION_STORE\]")

    class ThreadstoreSessionStore(SessionStore):
        """A framework ``SessionStore`` on a threadstore store (memory, SQLite, PostgreSQL).

        Sessions belong to ``user_uuid`` (within ``tenant_id``/``app_id`` when given);
        ``get`` returns a new ``AgentSession`` restored with ``AgentSession.from_dict``.
        """

        def __init__(
            self,
            store: Store,
            user_uuid: UUID,
            *,
            tenant_id: str | None = None,
            app_id: str | None = None,
        ) -> None:
            super().__init__()
            self.store = store
            self.scope = ChatScope(store, user_uuid, tenant_id, app_id)

        async def get(self, session_id: str) -> AgentSession | None:
            """Return the stored session, or ``None`` when there is none."""
            self.validate_session_id(session_id)
            chat = await self.scope.find(session_id)
            if chat is None or not isinstance(chat.state, dict):
                return None
            stored = chat.state.get(SESSION_STATE_KEY)
            return AgentSession.from_dict(stored) if isinstance(stored, dict) else None

        async def set(self, session_id: str, session: AgentSession) -> None:
            """Store ``session`` under ``session_id``, replacing what was there."""
            self.validate_session_id(session_id)
            chat = await self.scope.open(session_id)
            state: dict[str, Any] = {SESSION_STATE_KEY: session.to_dict()}
            await self.store.update_chat_state(chat.chat_uuid, state)

        async def delete(self, session_id: str) -> None:
            """Forget the stored session (its history, if any, stays)."""
            self.validate_session_id(session_id)
            chat = await self.scope.find(session_id)
            if chat is not None:
                await self.store.update_chat_state(chat.chat_uuid, None)
