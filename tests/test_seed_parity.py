"""Parity with the seed layer: what a user switching from it writes is stored as it meant."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest
from ag_ui.core import (
    BaseEvent,
    EventType,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolMessage,
)
from pydantic import ValidationError

from agui_scripts import (
    ScriptedAgent,
    collect,
    full_turn,
    reasoning,
    run_error,
    run_finished,
    run_input,
    run_started,
    text_message,
    tool_call,
    user,
)
from conftest import StoreOpener
from threadstore import (
    Chat,
    ChatCreate,
    InvalidInputError,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageUpdate,
    Role,
    Store,
    ToolCall,
)
from threadstore.agui import StorageAgent
from threadstore.codec import translate_messages
from threadstore.codec._names import CHAT_NAME_LIMIT, chat_name_from_text

CHAT = uuid4()
USER = UUID("00000000-0000-4000-8000-000000000020")


# --- item 19: defaults and the seed's field names ----------------------------------------


def test_a_message_without_a_role_is_a_user_message_as_in_the_seed() -> None:
    assert MessageCreate(chat_uuid=CHAT).role is Role.USER
    assert Message(message_uuid=uuid4(), chat_uuid=CHAT).role is Role.USER


def test_the_seeds_field_names_are_accepted_as_aliases() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    create = MessageCreate(
        chat_id=CHAT, step="plan", timestamp=when, error="boom", metadata={"k": 1}
    )

    assert (create.chat_uuid, create.step_name, create.created_at) == (CHAT, "plan", when)
    assert (create.error, create.metadata) == ("boom", {"k": 1})
    message = Message.model_validate(
        {"message_uuid": uuid4(), "chat_id": CHAT, "step": "s", "timestamp": when, "v": 1}
    )
    assert (message.chat_uuid, message.step_name, message.created_at) == (CHAT, "s", when)
    assert message.format_version == 1
    assert MessageUpdate(step="act").step_name == "act"


def test_a_seed_field_with_no_place_here_is_refused_loudly() -> None:
    with pytest.raises(ValidationError, match="format_version"):
        MessageCreate(chat_uuid=CHAT, v=1)


def test_the_native_names_still_work_and_win_nothing_silently() -> None:
    create = MessageCreate(chat_uuid=CHAT, step_name="s", error=None)

    assert create.step_name == "s" and create.metadata == {}
    update = MessageUpdate(error="e", metadata={"a": 1})
    assert (update.error, update.metadata) == ("e", {"a": 1})
    assert MessageUpdate(error="e").error == "e"  # a field: it needs no metadata


def test_a_message_that_kept_its_error_in_metadata_reads_it_as_the_field() -> None:
    # How versions before the error column kept it, in their rows and their exports.
    old = {"message_uuid": uuid4(), "chat_uuid": CHAT, "metadata": {"error": "boom", "k": 1}}

    message = Message.model_validate(old)
    create = MessageCreate.model_validate({"chat_uuid": CHAT, "metadata": {"error": "boom"}})

    assert (message.error, message.metadata) == ("boom", {"k": 1})
    assert (create.error, create.metadata) == ("boom", {})
    exported = {**old, "error": "boom"}  # their exports carried both
    assert Message.model_validate(exported).metadata == {"k": 1}


async def test_seed_style_dtos_are_stored_with_every_field(store: Store) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    created = await store.create_message(
        MessageCreate(chat_id=chat.chat_uuid, step="plan", timestamp=when, error="boom")
    )

    stored = await store.get_message(created.message_uuid)
    assert stored is not None
    assert (stored.role, stored.step_name, stored.created_at) == (Role.USER, "plan", when)
    assert stored.error == "boom"
    assert stored.model_dump()["error"] == "boom"


# --- item 20: chat names, Message.error ------------------------------------------------------


def make_agent(store: Any, inner: Any, **options: Any) -> StorageAgent:
    return StorageAgent("assistant", USER, store, store, inner, run_repo=store, **options)


async def only_chat(store: Store, thread_id: str = "thread-1") -> Chat:
    chat = await store.get_chat_by_thread_id(USER, thread_id)
    assert chat is not None
    return chat


async def test_a_new_chat_is_named_from_its_first_user_message_trimmed(store: Store) -> None:
    script = [run_started(), run_finished()]
    messages = [user("u1", "  What is\n the   weather in Paris?  "), user("u2", "And Rome?")]

    await collect(make_agent(store, ScriptedAgent(script)).run(run_input(messages=messages)))

    assert (await only_chat(store)).name == "What is the weather in Paris?"


def test_a_long_first_message_is_cut_at_a_word_end_within_the_bound() -> None:
    text = " ".join(f"word{i}" for i in range(40))  # 269 characters

    name = chat_name_from_text(text)

    assert name is not None and len(name) <= CHAT_NAME_LIMIT
    assert text.startswith(name) and text[len(name)] == " "  # a whole word, not half of one
    assert len(name) > CHAT_NAME_LIMIT - 10
    assert chat_name_from_text("x" * 250) == "x" * CHAT_NAME_LIMIT  # no word end: cut hard
    assert chat_name_from_text(" \n\t") is None


async def test_a_given_name_wins_and_a_chat_without_user_text_stays_unnamed(
    store: Store,
) -> None:
    script = [run_started(), run_finished()]
    named = make_agent(store, ScriptedAgent(script), chat_name="Trip planning")
    await collect(named.run(run_input(messages=[user("u1", "Hello there")])))
    await collect(make_agent(store, ScriptedAgent(script)).run(run_input("thread-2")))
    second = [run_started("thread-1", "run-2"), run_finished("thread-1", "run-2")]
    again = make_agent(store, ScriptedAgent(second))
    await collect(again.run(run_input(run_id="run-2", messages=[user("u9", "Rename me?")])))

    assert (await only_chat(store)).name == "Trip planning"  # an existing chat keeps its name
    assert (await only_chat(store, "thread-2")).name is None


async def test_a_crash_sets_its_error_on_the_message_and_the_tool_call_it_interrupts(
    store: Store,
) -> None:
    script = [
        run_started(),
        *text_message("a1", "Looking it up."),
        *tool_call("c1", "search", '{"q": "paris"}', parent_message_id="a1")[:2],  # no END
    ]
    inner = ScriptedAgent(script, fail_after=len(script), error=RuntimeError("model down"))

    with pytest.raises(RuntimeError):
        await collect(make_agent(store, inner).run(run_input(messages=[user("u1")])))

    question, answer = await store.get_chat_messages((await only_chat(store)).chat_uuid)
    assert question.error is None
    call = answer.tool_calls[0]
    assert (call.status, call.error) == (MessageStatus.ERRORED, "RuntimeError: model down")
    assert (answer.status, answer.error) == (MessageStatus.COMPLETE, None)  # it had ended


async def test_a_crash_mid_message_sets_its_error_on_the_message(store: Store) -> None:
    script = [run_started(), *text_message("a1", "Half an ans")[:-1]]
    inner = ScriptedAgent(script, fail_after=len(script), error=RuntimeError("model down"))

    with pytest.raises(RuntimeError):
        await collect(make_agent(store, inner).run(run_input(messages=[user("u1")])))

    answer = (await store.get_chat_messages((await only_chat(store)).chat_uuid))[-1]
    assert (answer.status, answer.error) == (MessageStatus.ERRORED, "RuntimeError: model down")
    assert answer.content == "Half an ans"
    assert "error" not in answer.metadata  # a field of its own (a column in SQL stores)


async def test_an_in_band_run_error_sets_the_error_of_the_message_it_ends(store: Store) -> None:
    script = [run_started(), *text_message("a1", "Half an ans")[:-1], run_error()]

    await collect(make_agent(store, ScriptedAgent(script)).run(run_input(messages=[user("u1")])))

    answer = (await store.get_chat_messages((await only_chat(store)).chat_uuid))[-1]
    assert (answer.status, answer.error) == (
        MessageStatus.ERRORED,
        "[MODEL_ERROR] the model refused",
    )
    assert answer.content == "Half an ans"


# --- item 21: no double wrapping, empty tool results, foreign messages -----------------------


async def test_wrapping_a_storage_agent_in_another_is_refused_clearly(store: Store) -> None:
    inner = make_agent(store, ScriptedAgent([run_started(), run_finished()]))

    with pytest.raises(InvalidInputError, match="cannot wrap a StorageAgent") as refused:
        make_agent(store, inner)
    assert isinstance(refused.value, ValueError)  # the seed layer raises ValueError


async def test_an_empty_tool_result_replays_as_completed_with_the_tool_name(store: Store) -> None:
    script = [
        run_started(),
        *text_message("a1", "Saving."),
        *tool_call("c1", "save_note", '{"text": "x"}', parent_message_id="a1", result=""),
        run_finished(),
    ]
    await collect(make_agent(store, ScriptedAgent(script)).run(run_input(messages=[user("u1")])))
    second = ScriptedAgent([run_started(run_id="run-2"), run_finished(run_id="run-2")])

    await collect(make_agent(store, second).run(run_input(run_id="run-2")))

    results = [m for m in second.inputs[0].messages if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.content) for m in results] == [("c1", "Completed save_note")]


def test_only_an_empty_result_is_replaced_not_a_pending_call_or_an_error() -> None:
    message = Message(message_uuid=uuid4(), chat_uuid=CHAT, role=Role.ASSISTANT)
    calls = [
        ToolCall(uuid=uuid4(), message_uuid=message.message_uuid, tool_call_id=f"c{i}", name="t")
        for i in range(4)
    ]
    calls[0].content, calls[1].content = "", "42"
    calls[3].error = "timed out"
    message.tool_calls = calls  # c2 has no result yet: the client still owes it

    results = [m for m in translate_messages([message]) if isinstance(m, ToolMessage)]

    assert [(m.tool_call_id, m.content, m.error) for m in results] == [
        ("c0", "Completed t", None),
        ("c1", "42", None),
        ("c3", "", "timed out"),
    ]


class MixedUpRepo:
    """A custom message repository that returns another chat's messages too."""

    def __init__(self, store: Store, foreign: Message) -> None:
        self.store, self.foreign = store, foreign

    async def get_chat_messages(self, chat_uuid: UUID) -> list[Message]:
        return [*await self.store.get_chat_messages(chat_uuid), self.foreign]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_message_of_another_chat_from_a_custom_repository_is_refused(
    store: Store,
) -> None:
    other = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="other"))
    foreign = await store.create_message(
        MessageCreate(chat_uuid=other.chat_uuid, agui_id="secret", content="not yours")
    )
    inner = ScriptedAgent([run_started(), run_finished()])
    agent = StorageAgent("assistant", USER, store, MixedUpRepo(store, foreign), inner)
    await collect(
        make_agent(store, ScriptedAgent([run_started(), run_finished()])).run(run_input())
    )

    events = await collect(agent.run(run_input(run_id="run-2", messages=[user("u1")])))

    assert [e.type for e in events] == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    assert events[-1].code == "INVALID_INPUT"
    assert "do not all belong to the same chat" in events[-1].message
    assert inner.inputs == []  # the inner agent never saw the other chat's message
    stored = await store.get_chat_messages((await only_chat(store)).chat_uuid)
    assert stored == []


