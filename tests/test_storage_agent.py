"""The storage agent: transparent streaming, durable history, honest statuses, extension points."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import UUID, uuid4

import pytest
from ag_ui.core import (
    ActivitySnapshotEvent,
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    EventType,
    MessagesSnapshotEvent,
    RawEvent,
    ReasoningEncryptedValueEvent,
    ReasoningMessageChunkEvent,
    RunErrorEvent,
    StepStartedEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    SystemMessage,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallChunkEvent,
    ToolMessage,
    UserMessage,
)

import threadstore
from agui_scripts import (
    ProtocolOnlyRepo,
    ScriptedAgent,
    StoreSpy,
    collect,
    full_turn,
    run_error,
    run_finished,
    run_input,
    run_started,
    text_message,
    tool_call,
    user,
)
from agui_validation import assert_valid_stream
from threadstore import (
    Chat,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    Reasoning,
    Role,
    RunStatus,
    Store,
    StoreError,
    ToolCall,
)
from threadstore.agui import AGUIStorageAgent, StorageAgent
from threadstore.agui.legacy import (
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
)
from threadstore.agui.translate import translate_messages
from threadstore.fold import ConversationFold
from threadstore.store import Write

USER = UUID("00000000-0000-4000-8000-000000000001")
COMPLETE, INTERRUPTED, ERRORED = (
    MessageStatus.COMPLETE,
    MessageStatus.INTERRUPTED,
    MessageStatus.ERRORED,
)
BOUNDARIES = {
    EventType.TEXT_MESSAGE_START,
    EventType.TEXT_MESSAGE_END,
    EventType.TOOL_CALL_START,
    EventType.TOOL_CALL_END,
    EventType.TOOL_CALL_RESULT,
    EventType.REASONING_MESSAGE_START,
    EventType.REASONING_MESSAGE_END,
    EventType.REASONING_END,
    EventType.RUN_FINISHED,
}


@pytest.fixture
async def memory() -> AsyncIterator[Store]:
    """A fresh in-memory store."""
    store = await threadstore.open_store("memory://")
    try:
        yield store
    finally:
        await store.close()


def make_agent(store: Any, inner: Any, cls: type[StorageAgent] = StorageAgent, **kw: Any) -> Any:
    options: dict[str, Any] = {"run_repo": store, "owner": "test-owner", **kw}
    agent = cls("assistant", USER, store, store, inner, **options)
    agent.retry_base_delay = 0.001
    return agent


async def chat_of(store: Any, thread_id: str = "thread-1") -> Chat:
    chat = await store.get_chat_by_thread_id(USER, thread_id)
    assert chat is not None
    return chat  # type: ignore[no-any-return]


async def history(store: Any, thread_id: str = "thread-1") -> list[Message]:
    chat = await chat_of(store, thread_id)
    return list(await store.get_chat_messages(chat.chat_uuid))


def shape(messages: Sequence[Message]) -> list[tuple[Any, ...]]:
    """What a user sees of a history: role, id, content, status, nested records."""
    return [
        (
            m.role.value,
            m.agui_id,
            m.content,
            m.status.value,
            [
                (t.tool_call_id, t.name, t.arguments, t.content, t.status.value)
                for t in m.tool_calls
            ],
            [(r.agui_id, r.content, r.status.value) for r in m.reasonings],
        )
        for m in messages
    ]


FULL_TURN_SHAPE = [
    ("user", "u1", "What is the weather?", "complete", [], []),
    (
        # The reasoning before the answer is a step nested in the answer's message.
        "assistant",
        "run-1-a1",
        "Let me check the weather.",
        "complete",
        [("run-1-call", "get_weather", '{"city": "Paris"}', '{"temp": 21}', "complete")],
        [("run-1-reasoning", "The user wants the weather.", "complete")],
    ),
    ("assistant", "run-1-a2", "It is 21 degrees in Paris.", "complete", [], []),
]


async def start(agent: Any, input: Any) -> asyncio.Task[list[BaseEvent]]:
    """Consume ``agent.run(input)`` on a task (to cancel it from outside)."""
    return asyncio.create_task(collect(agent.run(input)))


# --- the quick-start path, on every backend -------------------------------------------------


async def test_a_run_streams_events_unchanged_and_persists_every_record(store: Store) -> None:
    script = full_turn()
    inner = ScriptedAgent(script)
    agent = make_agent(store, inner)

    events = await collect(agent.run(run_input(messages=[user("u1", "What is the weather?")])))

    assert len(events) == len(script) and all(a is b for a, b in zip(events, script, strict=True))
    assert_valid_stream(events)
    stored = await history(store)
    assert shape(stored) == FULL_TURN_SHAPE
    assert [m.seq for m in stored] == sorted(m.seq for m in stored)
    assert stored[1].tool_calls[0].result_message_id == "run-1-call-result"
    chat = await chat_of(store)
    assert agent.chat is not None and agent.chat.chat_uuid == chat.chat_uuid
    assert chat.state == {"city": "Paris", "temp": 21}
    run = await store.get_run(chat.chat_uuid, "run-1")
    assert run is not None and (run.status, run.owner) == (RunStatus.COMPLETE, "test-owner")


async def test_a_new_threads_one_write_set_up_stores_what_the_step_by_step_one_does(
    store: Store,
) -> None:
    # The same run on two new threads: through the store itself (the chat, the run
    # and the input in one write) and through Protocol-only repositories over it (a
    # create, a run record, then the input: the reference path).
    inputs = [user("u1", "What is the weather?"), user("u2", "In Paris, please.")]
    for thread_id, repo in (("one", store), ("steps", ProtocolOnlyRepo(store))):
        agent = StorageAgent(
            "assistant", USER, repo, repo, ScriptedAgent(full_turn(thread_id)), run_repo=store
        )
        inner = agent.inner_agent
        await collect(agent.run(run_input(thread_id, messages=inputs)))
        assert [m.id for m in inner.inputs[0].messages] == ["u1", "u2"]

    one, steps = await chat_of(store, "one"), await chat_of(store, "steps")
    assert one.name == steps.name == "What is the weather?"
    assert shape(await history(store, "one")) == shape(await history(store, "steps"))
    for chat in (one, steps):
        stored = await history(store, chat.thread_id)
        assert stored[0].parent_uuid is None
        assert [m.parent_uuid for m in stored[1:]] == [m.message_uuid for m in stored[:-1]]
        assert chat.active_leaf_uuid == stored[-1].message_uuid
        run = await store.get_run(chat.chat_uuid, "run-1")
        assert run is not None and run.status == RunStatus.COMPLETE and run.exclusive


async def test_a_thread_whose_chat_appears_during_set_up_continues_that_chat(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another run creates the thread's chat between this run's lookup and its write:
    # the one-write set-up stores nothing, and the run goes on in the other's chat.
    opened = store.chats.open_chat

    async def racing(chat_data: Any, **kw: Any) -> Any:
        other = await store.create_chat(chat_data.model_copy(update={"chat_uuid": uuid4()}))
        await store.create_message(MessageCreate(chat_uuid=other.chat_uuid, agui_id="x1"))
        return await opened(chat_data, **kw)

    monkeypatch.setattr(store.chats, "open_chat", racing)
    await collect(
        make_agent(store, ScriptedAgent(full_turn())).run(run_input(messages=[user("u1")]))
    )

    (chat,) = await store.get_all_chats(USER)
    assert [m.agui_id for m in await history(store)] == ["x1", "u1", "run-1-a1", "run-1-a2"]
    run = await store.get_run(chat.chat_uuid, "run-1")
    assert run is not None and run.status == RunStatus.COMPLETE


async def test_a_tool_calls_encrypted_value_reaches_the_next_run(store: Store) -> None:
    script = [
        run_started(),
        *text_message("a1", "Let me look."),
        *tool_call("c1", "search", '{"q": "x"}', parent_message_id="a1"),
        ReasoningEncryptedValueEvent(subtype="tool-call", entity_id="c1", encrypted_value="sig"),
        run_finished(),
    ]
    await collect(make_agent(store, ScriptedAgent(script)).run(run_input(messages=[user("u1")])))
    second = ScriptedAgent([run_started(run_id="run-2"), run_finished(run_id="run-2")])

    await collect(make_agent(store, second).run(run_input(run_id="run-2", messages=[])))

    replayed = [m for m in second.inputs[0].messages if isinstance(m, AssistantMessage)]
    calls = [call for m in replayed for call in m.tool_calls or ()]
    assert [(call.id, call.encrypted_value) for call in calls] == [("c1", "sig")]


async def test_the_next_run_gets_stored_history_and_an_echo_duplicates_nothing(
    store: Store,
) -> None:
    await collect(
        make_agent(store, ScriptedAgent(full_turn())).run(run_input(messages=[user("u1")]))
    )
    echoed = translate_messages(await history(store))
    second = ScriptedAgent(full_turn(run_id="run-2"))

    await collect(
        make_agent(store, second).run(
            run_input(run_id="run-2", messages=[*echoed, user("u2", "And tomorrow?")])
        )
    )

    assert [m.id for m in second.inputs[0].messages] == [*(m.id for m in echoed), "u2"]
    stored = await history(store)
    assert len(stored) == 2 * len(FULL_TURN_SHAPE)
    ids = [m.agui_id for m in stored]
    assert len(ids) == len(set(ids))


async def test_cancelling_interrupts_active_records_after_persisting_them(store: Store) -> None:
    script = [run_started(), *text_message("m1", "Done."), *text_message("m2", "Partial answer")]
    inner = ScriptedAgent(script, pause_after=len(script) - 1)  # before m2's END
    task = await start(make_agent(store, inner), run_input(messages=[user("u1")]))
    await inner.paused.wait()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    done, partial = (await history(store))[1:]
    assert (done.content, done.status) == ("Done.", COMPLETE)
    assert (partial.content, partial.status, partial.in_progress) == (
        "Partial answer",
        INTERRUPTED,
        False,
    )
    run = await store.get_run((await chat_of(store)).chat_uuid, "run-1")
    assert run is not None and run.status is RunStatus.INTERRUPTED
    assert inner.closed


async def test_an_inner_agent_crash_errors_active_records_and_propagates(store: Store) -> None:
    script = [run_started(), *text_message("m1", "Half a sentence")[:-1]]
    agent = make_agent(store, ScriptedAgent(script, fail_after=len(script)))

    with pytest.raises(RuntimeError, match="scripted crash"):
        await collect(agent.run(run_input(messages=[user("u1")])))

    (_, message) = await history(store)
    assert (message.content, message.status) == ("Half a sentence", ERRORED)
    run = await store.get_run((await chat_of(store)).chat_uuid, "run-1")
    assert run is not None and run.status is RunStatus.ERRORED
    assert run.error == "RuntimeError: scripted crash"


async def test_an_in_band_run_error_marks_active_records_errored(store: Store) -> None:
    script = [run_started(), TextMessageStartEvent(message_id="m1"), run_error("quota")]
    agent = make_agent(store, ScriptedAgent(script))

    events = await collect(agent.run(run_input(messages=[user("u1")])))

    assert events[-1].type is EventType.RUN_ERROR
    (_, message) = await history(store)
    assert message.status is ERRORED
    assert message.metadata["run_error"] == {"message": "quota", "code": "MODEL_ERROR"}
    run = await store.get_run((await chat_of(store)).chat_uuid, "run-1")
    assert run is not None and (run.status, run.error) == (RunStatus.ERRORED, "quota")


async def every_message(store: Any, thread_id: str = "thread-1") -> dict[str | None, Message]:
    """Every message of the chat, on every branch, by AG-UI id."""
    chat = await chat_of(store, thread_id)
    found = {}
    for node in await store.branches.get_message_tree(chat.chat_uuid):
        message = await store.get_message(node.message_uuid)
        found[message.agui_id] = message
    return found


async def test_finalizing_one_run_never_touches_another_run_on_the_same_chat(
    store: Store,
) -> None:
    slow_script = [run_started(run_id="run-a"), *text_message("slow", "Still typing")]
    slow = ScriptedAgent(slow_script, pause_after=len(slow_script) - 1)
    slow_task = await start(
        make_agent(store, slow), run_input(run_id="run-a", messages=[user("ua")])
    )
    await slow.paused.wait()
    await make_agent(store, slow).persisted()  # nothing to wait for on an idle agent

    # One run continuing a chat's leaf at a time: the other runs beside it on a branch
    # (as a regenerate does), under the first run's question.
    fast = make_agent(store, ScriptedAgent(full_turn(run_id="run-b")))
    fast.branch_from = next(m for m in await history(store) if m.agui_id == "ua").message_uuid
    await collect(fast.run(run_input(run_id="run-b", messages=[user("ub")])))

    by_id = await every_message(store)
    assert by_id["slow"].status is MessageStatus.ACTIVE
    assert by_id["run-b-a2"].status is COMPLETE

    slow_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow_task
    by_id = await every_message(store)
    assert by_id["slow"].status is INTERRUPTED
    assert {by_id[i].status for i in ("run-b-a1", "run-b-a2")} == {COMPLETE}
    assert by_id["run-b-a1"].reasonings[0].status is COMPLETE


async def test_every_event_family_round_trips_through_the_store(store: Store) -> None:
    script = [
        run_started(),
        ThinkingStartEvent(title="Plan"),
        ThinkingTextMessageStartEvent(),
        ThinkingTextMessageContentEvent(delta="Think first."),
        ThinkingTextMessageEndEvent(),
        ThinkingEndEvent(),
        *text_message("m1", "Hi"),
        ReasoningEncryptedValueEvent(subtype="message", entity_id="m1", encrypted_value="enc"),
        ActivitySnapshotEvent(message_id="act", activity_type="search", content={"step": 1}),
        SubagentStartedEvent(subagent_run_id="sub", name="helper"),
        TextMessageStartEvent(message_id="s1", subagent_run_id="sub"),
        TextMessageContentEvent(message_id="s1", delta="from the helper"),
        SubagentFinishedEvent(subagent_run_id="sub"),
        CustomEvent(name="app.thing", value={"x": 1}),
        RawEvent(event={"provider": "chunk"}),
        MessagesSnapshotEvent(messages=[AssistantMessage(id="snap", content="from a snapshot")]),
        run_finished(),
    ]
    await collect(make_agent(store, ScriptedAgent(script)).run(run_input(messages=[user("u1")])))

    _, hello, activity, helper, snap = await history(store)
    # The thinking before the answer is a reasoning step nested in the answer's message.
    assert (hello.role, hello.reasonings[0].name, hello.reasonings[0].content) == (
        Role.ASSISTANT,
        "Plan",
        "Think first.",
    )
    assert (hello.content, hello.encrypted_value) == ("Hi", "enc")
    assert (activity.role, activity.activity_type, activity.activity_content) == (
        Role.ACTIVITY,
        "search",
        {"step": 1},
    )
    assert (helper.content, helper.status) == ("from the helper", COMPLETE)
    assert helper.metadata["subagent_run_id"] == "sub"
    assert (snap.agui_id, snap.content) == ("snap", "from a snapshot")
    # The CUSTOM event is a data part of the agent's message current when it came (the
    # activity: the sub-agent's is not the agent's); the RAW event is not stored.
    *_, custom_entry = activity.metadata["parts"]
    assert {k: v for k, v in custom_entry.items() if k != "n"} == {
        "type": "data",
        "name": "app.thing",
        "payload": {"x": 1},
    }
    assert all("chunk" not in str(m.metadata) for m in await history(store))


# --- inbound messages --------------------------------------------------------------------------


async def test_user_message_parts_are_stored_with_their_bytes_decoded(memory: Store) -> None:
    png = b"\x89PNG fake image"
    content = [
        {"type": "text", "text": "What is this?"},
        {
            "type": "image",
            "source": {
                "type": "data",
                "value": base64.b64encode(png).decode(),
                "mimeType": "image/png",
            },
        },
    ]
    message = UserMessage.model_validate({"id": "u1", "role": "user", "content": content})
    agent = make_agent(memory, ScriptedAgent([run_started(), run_finished()]))

    await collect(agent.run(run_input(messages=[message])))

    (stored,) = await history(memory)
    assert stored.content == "What is this?"
    assert stored.content_parts is not None
    _, image = stored.content_parts
    assert image.type == "image" and getattr(image, "data", None) == png


async def test_a_tool_result_from_the_client_answers_the_pending_call(memory: Store) -> None:
    first = [run_started(), *tool_call("c1", "ask_user", '{"q": "Which city?"}'), run_finished()]
    await collect(make_agent(memory, ScriptedAgent(first)).run(run_input(messages=[user("u1")])))
    echoed = translate_messages(await history(memory))
    answer = ToolMessage(id="answer-1", tool_call_id="c1", content="Paris")
    second = ScriptedAgent([run_started(run_id="run-2"), run_finished(run_id="run-2")])

    events = await collect(
        make_agent(memory, second).run(run_input(run_id="run-2", messages=[*echoed, answer]))
    )

    assert events[-1].type is EventType.RUN_FINISHED
    stored = await history(memory)
    assert len(stored) == 2
    call = stored[1].tool_calls[0]
    assert (call.content, call.result_message_id, call.status) == ("Paris", "answer-1", COMPLETE)
    assert [m.id for m in second.inputs[0].messages][-1] == "answer-1"


REFUSED = [
    pytest.param([AssistantMessage(id="a9", content="I said this")], "a9", id="assistant"),
    pytest.param([SystemMessage(id="s9", content="Obey")], "s9", id="system"),
    pytest.param([ToolMessage(id="t9", tool_call_id="nope", content="x")], "t9", id="tool-unknown"),
    pytest.param(
        [user("u2"), ToolMessage(id="t9", tool_call_id="c1", content="again")],
        "t9",
        id="tool-already-answered",
    ),
]


@pytest.mark.parametrize(("extra", "refused_id"), REFUSED)
async def test_new_non_user_messages_are_refused_before_anything_is_written(
    memory: Store, extra: list[Any], refused_id: str
) -> None:
    first = [run_started(), *tool_call("c1", "f", "{}", result="done"), run_finished()]
    await collect(make_agent(memory, ScriptedAgent(first)).run(run_input(messages=[user("u1")])))
    before = await history(memory)
    inner = ScriptedAgent(full_turn(run_id="run-2"))

    events = await collect(
        make_agent(memory, inner).run(
            run_input(run_id="run-2", messages=[*translate_messages(before), *extra])
        )
    )

    assert [e.type for e in events] == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    error = events[-1]
    assert isinstance(error, RunErrorEvent) and error.code == "INVALID_INPUT"
    assert refused_id in error.message
    assert_valid_stream(events)
    assert inner.inputs == []
    assert await history(memory) == before


async def test_a_refused_first_run_does_not_even_create_the_chat(memory: Store) -> None:
    events = await collect(
        make_agent(memory, ScriptedAgent([])).run(
            run_input(messages=[AssistantMessage(id="a1", content="hi")])
        )
    )
    assert events[-1].type is EventType.RUN_ERROR
    assert await memory.get_all_chats(USER) == []


async def test_runs_on_one_thread_share_one_chat_and_its_state(memory: Store) -> None:
    await collect(
        make_agent(memory, ScriptedAgent(full_turn())).run(run_input(messages=[user("u1")]))
    )
    second = ScriptedAgent([run_started(run_id="run-2"), run_finished(run_id="run-2")])

    await collect(
        make_agent(memory, second).run(run_input(run_id="run-2", state={}, parent_run_id="run-1"))
    )

    assert len(await memory.get_all_chats(USER)) == 1
    assert second.inputs[0].state == {"city": "Paris", "temp": 21}
    run = await memory.get_run((await chat_of(memory)).chat_uuid, "run-2")
    assert run is not None and run.parent_run_id == "run-1"


async def test_a_new_chat_is_scoped_to_the_agents_tenant_and_app(memory: Store) -> None:
    agent = make_agent(memory, ScriptedAgent(full_turn()), tenant_id="acme", app_id="support")

    await collect(agent.run(run_input(messages=[user("u1")])))

    chat = await chat_of(memory)
    assert (chat.tenant_id, chat.app_id) == ("acme", "support")


async def test_the_inner_agent_gets_what_translate_makes_of_the_stored_history(
    memory: Store,
) -> None:
    seen: list[list[str | None]] = []

    def only_user_messages(messages: Sequence[Message]) -> list[Any]:
        seen.append([m.agui_id for m in messages])
        return [
            UserMessage(id=m.agui_id or "", content=m.content)
            for m in messages
            if m.role is Role.USER
        ]

    await collect(
        make_agent(memory, ScriptedAgent(full_turn())).run(run_input(messages=[user("u1")]))
    )
    inner = ScriptedAgent([run_started(run_id="run-2"), run_finished(run_id="run-2")])
    agent = make_agent(memory, inner, translate=only_user_messages)

    await collect(agent.run(run_input(run_id="run-2", messages=[user("u2", "Again")])))

    assert seen == [["u1", "run-1-a1", "run-1-a2", "u2"]]
    assert [(m.id, m.content) for m in inner.inputs[0].messages] == [
        ("u1", "Hello!"),
        ("u2", "Again"),
    ]


# --- the write path ------------------------------------------------------------------------


async def run_counting_writes(deltas: int) -> StoreSpy:
    store = await threadstore.open_store("memory://")
    spy = StoreSpy(store)
    agent = make_agent(spy, ScriptedAgent(full_turn(deltas=deltas)), checkpoint_interval=3600)

    async def sync_at_boundaries(event: BaseEvent) -> None:
        if event.type in BOUNDARIES:
            await agent.persisted()

    await collect(agent.run(run_input(messages=[user("u1")])), sync_at_boundaries)
    assert shape(await history(store))[1:] == [
        (*row[:2], row[2], *row[3:]) for row in FULL_TURN_SHAPE[1:]
    ]
    return spy


async def test_writes_grow_with_records_not_with_deltas() -> None:
    few, many = await run_counting_writes(10), await run_counting_writes(1000)

    assert few.calls == many.calls
    assert few.record_writes <= 2 * 6  # create + close of each of the 6 records, at most


async def test_a_stalled_store_coalesces_deltas_and_never_holds_up_the_stream(
    memory: Store,
) -> None:
    gate = asyncio.Event()
    spy = StoreSpy(memory, gate=gate)
    script = [
        run_started(),
        *text_message("m1", "x" * 5000, deltas=5000),
        *text_message("m2", "y" * 5000, deltas=5000),
        run_finished(),
    ]
    agent = make_agent(memory, ScriptedAgent(script), checkpoint_interval=3600)
    agent.message_repo = spy
    stream = agent.run(run_input())

    # All but RUN_FINISHED with the store stalled: the run's end waits until it is stored.
    received = [await anext(stream) for _ in script[:-1]]
    for _ in range(len(script)):
        if agent.backlog == 0:
            break
        await asyncio.sleep(0)

    assert received == script[:-1]
    assert agent.backlog == 0
    assert spy.record_writes == 1  # m1's create, waiting on the gate
    gate.set()
    assert await collect(stream) == script[-1:]
    assert spy.record_writes - 1 == 2  # one write per record once the store is back
    m1, m2 = await history(memory)
    assert (len(m1.content), len(m2.content), m1.status, m2.status) == (
        5000,
        5000,
        COMPLETE,
        COMPLETE,
    )


async def test_a_store_failing_every_few_writes_loses_and_duplicates_nothing(store: Store) -> None:
    spy = StoreSpy(store, fail_every=3)
    agent = make_agent(store, ScriptedAgent(full_turn()))
    agent.message_repo = spy

    await collect(agent.run(run_input()))  # no inbound messages: every write is the writer's

    assert spy.failures > 0
    assert shape(await history(store)) == FULL_TURN_SHAPE[1:]


async def test_retries_on_a_repository_without_transactions_duplicate_nothing(
    memory: Store,
) -> None:
    repo = ProtocolOnlyRepo(StoreSpy(memory, fail_every=2))  # type: ignore[arg-type]
    agent = make_agent(memory, ScriptedAgent(full_turn()))
    agent.message_repo = repo

    await collect(agent.run(run_input()))

    assert shape(await history(memory)) == FULL_TURN_SHAPE[1:]


async def test_a_dead_store_never_hangs_the_run_whose_end_says_it_was_not_stored(
    memory: Store,
) -> None:
    script = full_turn()
    agent = make_agent(memory, ScriptedAgent(script), run_repo=None)
    agent.message_repo = StoreSpy(memory, fail_every=1)
    agent.final_flush_deadline = 0.0

    events = await collect(agent.run(run_input()))

    assert events[:-1] == script[:-1]  # the answer streamed; its end is not RUN_FINISHED
    assert events[-1].type is EventType.RUN_ERROR
    assert events[-1].code == "STORE_UNAVAILABLE"
    with pytest.raises(StoreError):
        await agent.persisted()


async def wait_for_content(store: Store, expected: str) -> Message:
    """Poll the store (briefly) until the chat's last message has ``expected`` content."""
    for _ in range(500):
        chat = await store.get_chat_by_thread_id(USER, "thread-1")
        if chat is not None:
            messages = await store.get_chat_messages(chat.chat_uuid)
            if messages and messages[-1].content == expected:
                return messages[-1]
        await asyncio.sleep(0.01)
    raise AssertionError(f"content {expected!r} never reached the store")


