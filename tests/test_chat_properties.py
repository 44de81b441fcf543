"""Properties of the chat engine over generated AG-UI streams and histories."""

from __future__ import annotations

from ag_ui.core import AssistantMessage, BaseEvent, UserMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_streams import fold, streams
from threadstore.chat import (
    AssistantTurn,
    ReasoningPart,
    TextPart,
    ToolPart,
    apply_event,
    canonical_from_ui,
    create_assistant_turn,
    seal_assistant_turn,
    ui_from_messages,
)

# Folding is fast, so each property sees more streams than hypothesis's default 100.
generated = settings(max_examples=150, deadline=None)


def dump(event: BaseEvent) -> dict[str, object]:
    return event.model_dump(mode="json")


@generated
@given(streams, st.data())
def test_folding_never_changes_the_turn_or_the_event_it_was_given(
    events: list[BaseEvent], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(events)))
    prefix, suffix = events[:cut], events[cut:]
    events_before = [dump(event) for event in events]
    middle = fold(prefix)
    # Two continuations from the same turn: neither may show through in the other or in it.
    left = middle
    for event in suffix:
        left = apply_event(left, event)
    right = middle
    for event in reversed(suffix):
        right = apply_event(right, event)

    assert middle.as_dict() == fold(prefix).as_dict()
    assert left.as_dict() == fold(events).as_dict()
    assert right.as_dict() == fold(prefix + suffix[::-1]).as_dict()
    assert [dump(event) for event in events] == events_before


@generated
@given(streams)
def test_every_event_gives_a_new_turn(events: list[BaseEvent]) -> None:
    turn = create_assistant_turn("t")
    for event in events:
        nxt = apply_event(turn, event)
        assert nxt is not turn
        turn = nxt


@generated
@given(streams)
def test_sealing_twice_returns_the_identical_object(events: list[BaseEvent]) -> None:
    turn = fold(events)
    sealed = seal_assistant_turn(turn)

    assert seal_assistant_turn(sealed) is sealed
    assert all(
        part.state == "done"
        for part in sealed.message.parts or ()
        if isinstance(part, TextPart | ReasoningPart)
    )
    for frame in sealed.sub_agents or ():
        assert seal_assistant_turn(frame.turn) is frame.turn


def check_buckets(turn: AssistantTurn) -> None:
    message = turn.message
    parts = message.parts or ()
    assert message.content == "".join(p.text for p in parts if isinstance(p, TextPart))
    thoughts = [p for p in parts if isinstance(p, ReasoningPart)]
    expected = "".join(p.text for p in thoughts if not p.encrypted) if thoughts else None
    assert message.reasoning == expected
    referenced = [p.tool_call_id for p in parts if isinstance(p, ToolPart)]
    assert referenced == [c.tool_call_id for c in message.tool_calls or ()]
    assert (message.parts is None) == (turn.part_count == 0)
    assert len(parts) == turn.part_count


@generated
@given(streams)
def test_buckets_hold_exactly_the_text_of_the_parts(events: list[BaseEvent]) -> None:
    turn = fold(events)

    check_buckets(turn)
    check_buckets(seal_assistant_turn(turn))
    for frame in turn.sub_agents or ():
        check_buckets(frame.turn)
        assert 0 <= frame.after_part <= turn.part_count


_text = st.text(min_size=1, max_size=12)


@st.composite
def text_histories(draw: st.DrawFn) -> list[UserMessage | AssistantMessage]:
    """User and assistant text messages, in any order, with unique ids."""
    roles = draw(st.lists(st.sampled_from(["user", "assistant"]), max_size=8))
    history: list[UserMessage | AssistantMessage] = []
    for n, role in enumerate(roles):
        content = draw(_text)
        if role == "user":
            history.append(UserMessage(id=f"u{n}", content=content))
        else:
            history.append(AssistantMessage(id=f"a{n}", content=content))
    return history


@generated
@given(text_histories())
def test_text_only_histories_round_trip(history: list[UserMessage | AssistantMessage]) -> None:
    before = [m.model_dump() for m in history]
    ui = ui_from_messages(history, lambda: "generated")

    assert canonical_from_ui(ui) == history
    assert [m.model_dump() for m in history] == before
