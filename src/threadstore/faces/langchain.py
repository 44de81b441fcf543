"""LangChain face: a ``BaseChatMessageHistory`` over any threadstore store.

Install with ``pip install "threadstore[langchain]"``.

One LangChain message is one threadstore message on the chat of ``(user_uuid,
session_id)``: the role, the text and the id (``agui_id``) go into the message's own
fields, an ``AIMessage``'s tool calls become tool-call records and a ``ToolMessage``
keeps its ``tool_call_id`` in ``metadata["tool_call_id"]``, so the chat API and the
AG-UI replay read the same history. What only LangChain has (``additional_kwargs``,
``response_metadata``, list content, usage, ...) is kept as JSON text under
``metadata["langchain"]``, so every message reads back equal to what was added.
Messages written by other faces read back as the closest LangChain message.

Sync and async
--------------
A store lives on the event loop that opened it. The async methods (``aget_messages``,
``aadd_messages``, ``aclear``) run on that loop. The sync ones (``messages``,
``add_messages``, ``clear``) must block until the store answers, which cannot happen
on the store's own loop, so they need the store to run on a loop in another thread:
open it with :class:`BackgroundStore`. Then both kinds work from any thread, with or
without a running event loop (async calls from another loop hop to the store's loop
and back). A plain :class:`~threadstore.Store` serves the async methods only, and the
sync ones raise a :class:`~threadstore.errors.ConfigurationError` saying so.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar
from uuid import UUID

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)

from threadstore.codec import TOOL_CALL_ID_METADATA_KEY
from threadstore.errors import ConfigurationError
from threadstore.faces._chat import SessionChat, load_history
from threadstore.faces._finished import finished_message, finished_tool_call
from threadstore.fold import Record
from threadstore.models import Message, Role, Summary
from threadstore.store import Store, open_store
from threadstore.usage import RunUsage, UsageReport

__all__ = ["BackgroundStore", "ThreadstoreChatMessageHistory", "usage_records"]

T = TypeVar("T")

LANGCHAIN_METADATA_KEY = "langchain"
"""``Message.metadata`` key holding the LangChain-only part of a message."""

_ROLES = {"human": Role.USER, "ai": Role.ASSISTANT, "system": Role.SYSTEM, "tool": Role.TOOL}
"""By message type; a chunk's type is its class name (``AIMessageChunk`` reads as ``ai``)."""


