"""Stored history keeps the order of what a message holds, as the live turn shows it.

The storage fold lists a message's text segments, reasoning, tool calls, steps and
activities in a parts order kept with the message, so ``ui_from_messages`` of the
stored history equals the sealed live turn part for part, on every backend.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from typing import Any
from uuid import UUID

import httpx
from ag_ui.core import (
    ActivitySnapshotEvent,
    BaseEvent,
    CustomEvent,
    RawEvent,
    ReasoningEncryptedValueEvent,
    ReasoningMessage,
    ReasoningMessageChunkEvent,
    ReasoningMessageEndEvent,
    RunErrorEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from hypothesis import given
from hypothesis import strategies as st

from agui_scripts import ScriptedAgent, collect, run_input, user
from chat_streams import END, RUN, fold, text, text_tool_text, thinking, tool
from conftest import StoreOpener
from face_support import on_the_store_fixture
from threadstore import Store
from threadstore.agui import StorageAgent
from threadstore.chat import DataPart, TextPart, UIMessage, seal_assistant_turn, ui_from_messages
from threadstore.codec._messages import translate_messages
from threadstore.models import CITATION_EVENT_NAME, Message
from threadstore.server import LOCAL_USER_UUID, create_app
from threadstore.transfer import ChatExport, export_chat, import_chat

USER = UUID("00000000-0000-4000-8000-0000000000d1")


async def store_run(store: Store, events: list[BaseEvent], thread_id: str = "thread-1") -> None:
    """Run a scripted agent through a StorageAgent: the events are stored."""
    agent = StorageAgent("assistant", USER, store, store, ScriptedAgent(events), run_repo=store)
    question = user(f"u-{thread_id}", "Where is it?")
    await collect(agent.run(run_input(thread_id, run_id="r-1", messages=[question])))


async def stored_messages(store: Store, thread_id: str = "thread-1") -> list[Message]:
    chat = await store.get_chat_by_thread_id(USER, thread_id)
    assert chat is not None
    return await store.get_chat_messages(chat.chat_uuid)


def as_ui(messages: list[Message]) -> list[UIMessage]:
    counter = itertools.count()
    return ui_from_messages(messages, lambda: f"gen-{next(counter)}")


async def test_text_tool_text_under_one_id_reloads_in_order(
    store: Store, store_url: str, open_test_store: StoreOpener
) -> None:
    live = seal_assistant_turn(fold(text_tool_text())).message
    await store_run(store, text_tool_text())
    # A reload: a store opened afresh on the same database (memory has only the one).
    reloaded = store if store_url.startswith("memory") else await open_test_store()

    _, answer = as_ui(await stored_messages(reloaded))

    assert [part.type for part in live.parts or ()] == ["step-start", "text", "tool", "text"]
    assert answer == live
    texts = [part.text for part in answer.parts or () if isinstance(part, TextPart)]
    assert texts == ["Let me look that up.", "It is sunny."]
    assert answer.content.encode() == "".join(texts).encode()
    (stored,) = [m for m in await stored_messages(reloaded) if m.agui_id == "msg-1"]
    assert stored.content == answer.content  # one message holds both segments


async def test_interleaved_messages_read_back_interleaved(store: Store) -> None:
    events = [
        *RUN,
        *thinking("r-1", "First ", "think."),
        *text("m-1", "One. "),
        *text("m-2", "Two. "),
        *tool("c-1", "search", "{}", parent="m-1", result="ok"),
        *text("m-1", "Three."),
        *END,
    ]
    live = seal_assistant_turn(fold(events)).message

    _, answer = as_ui(await store_messages_of(store, events))

    assert answer == live
    assert [p.type for p in answer.parts or ()] == ["reasoning", "text", "text", "tool", "text"]
    assert answer.content == "One. Two. Three."


async def store_messages_of(store: Store, events: list[BaseEvent]) -> list[Message]:
    thread_id = f"thread-{uuid.uuid4()}"
    await store_run(store, events, thread_id)
    return await stored_messages(store, thread_id)


def custom_parts_stream() -> list[BaseEvent]:
    """CUSTOM events before any message, between text and a tool call, and one replacing."""
    return [
        *RUN,
        CustomEvent(name="status", value={"id": "job", "pct": 10}),
        *text("m-1", "Searching. "),
        CustomEvent(name=CITATION_EVENT_NAME, value={"url": "https://example.org/a"}),
        *tool("c-1", "search", "{}", parent="m-1", result="found"),
        CustomEvent(name="status", value={"id": "job", "pct": 90, "thumb": b"\x89PNG"}),
        CustomEvent(name="note", value=["no id", 1]),
        *text("m-1", "Found it."),
        RawEvent(event={"provider": "chunk"}),
        *END,
    ]


async def test_custom_parts_reload_where_they_streamed(
    store: Store, store_url: str, open_test_store: StoreOpener
) -> None:
    live = seal_assistant_turn(fold(custom_parts_stream())).message
    await store_run(store, custom_parts_stream())
    reloaded = store if store_url.startswith("memory") else await open_test_store()

    _, answer = as_ui(await stored_messages(reloaded))

    assert answer == live
    assert [p.type for p in answer.parts or ()] == [
        "data",
        "text",
        "citation",
        "tool",
        "data",
        "text",
    ]
    status = (answer.parts or ())[0]
    assert isinstance(status, DataPart)  # replaced in place: its place, the latest payload
    assert status.payload == {"id": "job", "pct": 90, "thumb": b"\x89PNG"}


async def test_a_run_that_only_sent_custom_parts_stores_none_of_them(store: Store) -> None:
    # As the seed layer: with no message of the agent's to attach them to, nothing is kept.
    events = [*RUN, StepStartedEvent(step_name="plan"), CustomEvent(name="card", value={"a": 1})]
    live = seal_assistant_turn(fold([*events, *END])).message

    rendered = as_ui(await store_messages_of(store, [*events, *END]))

    assert [p.type for p in live.parts or ()] == ["step-start", "data"]  # shown while live
    assert [m.role for m in rendered] == ["user"]


async def test_custom_parts_survive_export_and_import(store: Store) -> None:
    live = seal_assistant_turn(fold(custom_parts_stream())).message
    await store_run(store, custom_parts_stream(), "exported")
    chat = await store.get_chat_by_thread_id(USER, "exported")
    assert chat is not None

    text = (await export_chat(store, chat)).model_dump_json()
    imported = await import_chat(
        store, ChatExport.model_validate_json(text), user_uuid=uuid.uuid4()
    )

    _, answer = as_ui(await store.get_chat_messages(imported.chat_uuid))
    assert answer == live


async def test_old_rows_without_a_parts_order_read_in_bucket_order(store: Store) -> None:
    events = [*RUN, *text("m-1", "Before. "), *tool("c-1", "f", "{}", result="r")]
    events += [*text("m-1", "After."), *thinking("r-1", "Late thought."), *END]
    messages = await store_messages_of(store, events)
    for message in messages:  # as rows written before the order was kept
        for record in [message, *message.tool_calls, *message.reasonings]:
            record.metadata.pop("parts", None)

    _, answer = as_ui(messages)

    # Bucket order: each message's reasoning, its text, its tool calls.
    assert [p.type for p in answer.parts or ()] == ["text", "tool", "reasoning"]
    assert answer.content == "Before. After."


# --- the stored projection equals the live turn, for generated streams ----------------

_deltas = st.lists(st.text(alphabet="xyz ⚡\n", min_size=1, max_size=5), min_size=1, max_size=3)
Piece = Callable[[int], list[BaseEvent]]


def _pieces() -> st.SearchStrategy[Piece]:
    """A well-formed piece of a stream, given its position (for ids that must be new)."""
    text_ids = st.sampled_from(["m-1", "m-2"])
    return st.one_of(
        st.builds(lambda i, d: lambda n: text(i, *d), text_ids, _deltas),
        st.builds(
            lambda parent, d, result: (
                lambda n: tool(f"c-{n}", "search", *d, parent=parent, result=result)
            ),
            st.none() | text_ids,
            _deltas,
            st.none() | st.just("done"),
        ),
        st.builds(lambda r, d: lambda n: thinking(r, *d), st.sampled_from(["r-1", "r-2"]), _deltas),
        st.builds(
            lambda i, d: lambda n: [TextMessageChunkEvent(message_id=i, delta=x) for x in d],
            text_ids,
            _deltas,
        ),
        st.builds(
            lambda r, d: lambda n: [ReasoningMessageChunkEvent(message_id=r, delta=x) for x in d],
            st.sampled_from(["r-1", "r-2"]),
            _deltas,
        ),
        st.builds(
            lambda r: (
                lambda n: [
                    ReasoningEncryptedValueEvent(
                        subtype="message", entity_id=r, encrypted_value="opaque"
                    )
                ]
            ),
            st.sampled_from(["r-1", "r-2"]),
        ),
        st.builds(
            lambda name: (
                lambda n: [
                    StepStartedEvent(step_name=name),
                    StepFinishedEvent(step_name=name),
                ]
            ),
            st.sampled_from(["plan", "act"]),
        ),
        st.builds(
            lambda a, k: (
                lambda n: [
                    ActivitySnapshotEvent(message_id=a, activity_type="plan", content={"n": k})
                ]
            ),
            st.sampled_from(["act-1", "act-2"]),
            st.integers(0, 3),
        ),
        st.builds(
            lambda name, key, value: lambda n: [CustomEvent(name=name, value=_custom(key, value))],
            # "plan" and "act-1" as the activities' type and id: they must not mix.
            st.sampled_from(["status", "plan", CITATION_EVENT_NAME]),
            st.none() | st.sampled_from(["job-1", "job-2", "act-1"]) | st.integers(0, 2),
            _payloads,
        ),
        st.just(lambda n: [RawEvent(event={"provider": "chunk", "n": n})]),
        st.builds(
            lambda steps: lambda n: _interleaved(n, steps),
            st.lists(
                st.tuples(st.sampled_from(["m-1", "m-2", "call"]), _delta), min_size=1, max_size=6
            ),
        ),
        st.builds(
            lambda d, with_tool, failed: lambda n: _sub_agent(n, d, with_tool, failed),
            _deltas,
            st.booleans(),
            st.booleans(),
        ),
    )


def _odd_pieces() -> st.SearchStrategy[Piece]:
    """A piece AG-UI allows but leaves to the reader (chunks naming nothing, a call
    streamed as chunks), or one out of order (an end, a delta, for nothing open)."""
    return st.one_of(
        st.builds(lambda d: lambda n: [TextMessageChunkEvent(delta=x) for x in d], _deltas),
        st.builds(lambda d: lambda n: [ReasoningMessageChunkEvent(delta=x) for x in d], _deltas),
        st.builds(
            lambda d, named: (
                lambda n: [
                    ToolCallChunkEvent(
                        tool_call_id=f"k-{n}" if named else None, tool_call_name="f", delta=x
                    )
                    for x in d
                ]
            ),
            _deltas,
            st.booleans(),
        ),
        st.builds(
            lambda kind: lambda n: [kind],
            st.sampled_from(
                [
                    TextMessageEndEvent(message_id="m-9"),
                    ToolCallEndEvent(tool_call_id="c-9"),
                    ReasoningMessageEndEvent(message_id="r-9"),
                ]
            ),
        ),
        st.builds(lambda d: lambda n: [ToolCallArgsEvent(tool_call_id=f"u-{n}", delta=d)], _delta),
        st.builds(
            lambda d: lambda n: [TextMessageContentEvent(message_id=f"o-{n}", delta=d)], _delta
        ),
    )


def _sub_agent(n: int, deltas: list[str], with_tool: bool, failed: bool) -> list[BaseEvent]:
    """A sub-agent's text, data and maybe a call; it finishes or fails."""
    sub = f"sub-{n}"
    end: BaseEvent = (
        SubagentErrorEvent(subagent_run_id=sub, message="lost")
        if failed
        else SubagentFinishedEvent(subagent_run_id=sub)
    )
    return [
        SubagentStartedEvent(subagent_run_id=sub, name="researcher"),
        *text(f"s-{n}", *deltas, subagent=sub),
        CustomEvent(name="status", value={"id": "job-1"}, subagent_run_id=sub),
        *(tool(f"sc-{n}", "f", "{}", subagent=sub) if with_tool else []),
        end,
    ]