# --- item 22: concrete repositories, awaitable flushes ----------------------------------------


async def test_repositories_constructed_by_name_store_a_run_as_the_store_does(
    store: Store,
) -> None:
    from threadstore import (
        ChatRepository,
        ChatRepositoryLike,
        MessageRepository,
        MessageRepositoryLike,
    )

    chat_repo, message_repo = ChatRepository(store), MessageRepository(store)
    assert isinstance(chat_repo, ChatRepositoryLike)
    assert isinstance(message_repo, MessageRepositoryLike)
    agent = StorageAgent("assistant", USER, chat_repo, message_repo, ScriptedAgent(full_turn()))

    await collect(agent.run(run_input(messages=[user("u1", "Weather?")])))

    chat = await chat_repo.get_chat_by_thread_id(USER, "thread-1")
    assert chat is not None and chat.state == {"city": "Paris", "temp": 21}  # state kept too
    history = await message_repo.get_chat_messages(chat.chat_uuid)
    assert [m.agui_id for m in history] == ["u1", "run-1-a1", "run-1-a2"]
    call = history[1].tool_calls[0]
    assert (call.arguments, call.content) == ('{"city": "Paris"}', '{"temp": 21}')
    assert await message_repo.get_tool_call_by_agui_id(history[1].message_uuid, "run-1-call")
    assert (await message_repo.get_last_messages([chat.chat_uuid]))[chat.chat_uuid].agui_id == (
        "run-1-a2"
    )
    renamed = await chat_repo.update_chat_name(chat.chat_uuid, "Paris")
    assert renamed is not None and renamed.name == "Paris"
    assert [c.chat_uuid for c in await chat_repo.get_all_chats(USER)] == [chat.chat_uuid]
    assert await chat_repo.delete_chat(chat.chat_uuid) is not None
    assert await message_repo.get_chat_messages(chat.chat_uuid) == []


