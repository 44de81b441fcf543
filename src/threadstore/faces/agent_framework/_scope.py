"""The chats a face may see: one user's, within a tenant and app when given."""

from __future__ import annotations

from uuid import UUID

from threadstore.errors import ConflictError
from threadstore.models import Chat, ChatCreate
from threadstore.store import Store

__all__ = ["ChatScope"]


class ChatScope:
    """Finds and opens chats by thread id for one user (and tenant/app), never another's."""

    def __init__(
        self, store: Store, user_uuid: UUID, tenant_id: str | None, app_id: str | None
    ) -> None:
        self.store = store
        self.user_uuid = user_uuid
        self.tenant_id = tenant_id
        self.app_id = app_id

    def _holds(self, chat: Chat) -> bool:
        return chat.tenant_id == self.tenant_id and chat.app_id == self.app_id

    async def find(self, thread_id: str) -> Chat | None:
        """Return the chat of ``thread_id`` in this scope, or ``None``."""
        chat = await self.store.get_chat_by_thread_id(self.user_uuid, thread_id)
        return chat if chat is not None and self._holds(chat) else None

    async def open(self, thread_id: str) -> Chat:
        """Return the chat of ``thread_id``, created in this scope when there is none.

        Raises :class:`~threadstore.ConflictError` when the user's thread belongs to
        another tenant or app.
        """
        chat = await self.store.create_chat(
            ChatCreate(
                user_uuid=self.user_uuid,
                thread_id=thread_id,
                tenant_id=self.tenant_id,
                app_id=self.app_id,
            )
        )
        if not self._holds(chat):
            raise ConflictError(
                f"thread {thread_id!r} of this user belongs to tenant {chat.tenant_id!r}, "
                f"app {chat.app_id!r}; this face is scoped to tenant {self.tenant_id!r}, "
                f"app {self.app_id!r}"
            )
        return chat
