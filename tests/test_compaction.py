"""Non-destructive compaction: agents get the newest summary and what follows it; people
see every message; no cut separates a tool call from its result."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from ag_ui.core import AssistantMessage, BaseEvent, MessagesSnapshotEvent, SystemMessage
from ag_ui.core import Message as AGUIMessage
from ag_ui.core import ToolMessage as AGUIToolMessage
from hypothesis import given, settings
from hypothesis import strategies as st

import threadstore
from agui_scripts import ScriptedAgent, collect, run_finished, run_input, text_message, user
from threadstore import (
    ChatCreate,
    InvalidInputError,
    Message,
    MessageCreate,
    MessageStatus,
    MessageToolCallCreate,
    Role,
    Store,
    ToolCall,
)
from threadstore.agui import BackgroundCompactor, StorageAgent, translate_messages
from threadstore.chat import ui_from_messages
from threadstore.lifecycle import (
    CompactionPolicy,
    deterministic_summary,
    message_tokens,
    plan_compaction,
    safe_cuts,
)
from threadstore.models import Summary
from threadstore.store.ops import CreateMessage, CreateToolCall

CHAT = UUID("00000000-0000-4000-8000-0000000000d1")


# --- random histories -----------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Stored histories with everything a cut could split: calls answered on the call or by
    a tool message of their own, calls still waiting, and older reasoning messages."""
    messages: list[Message] = []
    counter = iter(range(1_000_000))
    text = st.text(alphabet="abc ", max_size=20)

    def message(role: Role, **fields: object) -> Message:
        n = next(counter)
        return Message(
            message_uuid=uuid4(),
            chat_uuid=CHAT,
            role=role,
            content=draw(text),
            agui_id=f"m{n}",
            seq=n + 1,
            status=MessageStatus.COMPLETE,
            in_progress=False,
            **fields,  # type: ignore[arg-type]
        )

    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["user", "answer", "reasoning", "call", "tool"]))
        if kind == "user":
            messages.append(message(Role.USER))
        elif kind == "reasoning":
            # An older history's reasoning block: a message before the answer it precedes.
            messages.append(message(Role.REASONING))
            messages.append(message(Role.ASSISTANT))
        elif kind == "answer":
            messages.append(message(Role.ASSISTANT))
        else:
            answer = message(Role.ASSISTANT)
            call_id = f"call{next(counter)}"
            answered = draw(st.sampled_from(["on the call", "by a message", "not yet"]))
            answer.tool_calls.append(
                ToolCall(
                    message_uuid=answer.message_uuid,
                    tool_call_id=call_id,
                    name="lookup",
                    content="found" if answered == "on the call" else None,
                    status=MessageStatus.COMPLETE,
                    in_progress=False,
                )
            )
            messages.append(answer)
            if answered == "by a message":
                between = draw(st.integers(0, 2))
                messages.extend(message(Role.ASSISTANT) for _ in range(between))
                messages.append(message(Role.TOOL, metadata={"tool_call_id": call_id}))
    return messages


def summary_at(history: Sequence[Message], cut: int) -> Summary:
    last = history[cut - 1]
    return Summary(
        chat_uuid=CHAT,
        first_message_uuid=history[0].message_uuid,
        last_message_uuid=last.message_uuid,
        last_seq=last.seq,
        message_count=cut,
        content="summary",
    )


def assert_calls_whole(given: Sequence[AGUIMessage]) -> None:
    """Every tool result the agent is given follows the call it answers, in what it is given."""
    called: set[str] = set()
    for message in given:
        if isinstance(message, AssistantMessage):
            called.update(call.id for call in message.tool_calls or ())
        if isinstance(message, AGUIToolMessage):
            assert message.tool_call_id in called, f"result {message.id} without its call"


@settings(max_examples=400, deadline=None)
@given(histories(), st.none() | st.integers(0, 6), st.none() | st.integers(0, 40))
def test_no_cut_separates_a_call_from_its_result_or_a_reasoning_block_from_its_message(
    history: list[Message], keep_messages: int | None, keep_tokens: int | None
) -> None:
    plan = asyncio.run(
        plan_compaction(history, [], keep_messages=keep_messages, keep_tokens=keep_tokens)
    )
    if plan is None:
        return
    cut = plan.cut
    covered, tail = history[:cut], history[cut:]
    assert 0 < cut <= len(history)
    if keep_messages is not None:
        assert len(tail) >= keep_messages
    # No reasoning message is cut off from the answer after it.
    assert covered[-1].role is not Role.REASONING
    # No call whose result may still come (or comes as a message of its own) is summarized
    # apart from that result.
    answered_before = {
        m.metadata["tool_call_id"] for m in covered if m.role is Role.TOOL and m.metadata
    }
    for message in covered:
        for call in message.tool_calls:
            assert call.content is not None or call.tool_call_id in answered_before, (
                f"{call.tool_call_id} is summarized apart from its result (or still waits)"
            )
    given_messages = [SystemMessage(id="summary", content="summary"), *translate_messages(tail)]
    assert_calls_whole(given_messages)
    # Each cut offered is one of these: a second plan from there finds the same rules.
    cuts, _ = asyncio.run(safe_cuts(history))
    assert cut in cuts


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 4))
def test_a_second_compaction_covers_the_first_summary_and_what_came_after_it(
    history: list[Message], keep: int
) -> None:
    first = asyncio.run(plan_compaction(history, [], keep_messages=keep + 2))
    if first is None:
        return
    summary = summary_at(history, first.cut)
    second = asyncio.run(plan_compaction(history, [summary], keep_messages=keep))
    if second is None:
        return
    assert second.first == 0 and second.new == first.cut and second.previous == summary
    assert second.cut > first.cut