class FlushingAgent(StorageAgent):
    """Flushes after every streamed delta, as seed-layer subclasses do, and looks at the store."""

    seen: list[tuple[str, str]]

    async def handle_text_message(self, state: Any, chat: Chat, event: BaseEvent) -> None:
        await super().handle_text_message(state, chat, event)
        if isinstance(event, TextMessageContentEvent):
            await self.flush_message_buffer(state)
            stored = await self.message_repo.get_message_by_agui_id(chat.chat_uuid, "m1")
            self.seen.append((event.delta, stored.content if stored else "<missing>"))

    async def handle_tool_call(self, state: Any, chat: Chat, event: BaseEvent) -> None:
        await super().handle_tool_call(state, chat, event)
        if isinstance(event, ToolCallArgsEvent):
            await self.flush_tool_call_buffer(state)
            message = await self.message_repo.get_message_by_agui_id(chat.chat_uuid, "m1")
            calls = message.tool_calls if message else []
            self.seen.append((event.delta, calls[0].arguments if calls else "<missing>"))


async def test_flush_buffers_return_once_the_buffered_text_is_durable(store: Store) -> None:
    script = [
        run_started(),
        *text_message("m1", "one two three", deltas=3),
        *tool_call("c1", "f", '{"a": 1}', parent_message_id="m1", deltas=2),
        run_finished(),
    ]
    agent = FlushingAgent(
        "assistant", USER, store, store, ScriptedAgent(script), checkpoint_interval=3600
    )
    agent.seen = []

    await collect(agent.run(run_input()))

    expected: list[tuple[str, str]] = []
    for kind in (TextMessageContentEvent, ToolCallArgsEvent):
        so_far = ""
        for event in script:
            if isinstance(event, kind):
                so_far += event.delta
                expected.append((event.delta, so_far))
    assert len(expected) == 5
    assert agent.seen == expected  # each flush returned with everything so far stored