_delta = st.text(alphabet="xyz ⚡\n", min_size=1, max_size=5)
_payloads = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(alphabet="ab ⚡", max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("pqr"), inner),
    max_leaves=6,
)


def _custom(key: object, value: object) -> object:
    """A CUSTOM value; with a key, an object carrying it as ``id`` (a string one addresses)."""
    return value if key is None else {"id": key, "value": value}


def _interleaved(n: int, steps: list[tuple[str, str]]) -> list[BaseEvent]:
    """Two text messages and a tool call streaming at once, their deltas interleaved."""
    call = f"ic-{n}"
    events: list[BaseEvent] = [
        TextMessageStartEvent(message_id="m-1"),
        TextMessageStartEvent(message_id="m-2"),
        ToolCallStartEvent(tool_call_id=call, tool_call_name="search", parent_message_id="m-1"),
    ]
    for target, delta in steps:
        if target == "call":
            events.append(ToolCallArgsEvent(tool_call_id=call, delta=delta))
        else:
            events.append(TextMessageContentEvent(message_id=target, delta=delta))
    events += [
        ToolCallEndEvent(tool_call_id=call),
        TextMessageEndEvent(message_id="m-2"),
        TextMessageEndEvent(message_id="m-1"),
    ]
    return events


_endings = st.sampled_from(["finished", "error", "truncated"])