# --- on a real store ----------------------------------------------------------------------


async def store_history(store: Store, history: Sequence[Message], thread: str) -> UUID:
    """Store ``history`` in a new chat (each message under the one before)."""
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id=thread))
    writes: list[CreateMessage | CreateToolCall] = []
    for message in history:
        uuid = uuid4()
        writes.append(
            CreateMessage(
                MessageCreate(
                    chat_uuid=chat.chat_uuid,
                    message_uuid=uuid,
                    role=message.role,
                    content=message.content,
                    agui_id=message.agui_id,
                    status=MessageStatus.COMPLETE,
                    in_progress=False,
                    metadata=message.metadata,
                )
            )
        )
        writes += [
            CreateToolCall(
                MessageToolCallCreate(
                    message_uuid=uuid,
                    tool_call_id=call.tool_call_id,
                    name=call.name,
                    content=call.content,
                    status=call.status,
                    in_progress=False,
                )
            )
            for call in message.tool_calls
        ]
    if writes:
        await store.apply_writes(writes)
    return chat.chat_uuid


def ui_of(messages: Sequence[Message]) -> list[dict[str, object]]:
    named = [m.model_copy(update={"agui_id": m.agui_id or str(m.message_uuid)}) for m in messages]
    ids = iter(range(1_000_000))
    return [m.model_dump() for m in ui_from_messages(named, generate_id=lambda: f"g{next(ids)}")]


