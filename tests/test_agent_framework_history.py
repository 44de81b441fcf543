"""The Agent Framework history provider's storage: exact round trips, other faces, filters.

Every test runs on every backend (the ``store`` fixture). The agent-driven behaviour
is in ``test_agent_framework_agent.py``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from typing import Any
from uuid import uuid4

import httpx
import pytest
from agent_framework import AgentSession, Content, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from face_support import scramble
from threadstore import Role, Store
from threadstore.agui import translate_messages
from threadstore.faces.agent_framework import (
    ThreadstoreHistoryProvider,
    keep_last_messages,
)
from threadstore.faces.agent_framework._convert import (
    messages_of,
    plain_reading,
    read_record,
    records_to_messages,
)
from threadstore.models import MediaPart, Reasoning, TextPart, ToolCall
from threadstore.models import Message as StoredMessage
from threadstore.server import LOCAL_USER_UUID, create_app

# --- a strategy for every kind of framework message ---------------------------------------

# Text a store can hold: no NUL (PostgreSQL cannot store it) and no lone surrogate (not
# encodable as UTF-8); the server rejects both at its edge on every backend.
_text = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=40
)
_ident = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
_json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ident, inner, max_size=3),
    max_leaves=6,
)
_properties = st.dictionaries(_ident, _json_value, max_size=2)


@st.composite
def _content(draw: st.DrawFn) -> Content:
    kind = draw(
        st.sampled_from(
            [
                "text",
                "text_reasoning",
                "data",
                "uri",
                "error",
                "function_call",
                "function_result",
                "usage",
                "hosted_file",
                "function_approval_request",
            ]
        )
    )
    props = draw(_properties)
    if kind == "text":
        return Content.from_text(draw(_text), additional_properties=props)
    if kind == "text_reasoning":
        return Content.from_text_reasoning(
            id=draw(st.none() | _ident),
            text=draw(st.none() | _text),
            protected_data=draw(st.none() | _text),
            additional_properties=props,
        )
    if kind == "data":
        media_type = draw(st.sampled_from(["image/png", "audio/wav", "application/pdf"]))
        return Content.from_data(draw(st.binary(max_size=40)), media_type)
    if kind == "uri":
        return Content.from_uri(
            f"https://example.com/{draw(_ident)}",
            media_type=draw(st.sampled_from(["image/jpeg", "video/mp4"])),
        )
    if kind == "error":
        return Content.from_error(
            message=draw(_text),
            error_code=draw(st.none() | _ident),
            error_details=draw(st.none() | _text),
        )
    if kind == "function_call":
        arguments = draw(st.dictionaries(_ident, _json_value, max_size=3))
        return Content.from_function_call(
            draw(_ident), draw(_ident), arguments=json.dumps(arguments), additional_properties=props
        )
    if kind == "function_result":
        return Content.from_function_result(draw(_ident), result=draw(_json_value))
    if kind == "usage":
        return Content.from_usage(
            {
                "input_token_count": draw(st.integers(0, 10**6)),
                "output_token_count": draw(st.integers(0, 10**6)),
            }
        )
    if kind == "hosted_file":
        return Content.from_hosted_file(draw(_ident))
    call = Content.from_function_call(draw(_ident), draw(_ident), arguments="{}")
    return Content.from_function_approval_request(draw(_ident), call)


@st.composite
def _messages(draw: st.DrawFn) -> list[Message]:
    count = draw(st.integers(1, 6))
    return [
        Message(
            draw(st.sampled_from(["user", "assistant", "system", "tool"])),
            draw(st.lists(_content(), max_size=4)),
            author_name=draw(st.none() | _ident),
            # Ids are unique within a chat, as the framework's services hand them out.
            message_id=draw(st.none() | st.just(f"m{index}-{uuid4().hex[:6]}")),
            additional_properties=draw(_properties),
        )
        for index in range(count)
    ]


def _provider(store: Store, **options: Any) -> ThreadstoreHistoryProvider:
    return ThreadstoreHistoryProvider(store, uuid4(), **options)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(messages=_messages())
async def test_any_framework_history_reads_back_exactly_as_it_was_stored(
    store: Store, messages: list[Message]
) -> None:
    provider = _provider(store)
    state: dict[str, Any] = {}

    await provider.save_messages("session", messages, state=state)
    loaded = await provider.get_messages("session", state=state)
    again = await provider.get_messages("session", state=state)  # from the store's cache

    expected = [m.to_dict() for m in messages]
    assert [m.to_dict() for m in loaded] == [m.to_dict() for m in again] == expected
    # The reference read: convert what the public store API hands out.
    chat = await provider.get_chat("session", state)
    assert chat is not None
    records = await store.get_chat_messages(chat.chat_uuid)
    assert [m.to_dict() for m in records_to_messages(records)] == expected
    # What a load returns shares nothing with the store.
    scramble([loaded, again], into=(Message, Content))
    assert [m.to_dict() for m in await provider.get_messages("session", state=state)] == expected


async def _tool_conversation(provider: ThreadstoreHistoryProvider, state: dict[str, Any]) -> None:
    png = b"\x89PNG\r\n\x1a\nimage"
    await provider.save_messages(
        "s",
        [
            Message("user", ["What is in this picture?", Content.from_data(png, "image/png")]),
            Message(
                "assistant",
                [
                    Content.from_text_reasoning(text="Look it up twice.", protected_data="opaque"),
                    Content.from_function_call("c1", "lookup", arguments='{"q": "a"}'),
                    Content.from_function_call("c2", "lookup", arguments='{"q": "b"}'),
                ],
                message_id="a1",
            ),
            Message(
                "tool",
                [
                    Content.from_function_result("c1", result="first result"),
                    Content.from_function_result("c2", result={"n": 2}),
                ],
            ),
            Message("assistant", ["A cat."], message_id="a2"),
        ],
        state=state,
    )


async def test_a_framework_history_replays_through_agui_with_calls_results_and_reasoning(
    store: Store,
) -> None:
    provider = _provider(store)
    state: dict[str, Any] = {}
    await _tool_conversation(provider, state)
    chat = await provider.get_chat("s", state)
    assert chat is not None

    replay = translate_messages(await store.get_chat_messages(chat.chat_uuid))

    shape = [(m.role, getattr(m, "content", None)) for m in replay]
    assert shape == [
        ("user", replay[0].content),
        ("reasoning", "Look it up twice."),
        ("assistant", ""),
        ("tool", "first result"),
        ("tool", '{"n": 2}'),
        ("assistant", "A cat."),
    ]
    user_parts = replay[0].content
    assert isinstance(user_parts, list)
    assert user_parts[0].text == "What is in this picture?"
    assert base64.b64decode(user_parts[1].source.value) == b"\x89PNG\r\n\x1a\nimage"
    calls = replay[2].tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        ("c1", "lookup", '{"q": "a"}'),
        ("c2", "lookup", '{"q": "b"}'),
    ]
    assert [m.tool_call_id for m in replay[3:5]] == ["c1", "c2"]


async def test_a_framework_history_reads_through_the_chat_api(store: Store) -> None:
    provider = ThreadstoreHistoryProvider(store, LOCAL_USER_UUID)
    state: dict[str, Any] = {}
    await _tool_conversation(provider, state)
    chat = await provider.get_chat("s", state)
    assert chat is not None
    app = create_app(store, agent="demo", demo_delay=0)

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            response = await http.get(f"/api/chats/{chat.chat_uuid}/messages")

    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [item["role"] for item in items] == ["user", "assistant", "tool", "assistant"]
    assert items[0]["content"] == "What is in this picture?"
    assert [c["content"] for c in items[1]["tool_calls"]] == ["first result", '{"n": 2}']
    assert items[1]["reasonings"][0]["content"] == "Look it up twice."
    assert items[3]["content"] == "A cat."


async def test_a_history_written_by_another_face_loads_as_framework_messages(
    store: Store,
) -> None:
    from threadstore import ChatCreate, MessageCreate, MessageStatus, MessageToolCallCreate

    user = uuid4()
    chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id="agui-thread"))
    await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content="Weather?", agui_id="u1")
    )
    answer = await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, agui_id="a1")
    )
    await store.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=answer.message_uuid,
            tool_call_id="t1",
            name="weather",
            arguments='{"city": "Oslo"}',
            content="sunny",
            status=MessageStatus.COMPLETE,
        )
    )
    await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, content="Sunny.", agui_id="a2")
    )
    provider = ThreadstoreHistoryProvider(store, user)

    loaded = await provider.get_messages(None, state={"thread_id": "agui-thread"})

    assert [(m.role, m.message_id) for m in loaded] == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("tool", None),
        ("assistant", "a2"),
    ]
    assert loaded[0].text == "Weather?"
    call = loaded[1].contents[0]
    assert (call.type, call.call_id, call.name, call.arguments) == (
        "function_call",
        "t1",
        "weather",
        '{"city": "Oslo"}',
    )
    result = loaded[2].contents[0]
    assert (result.type, result.call_id, result.result) == ("function_result", "t1", "sunny")


async def test_a_long_history_loads_in_pieces_as_it_converts_whole(store: Store) -> None:
    from threadstore import ChatCreate, MessageCreate, MessageStatus, MessageToolCallCreate
    from threadstore._steps import OFF_LOOP_ITEMS, STEP_ITEMS

    user = uuid4()
    chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id="long"))

    async def say(n: int) -> None:
        for i in range(n):
            await store.create_message(
                MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content=f"m{i}")
            )

    # A call answered in its own record ends the first piece; the tool message another
    # face stored for it starts the next, and must be skipped as an answer already read.
    await say(STEP_ITEMS - 1)
    answer = await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, agui_id="a1")
    )
    await store.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=answer.message_uuid,
            tool_call_id="t1",
            name="weather",
            content="sunny",
            status=MessageStatus.COMPLETE,
        )
    )
    await store.create_message(
        MessageCreate(
            chat_uuid=chat.chat_uuid,
            role=Role.TOOL,
            content="sunny",
            metadata={"tool_call_id": "t1"},
        )
    )
    await say(OFF_LOOP_ITEMS)
    provider = ThreadstoreHistoryProvider(store, user)

    loaded = await provider.get_messages(None, state={"thread_id": "long"})

    whole = records_to_messages(await store.get_chat_messages(chat.chat_uuid))
    assert [m.to_dict() for m in loaded] == [m.to_dict() for m in whole]
    results = [c for m in loaded for c in m.contents if c.type == "function_result"]
    assert [c.call_id for c in results] == ["t1"]


async def test_histories_are_scoped_by_user_tenant_and_app(store: Store) -> None:
    user = uuid4()
    mine = ThreadstoreHistoryProvider(store, user, tenant_id="t1", app_id="a")
    other_user = ThreadstoreHistoryProvider(store, uuid4(), tenant_id="t1", app_id="a")
    other_app = ThreadstoreHistoryProvider(store, user, tenant_id="t1", app_id="b")
    await mine.save_messages("s", [Message("user", ["secret"])], state={})

    assert [m.text for m in await mine.get_messages("s", state={})] == ["secret"]
    assert await other_user.get_messages("s", state={}) == []
    assert await other_app.get_messages("s", state={}) == []
    from threadstore import ConflictError

    with pytest.raises(ConflictError, match="tenant 't1', app 'a'"):
        await other_app.save_messages("s", [Message("user", ["mixing in"])], state={})


async def test_the_storage_key_lives_in_the_session_state_not_the_provider(store: Store) -> None:
    provider = _provider(store)
    first: dict[str, Any] = {}
    second: dict[str, Any] = {"thread_id": "chosen-thread"}

    await provider.save_messages("session-1", [Message("user", ["one"])], state=first)
    await provider.save_messages("session-2", [Message("user", ["two"])], state=second)

    assert first == {"thread_id": "session-1"}
    assert second == {"thread_id": "chosen-thread"}
    assert [m.text for m in await provider.get_messages("ignored", state=first)] == ["one"]
    assert [m.text for m in await provider.get_messages("ignored", state=second)] == ["two"]


# --- the keep-last filter ------------------------------------------------------------------


@st.composite
def _tool_histories(draw: st.DrawFn) -> list[Message]:
    """User turns, answers, and assistant calls each followed by their results."""
    out: list[Message] = []
    for turn in range(draw(st.integers(0, 8))):
        out.append(Message("user", [f"q{turn}"]))
        for step in range(draw(st.integers(0, 2))):
            ids = [f"c{turn}-{step}-{n}" for n in range(draw(st.integers(1, 3)))]
            out.append(Message("assistant", [Content.from_function_call(i, "f") for i in ids]))
            if draw(st.booleans()):  # all results in one tool message
                out.append(
                    Message("tool", [Content.from_function_result(i, result=1) for i in ids])
                )
            else:
                out.extend(
                    Message("tool", [Content.from_function_result(i, result=1)]) for i in ids
                )
        out.append(Message("assistant", [f"a{turn}"]))
    return out


def _calls(messages: list[Message], kind: str) -> set[str]:
    return {c.call_id for m in messages for c in m.contents if c.type == kind and c.call_id}


@settings(max_examples=300, deadline=None)
@given(history=_tool_histories(), count=st.integers(1, 12))
def test_keep_last_never_separates_a_tool_call_from_its_result(
    history: list[Message], count: int
) -> None:
    kept = keep_last_messages(count)(history)

    assert len(kept) <= count
    assert kept == history[len(history) - len(kept) :]  # a suffix
    assert _calls(kept, "function_result") <= _calls(kept, "function_call")
    assert {
        r for r in _calls(history, "function_result") if r in _calls(kept, "function_call")
    } <= (_calls(kept, "function_result"))
    # The longest such suffix: one more message would break a pair or the count.
    longer = history[len(history) - len(kept) - 1 :] if len(kept) < len(history) else None
    if longer is not None and len(longer) <= count:
        assert not _calls(longer, "function_result") <= _calls(longer, "function_call")


def test_keep_last_rejects_a_count_below_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        keep_last_messages(0)


async def test_the_filter_applies_to_loaded_history_only(store: Store) -> None:
    provider = _provider(store, message_filter=keep_last_messages(2))
    state: dict[str, Any] = {}
    await provider.save_messages("s", [Message("user", [f"m{i}"]) for i in range(5)], state=state)

    assert [m.text for m in await provider.get_messages("s", state=state)] == ["m3", "m4"]
    session = AgentSession(session_id="s")
    session.state[provider.source_id] = state
    assert len(await provider.get_session_messages(session)) == 5
    chat = await provider.get_chat("s", state)
    assert chat is not None
    assert len(await store.get_chat_messages(chat.chat_uuid)) == 5


def test_import_threadstore_leaves_the_framework_unloaded() -> None:
    script = (
        "import sys, threadstore\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'agent_framework'"
        " or m.startswith('threadstore.faces')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


async def test_plain_text_is_stored_as_any_face_stores_it(store: Store) -> None:
    provider = _provider(store)
    state: dict[str, Any] = {}
    plain = [Message("user", ["Hi"]), Message("assistant", ["Hello."], message_id="a1")]
    rich = Message("assistant", [Content.from_text("Hello.", additional_properties={"k": 1})])

    await provider.save_messages("s", [*plain, rich], state=state)

    chat = await provider.get_chat("s", state)
    assert chat is not None
    records = await store.get_chat_messages(chat.chat_uuid)
    assert [r.metadata for r in records[:2]] == [{}, {}]
    assert [(r.role, r.content, r.agui_id) for r in records[:2]] == [
        (Role.USER, "Hi", None),
        (Role.ASSISTANT, "Hello.", "a1"),
    ]
    assert records[2].metadata["agent_framework"] == rich.to_dict()
    loaded = await provider.get_messages("s", state=state)
    assert [m.to_dict() for m in loaded] == [m.to_dict() for m in [*plain, rich]]


# --- the plain reading and the reference read ---------------------------------------------


@st.composite
def _records(draw: st.DrawFn) -> list[StoredMessage]:
    """Stored records as any face writes them: plain most often, else with anything nested."""
    chat_uuid = uuid4()
    records = []
    for seq in range(draw(st.integers(1, 5))):
        message_uuid = uuid4()
        calls = [
            ToolCall(
                uuid=uuid4(),
                message_uuid=message_uuid,
                tool_call_id=f"c{seq}-{index}",
                name=draw(_ident),
                arguments=draw(_text),
                content=draw(st.none() | _text),
                seq=index,
            )
            for index in range(draw(st.integers(0, 2)))
        ]
        steps = [
            Reasoning(
                uuid=uuid4(),
                message_uuid=message_uuid,
                agui_id=draw(st.none() | _ident),
                content=draw(_text),
                encrypted_value=draw(st.none() | _text),
                seq=len(calls) + index,
            )
            for index in range(draw(st.integers(0, 1)))
        ]
        parts = draw(
            st.none()
            | st.just([])
            | st.lists(
                st.builds(TextPart, text=_text)
                | st.builds(
                    MediaPart,
                    type=st.just("image"),
                    source=st.just("url"),
                    value=st.just("https://example.com/a.png"),
                    mime_type=st.just("image/png"),
                ),
                max_size=2,
            )
        )
        form = Message("assistant", draw(st.lists(_content(), max_size=2))).to_dict()
        metadata = draw(
            st.sampled_from(
                [{}, {"tool_call_id": "c0-0"}, {"agent_framework": "not a form"}, {"k": 1}]
            )
            | st.just({"agent_framework": form})
        )
        records.append(
            StoredMessage(
                message_uuid=message_uuid,
                chat_uuid=chat_uuid,
                role=draw(st.sampled_from(list(Role))),
                content=draw(_text),
                name=draw(st.none() | _ident),
                agui_id=draw(st.none() | _ident),
                content_parts=parts,
                metadata=metadata,
                tool_calls=calls,
                reasonings=steps,
                seq=seq,
            )
        )
    return records


@settings(max_examples=200, deadline=None)
@given(records=_records())
def test_every_record_reads_as_the_general_read_reads_it(records: list[StoredMessage]) -> None:
    readings = [plain_reading(record) for record in records]
    answered: set[str] = set()
    reference = [m.to_dict() for record in records for m in read_record(record, answered)]

    assert [m.to_dict() for m in messages_of(records, readings, set())] == reference
    assert [m.to_dict() for m in records_to_messages(records)] == reference


async def _reference(store: Store, provider: ThreadstoreHistoryProvider) -> list[dict[str, Any]]:
    chat = await provider.get_chat("s", {"thread_id": "s"})
    assert chat is not None
    return [m.to_dict() for m in records_to_messages(await store.get_chat_messages(chat.chat_uuid))]


async def test_a_load_after_appends_and_an_edit_reads_the_history_as_it_is_now(
    store: Store,
) -> None:
    from threadstore import MessageCreate, MessageUpdate

    provider = _provider(store)
    state: dict[str, Any] = {"thread_id": "s"}
    await provider.save_messages(
        "s", [Message("user", ["one"]), Message("assistant", ["two"], message_id="a1")], state=state
    )
    first = await provider.get_messages("s", state=state)
    chat = await provider.get_chat("s", state)
    assert chat is not None
    await provider.save_messages("s", [Message("user", ["three"])], state=state)
    added = await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, content="four", agui_id="a2")
    )
    second = await provider.get_messages("s", state=state)
    await store.update_message(added.message_uuid, MessageUpdate(content="four, edited"))
    third = await provider.get_messages("s", state=state)

    assert [m.text for m in first] == ["one", "two"]
    assert [m.text for m in second] == ["one", "two", "three", "four"]
    assert [m.text for m in third] == ["one", "two", "three", "four, edited"]
    assert [m.to_dict() for m in third] == await _reference(store, provider)


async def test_loads_running_while_the_chat_grows_each_read_a_whole_history(
    store: Store,
) -> None:
    from threadstore import ChatCreate, MessageCreate
    from threadstore._steps import OFF_LOOP_ITEMS
    from threadstore.store.ops import CreateMessage

    user = uuid4()
    chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id="s"))
    await store.apply_writes(
        [
            CreateMessage(MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content=f"m{i}"))
            for i in range(OFF_LOOP_ITEMS + 50)
        ]
    )
    provider = ThreadstoreHistoryProvider(store, user)
    before = await _reference(store, provider)

    async def append() -> None:
        await provider.save_messages(
            "s", [Message("assistant", ["late"])], state={"thread_id": "s"}
        )

    loads = await asyncio.gather(
        provider.get_messages("s", state={"thread_id": "s"}),
        append(),
        provider.get_messages("s", state={"thread_id": "s"}),
    )
    after = await _reference(store, provider)

    assert after == [*before, Message("assistant", ["late"]).to_dict()]
    for loaded in (loads[0], loads[2]):
        assert [m.to_dict() for m in loaded] in (before, after)
    again = await provider.get_messages("s", state={"thread_id": "s"})
    assert [m.to_dict() for m in again] == after