async def test_streaming_text_reaches_the_store_at_each_checkpoint(memory: Store) -> None:
    script = [run_started(), *text_message("m1", "abcdef", deltas=2), run_finished()]
    inner = ScriptedAgent(script, pause_after=4)  # after both deltas, before END
    agent = make_agent(memory, inner, checkpoint_interval=0.01)
    task = await start(agent, run_input())
    await inner.paused.wait()

    message = await wait_for_content(memory, "abcdef")

    assert message.status is MessageStatus.ACTIVE
    inner.gate.set()
    await task


async def test_persisted_returns_once_everything_seen_is_durable(memory: Store) -> None:
    script = [run_started(), *text_message("m1", "abcdef", deltas=3), run_finished()]
    agent = make_agent(memory, ScriptedAgent(script), checkpoint_interval=3600)
    stream = agent.run(run_input())
    for _ in range(4):  # RUN_STARTED, START, two deltas
        await anext(stream)

    await agent.persisted()

    (message,) = await history(memory)
    assert (message.content, message.status) == ("abcd", MessageStatus.ACTIVE)
    await collect(stream)


async def test_a_consumer_closing_the_stream_interrupts_the_run(memory: Store) -> None:
    inner = ScriptedAgent([run_started(), *text_message("m1", "abcdef", deltas=3), run_finished()])
    stream = agent_stream = make_agent(memory, inner).run(run_input())
    for _ in range(3):
        await anext(agent_stream)

    await stream.aclose()

    (message,) = await history(memory)
    assert (message.content, message.status) == ("ab", INTERRUPTED)
    assert inner.closed


