"""An inner agent whose stream goes on after its ``RUN_FINISHED``.

The storage agent holds ``RUN_FINISHED`` until the run is durable. When more events
follow it, the held end goes out before them, and only once everything streamed so far
is durable (``RunPersister.settled``): a client told the run finished can read it back.
When that cannot be done in time (``final_flush_deadline``), the client gets a
``RUN_ERROR`` (``STORE_UNAVAILABLE``) in its place, never a ``RUN_FINISHED``. Both ways
of consuming a run (iterating ``run``, or ``run_into`` with a callback, the run
manager's) behave alike.
"""

from __future__ import annotations

import asyncio
from uuid import UUID

import pytest
from ag_ui.core import BaseEvent, CustomEvent, EventType, RunAgentInput

from agui_scripts import (
    ScriptedAgent,
    StoreSpy,
    run_finished,
    run_input,
    run_started,
    text_message,
)
from threadstore import MessageStatus, Store
from threadstore.agui import StorageAgent

USER = UUID("00000000-0000-4000-8000-0000000000c1")
ANSWER = "the whole answer"
NEVER = 3600.0
"""A flush interval no run reaches: only the run's end asks for a flush."""


# The conftest's store, on a SQLite file of its own.
pytestmark = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)


def script() -> list[BaseEvent]:
    """An answer, the run's end, then one more event (as some frameworks send)."""
    return [
        run_started(),
        *text_message("m1", ANSWER, deltas=3),
        run_finished(),
        CustomEvent(name="usage", value={"tokens": 12}),
    ]


async def consume(
    agent: StorageAgent, input: RunAgentInput, via: str, seen: list[BaseEvent] | None = None
) -> list[BaseEvent]:
    """The events a client of the run gets (appended to ``seen`` as they come), consuming
    it ``via`` ``run`` or ``run_into``."""
    events: list[BaseEvent] = [] if seen is None else seen
    if via == "run":
        async for event in agent.run(input):
            events.append(event)
    else:
        await agent.run_into(input, events.append)
    return events


@pytest.mark.parametrize("via", ["run", "run_into"])
async def test_a_run_finished_followed_by_more_events_goes_out_first_and_once_stored(
    store: Store, via: str
) -> None:
    events = script()
    inner = ScriptedAgent(events, pause_after=len(events))  # holds its stream open at the end
    agent = StorageAgent(
        "assistant", USER, store, store, inner, run_repo=store, checkpoint_interval=NEVER
    )
    agent.min_flush_interval = NEVER

    seen: list[BaseEvent] = []
    consumer = asyncio.ensure_future(consume(agent, run_input(), via, seen))
    await inner.paused.wait()
    # Everything the inner agent sent is out (its stream has not ended), RUN_FINISHED
    # before the event after it; and what RUN_FINISHED announced is stored.
    assert seen == events
    chat = await store.get_chat_by_thread_id(USER, "thread-1")
    assert chat is not None
    stored = await store.get_chat_messages(chat.chat_uuid)
    assert [(m.agui_id, m.content, m.status) for m in stored] == [
        ("m1", ANSWER, MessageStatus.COMPLETE)
    ]
    inner.gate.set()
    assert await consumer == events
    await agent.persisted()


@pytest.mark.parametrize("via", ["run", "run_into"])
async def test_a_run_that_cannot_be_stored_ends_in_run_error_even_when_its_stream_goes_on(
    store: Store, via: str
) -> None:
    events = script()
    spy = StoreSpy(store, fail_every=1)  # every record write fails
    agent = StorageAgent(
        "assistant", USER, store, spy, ScriptedAgent(events), run_repo=store, owner="t"
    )
    agent.retry_base_delay = agent.retry_max_delay = 0.0
    agent.final_flush_deadline = 0.0

    seen = await consume(agent, run_input(), via)

    assert spy.failures > 0
    types = [event.type for event in seen]
    assert EventType.RUN_FINISHED not in types
    at = len(events) - 2  # where the inner agent's RUN_FINISHED was
    assert seen[:at] == events[:at]  # the answer streamed as it came
    assert seen[at].type is EventType.RUN_ERROR
    assert seen[at].code == "STORE_UNAVAILABLE"  # type: ignore[attr-defined]
    assert "not saved" in seen[at].message  # type: ignore[attr-defined]
    assert seen[at + 1 :] == events[at + 1 :]  # what followed still passes through