async def test_flushing_from_outside_a_handler_waits_for_what_was_streamed(store: Store) -> None:
    script = [run_started(), *text_message("m1", "streamed so far", deltas=3)[:-1]]
    inner = ScriptedAgent([*script, run_finished()], pause_after=len(script))
    agent = make_agent(store, inner, checkpoint_interval=3600)
    stream = agent.run(run_input())
    for _ in script:
        await anext(stream)

    await agent.flush_reasoning_buffer()

    stored = await store.get_chat_messages((await only_chat(store)).chat_uuid)
    assert [(m.agui_id, m.content) for m in stored] == [("m1", "streamed so far")]
    inner.gate.set()
    assert [e.type for e in await collect(stream)] == [EventType.RUN_FINISHED]


async def test_a_reasoning_step_cut_off_by_a_run_error_carries_the_error(store: Store) -> None:
    script = [run_started(), *reasoning("r1", "thinking hard", deltas=2)[:3], run_error()]

    await collect(make_agent(store, ScriptedAgent(script)).run(run_input(messages=[user("u1")])))

    steps = [
        r
        for m in await store.get_chat_messages((await only_chat(store)).chat_uuid)
        for r in m.reasonings
    ]
    assert [(r.status, r.error) for r in steps] == [
        (MessageStatus.ERRORED, "[MODEL_ERROR] the model refused")
    ]


