"""Every threadstore Store as a ChatStore: StoreChatStore on memory, SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from ag_ui.core import (
    ActivityMessage,
    AssistantMessage,
    FunctionCall,
    Message,
    ReasoningMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from agui_scripts import (
    ScriptedAgent,
    StoreSpy,
    collect,
    full_turn,
    run_finished,
    run_input,
    run_started,
    text_message,
    tool_call,
    user,
)
from sqlite_support import sqlite_store
from test_chat_persist import tool_run
from test_statement_counts import count_statements
from threadstore import InvalidInputError, Role, StorageAgent, Store
from threadstore.agui import ChatPersistingAgent, ChatPersistOptions
from threadstore.chatstore import ChatRecord, Scope, StoreChatStore, list_chats
from threadstore.keys import user_uuid_for

SCOPE = Scope(user_id="u_1", tenant_id="acme", app_id="support", agent_id="triage")


def call(call_id: str, name: str = "weather", arguments: str = '{"city": "Oslo"}') -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))


def tool_history() -> list[Message]:
    return [
        SystemMessage(id="s1", content="Be brief."),
        UserMessage(id="u1", content="Weather in Oslo?"),
        ReasoningMessage(id="r1", content="The user wants the weather."),
        AssistantMessage(id="a1", content="Let me check.", tool_calls=[call("c1")]),
        ToolMessage(id="c1-result", tool_call_id="c1", content="4 C"),
        AssistantMessage(id="a2", content="Take an umbrella."),
        ActivityMessage(id="act1", activity_type="progress", content={"done": 1}),
    ]


def chain(count: int, prefix: str = "m") -> list[Message]:
    """``count`` alternating user and assistant messages."""
    return [
        UserMessage(id=f"{prefix}{i}", content=f"question {i}")
        if i % 2 == 0
        else AssistantMessage(id=f"{prefix}{i}", content=f"answer {i}")
        for i in range(count)
    ]


def record(messages: Sequence[Message], chat_id: str = "chat-42", **fields: Any) -> ChatRecord:
    return ChatRecord(
        chat_id=chat_id, scope=fields.pop("scope", SCOPE), messages=messages, **fields
    )


def dumps(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [message.model_dump(exclude_none=True) for message in messages]


async def test_a_saved_tool_using_history_loads_back_message_for_message(store: Store) -> None:
    chats = StoreChatStore(store, "u_1")

    await chats.save_chat(record(tool_history()))
    loaded = await chats.load_chat("chat-42")

    assert loaded is not None
    assert dumps(loaded.messages) == dumps(tool_history())
    assert loaded.scope == SCOPE and loaded.parent_id is None and loaded.chat_id == "chat-42"


async def test_bytes_in_message_metadata_load_back_as_bytes(store: Store) -> None:
    chats = StoreChatStore(store, "u_1")
    photo = UserMessage(id="u1", content="What is this?", metadata={"thumbnail": b"\x89PNG\x00"})

    await chats.save_chat(record([photo]))

    loaded = await chats.load_chat("chat-42")
    assert loaded is not None and loaded.messages[0].metadata == {"thumbnail": b"\x89PNG\x00"}


async def test_a_saved_chat_is_an_ordinary_chat_of_the_users_uuid(store: Store) -> None:
    await StoreChatStore(store, "u_1").save_chat(record(tool_history()))

    chat = await store.get_chat_by_thread_id(user_uuid_for("u_1"), "chat-42")
    assert chat is not None
    assert (chat.tenant_id, chat.app_id) == ("acme", "support")
    stored = await store.get_chat_messages(chat.chat_uuid)
    assert [m.role for m in stored] == [
        Role.SYSTEM,
        Role.USER,
        Role.REASONING,
        Role.ASSISTANT,
        Role.ASSISTANT,
        Role.ACTIVITY,
    ]
    # The tool result is the call's result, as the storage agent stores one.
    (weather,) = stored[3].tool_calls
    assert (weather.tool_call_id, weather.content, weather.result_message_id) == (
        "c1",
        "4 C",
        "c1-result",
    )


async def test_saving_a_superset_writes_only_the_new_messages(store: Store) -> None:
    spy = StoreSpy(store)
    chats = StoreChatStore(spy, "u_1")  # type: ignore[arg-type]
    history = chain(1000)
    await chats.save_chat(record(history))
    assert spy.calls["create_message"] == 1000

    spy.calls.clear()
    await chats.save_chat(record([*history, UserMessage(id="m1000", content="one more")]))

    assert spy.record_writes == 1 and spy.calls["create_message"] == 1
    loaded = await chats.load_chat("chat-42")
    assert loaded is not None and [m.id for m in loaded.messages][-2:] == ["m999", "m1000"]

    spy.calls.clear()
    await chats.save_chat(record([*history, UserMessage(id="m1000", content="one more")]))
    assert spy.record_writes == 0 and spy.calls["set_active_leaf"] == 0


@pytest.mark.usefixtures("quiet_search_indexer")
async def test_the_second_save_costs_the_same_statements_after_10_or_1000_messages(
    tmp_path: Path,
) -> None:
    counts: dict[int, int] = {}
    for size in (10, 1000):
        async with sqlite_store(tmp_path / f"{size}.db") as store:
            chats = StoreChatStore(store, "u_1")
            history = chain(size)
            await chats.save_chat(record(history))
            grown = record([*history, UserMessage(id="new", content="one more")])
            counts[size] = await count_statements(store, partial(chats.save_chat, grown))

    assert counts[10] == counts[1000]
    assert counts[1000] < 20  # a handful of reads, one insert, the transaction


async def test_a_result_for_a_waiting_call_completes_it_in_place(store: Store) -> None:
    spy = StoreSpy(store)
    chats = StoreChatStore(spy, "u_1")  # type: ignore[arg-type]
    asked = [
        UserMessage(id="u1", content="Open a file"),
        AssistantMessage(id="a1", tool_calls=[call("c9")]),
    ]
    await chats.save_chat(record(asked))

    spy.calls.clear()
    answered = [
        *asked,
        ToolMessage(id="c9-result", tool_call_id="c9", content="notes.txt"),
        AssistantMessage(id="a2", content="Opened."),
    ]
    await chats.save_chat(record(answered))

    assert spy.calls["update_message_tool_call"] == 1 and spy.calls["create_message"] == 1
    loaded = await chats.load_chat("chat-42")
    assert loaded is not None
    assert [(m.role, m.id) for m in loaded.messages] == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("tool", "c9-result"),
        ("assistant", "a2"),
    ]


async def test_a_replaced_history_keeps_the_old_one_as_a_branch(store: Store) -> None:
    chats = StoreChatStore(store, "u_1")
    first = chain(4)  # m0 m1 m2 m3
    await chats.save_chat(record(first))

    # Edit-and-resend of the second question: m2 and its answer give way to m2b, m3b.
    edited = [
        *first[:2],
        UserMessage(id="m2b", content="better question"),
        AssistantMessage(id="m3b", content="better answer"),
    ]
    await chats.save_chat(record(edited))

    loaded = await chats.load_chat("chat-42")
    assert loaded is not None and [m.id for m in loaded.messages] == ["m0", "m1", "m2b", "m3b"]
    chat = await store.get_chat_by_thread_id(user_uuid_for("u_1"), "chat-42")
    assert chat is not None
    old_leaf = await store.get_message_by_agui_id(chat.chat_uuid, "m3")
    assert old_leaf is not None
    await store.branches.set_active_leaf(chat.chat_uuid, old_leaf.message_uuid)
    old = await chats.load_chat("chat-42")
    assert old is not None and [m.id for m in old.messages] == ["m0", "m1", "m2", "m3"]


async def test_an_edited_text_with_the_same_id_is_a_new_branch_too(store: Store) -> None:
    chats = StoreChatStore(store, "u_1")
    await chats.save_chat(record(chain(2)))
    chat = await store.get_chat_by_thread_id(user_uuid_for("u_1"), "chat-42")
    assert chat is not None
    original = (await store.get_chat_messages(chat.chat_uuid))[1]

    reworded = AssistantMessage(id="m1", content="reworded")
    await chats.save_chat(record([*chain(1), reworded]))

    loaded = await chats.load_chat("chat-42")
    assert loaded is not None and dumps(loaded.messages) == dumps([*chain(1), reworded])
    await store.branches.set_active_leaf(chat.chat_uuid, original.message_uuid)
    old = await chats.load_chat("chat-42")
    assert old is not None and dumps(old.messages) == dumps(chain(2))


async def test_a_shorter_history_moves_the_active_leaf_back_and_deletes_nothing(
    store: Store,
) -> None:
    spy = StoreSpy(store)
    chats = StoreChatStore(spy, "u_1")  # type: ignore[arg-type]
    await chats.save_chat(record(chain(4)))
    spy.calls.clear()

    await chats.save_chat(record(chain(2)))  # regenerate: the last turn dropped

    assert spy.record_writes == 0 and spy.calls["set_active_leaf"] == 1
    assert spy.calls["delete_chat"] == 0
    loaded = await chats.load_chat("chat-42")
    assert loaded is not None and [m.id for m in loaded.messages] == ["m0", "m1"]
    chat = await store.get_chat_by_thread_id(user_uuid_for("u_1"), "chat-42")
    assert chat is not None and await store.get_message_by_agui_id(chat.chat_uuid, "m3")


async def test_a_history_with_another_first_message_becomes_a_second_root(
    store: Store,
) -> None:
    chats = StoreChatStore(store, "u_1")
    await chats.save_chat(record(chain(2)))

    await chats.save_chat(record(chain(2, prefix="x")))

    loaded = await chats.load_chat("chat-42")
    assert loaded is not None and [m.id for m in loaded.messages] == ["x0", "x1"]
    chat = await store.get_chat_by_thread_id(user_uuid_for("u_1"), "chat-42")
    assert chat is not None
    old_first = await store.get_message_by_agui_id(chat.chat_uuid, "m0")
    assert old_first is not None and old_first.parent_uuid is None
    # Nothing was deleted: the old history is one switch away.
    await store.branches.switch_branch(chat.chat_uuid, old_first.message_uuid)
    loaded = await chats.load_chat("chat-42")
    assert loaded is not None and [m.id for m in loaded.messages] == ["m0", "m1"]


async def test_an_empty_history_is_refused_and_nothing_changes(store: Store) -> None:
    chats = StoreChatStore(store, "u_1")
    await chats.save_chat(record(chain(2)))

    with pytest.raises(InvalidInputError, match="holds no messages"):
        await chats.save_chat(record([]))

    loaded = await chats.load_chat("chat-42")
    assert loaded is not None and [m.id for m in loaded.messages] == ["m0", "m1"]


async def test_the_parent_id_is_recorded_as_fork_lineage(store: Store) -> None:
    chats = StoreChatStore(store, "u_1")
    await chats.save_chat(record(chain(4), chat_id="parent"))

    await chats.save_chat(
        record(
            [*chain(2), UserMessage(id="f2", content="a different turn")],
            chat_id="fork",
            parent_id="parent",
        )
    )

    loaded = await chats.load_chat("fork")
    assert loaded is not None and loaded.parent_id == "parent"
    parent = await store.get_chat_by_thread_id(user_uuid_for("u_1"), "parent")
    fork = await store.get_chat_by_thread_id(user_uuid_for("u_1"), "fork")
    assert parent is not None and fork is not None
    assert fork.forked_from_chat_uuid == parent.chat_uuid
    shared = await store.get_message_by_agui_id(parent.chat_uuid, "m1")
    assert shared is not None and fork.forked_from_message_uuid == shared.message_uuid

    with pytest.raises(InvalidInputError, match="forked from 'parent'"):
        await chats.save_chat(record(chain(2), chat_id="fork", parent_id="another"))


async def test_a_record_of_another_owner_is_refused(store: Store) -> None:
    chats = StoreChatStore(store, "u_1")
    await chats.save_chat(record(chain(2)))

    with pytest.raises(InvalidInputError, match="this chat store is user 'u_1'"):
        await chats.save_chat(record(chain(2), scope=Scope(user_id="u_2")))
    with pytest.raises(InvalidInputError, match="tenant_id='acme'"):
        await chats.save_chat(
            record(chain(3), scope=Scope(user_id="u_1", tenant_id="other", app_id="support"))
        )
    assert await StoreChatStore(store, "u_2").load_chat("chat-42") is None


async def test_list_filters_by_scope_and_delete_removes_the_chat(store: Store) -> None:
    chats = StoreChatStore(store, "u_1")
    await chats.save_chat(record(chain(2), chat_id="a"))
    await chats.save_chat(
        record(chain(2), chat_id="b", scope=Scope(user_id="u_1", tenant_id="acme"))
    )
    await chats.save_chat(record(chain(2), chat_id="c", scope=Scope(user_id="u_1", app_id="web")))
    await StoreChatStore(store, "u_2").save_chat(
        record(chain(2), chat_id="d", scope=Scope(user_id="u_2"))
    )

    assert sorted(await list_chats(chats)) == ["a", "b", "c"]
    assert sorted(await list_chats(chats, Scope(user_id="u_1", tenant_id="acme"))) == ["a", "b"]
    assert await list_chats(chats, Scope(user_id="u_1", agent_id="triage")) == ["a"]
    assert await list_chats(chats, Scope(user_id="u_1", app_id="web")) == ["c"]
    assert await list_chats(chats, Scope(user_id="u_2")) == []

    await chats.delete_chat("a")
    await chats.delete_chat("never-saved")
    assert await chats.load_chat("a") is None
    assert sorted(await list_chats(chats)) == ["b", "c"]


async def test_a_wrapped_agent_persists_two_runs_into_a_store(store: Store) -> None:
    spy = StoreSpy(store)
    options = ChatPersistOptions(StoreChatStore(spy, "u_1"), "chat-42", SCOPE)  # type: ignore[arg-type]
    first_input = run_input(messages=[user("u1", "Weather in Oslo?")])
    await collect(ChatPersistingAgent(ScriptedAgent(tool_run()), options).run(first_input))

    first = await options.store.load_chat("chat-42")  # type: ignore[misc]
    assert first is not None
    assert [(m.role, m.id) for m in first.messages] == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("tool", "call-1-result"),
        ("assistant", "a1-assistant-2"),
    ]

    spy.calls.clear()
    second_input = run_input(run_id="run-2", messages=[*first.messages, user("u2", "And Bergen?")])
    second = [
        run_started(run_id="run-2"),
        *text_message("b1", "Which city exactly?"),
        *tool_call("call-9", "pick_city", "{}", parent_message_id="b1"),
        run_finished(run_id="run-2"),
    ]
    await collect(ChatPersistingAgent(ScriptedAgent(second), options).run(second_input))

    # The second run adds a question and an answer waiting on a client tool: two messages,
    # one call, whatever the length of the history before them.
    assert spy.calls["create_message"] == 2 and spy.calls["create_message_tool_call"] == 1
    assert spy.record_writes == 3


async def test_a_chat_a_storage_agent_wrote_loads_and_grows_by_what_a_save_adds(
    store: Store,
) -> None:
    owner = uuid4()
    inner = ScriptedAgent(full_turn("thread-1", "run-1"))
    storage = StorageAgent("assistant", owner, store, store, inner)
    await collect(storage.run(run_input("thread-1", "run-1", [user("u1", "Weather?")])))

    spy = StoreSpy(store)
    chats = StoreChatStore(spy, str(owner))  # type: ignore[arg-type]
    loaded = await chats.load_chat("thread-1")
    assert loaded is not None
    assert [m.role for m in loaded.messages] == [
        "user",
        "reasoning",
        "assistant",
        "tool",
        "assistant",
    ]

    await chats.save_chat(
        record([*loaded.messages, user("u2", "And tomorrow?")], "thread-1", scope=loaded.scope)
    )

    assert spy.record_writes == 1 and spy.calls["create_message"] == 1
    again = await chats.load_chat("thread-1")
    assert again is not None and dumps(again.messages) == dumps(
        [*loaded.messages, user("u2", "And tomorrow?")]
    )
