"""The one reading of an AG-UI stream, and the projections that read through it.

``codec.StreamReader`` and ``codec.READING`` decide what every event opens, extends and
closes; the storage fold, the chat engine's reducer and the server's reconnect snapshot
are projections of that reading. These tests hold the reading to its own laws, require
a rule in every projection for every event it lets through, and check that the
reconnect snapshot of a run cut anywhere rebuilds the stored history. That the stored
history's UI form equals the chat engine's live turn, for generated streams in order and
out of it, is ``tests/test_chat_parts_order.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any, get_args
from uuid import UUID

from ag_ui.core import (
    ActivitySnapshotEvent,
    BaseEvent,
    Event,
    ReasoningMessageChunkEvent,
    ReasoningMessageStartEvent,
    TextMessageChunkEvent,
    TextMessageStartEvent,
    ToolCallChunkEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from agui_scripts import ScriptedAgent, collect, run_input, user
from chat_streams import END, RUN, streams, text, thinking, tool
from face_support import on_the_store_fixture
from threadstore import Store
from threadstore.agui import StorageAgent
from threadstore.agui.connect import opened_messages, run_hydration
from threadstore.chat import _reducer
from threadstore.codec import READING, StreamReader, event_kind, translate_messages
from threadstore.codec import _stream as reading
from threadstore.codec.thinking import ThinkingStartEvent
from threadstore.fold import ConversationFold
from threadstore.server._routes_agui import _hydration_frames

USER = UUID("00000000-0000-4000-8000-0000000000e7")


def _wire_types() -> set[str]:
    """Every event type AG-UI defines (``ag_ui.core.Event``), and the retired THINKING_*."""
    types = set()
    for cls in (*get_args(get_args(Event)[0]), *reading._REWRITES):
        default = cls.model_fields["type"].default
        types.add(str(getattr(default, "value", default)))
    return types


# --- the reading's own laws -------------------------------------------------------------


def test_every_event_type_is_read_as_itself_or_rewritten_or_raw() -> None:
    rewritten = {event_kind(cls.model_construct()) for cls in reading._REWRITES}
    assert _wire_types() - set(READING) - rewritten == {"RAW"}


def test_every_projection_has_a_rule_for_every_event_the_reading_lets_through() -> None:
    fold_rules = set(ConversationFold._HANDLERS)
    turn_rules = {*_reducer._HANDLERS_BY_NAME, *_reducer._SUBAGENT_HANDLERS}
    assert set(READING) - fold_rules == set()
    # What the turn does not show, it says so by name: no event falls through unseen.
    assert set(READING) - turn_rules == set(_reducer.NOT_IN_THE_TURN)


@settings(max_examples=300, deadline=None)
@given(streams)
def test_reading_leaves_only_explicit_events_and_passes_is_its_shortcut(
    events: list[BaseEvent],
) -> None:
    reader = StreamReader("r-1")
    for event in events:
        before = reader
        if reader.passes(event):
            assert reader.read(event) == (reader, (event,))
        reader, read = reader.read(event)
        for one in read:
            kind = event_kind(one)
            assert kind in READING or kind == "RAW"
            if kind.endswith("_CHUNK"):
                # A chunk comes through only as the delta of the run it names.
                slot = reading._CHUNKS[type(one)][0]
                open_ = before.chunks[slot]
                assert open_ is not None and getattr(one, reading._CHUNKS[type(one)][1]) == (
                    open_.id
                )
    reader, ends = reader.close()
    assert reader.chunks == (None, None, None)
    assert all(event_kind(end).endswith("_END") for end in ends)


def test_a_chunk_run_ends_at_the_next_event_of_the_conversation_but_not_at_raw() -> None:
    from ag_ui.core import CustomEvent, RawEvent

    reader = StreamReader("r-1")
    reader, opened = reader.read(TextMessageChunkEvent(message_id="m", delta="a"))
    assert [event_kind(e) for e in opened] == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    reader, raw = reader.read(RawEvent(event={}))
    assert [event_kind(e) for e in raw] == ["RAW"]
    reader, more = reader.read(TextMessageChunkEvent(message_id="m", delta="b"))
    assert [event_kind(e) for e in more] == ["TEXT_MESSAGE_CHUNK"]
    reader, custom = reader.read(CustomEvent(name="n", value=1))
    assert [event_kind(e) for e in custom] == ["TEXT_MESSAGE_END", "CUSTOM"]


def test_thinking_events_read_as_reasoning_with_ids_made_for_the_run() -> None:
    _, (span,) = StreamReader("r-7").read(ThinkingStartEvent(title="plan"))
    assert event_kind(span) == "REASONING_START"
    assert span.message_id == "thinking-r-7-1"  # type: ignore[attr-defined]


# --- the reconnect snapshot ----------------------------------------------------------------


def _opened_by(events: list[BaseEvent]) -> list[tuple[str, str]]:
    return [(m.id, m.role) for m in opened_messages(events)]


def test_the_reconnect_snapshot_opens_what_chunks_start_as_their_explicit_form_would() -> None:
    chunked = [
        TextMessageChunkEvent(message_id="m", delta="a"),
        ReasoningMessageChunkEvent(message_id="r", delta="b"),
        ToolCallChunkEvent(tool_call_id="c", tool_call_name="f", parent_message_id="m", delta="{"),
        ToolCallChunkEvent(tool_call_id="d", tool_call_name="f", delta="{"),
    ]
    assert _opened_by(chunked) == [("m", "assistant"), ("r", "reasoning"), ("d", "assistant")]
    # A chunk naming nothing opens nothing the client could hold: its id is made up.
    assert _opened_by([TextMessageChunkEvent(delta="a")]) == []


def _client_applies(
    snapshot: list[dict[str, Any]], events: list[BaseEvent]
) -> list[tuple[str, str]]:
    """The (id, role) of the messages an AG-UI client holds after ``snapshot`` then
    ``events``: it creates a message at each START (one it holds already it keeps), a
    call's holder at TOOL_CALL_START unless it holds the named parent, a tool message at
    each result and an activity message at each snapshot. Chunks it reads as AG-UI's
    client does, START / CONTENT / END (the same reading the server's)."""
    held = [(m["id"], m["role"]) for m in snapshot]
    ids = {id for id, _ in held}

    def create(id: str, role: str) -> None:
        if id not in ids:
            held.append((id, role))
            ids.add(id)

    reader = StreamReader()
    for raw in events:
        reader, read = reader.read(raw)
        for event in read:
            if isinstance(event, TextMessageStartEvent):
                create(event.message_id, event.role or "assistant")
            elif isinstance(event, ReasoningMessageStartEvent):
                create(event.message_id, "reasoning")
            elif isinstance(event, ToolCallStartEvent):
                parent = event.parent_message_id
                if parent is None or parent not in ids:
                    create(parent or event.tool_call_id, "assistant")
            elif isinstance(event, ToolCallResultEvent):
                create(event.message_id, "tool")
            elif isinstance(event, ActivitySnapshotEvent):
                create(event.message_id, "activity")
    return held


Piece = Callable[[int], list[BaseEvent]]


def _piece() -> st.SearchStrategy[Piece]:
    """A well-formed piece, given its position, whose every message the stream names."""
    text_ids = st.sampled_from(["m-1", "m-2"])
    deltas = st.lists(st.text(alphabet="xy ", min_size=1, max_size=3), min_size=1, max_size=2)
    return st.one_of(
        st.builds(lambda i, d: lambda n: text(i, *d), text_ids, deltas),
        st.builds(
            lambda parent, d: lambda n: tool(f"c-{n}", "f", *d, parent=parent, result="ok"),
            text_ids,
            deltas,
        ),
        st.builds(lambda r, d: lambda n: thinking(r, *d), st.sampled_from(["r-1", "r-2"]), deltas),
        st.builds(
            lambda i, d: lambda n: [TextMessageChunkEvent(message_id=i, delta=x) for x in d],
            text_ids,
            deltas,
        ),
        st.builds(
            lambda a: (
                lambda n: [ActivitySnapshotEvent(message_id=a, activity_type="plan", content={})]
            ),
            st.sampled_from(["act-1", "act-2"]),
        ),
    )


async def _stored(store: Store, events: list[BaseEvent]) -> tuple[Any, list[Any]]:
    thread_id = f"thread-{uuid.uuid4()}"
    agent = StorageAgent("assistant", USER, store, store, ScriptedAgent(events), run_repo=store)
    question = user("u-1", "Where is it?")
    await collect(agent.run(run_input(thread_id, run_id="r-1", messages=[question])))
    chat = await store.get_chat_by_thread_id(USER, thread_id)
    assert chat is not None
    return chat, await store.get_chat_messages(chat.chat_uuid)


def _snapshot_messages(frames: list[bytes]) -> list[dict[str, Any]]:
    """The messages of the ``MESSAGES_SNAPSHOT`` among SSE ``frames``."""
    for frame in b"".join(frames).decode().split("\n\n"):
        data = next((line[6:] for line in frame.splitlines() if line.startswith("data: ")), None)
        if data is not None and json.loads(data)["type"] == "MESSAGES_SNAPSHOT":
            return list(json.loads(data)["messages"])
    raise AssertionError("no MESSAGES_SNAPSHOT")


@on_the_store_fixture
@given(pieces=st.lists(_piece(), min_size=1, max_size=6), data=st.data())
async def test_a_reconnect_at_any_point_of_a_run_rebuilds_the_stored_history(
    store: Store, pieces: list[Piece], data: st.DataObject
) -> None:
    events = [*RUN, *(e for n, piece in enumerate(pieces) for e in piece(n)), *END]
    cut = data.draw(st.integers(1, len(events) - 1), label="cut")
    # The client reconnects after ``cut`` events: the store holds the run up to there,
    # and the server hydrates it from that history and the run's events so far.
    chat, history = await _stored(store, events[:cut])
    hydration = await run_hydration(chat, history, "r-1", list(enumerate(events[:cut], 1)))
    frames = await _hydration_frames(hydration)
    _, whole = await _stored(store, events)

    # It applies the snapshot, then the run's events: those replayed, then the rest.
    held = _client_applies(_snapshot_messages(frames), events[1:])

    stored = [(m.id, m.role) for m in translate_messages(whole)]
    # Every stored message once, none besides. The stored order puts a tool result after
    # its call and reasoning before the answer it belongs to, as a model is given them;
    # a live client holds those where they streamed. Text messages keep one order.
    assert sorted(held) == sorted(stored)
    spoken = ("user", "assistant")
    assert [m for m in held if m[1] in spoken] == [m for m in stored if m[1] in spoken]