def _stream(pieces: list[Piece], ending: str) -> list[BaseEvent]:
    events: list[BaseEvent] = list(RUN)
    for n, piece in enumerate(pieces):
        events += piece(n)
    if ending == "finished":
        events += END
    elif ending == "error":
        events.append(RunErrorEvent(message="boom"))
    return events


def _agent_wrote(events: list[BaseEvent], live: UIMessage) -> bool:
    """Whether the stream opened a message of the agent's (an activity is one)."""
    if any(isinstance(event, ActivitySnapshotEvent) for event in events):
        return True
    return any(part.type in ("text", "reasoning", "tool") for part in live.parts or ())


@on_the_store_fixture
@given(pieces=st.lists(_pieces(), min_size=1, max_size=8), ending=_endings)
async def test_the_stored_projection_equals_the_live_turn_on_every_backend(
    store: Store, pieces: list[Piece], ending: str
) -> None:
    await _check_projections_agree(store, _stream(pieces, ending))


@on_the_store_fixture
@given(
    pieces=st.lists(st.one_of(_pieces(), _odd_pieces()), min_size=1, max_size=8),
    # Ended as AG-UI requires: cut short too, such a stream has no one truth to agree on.
    ending=st.sampled_from(["finished", "error"]),
)
async def test_the_projections_agree_on_streams_out_of_order_or_left_to_the_reader(
    store: Store, pieces: list[Piece], ending: str
) -> None:
    await _check_projections_agree(store, _stream(pieces, ending))