class BackgroundStore:
    """A threadstore store served by an event loop in its own daemon thread.

    Synchronous code (and code on other event loops) uses the store through
    :meth:`run`. Use as ``with BackgroundStore(url) as background:``; ``close()``
    closes the store and stops the thread.
    """

    def __init__(self, url: str, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="threadstore-background-store", daemon=True
        )
        self._thread.start()
        try:
            self.store: Store = self.run(open_store(url, **options))
        except BaseException:
            self._stop()
            raise

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the store's loop and wait for its result."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise ConfigurationError(
                "BackgroundStore.run was called on the store's own loop, where it would wait "
                "forever; await the coroutine there instead"
            )
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        """Close the store and stop its thread."""
        if self.loop.is_closed():
            return
        try:
            self.run(self.store.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ThreadstoreChatMessageHistory(BaseChatMessageHistory):
    """The LangChain message history of one user's session, kept in a threadstore chat.

    ``session_id`` is the chat's thread id. ``store`` is an open
    :class:`~threadstore.Store` (async methods only) or a :class:`BackgroundStore`
    (sync and async methods); see the module docstring.
    """

    def __init__(
        self,
        store: Store | BackgroundStore,
        *,
        user_uuid: UUID,
        session_id: str,
        tenant_id: str | None = None,
        app_id: str | None = None,
    ) -> None:
        super().__init__()
        self._background = store if isinstance(store, BackgroundStore) else None
        self.store = store.store if isinstance(store, BackgroundStore) else store
        self.user_uuid = user_uuid
        self.session_id = session_id
        self._chat = SessionChat(self.store, user_uuid, session_id, tenant_id, app_id)

    # --- LangChain's interface -----------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages, oldest first (a compacted chat's: its summary, then the rest)."""
        return self._wait(self._load)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` to the session, in one transaction."""
        self._wait(lambda: self._append(messages))

    def clear(self) -> None:
        """Delete the session's chat and every message in it."""
        self._wait(self._clear)

    async def aget_messages(self) -> list[BaseMessage]:
        """The session's messages, oldest first."""
        return await self._hop(self._load)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` to the session, in one transaction."""
        await self._hop(lambda: self._append(messages))

    async def aclear(self) -> None:
        """Delete the session's chat and every message in it."""
        await self._hop(self._clear)

    # --- running on the store's loop ------------------------------------------------------

    def _wait(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        if self._background is None:
            raise ConfigurationError(
                "the synchronous methods of ThreadstoreChatMessageHistory need a store on a "
                "loop of its own: pass a BackgroundStore, or use aget_messages, aadd_messages "
                "and aclear"
            )
        return self._background.run(work())

    async def _hop(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        background = self._background
        if background is None or asyncio.get_running_loop() is background.loop:
            return await work()
        future = asyncio.run_coroutine_threadsafe(work(), background.loop)
        return await asyncio.wrap_future(future)

    # --- the store side --------------------------------------------------------------------

    async def _load(self) -> list[BaseMessage]:
        chat_uuid = await self._chat.find()
        if chat_uuid is None:
            return []
        return await load_history(self.store, chat_uuid, history_messages, summary_messages)

    async def _append(self, messages: Sequence[BaseMessage]) -> None:
        if not messages:
            return
        chat_uuid = await self._chat.append(
            lambda chat: [message_records(chat, one) for one in messages]
        )
        if self.store.usage.kept:
            for usage in usage_records(chat_uuid, self.user_uuid, messages):
                await self.store.usage.record(usage)

    async def _clear(self) -> None:
        await self._chat.delete()


# --- conversion ------------------------------------------------------------------------------


def usage_records(
    chat_uuid: UUID, user_uuid: UUID, messages: Sequence[BaseMessage]
) -> list[RunUsage]:
    """The usage ledger's rows of the AI messages that carry ``usage_metadata``.

    One row per message, keyed by its id (``langchain:<id>``), so adding it again
    replaces its row; a message without an id is not counted (it could not be told
    apart from the same message added twice).
    """
    rows = []
    for message in messages:
        metadata = getattr(message, "usage_metadata", None)
        if not isinstance(message, AIMessage) or not metadata or not message.id:
            continue
        inputs = metadata.get("input_token_details") or {}
        outputs = metadata.get("output_token_details") or {}
        report = UsageReport(
            input_tokens=metadata.get("input_tokens") or 0,
            output_tokens=metadata.get("output_tokens") or 0,
            cached_input_tokens=inputs.get("cache_read") or 0,
            reasoning_tokens=outputs.get("reasoning") or 0,
            model=(message.response_metadata or {}).get("model_name"),
        )
        run_id = f"langchain:{message.id}"
        rows.append(RunUsage.of(chat_uuid, run_id, user_uuid, report, source="langchain"))
    return rows


def _text(content: str | list[str | dict[str, Any]]) -> str:
    """The plain text of LangChain content, for readers that know only text."""
    if isinstance(content, str):
        return content
    texts = [
        part if isinstance(part, str) else str(part.get("text", ""))
        for part in content
        if isinstance(part, str) or part.get("type") == "text"
    ]
    return "\n".join(texts)


def message_records(chat_uuid: UUID, message: BaseMessage) -> Record:
    """The threadstore message (and tool calls) that store one LangChain message."""
    # Fields left at their defaults come back by themselves; the stored copy stays small.
    data: dict[str, Any] = message.model_dump(exclude_defaults=True)
    # The id and string content live in the message's own fields; the rest is LangChain's.
    data.pop("id", None)
    if isinstance(message.content, str):
        data.pop("content", None)
    # As JSON text, not a JSON document: PostgreSQL's jsonb would read 1e16 back as an int.
    saved = json.dumps({**data, "type": message.type})
    metadata: dict[str, Any] = {LANGCHAIN_METADATA_KEY: saved}
    role = _ROLES.get(message.type.removesuffix("MessageChunk").lower(), Role.ASSISTANT)
    if isinstance(message, ToolMessage):
        metadata[TOOL_CALL_ID_METADATA_KEY] = message.tool_call_id
    create = finished_message(
        chat_uuid,
        role=role,
        content=_text(message.content),
        agui_id=message.id,
        name=message.name,
        metadata=metadata,
    )
    calls = [
        finished_tool_call(create.message_uuid, call["id"], call["name"], json.dumps(call["args"]))
        for call in (message.tool_calls if isinstance(message, AIMessage) else [])
        # A call without an id cannot be answered or replayed; LangChain's copy keeps it.
        if call["id"] is not None
    ]
    return Record(create, calls)


def summary_messages(summary: Summary) -> list[BaseMessage]:
    """What a compacted chat's summary reads as: one system message, before what follows it."""
    return [SystemMessage(content=summary.content, id=summary.agui_id)]


def history_messages(messages: Sequence[Message]) -> list[BaseMessage]:
    """The LangChain messages of a stored history, oldest first (nothing in them is shared)."""
    return [out for message in messages for out in langchain_messages(message)]


def langchain_messages(message: Message) -> list[BaseMessage]:
    """The LangChain messages a stored message reads as (none for reasoning or activity)."""
    saved = message.metadata.get(LANGCHAIN_METADATA_KEY)
    if isinstance(saved, str):
        data = json.loads(saved)
        kind = data.pop("type")
        data.setdefault("content", message.content)
        data["id"] = message.agui_id
        return messages_from_dict([{"type": kind, "data": data}])
    return _from_other_face(message)


def _from_other_face(message: Message) -> list[BaseMessage]:
    """Read a message another face wrote: its role, text, id, tool calls and their results."""
    common: dict[str, Any] = {"content": message.content, "id": message.agui_id}
    role = message.role
    if role is Role.USER:
        return [HumanMessage(name=message.name, **common)]
    if role in (Role.SYSTEM, Role.DEVELOPER):
        return [SystemMessage(name=message.name, **common)]
    if role is Role.TOOL:
        call_id = message.metadata.get(TOOL_CALL_ID_METADATA_KEY)
        return [ToolMessage(tool_call_id=call_id, **common)] if isinstance(call_id, str) else []
    if role is not Role.ASSISTANT:
        return []
    calls = sorted(message.tool_calls, key=lambda call: call.seq)
    out: list[BaseMessage] = [
        AIMessage(
            name=message.name,
            tool_calls=[
                {"id": call.tool_call_id, "name": call.name, "args": _arguments(call.arguments)}
                for call in calls
            ],
            **common,
        )
    ]
    out.extend(
        ToolMessage(
            content=call.content if call.content is not None else call.error or "",
            tool_call_id=call.tool_call_id,
            id=call.result_message_id,
            status="error" if call.error is not None else "success",
        )
        for call in calls
        if call.content is not None or call.error is not None
    )
    return out


def _arguments(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as LangChain's dict (empty or non-object text gives ``{}``)."""
    try:
        parsed = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
