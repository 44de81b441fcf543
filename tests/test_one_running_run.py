"""One running run per chat, held by the database: across processes, and through the server.

Two processes told at the same moment to start a run on one chat: exactly one starts it
and the other is refused naming the winner, whatever the interleaving (each round starts
on a line both read, not after a sleep). Through the server, a run record another
process wrote after this one's checks refuses the run with nothing stored (in its stream,
or with a 409 when its writes come before it starts), and a run whose owner stopped
heartbeating does not hold the thread.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from ag_ui.core import BaseEvent, RunAgentInput

import threadstore
from agui_scripts import (
    ScriptedAgent,
    collect,
    run_finished,
    run_started,
    text_message,
    tool_call,
    user,
)
from agui_scripts import run_input as agent_input
from postgres_support import clean_database, server_url
from server_support import collect_sse, run_input, served_with_store
from test_crash_recovery import WAIT_LIMIT
from threadstore import ChatCreate, Run, RunStatus
from threadstore.agui._agent import RUN_LIVE_ERROR_CODE, StorageAgent
from threadstore.server._run_gate import RunGate

CHILD = Path(__file__).with_name("run_claim_child.py")
ROUNDS = 20
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of a migrated database with no rows."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'runs.db'}"
        store = await threadstore.open_store(url)
        await store.close()
        yield url
        return
    async with clean_database(server_url()) as url:
        yield url


async def start_child(url: str, owner: str) -> asyncio.subprocess.Process:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        url,
        owner,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(CHILD.parent)},
    )
    assert child.stdout is not None
    line = await asyncio.wait_for(child.stdout.readline(), WAIT_LIMIT)
    assert line == b"ready\n", line
    return child


async def answer(child: asyncio.subprocess.Process) -> list[str]:
    assert child.stdout is not None
    return (await asyncio.wait_for(child.stdout.readline(), WAIT_LIMIT)).decode().split()


async def test_two_processes_starting_runs_on_one_chat_at_once_start_exactly_one(
    database: str,
) -> None:
    store = await threadstore.open_store(database, setup=False)
    children = [await start_child(database, "a"), await start_child(database, "b")]
    try:
        for round_ in range(ROUNDS):
            chat = await store.create_chat(
                ChatCreate(user_uuid=UUID(int=1), thread_id=f"thread-{round_}")
            )
            for name, child in zip("ab", children, strict=True):
                assert child.stdin is not None
                child.stdin.write(f"{chat.chat_uuid} thread-{round_} run-{name}\n".encode())
            for child in children:
                assert child.stdin is not None
                await child.stdin.drain()

            a, b = await asyncio.gather(*(answer(child) for child in children))

            assert sorted([a[0], b[0]]) == ["refused", "started"], (round_, a, b)
            winner = "run-a" if a == ["started"] else "run-b"
            loser = "run-b" if winner == "run-a" else "run-a"
            assert (a if a[0] == "refused" else b) == ["refused", winner]
            assert await store.get_run(chat.chat_uuid, loser) is None
            won = await store.get_run(chat.chat_uuid, winner)
            assert won is not None and won.status == RunStatus.RUNNING
    finally:
        for child in children:
            assert child.stdin is not None
            child.stdin.close()
            await asyncio.wait_for(child.wait(), WAIT_LIMIT)
        await store.close()
    assert [child.returncode for child in children] == [0, 0]


def agent() -> ScriptedAgent:
    return ScriptedAgent(
        lambda run: [
            run_started(run.thread_id, run.run_id),
            *text_message(f"{run.run_id}-a", "Hello."),
            run_finished(run.thread_id, run.run_id),
        ]
    )


async def first_run_then_a_run_elsewhere(
    client: Any, store: threadstore.Store, text: str
) -> tuple[dict[str, Any], threadstore.Chat]:
    """A first run through the server; then another process starts a run on its thread
    ("elsewhere"), as if just after the next POST's checks passed (see ``checks_passed``)."""
    first = run_input(text)
    async with client.stream("POST", "/agui", json=first) as response:
        assert response.status_code == 200
        await collect_sse(response)
    user = (await store.get_all_chats(None))[0].user_uuid
    chat = await store.get_chat_by_thread_id(user, first["threadId"])
    assert chat is not None
    await store.start_run(
        Run(chat_uuid=chat.chat_uuid, thread_id=chat.thread_id, run_id="elsewhere", owner="b")
    )
    return first, chat


async def checks_passed(
    _: RunGate, state: Any, user: UUID, run: RunAgentInput
) -> threadstore.Chat | None:
    """The run gate's checks, passing: only the chat look-up the set-up then uses."""
    return await state.store.get_chat_by_thread_id(user, run.thread_id)