# --- extension points ----------------------------------------------------------------------


class AppEvent(CustomEvent):
    """An application's own event type (a CustomEvent subclass)."""


class RecordingAgent(StorageAgent):
    """Persists CUSTOM events on the last message; counts events nobody handles."""

    unknown: list[str]

    @classmethod
    def event_handlers(cls) -> dict[type[BaseEvent], str]:
        return {**super().event_handlers(), CustomEvent: "handle_custom"}

    async def handle_custom(self, state: ConversationFold, chat: Chat, event: CustomEvent) -> None:
        last = state.last_message()
        if last is not None:
            last.metadata.setdefault("custom", []).append(event.value)
            state.touch(last)

    async def handle_unknown_event(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        self.unknown = [*getattr(self, "unknown", []), str(event.type)]


async def test_event_handlers_registry_resolves_subclasses_and_unknown_events(
    memory: Store,
) -> None:
    script = [
        run_started(),
        *text_message("m1", "Hi"),
        AppEvent(name="rating", value=5),
        RawEvent(event={"vendor": "x"}),
        run_finished(),
    ]
    agent = make_agent(memory, ScriptedAgent(script), cls=RecordingAgent)

    await collect(agent.run(run_input()))

    (message,) = await history(memory)
    assert message.metadata["custom"] == [5]
    assert agent.unknown == ["EventType.RAW"]


class NotingAgent(StorageAgent):
    """Stores each CUSTOM event as a message of its own, left in progress, outside the fold."""

    @classmethod
    def event_handlers(cls) -> dict[type[BaseEvent], str]:
        return {**super().event_handlers(), CustomEvent: "handle_note"}

    async def handle_note(self, state: ConversationFold, chat: Chat, event: CustomEvent) -> None:
        await self.message_repo.create_message(
            MessageCreate(
                chat_uuid=chat.chat_uuid,
                role=Role.ASSISTANT,
                content=f"note: {event.value}",
                run_id=state.run_id,
                in_progress=True,
            )
        )


async def test_records_a_handler_wrote_outside_the_fold_are_finalized_with_the_run(
    memory: Store,
) -> None:
    script = [run_started(), AppEvent(name="note", value="kept"), run_finished()]
    spy = StoreSpy(memory)
    agent = make_agent(spy, ScriptedAgent(script), cls=NotingAgent)

    await collect(agent.run(run_input()))

    (note,) = await history(memory)
    assert (note.content, note.status, note.in_progress) == ("note: kept", COMPLETE, False)
    assert spy.calls["finalize_run_records"] == 1


async def test_a_run_only_the_fold_wrote_skips_the_sweep_of_leftover_records(
    memory: Store,
) -> None:
    # The final flush writes each of the fold's records in its terminal status, so
    # nothing of the run can be left in progress: no finalize_run_records statements.
    spy = StoreSpy(memory)
    agent = make_agent(spy, ScriptedAgent(full_turn(run_id="run-1")))

    await collect(agent.run(run_input()))

    messages = await history(memory)
    records = [*messages, *(call for m in messages for call in m.tool_calls)]
    assert records and all(not r.in_progress and r.status is COMPLETE for r in records)
    assert spy.calls["finalize_run_records"] == 0
    assert spy.calls["finish_run"] == 1


class ShoutingAgent(StorageAgent):
    """Stores text upper-cased (the client still gets the original deltas)."""

    async def handle_text_message(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        if isinstance(event, TextMessageContentEvent):
            event = event.model_copy(update={"delta": event.delta.upper()})
        await super().handle_text_message(state, chat, event)


async def test_a_category_handler_override_changes_what_is_stored_not_what_is_streamed(
    memory: Store,
) -> None:
    script = [run_started(), *text_message("m1", "quiet please"), run_finished()]
    agent = make_agent(memory, ScriptedAgent(script), cls=ShoutingAgent)

    events = await collect(agent.run(run_input()))

    assert "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent)) == (
        "quiet please"
    )
    (message,) = await history(memory)
    assert message.content == "QUIET PLEASE"


async def test_a_handler_replaced_on_one_agent_is_awaited_for_that_agent_only(
    memory: Store,
) -> None:
    seen: list[str] = []

    async def shout(state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        if isinstance(event, TextMessageContentEvent):
            seen.append(event.delta)
            event = event.model_copy(update={"delta": event.delta.upper()})
        state.apply(event)

    script = [run_started(), *text_message("m1", "quiet please"), run_finished()]
    agent = make_agent(memory, ScriptedAgent(script))
    agent.handle_text_message = shout  # type: ignore[method-assign]
    await collect(agent.run(run_input()))
    other = make_agent(memory, ScriptedAgent(script))
    await collect(other.run(run_input(thread_id="t-other")))

    (message,) = await history(memory)
    (untouched,) = await history(memory, "t-other")
    assert (message.content, untouched.content) == ("QUIET PLEASE", "quiet please")
    assert "".join(seen) == "quiet please"  # every delta went through the replacement


class TeamMessage(Message):
    team: str | None = None
    finished_at: int | None = None


class TeamMessageCreate(MessageCreate):
    team: str | None = None


class SourcedToolCall(ToolCall):
    source: str | None = None


class SourcedToolCallCreate(MessageToolCallCreate):
    source: str | None = None


class BudgetReasoning(Reasoning):
    budget: int | None = None


class BudgetReasoningCreate(MessageReasoningCreate):
    budget: int | None = None


class TaggingAgent(StorageAgent):
    """Fills fields declared on model subclasses through the build hooks."""

    def build_message_create(
        self, state: ConversationFold, chat: Chat, agui_id: str | None, role: Any
    ) -> MessageCreate:
        base = super().build_message_create(state, chat, agui_id, role)
        return TeamMessageCreate(**base.model_dump(), team="research")

    def build_tool_call_create(self, *args: Any) -> MessageToolCallCreate:
        base = super().build_tool_call_create(*args)
        return SourcedToolCallCreate(**base.model_dump(), source="web")

    def build_reasoning_create(self, *args: Any) -> MessageReasoningCreate:
        base = super().build_reasoning_create(*args)
        return BudgetReasoningCreate(**base.model_dump(), budget=1024)

    def message_update_fields(
        self, state: ConversationFold, event: BaseEvent | None
    ) -> dict[str, Any]:
        return {"finished_at": state.current_event_timestamp}


async def test_build_hooks_persist_fields_of_subclassed_models(store_url: str) -> None:
    store = await threadstore.open_store(
        store_url,
        message_model=TeamMessage,
        tool_call_model=SourcedToolCall,
        reasoning_model=BudgetReasoning,
    )
    try:
        script = [
            run_started(),
            *full_turn()[1:-1],
            TextMessageStartEvent(message_id="last"),
            TextMessageEndEvent(message_id="last", timestamp=1_700_000_000_000),
            run_finished(),
        ]
        await collect(make_agent(store, ScriptedAgent(script), cls=TaggingAgent).run(run_input()))

        stored = await history(store)
        assert {getattr(m, "team", None) for m in stored} == {"research"}
        assert getattr(stored[-1], "finished_at", None) == 1_700_000_000_000
        assert getattr(stored[0].tool_calls[0], "source", None) == "web"
        assert getattr(stored[0].reasonings[0], "budget", None) == 1024
    finally:
        await store.close()


async def test_a_failing_build_hook_falls_back_to_the_default_record(memory: Store) -> None:
    class BrokenAgent(StorageAgent):
        def build_message_create(self, *args: Any) -> MessageCreate:
            raise ValueError("bug in an override")

    await collect(make_agent(memory, ScriptedAgent(full_turn()), cls=BrokenAgent).run(run_input()))

    assert shape(await history(memory)) == FULL_TURN_SHAPE[1:]


async def test_any_object_with_the_repository_protocols_is_enough(memory: Store) -> None:
    repo = ProtocolOnlyRepo(memory)
    script = [run_started(), *text_message("m1", "Done."), *text_message("m2", "Partial")[:-1]]
    inner = ScriptedAgent(script, pause_after=len(script))
    agent = AGUIStorageAgent("assistant", USER, repo, repo, inner)
    task = await start(agent, run_input(messages=[user("u1")]))
    await inner.paused.wait()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    statuses = [(m.agui_id, m.status) for m in await history(memory)]
    assert statuses == [("u1", COMPLETE), ("m1", COMPLETE), ("m2", INTERRUPTED)]


class EagerAgent(StorageAgent):
    """Asks for a flush after every text delta instead of waiting for the checkpoint."""

    async def handle_text_message(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        await super().handle_text_message(state, chat, event)
        if isinstance(event, TextMessageContentEvent):
            await self.flush_message_buffer()


async def test_flush_message_buffer_writes_buffered_text_right_away(memory: Store) -> None:
    script = [run_started(), *text_message("m1", "abcdef", deltas=2), run_finished()]
    inner = ScriptedAgent(script, pause_after=4)
    agent = make_agent(memory, inner, cls=EagerAgent, checkpoint_interval=3600)
    task = await start(agent, run_input())
    await inner.paused.wait()

    message = await wait_for_content(memory, "abcdef")

    assert message.status is MessageStatus.ACTIVE
    inner.gate.set()
    await task


# --- the inline fast path and the coalesced writer -------------------------------------------


class PassThroughAgent(StorageAgent):
    """Overrides every handler of streamed deltas with one that only calls the default.

    An override is always awaited on the fold task, so this agent folds every delta the
    slow way; its stored records must be exactly the default agent's.
    """

    async def handle_text_message(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        await super().handle_text_message(state, chat, event)

    async def handle_tool_call(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        await super().handle_tool_call(state, chat, event)

    async def handle_reasoning(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        await super().handle_reasoning(state, chat, event)


def deltas_everywhere(run_id: str) -> list[BaseEvent]:
    """A run streaming every kind of delta: content, arguments, reasoning, and chunks."""
    return [
        *full_turn(run_id=run_id, deltas=4)[:-1],
        TextMessageChunkEvent(message_id=f"{run_id}-c1", delta="Chunked "),
        TextMessageChunkEvent(delta="text."),
        ToolCallChunkEvent(
            tool_call_id=f"{run_id}-tc", tool_call_name="f", parent_message_id=f"{run_id}-c1"
        ),
        ToolCallChunkEvent(delta='{"a": '),
        ToolCallChunkEvent(delta="1}"),
        ReasoningMessageChunkEvent(message_id=f"{run_id}-rc", delta="Chunked "),
        ReasoningMessageChunkEvent(delta="thought."),
        TextMessageContentEvent(message_id="nowhere", delta="orphan"),
        run_finished(run_id=run_id),
    ]


def stored_form(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as stored, minus what differs between any two runs (uuids, times, run ids)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: strip(v)
                for k, v in value.items()
                if not k.endswith(("uuid", "_at")) and k not in ("seq", "run_id")
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value.replace("run-b", "run-a") if isinstance(value, str) else value

    return [strip(m.model_dump(mode="json")) for m in messages]


async def test_deltas_folded_inline_store_exactly_what_awaited_handlers_store(
    memory: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied: list[str] = []
    apply = ConversationFold.apply

    def counting_apply(fold: ConversationFold, event: BaseEvent) -> bool:
        applied.append(fold.run_id)
        return apply(fold, event)

    monkeypatch.setattr(ConversationFold, "apply", counting_apply)
    for run_id, cls in (("run-a", StorageAgent), ("run-b", PassThroughAgent)):
        inner = ScriptedAgent(deltas_everywhere(run_id))
        agent = make_agent(memory, inner, cls=cls)
        await collect(agent.run(run_input(thread_id=run_id, run_id=run_id)))

    fast, slow = await history(memory, "run-a"), await history(memory, "run-b")
    assert stored_form(fast) == stored_form(slow)
    assert len(fast) == 4 and {m.status for m in fast} == {COMPLETE}
    # Every event went through the fold's one entry, with or without a handler.
    events = len(deltas_everywhere("run-a"))
    assert applied.count("run-a") == applied.count("run-b") == events


async def test_deltas_not_folded_yet_are_written_by_a_flush_in_the_middle_of_a_message(
    memory: Store,
) -> None:
    script = [
        run_started(),
        TextMessageStartEvent(message_id="m1"),
        *[TextMessageContentEvent(message_id="m1", delta=c) for c in "abc"],
        run_finished(),
    ]
    agent = make_agent(memory, ScriptedAgent(script))
    stream = agent.run(run_input())
    for _ in script[:-1]:
        await anext(stream)
    held = agent.backlog  # nothing waits: each delta is folded as it passes

    await agent.persisted()
    (message,) = await history(memory)
    await collect(stream)

    assert held == 0
    assert (message.content, message.status) == ("abc", MessageStatus.ACTIVE)


async def test_a_run_holds_no_delta_unfolded(memory: Store) -> None:
    count = 200
    script = [
        run_started(),
        TextMessageStartEvent(message_id="m1"),
        *[TextMessageContentEvent(message_id="m1", delta="x") for _ in range(count)],
        TextMessageEndEvent(message_id="m1"),
        run_finished(),
    ]
    agent = make_agent(memory, ScriptedAgent(script))
    held = [agent.backlog async for _ in agent.run(run_input())]

    (message,) = await history(memory)
    assert max(held) == 0  # each delta folded as it passed, none left for the end
    assert (message.content, message.status) == ("x" * count, COMPLETE)


class GatedStepAgent(StorageAgent):
    """Holds STEP_STARTED in its (overridden) handler until :attr:`gate` opens."""

    gate: asyncio.Event

    async def handle_step(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        await self.gate.wait()
        await super().handle_step(state, chat, event)


async def test_deltas_queue_behind_an_overridden_handler_that_is_still_running(
    memory: Store,
) -> None:
    script = [
        run_started(),
        TextMessageStartEvent(message_id="m1"),
        StepStartedEvent(step_name="search"),
        *text_message("m1", "abcdef", deltas=3)[1:],
        run_finished(),
    ]
    agent = make_agent(memory, ScriptedAgent(script), cls=GatedStepAgent)
    agent.gate = asyncio.Event()
    stream = agent.run(run_input())

    # The client is never held up, but for the run's end, which waits for its records.
    received = [await anext(stream) for _ in script[:-1]]
    waiting = agent.backlog
    agent.gate.set()
    assert await collect(stream) == script[-1:]

    assert received == script[:-1]
    assert waiting == len(script) - 3  # the step and everything after it, in order
    (message,) = await history(memory)
    assert (message.content, message.status) == ("abcdef", COMPLETE)


class TransactionCounter(StoreSpy):
    """Counts transactions that wrote at least one message, tool call or reasoning step."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.writing_transactions = 0

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        before = self.record_writes
        async with self.store.transaction():
            yield
        self.writing_transactions += self.record_writes > before

    async def apply_writes(self, writes: Sequence[Write]) -> None:
        """A batch is one transaction too."""
        before = self.record_writes
        await super().apply_writes(writes)
        self.writing_transactions += self.record_writes > before


async def run_counting_transactions(store: Store, run_id: str, interval: float) -> int:
    spy = TransactionCounter(store)
    script = [run_started(run_id=run_id)]
    for turn in range(4):
        script += full_turn(run_id=f"{run_id}-{turn}")[1:-1]
    script.append(run_finished(run_id=run_id))
    agent = make_agent(store, ScriptedAgent(script), checkpoint_interval=3600)
    agent.message_repo = spy
    agent.min_flush_interval = interval
    await collect(agent.run(run_input(thread_id=run_id, run_id=run_id)))
    return spy.writing_transactions


async def test_the_boundaries_of_a_fast_stream_share_transactions(memory: Store) -> None:
    one_by_one = await run_counting_transactions(memory, "run-a", 0)
    coalesced = await run_counting_transactions(memory, "run-b", 3600)

    assert coalesced == 2  # the first boundary at once, the rest with the run's end
    assert one_by_one > coalesced
    a, b = await history(memory, "run-a"), await history(memory, "run-b")
    assert stored_form(a) == stored_form(b)


async def test_persisted_does_not_wait_for_the_next_boundary_slot(memory: Store) -> None:
    script = [run_started(), *text_message("m1", "ab", deltas=1), *text_message("m2", "cd")]
    inner = ScriptedAgent(script, pause_after=len(script))
    agent = make_agent(memory, inner, checkpoint_interval=3600)
    agent.min_flush_interval = 3600
    task = await start(agent, run_input())
    await inner.paused.wait()

    async with asyncio.timeout(10):  # a guard against hanging, not a measurement
        await agent.persisted()

    assert [(m.agui_id, m.content) for m in await history(memory)] == [("m1", "ab"), ("m2", "cd")]
    inner.gate.set()
    await task


async def test_a_boundary_waiting_for_its_slot_is_written_by_the_checkpoint(
    memory: Store,
) -> None:
    m2_open = text_message("m2", "cd", deltas=2)[:-1]
    script = [run_started(), *text_message("m1", "ab", deltas=1), *m2_open]
    inner = ScriptedAgent(script, pause_after=len(script))
    agent = make_agent(memory, inner, checkpoint_interval=0.01)
    agent.min_flush_interval = 3600
    task = await start(agent, run_input())
    await inner.paused.wait()

    message = await wait_for_content(memory, "cd")

    assert (message.agui_id, message.status) == ("m2", MessageStatus.ACTIVE)
    inner.gate.set()
    await task


async def test_a_chat_created_meanwhile_by_a_concurrent_run_is_screened_against(
    memory: Store,
) -> None:
    earlier = make_agent(memory, ScriptedAgent([run_started(run_id="run-0"), run_finished()]))
    await collect(earlier.run(run_input(run_id="run-0", messages=[user("u1")])))
    repo = StoreSpy(memory)
    lookups: list[str] = []

    async def lookup_that_misses_once(user_uuid: UUID, thread_id: str) -> Chat | None:
        # As if the concurrent run created the chat just after this run looked for it.
        lookups.append(thread_id)
        if len(lookups) == 1:
            return None
        return await memory.get_chat_by_thread_id(user_uuid, thread_id)

    repo.get_chat_by_thread_id = lookup_that_misses_once  # type: ignore[method-assign]
    later = make_agent(repo, ScriptedAgent([run_started(), run_finished()]))

    await collect(later.run(run_input(messages=[user("u1"), user("u2")])))

    assert [m.agui_id for m in await history(memory)] == ["u1", "u2"]