@pytest.fixture(scope="module")
def sqlite_file(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Path:
    path = tmp_path_factory.mktemp("compaction") / "threadstore.db"
    shutil.copyfile(sqlite_template, path)
    return path


@settings(max_examples=40, deadline=None)
@given(histories(), st.integers(0, 4))
def test_on_sqlite_the_agent_gets_summary_and_tail_and_the_ui_history_is_unchanged(
    sqlite_file: Path, history: list[Message], keep: int
) -> None:
    async def example() -> None:
        async with await threadstore.open_store(f"sqlite:///{sqlite_file}") as store:
            chat_uuid = await store_history(store, history, f"t-{uuid4()}")
            before = ui_of(await store.get_chat_messages(chat_uuid))
            summary = await store.branches.compact(chat_uuid, keep_messages=keep)
            after = ui_of(await store.get_chat_messages(chat_uuid))
            assert after == before
            agent = ScriptedAgent([])
            storage = StorageAgent("a", uuid4(), store, store, agent)
            chat = await store.chats.get_chat(chat_uuid)
            assert chat is not None
            storage.user_uuid = chat.user_uuid
            await collect(storage.run(run_input(chat.thread_id, "r", [])))
            given_messages = agent.inputs[0].messages
            if summary is None:
                return
            assert given_messages[0] == SystemMessage(id=summary.agui_id, content=summary.content)
            tail = (await store.get_chat_messages(chat_uuid))[summary.message_count :]
            assert given_messages[1:] == translate_messages(tail)
            assert_calls_whole(given_messages)

    asyncio.run(example())


async def add_turns(store: Store, chat_uuid: UUID, turns: int, start: int = 0) -> None:
    writes: list[CreateMessage | CreateToolCall] = []
    for n in range(start, start + turns):
        for role, text in ((Role.USER, f"question {n}"), (Role.ASSISTANT, f"answer {n}")):
            writes.append(
                CreateMessage(
                    MessageCreate(
                        chat_uuid=chat_uuid,
                        role=role,
                        content=text,
                        agui_id=f"{role}-{n}",
                        status=MessageStatus.COMPLETE,
                        in_progress=False,
                    )
                )
            )
    await store.apply_writes(writes)


async def test_compaction_keeps_every_message_and_removing_the_summary_undoes_it(
    store: Store,
) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    await add_turns(store, chat.chat_uuid, 10)
    whole = await store.get_chat_messages(chat.chat_uuid)

    summary = await store.branches.compact(chat.chat_uuid, keep_messages=4)

    assert summary is not None and summary.message_count == 16
    assert summary.first_message_uuid == whole[0].message_uuid
    assert summary.last_message_uuid == whole[15].message_uuid
    assert summary.summarizer == "deterministic_summary"
    assert await store.get_chat_messages(chat.chat_uuid) == whole
    given = await store.branches.agent_history(chat.chat_uuid)
    assert given.summary == summary
    assert [m.content for m in given.messages] == [m.content for m in whole[16:]]
    assert await store.branches.summaries(chat.chat_uuid) == [summary]

    assert await store.branches.remove_summary(chat.chat_uuid, summary.summary_uuid)
    assert not await store.branches.remove_summary(chat.chat_uuid, summary.summary_uuid)
    given = await store.branches.agent_history(chat.chat_uuid)
    assert given.summary is None and list(given.messages) == whole


async def test_a_later_compaction_reads_the_earlier_summary_and_covers_both(store: Store) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    await add_turns(store, chat.chat_uuid, 5)
    first = await store.branches.compact(chat.chat_uuid, keep_messages=2)
    await add_turns(store, chat.chat_uuid, 5, start=5)
    seen: list[tuple[list[str], Summary | None]] = []

    async def summarizer(messages: Sequence[Message], previous: Summary | None) -> str:
        seen.append(([m.content for m in messages], previous))
        return "both"

    second = await store.branches.compact(chat.chat_uuid, summarizer, keep_messages=2)

    assert first is not None and second is not None
    assert seen == [
        (
            [
                "question 4",
                "answer 4",
                *(f"{r} {n}" for n in range(5, 9) for r in ("question", "answer")),
            ],
            first,
        )
    ]
    assert second.first_message_uuid == first.first_message_uuid and second.message_count == 18
    assert (await store.branches.agent_history(chat.chat_uuid)).summary == second
    assert await store.branches.summaries(chat.chat_uuid) == [second, first]
    # Nothing new to cover: no third summary.
    assert await store.branches.compact(chat.chat_uuid, keep_messages=2) is None


async def test_a_summary_applies_only_on_the_branch_it_was_made_on(store: Store) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    await add_turns(store, chat.chat_uuid, 6)
    whole = await store.get_chat_messages(chat.chat_uuid)
    summary = await store.branches.compact(chat.chat_uuid, keep_messages=2)
    assert summary is not None

    # Editing an early message starts a branch the summary does not cover.
    edited = await store.branches.edit_message(
        whole[2].message_uuid, MessageCreate(role=Role.USER, content="again")
    )
    given = await store.branches.agent_history(chat.chat_uuid)
    assert given.summary is None
    assert [m.content for m in given.messages] == ["question 0", "answer 0", "again"]

    # Switching back brings it back.
    await store.branches.switch_branch(chat.chat_uuid, whole[2].message_uuid)
    assert (await store.branches.agent_history(chat.chat_uuid)).summary == summary
    assert edited.chat_uuid == chat.chat_uuid


async def test_a_summarizer_that_writes_nothing_is_refused_and_nothing_is_stored(
    store: Store,
) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    await add_turns(store, chat.chat_uuid, 4)

    with pytest.raises(InvalidInputError, match="no summary text"):
        await store.branches.compact(
            chat.chat_uuid, lambda messages, previous: "  ", keep_messages=0
        )

    assert await store.branches.summaries(chat.chat_uuid) == []


async def test_deleting_a_chat_deletes_its_summaries(store: Store) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    await add_turns(store, chat.chat_uuid, 4)
    assert await store.branches.compact(chat.chat_uuid, keep_messages=0) is not None

    await store.delete_chat(chat.chat_uuid, soft=True)
    assert await store.branches.summaries(chat.chat_uuid) == []
    await store.delete_chat(chat.chat_uuid)

    assert await store.branches.summaries(chat.chat_uuid) == []
    with pytest.raises(threadstore.NotFoundError):
        await store.branches.compact(chat.chat_uuid)


def answer(input_: object, run: str) -> list[BaseEvent]:
    return [*text_message(f"{run}-a", f"answer {run}"), run_finished("t", run)]


async def test_the_storage_agent_gives_the_summary_then_the_tail_and_stores_nothing_of_it(
    store: Store,
) -> None:
    user_uuid = uuid4()

    def script(run: object) -> list[BaseEvent]:
        run_id = run.run_id  # type: ignore[attr-defined]
        # An agent that sends back everything it was given, as a snapshot.
        given = [m for m in run.messages]  # type: ignore[attr-defined]
        return [
            *text_message(f"{run_id}-a", f"answer {run_id}"),
            MessagesSnapshotEvent(messages=given),
            run_finished("t", run_id),
        ]

    agent = ScriptedAgent(script)
    for n in range(4):
        storage = StorageAgent("a", user_uuid, store, store, agent)
        await collect(storage.run(run_input("t", f"r{n}", [user(f"u{n}", f"question {n}")])))
    chat = await store.get_chat_by_thread_id(user_uuid, "t")
    assert chat is not None
    summary = await store.branches.compact(chat.chat_uuid, keep_messages=2)
    assert summary is not None
    stored = await store.get_chat_messages(chat.chat_uuid)

    # The client echoes what it saw, the summary too, and asks again.
    echoed = [*agent.inputs[-1].messages, SystemMessage(id=summary.agui_id, content="x")]
    storage = StorageAgent("a", user_uuid, store, store, agent)
    events = await collect(storage.run(run_input("t", "r4", [*echoed, user("u4", "more")])))

    assert [e.type for e in events][-1] == "RUN_FINISHED"
    given = agent.inputs[-1].messages
    assert given[0] == SystemMessage(id=summary.agui_id, content=summary.content)
    assert [m.id for m in given[1:]] == ["u3", "r3-a", "u4"]
    after = await store.get_chat_messages(chat.chat_uuid)
    assert [m.agui_id for m in after] == [*(m.agui_id for m in stored), "u4", "r4-a"]
    assert all(m.role is not Role.SYSTEM for m in after)


async def test_a_background_compactor_compacts_a_chat_once_it_is_over_budget(
    store: Store,
) -> None:
    user_uuid = uuid4()
    policy = CompactionPolicy(max_messages=6, keep_messages=2)
    agent = ScriptedAgent(lambda run: answer(run, run.run_id))
    async with BackgroundCompactor(store, policy) as compactor:
        for n in range(3):
            storage = StorageAgent("a", user_uuid, store, store, agent, compactor=compactor)
            await collect(storage.run(run_input("t", f"r{n}", [user(f"u{n}", "hi")])))
            await compactor.drain()
        assert compactor.made == []  # six messages: at the budget, not over it
        storage = StorageAgent("a", user_uuid, store, store, agent, compactor=compactor)
        await collect(storage.run(run_input("t", "r3", [user("u3", "hi")])))
        await compactor.drain()

    chat = await store.get_chat_by_thread_id(user_uuid, "t")
    assert chat is not None
    (made,) = compactor.made
    assert await store.branches.summaries(chat.chat_uuid) == [made]
    assert made.message_count == 6 and made.summarizer == "deterministic_summary"
    storage = StorageAgent("a", user_uuid, store, store, agent)
    await collect(storage.run(run_input("t", "r4", [user("u4", "hi")])))
    assert [m.id for m in agent.inputs[-1].messages] == [made.agui_id, "u3", "r3-a", "u4"]


def test_a_policy_that_would_compact_forever_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="must be more than keep_messages"):
        CompactionPolicy(max_messages=4, keep_messages=4)