def test_a_seed_reasoning_dto_keeps_its_error() -> None:
    parent = uuid4()

    assert MessageReasoningCreate(message_uuid=parent, error="x").metadata == {"error": "x"}
    with pytest.raises(ValidationError, match="metadata"):
        MessageReasoningUpdate(error="x")


# --- the seed's names: one module, placeholder codec, emitters, read views --------------


def test_the_seed_module_names_every_switching_import_and_no_more_than_it_needs() -> None:
    import threadstore
    import threadstore.seed as seed

    assert len(seed.__all__) <= 25
    assert all(getattr(seed, name) is not None for name in seed.__all__)
    assert seed.AGUIStorageAgent is StorageAgent
    assert seed.PAYLOAD_VERSION == 1
    assert "wire_non_empty_str" not in threadstore.__all__  # only through threadstore.seed


def test_the_empty_text_placeholder_codec_round_trips_as_the_seed_s() -> None:
    from threadstore.seed import app_str, wire_non_empty_str

    assert wire_non_empty_str("") == wire_non_empty_str(None) == "\u200b"
    assert wire_non_empty_str("hello") == "hello"
    assert app_str("\u200b") == app_str("") == app_str(None) == ""
    for value in ["", "hello", "{}", "multi\nline"]:
        assert app_str(wire_non_empty_str(value)) == value


def test_only_a_user_message_carries_its_emitter_s_participant_id() -> None:
    from threadstore.seed import emitter_for_role

    assert emitter_for_role("user", "pid-123") == ("user", "pid-123")
    for role in ["assistant", "tool", "reasoning", "system", "developer"]:
        assert emitter_for_role(role, "pid-123") == ("agent", None)


async def test_a_chat_s_one_participant_is_its_user(store: Store) -> None:
    from threadstore.keys import participant_id

    chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="t"))

    stored = await store.chats.get_chat(chat.chat_uuid)
    assert stored is not None and stored.participants == [participant_id(USER)]


def test_nested_records_build_with_the_seed_s_defaults_and_a_fixed_role() -> None:
    from threadstore.models import Reasoning

    call, step = ToolCall(), Reasoning(role="reasoning")

    assert (call.role, step.role) == (Role.TOOL, Role.REASONING)
    assert (call.status, step.status) == (MessageStatus.ACTIVE, MessageStatus.ACTIVE)
    assert call.in_progress is True and ToolCall().uuid != call.uuid
    assert ToolCall(name="search", arguments="{}", content="found").name == "search"
    assert ToolCall(role="tool").role is Role.TOOL
    with pytest.raises(ValidationError, match="role is 'tool'"):
        ToolCall(role="user")


async def test_a_stored_message_reads_v_and_timestamp_as_the_seed_named_them(
    store: Store,
) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="t"))
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    created = await store.create_message(
        MessageCreate(chat_id=chat.chat_uuid, timestamp=when, step="plan")
    )

    stored = await store.get_message(created.message_uuid)

    assert stored is not None
    assert (stored.v, stored.timestamp, stored.step) == (1, when, "plan")
    assert stored.chat_id == chat.chat_uuid


async def stored_turn(store: Store) -> list[Message]:
    script = [
        run_started(),
        *reasoning("r1", "thinking"),
        *text_message("a1", "Looking."),
        *tool_call("c1", "search", '{"q": 1}', parent_message_id="a1", result="found"),
        run_finished(),
    ]
    await collect(make_agent(store, ScriptedAgent(script)).run(run_input(messages=[user("u1")])))
    return list(await store.get_chat_messages((await only_chat(store)).chat_uuid))


async def test_the_public_read_view_is_flat_with_the_seed_s_field_names(store: Store) -> None:
    from threadstore.seed import MessagePublic

    answer = (await stored_turn(store))[1]

    public = MessagePublic.from_message(answer)

    assert (public.message_uuid, public.chat_id, public.agui_id) == (
        answer.message_uuid,
        answer.chat_uuid,
        "a1",
    )
    assert (public.role, public.name, public.step, public.timestamp) == (
        Role.ASSISTANT,
        answer.name or "",
        None,
        answer.created_at,
    )
    assert [c.name for c in public.tool_calls] == ["search"]
    assert [r.content for r in public.reasonings] == ["thinking"]
    assert "parent_uuid" not in public.model_dump()  # no tree: flat and non-recursive


