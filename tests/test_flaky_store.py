"""A store failing every few writes costs no text: flushes split, retry, or report the loss."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

import pytest
from ag_ui.core import BaseEvent

from agui_scripts import (
    ScriptedAgent,
    StoreSpy,
    collect,
    run_finished,
    run_input,
    run_started,
    text_message,
    tool_call,
)
from threadstore import MessageStatus, RunStatus, Store
from threadstore.agui import StorageAgent

USER = UUID("00000000-0000-4000-8000-000000000016")
EVENTS = 2_000


def long_run() -> tuple[list[BaseEvent], dict[str, str], dict[str, str]]:
    """A run of exactly ``EVENTS`` events: messages streaming text, tool calls streaming args.

    Returns the script, each message's text and each tool call's arguments.
    """
    script: list[BaseEvent] = [run_started()]
    texts: dict[str, str] = {}
    arguments: dict[str, str] = {}
    turn = 0
    while True:
        message_id, call_id = f"m{turn}", f"c{turn}"
        text = "".join(f"[{turn}:{i}] word " for i in range(60))
        args = '{"q": "' + "".join(f"{turn}-{i}," for i in range(30)) + '"}'
        events = [
            *text_message(message_id, text, deltas=60),
            *tool_call(call_id, "search", args, parent_message_id=message_id, deltas=30),
        ]
        if len(script) + len(events) + 1 > EVENTS:
            break
        script.extend(events)
        texts[message_id], arguments[call_id] = text, args
        turn += 1
    tail = EVENTS - 1 - len(script) - 2  # fill up with one last message
    last = "".join(f"<{i}>" for i in range(tail))
    script.extend(text_message("last", last, deltas=tail))
    texts["last"] = last
    script.append(run_finished())
    assert len(script) == EVENTS
    return script, texts, arguments


def agent_over(repo: Any, script: list[BaseEvent], **settings: Any) -> StorageAgent:
    agent = StorageAgent(
        "assistant", USER, repo, repo, ScriptedAgent(script), run_repo=repo, owner="t"
    )
    agent.retry_base_delay = agent.retry_max_delay = 0.0  # retries back off by nothing here
    for name, value in settings.items():
        setattr(agent, name, value)
    return agent


async def test_a_store_failing_every_third_write_stores_every_character_once(
    store: Store,
) -> None:
    script, texts, arguments = long_run()
    spy = StoreSpy(store, fail_every=3)
    agent = agent_over(spy, script)

    events = await collect(agent.run(run_input()))
    await agent.persisted()

    assert events == script
    assert spy.failures > 0
    chat = await store.get_chat_by_thread_id(USER, "thread-1")
    assert chat is not None
    stored = await store.get_chat_messages(chat.chat_uuid)
    assert {m.agui_id: m.content for m in stored} == texts
    calls = {c.tool_call_id: c.arguments for m in stored for c in m.tool_calls}
    assert calls == arguments
    assert {m.status for m in stored} == {MessageStatus.COMPLETE}
    run = await store.get_run(chat.chat_uuid, "run-1")
    assert run is not None and run.status is RunStatus.COMPLETE


async def test_a_run_that_cannot_be_persisted_is_marked_errored_and_the_loss_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    script = [run_started(), *text_message("m1", "lost words", deltas=2), run_finished()]

    class RecordsFail(StoreSpy):
        """Every message write fails; the run record (another repository) still works."""

    spy = RecordsFail(store, fail_every=1)
    agent = StorageAgent(
        "assistant", USER, store, spy, ScriptedAgent(script), run_repo=store, owner="t"
    )
    agent.retry_base_delay = agent.retry_max_delay = 0.0
    agent.final_flush_deadline = 0.0

    with caplog.at_level(logging.ERROR, logger="threadstore.agui._agent"):
        await collect(agent.run(run_input()))

    chat = await store.get_chat_by_thread_id(USER, "thread-1")
    assert chat is not None
    run = await store.get_run(chat.chat_uuid, "run-1")
    assert run is not None and run.status is RunStatus.ERRORED
    assert run.error is not None and "could not be persisted" in run.error
    assert "injected failure" in run.error
    lost = [r for r in caplog.records if "lost" in r.getMessage()]
    assert lost, caplog.text
    assert "10 characters" in lost[0].getMessage()  # "lost words"
