"""Run in an environment holding threadstore without extras: use the library, report as JSON.

Usage: ``python -I bare_install_child.py DB_PATH``. Imports nothing from the test suite
(whose dependencies the environment lacks) and prints one JSON object of what it saw.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from importlib.util import find_spec
from typing import Any
from uuid import uuid4

from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    UserMessage,
)

import threadstore
from threadstore import ChatCreate, MessageCreate, Role, open_store
from threadstore.chat import apply_event, create_assistant_turn
from threadstore.errors import ConfigurationError

EXTRAS = ("fastapi", "starlette", "uvicorn", "typer", "rich", "asyncpg")


class TwoWordAgent:
    """An inner agent that answers every run with "Hello there", in two deltas."""

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
        for event in answer():
            yield event
        yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


def answer() -> list[BaseEvent]:
    """One assistant text message, streamed in two deltas."""
    return [
        TextMessageStartEvent(message_id="a1", role="assistant"),
        TextMessageContentEvent(message_id="a1", delta="Hello "),
        TextMessageContentEvent(message_id="a1", delta="there"),
        TextMessageEndEvent(message_id="a1"),
    ]


async def store_and_read(url: str) -> dict[str, Any]:
    """A chat and a message written to a SQLite file, read back by a second opening."""
    user = uuid4()
    async with await open_store(url) as store:
        chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id="t-store"))
        await store.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content="Hi")
        )
    async with await open_store(url) as store:
        found = await store.get_chat_by_thread_id(user, "t-store")
        assert found is not None
        stored = await store.get_chat_messages(found.chat_uuid)
    return {"messages": [[m.role.value, m.content] for m in stored]}


async def storage_agent_run(url: str) -> dict[str, Any]:
    """One run of the storage agent over the scripted agent, through the manager."""
    user = uuid4()
    async with await open_store(url) as store:
        inner = TwoWordAgent()
        async with threadstore.StreamPersistenceManager(
            lambda: threadstore.StorageAgent("assistant", user, store, store, inner),
            store=store,
        ) as manager:
            handle = await manager.run(
                RunAgentInput(
                    thread_id="t-agent",
                    run_id="r1",
                    state={},
                    tools=[],
                    context=[],
                    forwarded_props={},
                    messages=[UserMessage(id="u1", role="user", content="Hi")],
                )
            )
            streamed = [event.type.value async for event in handle.events()]
            await handle.wait()
        chat = await store.get_chat_by_thread_id(user, "t-agent")
        assert chat is not None
        stored = await store.get_chat_messages(chat.chat_uuid)
    return {
        "streamed": streamed,
        "messages": [[m.role.value, m.content, m.status.value] for m in stored],
    }


def chat_engine() -> str:
    """The chat engine's fold of the same answer."""
    turn = create_assistant_turn("a1")
    for event in answer():
        turn = apply_event(turn, event)
    return turn.message.content


def postgres_without_driver() -> str:
    """What opening a PostgreSQL URL says when its driver is not installed."""
    try:
        threadstore.create_store("postgresql://user@127.0.0.1:5432/db")
    except ConfigurationError as error:
        return f"ConfigurationError: {error}"
    return "no error"


def server_names() -> dict[str, str]:
    """What the server package offers without its extra: the demo agent, not the app."""
    from threadstore.server import DemoAgent

    try:
        from threadstore.server import create_app  # noqa: F401
    except ModuleNotFoundError as error:
        app = f"ModuleNotFoundError: {error}"
    else:
        app = "imported"
    return {"demo_agent": DemoAgent.__name__, "create_app": app}


def main(db_path: str) -> None:
    url = f"sqlite:///{db_path}"
    report = {
        "threadstore": threadstore.__file__,
        "importable": [name for name in EXTRAS if find_spec(name) is not None],
        "store": asyncio.run(store_and_read(url)),
        "agent": asyncio.run(storage_agent_run(url)),
        "chat": chat_engine(),
        "postgres": postgres_without_driver(),
        "server": server_names(),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