async def test_replayed_messages_extend_into_the_seed_s_shape_with_their_record(
    store: Store,
) -> None:
    from threadstore.seed import ExtendedBaseMessage, extended_messages

    history = await stored_turn(store)

    extended = extended_messages(history)

    assert [(m.id, m.role) for m in extended] == [
        (m.id, m.role) for m in translate_messages(history)
    ]
    assert all(isinstance(m, ExtendedBaseMessage) for m in extended)
    question, step, answer, result = extended
    assert question.uuid == str(history[0].message_uuid)
    assert step.uuid == str(history[1].reasonings[0].uuid)
    assert answer.uuid == str(history[1].message_uuid) and answer.id == "a1"
    assert result.uuid == str(history[1].tool_calls[0].uuid)
    assert result.tool_call_id == "c1" and result.content == "found"
    assert answer.tool_calls is not None and answer.tool_calls[0].id == "c1"
    assert {(m.in_progress, m.status, m.error) for m in extended} == {
        (False, MessageStatus.COMPLETE, None)
    }


async def test_a_crashed_reply_extends_with_its_error(store: Store) -> None:
    from threadstore.seed import extended_messages

    script = [run_started(), *text_message("a1", "Half an ans")[:-1]]
    inner = ScriptedAgent(script, fail_after=len(script), error=RuntimeError("model down"))
    with pytest.raises(RuntimeError):
        await collect(make_agent(store, inner).run(run_input(messages=[user("u1")])))

    history = await store.get_chat_messages((await only_chat(store)).chat_uuid)

    answer = extended_messages(history)[-1]
    assert (answer.in_progress, answer.status, answer.error) == (
        False,
        MessageStatus.ERRORED,
        "RuntimeError: model down",
    )


async def test_the_session_registry_resolves_every_stored_chat(store: Store) -> None:
    from threadstore.seed import ChatRepository, ChatSessionRegistry, MessageRepository

    registry = ChatSessionRegistry(store)
    chats = ChatRepository(store, registry)
    MessageRepository(store, registry)  # the seed's constructors take the registry too
    chat = await chats.create_chat(ChatCreate(user_uuid=USER, thread_id="t"))

    assert registry.get_session_id(chat.chat_uuid) == str(chat.chat_uuid)
    cold = ChatSessionRegistry(store)  # another replica, or after a restart
    assert cold.get_session_id(chat.chat_uuid) is None
    assert await cold.resolve(chat.chat_uuid) == str(chat.chat_uuid)
    assert cold.get_session_id(chat.chat_uuid) == str(chat.chat_uuid)
    assert await cold.resolve(uuid4()) is None
    await chats.delete_chat(chat.chat_uuid)
    assert registry.get_session_id(chat.chat_uuid) is None
    assert await registry.resolve(chat.chat_uuid) is None


def test_the_session_registry_is_bounded() -> None:
    from threadstore.seed import ChatSessionRegistry

    registry = ChatSessionRegistry(object(), max_entries=2)  # type: ignore[arg-type]
    first, *rest = [uuid4() for _ in range(3)]
    for chat_uuid in [first, *rest]:
        registry.register(chat_uuid)

    assert registry.get_session_id(first) is None
    assert [registry.get_session_id(c) for c in rest] == [str(c) for c in rest]


async def test_a_refused_run_ends_with_the_seed_s_error_code(store: Store) -> None:
    from ag_ui.core import AssistantMessage

    from threadstore.seed import ErrorCodes

    inner = ScriptedAgent([run_started(), run_finished()])
    refused = [AssistantMessage(id="a-new", content="not yours to write")]

    events = await collect(make_agent(store, inner).run(run_input(messages=refused)))

    assert events[-1].code == ErrorCodes.INVALID_INPUT == "INVALID_INPUT"


async def test_renaming_never_loses_a_version_race_here(store: Store) -> None:
    from threadstore.errors import ConflictError
    from threadstore.seed import VersionConflictError

    assert issubclass(VersionConflictError, ConflictError)
    chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="t"))

    renamed = await asyncio.gather(
        *(store.update_chat_name(chat.chat_uuid, f"name {i}") for i in range(10))
    )

    assert all(r is not None for r in renamed)  # none raised: each rename is one transaction
    final = await store.chats.get_chat(chat.chat_uuid)
    assert final is not None and final.name in {f"name {i}" for i in range(10)}


