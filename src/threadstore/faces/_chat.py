"""The chat a framework's session lives in: one user's chat, named by its thread id."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar
from uuid import UUID

from threadstore._steps import in_steps
from threadstore.errors import NotFoundError
from threadstore.fold import Record, append_writes
from threadstore.models import ChatCreate, Message, Summary
from threadstore.store import Store

_T = TypeVar("_T")


async def load_history(
    store: Store,
    chat_uuid: UUID,
    convert: Callable[[Sequence[Message]], Iterable[_T]],
    summary_form: Callable[[Summary], Iterable[_T]] | None = None,
) -> list[_T]:
    """The framework objects ``convert`` makes of the chat's history, oldest first.

    ``convert`` gets the store's own records (:meth:`Store.read_history`, no copy made
    per load), so it must neither change them nor keep anything mutable of them. It is
    fed a long history in pieces, in order, on the loop, which it gets back between
    them (:func:`~threadstore._steps.in_steps`): a worker thread would compete
    with the loop for the interpreter and cost a hop. With ``summary_form``, what an
    agent is given of a compacted chat: the summary's objects, then the messages after
    it (``store.branches.agent_history``).
    """
    out: list[_T] = []
    history: Sequence[Message]
    if summary_form is None:
        history = await store.messages.read_history(chat_uuid)
    else:
        given = await store.branches.agent_history(chat_uuid)
        if given.summary is not None:
            out.extend(summary_form(given.summary))
        history = given.messages
    await in_steps(history, lambda piece: out.extend(convert(piece)))
    return out


@dataclass
class SessionChat:
    """One user's chat in ``store``, found by ``thread_id`` and created on the first write."""

    store: Store
    user_uuid: UUID
    thread_id: str
    tenant_id: str | None = None
    app_id: str | None = None
    _known: UUID | None = field(default=None, repr=False)
    """The chat's uuid as last seen; writes trust it until the store says it is gone."""

    async def find(self) -> UUID | None:
        """The chat's uuid, or ``None`` when the session has nothing yet.

        Always asks the store: another process may have cleared the session meanwhile.
        """
        chat = await self.store.get_chat_by_thread_id(self.user_uuid, self.thread_id)
        self._known = chat.chat_uuid if chat is not None else None
        return self._known

    async def append(self, build: Callable[[UUID], Iterable[Record]]) -> UUID:
        """Append the messages ``build`` makes for the chat, all or nothing, creating it if needed.

        ``build`` gives each message with its tool calls, in order. Returns the chat's uuid.
        """
        if self._known is not None:
            try:
                await self.store.apply_writes(append_writes(build(self._known)))
                return self._known
            except NotFoundError:
                pass  # cleared by another history or process since: start a new chat
        chat = await self.store.create_chat(
            ChatCreate(
                user_uuid=self.user_uuid,
                thread_id=self.thread_id,
                tenant_id=self.tenant_id,
                app_id=self.app_id,
            )
        )
        self._known = chat.chat_uuid
        await self.store.apply_writes(append_writes(build(chat.chat_uuid)))
        return chat.chat_uuid

    async def delete(self) -> None:
        """Delete the chat and everything in it (nothing when there is none)."""
        chat_uuid = await self.find()
        if chat_uuid is not None:
            await self.store.delete_chat(chat_uuid)
        self._known = None