async def _check_projections_agree(store: Store, events: list[BaseEvent]) -> None:
    """The stored history's UI form equals the live turn the chat engine folds."""
    live = seal_assistant_turn(fold(events)).message

    rendered = as_ui(await store_messages_of(store, events))

    question, *answers = rendered
    assert question.role == "user"
    if not _agent_wrote(events, live):
        # Steps and CUSTOM parts are listed in the agent's messages: a run that wrote none
        # stores none of them (the live turn showed them while it streamed).
        assert answers == []
        return
    (answer,) = answers
    expected: dict[str, Any] = {}
    if live.id == "turn-1":  # the stream named no assistant message: the store made an id
        expected["id"] = answer.id
    assert answer == live.model_copy(update=expected)


# --- reasoning nests in the answer; the replay stays as AG-UI lists it ----------------


def replayed(messages: list[Message]) -> list[tuple[str, str, str | None]]:
    out = translate_messages(messages)
    return [(m.role, m.id, getattr(m, "subagent_run_id", None)) for m in out]


async def test_reasoning_before_the_answer_nests_in_it_and_replays_before_it(
    store: Store,
) -> None:
    events = [
        *RUN,
        *thinking("r-1", "Need ", "a lookup."),
        *text("m-1", "Let me look."),
        *tool("c-1", "search", "{}", parent="m-1", result="found"),
        *END,
    ]
    messages = await store_messages_of(store, events)

    user_message, answer = messages
    assert (answer.role, answer.agui_id, answer.content) == ("assistant", "m-1", "Let me look.")
    assert [(r.agui_id, r.content) for r in answer.reasonings] == [("r-1", "Need a lookup.")]
    # The next run reads it as an AG-UI client holds it: the reasoning message first.
    assert replayed(messages) == [
        ("user", user_message.agui_id, None),
        ("reasoning", "r-1", None),
        ("assistant", "m-1", None),
        ("tool", "c-1-result", None),
    ]
    reasoning = translate_messages(messages)[1]
    assert isinstance(reasoning, ReasoningMessage) and reasoning.content == "Need a lookup."