# --- events with nothing to attach to store nothing, as in the seed -----------------------


async def test_a_lone_encrypted_reasoning_value_stores_nothing(store: Store) -> None:
    from ag_ui.core import ReasoningEncryptedValueEvent

    lone = ReasoningEncryptedValueEvent(
        subtype="message", entity_id="e1", encrypted_value="opaque-blob"
    )

    await collect(
        make_agent(store, ScriptedAgent([run_started(), lone, run_finished()])).run(run_input())
    )

    assert await store.get_chat_messages((await only_chat(store)).chat_uuid) == []


async def test_an_unregistered_custom_event_with_no_message_stores_nothing(store: Store) -> None:
    from ag_ui.core import CustomEvent

    script = [run_started(), CustomEvent(name="note", value=1), run_finished()]

    await collect(make_agent(store, ScriptedAgent(script)).run(run_input()))

    assert await store.get_chat_messages((await only_chat(store)).chat_uuid) == []


async def test_a_custom_event_in_a_run_with_a_reply_stays_a_part_of_it(store: Store) -> None:
    from ag_ui.core import CustomEvent

    script = [
        run_started(),
        CustomEvent(name="note", value=1),
        *text_message("a1", "Done."),
        run_finished(),
    ]

    await collect(make_agent(store, ScriptedAgent(script)).run(run_input()))

    (answer,) = await store.get_chat_messages((await only_chat(store)).chat_uuid)
    assert [e["type"] for e in answer.metadata["parts"]] == ["data", "text"]


# --- seed 001: a corrupt stored chat reads the same on every ChatStore -------------------


async def corrupt_role(store_url: str, message_uuid: UUID) -> None:
    """Write a role no model knows into a stored message row, behind the store's back."""
    if store_url.startswith("sqlite"):
        path = store_url.removeprefix("sqlite:///").split("?")[0]
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE messages SET role = 'bogus', metadata = '{not json' WHERE message_uuid = ?",
                (str(message_uuid),),
            )
        return
    conn = await asyncpg.connect(store_url)
    try:
        await conn.execute(
            "UPDATE messages SET role = 'bogus' WHERE message_uuid = $1", message_uuid
        )
    finally:
        await conn.close()


async def test_a_corrupt_stored_row_is_a_typed_error_and_a_chat_store_reads_none(
    store: Store,
    store_url: str,
    open_test_store: StoreOpener,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from ag_ui.core import UserMessage

    from threadstore.chatstore import ChatRecord, Scope, StoreChatStore
    from threadstore.errors import CorruptRecordError, StoreError

    if store_url.startswith("memory"):
        pytest.skip("the in-memory store keeps models, not rows")
    chats = StoreChatStore(store, "u-1")
    hello = UserMessage(id="m-1", content="hi")
    await chats.save_chat(ChatRecord(chat_id="c-1", scope=Scope(user_id="u-1"), messages=(hello,)))
    chat = await store.get_chat_by_thread_id(chats.user_uuid, "c-1")
    assert chat is not None
    (message,) = await store.get_chat_messages(chat.chat_uuid)
    await corrupt_role(store_url, message.message_uuid)
    reopened = await open_test_store()

    with pytest.raises(CorruptRecordError) as raised:
        await reopened.get_chat_messages(chat.chat_uuid)

    assert isinstance(raised.value, StoreError)
    assert str(message.message_uuid) in str(raised.value)
    assert str(chat.chat_uuid) in str(raised.value)
    assert await StoreChatStore(reopened, "u-1").load_chat("c-1") is None
    assert "loaded as None" in caplog.text and str(message.message_uuid) in caplog.text


def test_a_corrupt_file_reads_none_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from threadstore.chatstore import JsonlChatStore

    chats = JsonlChatStore(tmp_path)
    (tmp_path / "c-1.json").write_text("{not json", encoding="utf-8")

    assert chats.load_chat("c-1") is None
    assert "c-1.json: stored record cannot be read" in caplog.text