async def test_a_token_budget_is_over_once_the_tail_holds_more_tokens_than_it() -> None:
    # More messages than one step of the count, which pauses between steps.
    tail = [
        Message(message_uuid=uuid4(), chat_uuid=CHAT, role=Role.USER, content="x" * 40)
        for _ in range(250)
    ]
    tokens = sum(message_tokens(message) for message in tail)
    assert not await CompactionPolicy(max_tokens=tokens).over_budget(tail)
    assert await CompactionPolicy(max_tokens=tokens - 1).over_budget(tail)


def test_the_deterministic_summary_is_the_same_for_the_same_messages() -> None:
    messages = [
        Message(message_uuid=uuid4(), chat_uuid=CHAT, role=Role.USER, content="x " * 200),
        Message(message_uuid=uuid4(), chat_uuid=CHAT, role=Role.ASSISTANT, content="ok"),
    ]
    text = deterministic_summary(messages, None)
    assert text == deterministic_summary(messages, None)
    assert text.splitlines()[0] == "Summary of 2 earlier message(s):"
    assert len(text.splitlines()[1]) < 200


def test_the_deterministic_summary_stays_small_however_much_it_covers() -> None:
    messages = [
        Message(message_uuid=uuid4(), chat_uuid=CHAT, role=Role.USER, content=f"m{n}")
        for n in range(5000)
    ]
    first = deterministic_summary(messages, None)
    previous = Summary(
        chat_uuid=CHAT,
        first_message_uuid=messages[0].message_uuid,
        last_message_uuid=messages[-1].message_uuid,
        last_seq=5000,
        message_count=5000,
        content=first * 10,
    )

    assert len(first) < 4000 and "4960 older message(s) not quoted" in first
    assert first.endswith("- user: m4999")
    assert len(deterministic_summary(messages, previous)) < 7000