async def test_reasoning_while_the_answer_streams_replays_after_it(store: Store) -> None:
    events = [
        *RUN,
        TextMessageStartEvent(message_id="m-1"),
        TextMessageContentEvent(message_id="m-1", delta="Hmm. "),
        *thinking("r-1", "Second thoughts."),
        TextMessageContentEvent(message_id="m-1", delta="Yes."),
        TextMessageEndEvent(message_id="m-1"),
        *END,
    ]
    messages = await store_messages_of(store, events)

    _, answer = messages
    assert [r.agui_id for r in answer.reasonings] == ["r-1"]
    assert [role for role, _, _ in replayed(messages)] == ["user", "assistant", "reasoning"]
    (ui,) = as_ui(messages)[1:]
    assert [p.type for p in ui.parts or ()] == ["text", "reasoning", "text"]


async def test_sub_agent_prose_is_stored_tagged_and_replayed_as_the_sub_agent_s(
    store: Store,
) -> None:
    events = [
        *RUN,
        SubagentStartedEvent(subagent_run_id="sub-1", name="researcher"),
        *text("s-1", "Found three sources.", subagent="sub-1"),
        SubagentFinishedEvent(subagent_run_id="sub-1"),
        *text("m-1", "Here is what I found."),
        *END,
    ]
    messages = await store_messages_of(store, events)

    _, helper, answer = messages
    assert helper.metadata["subagent_run_id"] == "sub-1"
    assert "subagent_run_id" not in answer.metadata
    assert ("assistant", "s-1", "sub-1") in replayed(messages)
    assert ("assistant", "m-1", None) in replayed(messages)
    (ui,) = as_ui(messages)[1:]
    assert ui.content == "Here is what I found."  # not the sub-agent's words


async def test_an_answer_takes_the_message_holding_its_reasoning_after_it_was_written(
    store: Store, store_url: str, open_test_store: StoreOpener
) -> None:
    events = [*RUN, *thinking("r-1", "Think."), *text("m-1", "Answer."), *END]
    agent = StorageAgent("assistant", USER, store, store, ScriptedAgent(events), run_repo=store)

    async def written(event: BaseEvent) -> None:
        if event.type == "REASONING_END":
            await agent.persisted()  # the holder is in the store before the answer names it
            (_, holder) = await stored_messages(store, "held")
            assert (holder.agui_id, holder.content, len(holder.reasonings)) == (None, "", 1)

    await collect(agent.run(run_input("held", "r-1", [user("u-held")])), written)
    reloaded = store if store_url.startswith("memory") else await open_test_store()

    (_, answer) = await stored_messages(reloaded, "held")
    assert (answer.agui_id, answer.content, answer.status) == ("m-1", "Answer.", "complete")
    assert [r.agui_id for r in answer.reasonings] == ["r-1"]
    assert await reloaded.get_message(answer.message_uuid) == answer


async def test_the_ui_view_of_a_chat_shows_the_stored_order(store: Store) -> None:
    events = text_tool_text()
    agent = StorageAgent("assistant", LOCAL_USER_UUID, store, store, ScriptedAgent(events))
    await collect(agent.run(run_input("ui-order", "r-1", [user("u-ui", "Weather?")])))
    chat = await store.get_chat_by_thread_id(LOCAL_USER_UUID, "ui-order")
    assert chat is not None
    app = create_app(store, agent="demo", demo_delay=0)

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            page = (await http.get(f"/api/chats/{chat.chat_uuid}/ui")).json()

    _, answer = page["items"]
    assert [part["type"] for part in answer["parts"]] == ["step-start", "text", "tool", "text"]
    assert [p["text"] for p in answer["parts"] if p["type"] == "text"] == [
        "Let me look that up.",
        "It is sunny.",
    ]


async def test_the_ui_view_of_a_chat_shows_its_custom_parts(store: Store) -> None:
    agent = StorageAgent(
        "assistant", LOCAL_USER_UUID, store, store, ScriptedAgent(custom_parts_stream())
    )
    await collect(agent.run(run_input("ui-custom", "r-1", [user("u-uc", "Search?")])))
    chat = await store.get_chat_by_thread_id(LOCAL_USER_UUID, "ui-custom")
    assert chat is not None
    app = create_app(store, agent="demo", demo_delay=0)

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            response = await http.get(f"/api/chats/{chat.chat_uuid}/ui")

    assert response.status_code == 200, response.text
    _, answer = response.json()["items"]
    parts = answer["parts"]
    assert [p["type"] for p in parts] == ["data", "text", "citation", "tool", "data", "text"]
    assert parts[0] == {  # bytes in a payload travel as base64, as in every UI message
        "type": "data",
        "name": "status",
        "id": "job",
        "payload": {"id": "job", "pct": 90, "thumb": "iVBORw=="},
    }
    assert parts[2]["citation"] == {"url": "https://example.org/a"}