async def test_a_run_record_written_by_another_process_after_the_checks_refuses_the_run(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with served_with_store(database, agent()) as (client, store):
        first, chat = await first_run_then_a_run_elsewhere(client, store, "First.")

        with monkeypatch.context() as patched:
            patched.setattr(RunGate, "_check", checks_passed)
            second = run_input("Second.", thread_id=first["threadId"])
            # The run starts while its set-up writes go on: the store's refusal comes in
            # the stream, after the agent's RUN_STARTED.
            async with client.stream("POST", "/agui", json=second) as response:
                assert response.status_code == 200
                events = await collect_sse(response)

        assert [event.type for event in events] == ["RUN_STARTED", "RUN_ERROR"]
        refusal = events[-1].data
        assert refusal is not None
        assert refusal["code"] == RUN_LIVE_ERROR_CODE and "elsewhere" in refusal["message"]
        contents = [m.content for m in await store.get_chat_messages(chat.chat_uuid)]
        assert contents == ["First.", "Hello."]  # the refused run stored nothing
        assert await store.get_run(chat.chat_uuid, second["runId"]) is None

        # The refused run id is not taken: once the thread is free, it runs.
        await store.finish_run(chat.chat_uuid, "elsewhere", RunStatus.COMPLETE)
        async with client.stream("POST", "/agui", json=second) as response:
            assert response.status_code == 200
            assert (await collect_sse(response))[-1].type == "RUN_FINISHED"
        contents = [m.content for m in await store.get_chat_messages(chat.chat_uuid)]
        assert contents == ["First.", "Hello.", "Second.", "Hello."]


def asks_for_a_tool() -> ScriptedAgent:
    """Asks the client to run a tool; answers once the client sends its result."""

    def script(run: RunAgentInput) -> list[BaseEvent]:
        if run.messages and run.messages[-1].role == "tool":
            middle = text_message(f"{run.run_id}-a", "It is 42.")
        else:
            middle = [
                *text_message(f"{run.run_id}-a", "Looking it up."),
                *tool_call("call-1", "lookup", "{}", parent_message_id=f"{run.run_id}-a"),
            ]
        return [run_started(run.thread_id, run.run_id), *middle, run_finished(run.thread_id)]

    return ScriptedAgent(script)


async def test_a_run_that_stores_a_tool_result_is_refused_with_a_409(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that stores tool results writes before it starts, so its refusal is a 409."""
    async with served_with_store(database, asks_for_a_tool()) as (client, store):
        first, chat = await first_run_then_a_run_elsewhere(client, store, "What is it?")

        monkeypatch.setattr(RunGate, "_check", checks_passed)
        second = {
            **run_input(thread_id=first["threadId"]),
            "messages": [{"id": "r-1", "role": "tool", "toolCallId": "call-1", "content": "42"}],
        }
        response = await client.post("/agui", json=second)

        assert response.status_code == 409, response.text
        body = response.json()
        assert (body["code"], body["run_id"]) == ("run_live", "elsewhere")
        messages = await store.get_chat_messages(chat.chat_uuid)
        assert [m.content for m in messages] == ["What is it?", "Looking it up."]
        assert messages[-1].tool_calls[0].content is None  # the result was not stored
        assert await store.get_run(chat.chat_uuid, second["runId"]) is None


async def test_a_run_whose_owner_stopped_heartbeating_does_not_hold_the_thread(
    database: str,
) -> None:
    async with served_with_store(database, agent()) as (client, store):
        first = run_input("First.")
        async with client.stream("POST", "/agui", json=first) as response:
            await collect_sse(response)
        user = (await store.get_all_chats(None))[0].user_uuid
        chat = await store.get_chat_by_thread_id(user, first["threadId"])
        crashed = Run(
            chat_uuid=chat.chat_uuid,
            thread_id=chat.thread_id,
            run_id="crashed",
            owner="gone",
            heartbeat_at=LONG_AGO,
        )
        await store.start_run(crashed)

        second = run_input("Second.", thread_id=first["threadId"])
        async with client.stream("POST", "/agui", json=second) as response:
            assert response.status_code == 200, await response.aread()
            assert (await collect_sse(response))[-1].type == "RUN_FINISHED"

        ended = await store.get_run(chat.chat_uuid, "crashed")
        assert ended is not None
        assert (ended.status, ended.error) == (
            RunStatus.INTERRUPTED,
            "owner gone stopped heartbeating",
        )


async def test_a_storage_agent_on_a_chat_with_a_live_run_is_refused_with_nothing_stored(
    store: threadstore.Store,
) -> None:

    user_uuid = UUID(int=7)
    script = [run_started("t", "first"), *text_message("a1", "Still typing")]
    live = ScriptedAgent(script, pause_after=len(script) - 1)
    first = StorageAgent("assistant", user_uuid, store, store, live, run_repo=store)
    running = asyncio.ensure_future(collect(first.run(agent_input("t", "first", [user("u1")]))))
    await live.paused.wait()

    second = StorageAgent("assistant", user_uuid, store, store, agent(), run_repo=store)
    events = await collect(second.run(agent_input("t", "second", [user("u2", "Me too")])))

    assert [e.type.value for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1].code == RUN_LIVE_ERROR_CODE and "first" in events[-1].message
    assert second.refused_by is not None and second.refused_by.live_run_id == "first"
    chat = await store.get_chat_by_thread_id(user_uuid, "t")
    assert chat is not None
    assert await store.get_run(chat.chat_uuid, "second") is None
    assert "Me too" not in [m.content for m in await store.get_chat_messages(chat.chat_uuid)]
    live.gate.set()
    await running


async def test_a_run_that_fails_to_set_up_does_not_hold_its_chat(store: threadstore.Store) -> None:
    user_uuid = UUID(int=8)

    def broken(_: object) -> list[object]:
        raise RuntimeError("translation failed")

    failing = StorageAgent(
        "assistant", user_uuid, store, store, agent(), run_repo=store, translate=broken
    )
    with pytest.raises(RuntimeError, match="translation failed"):
        await collect(failing.run(agent_input("t", "first", [user("u1")])))
    chat = await store.get_chat_by_thread_id(user_uuid, "t")
    assert chat is not None
    failed = await store.get_run(chat.chat_uuid, "first")
    assert failed is not None and failed.status == RunStatus.ERRORED

    after = StorageAgent("assistant", user_uuid, store, store, agent(), run_repo=store)
    events = await collect(after.run(agent_input("t", "second", [user("u2")])))

    assert events[-1].type.value == "RUN_FINISHED"
