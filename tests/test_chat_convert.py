"""UI messages from AG-UI or stored history, and back to canonical AG-UI messages."""

from __future__ import annotations

import itertools
from uuid import uuid4

from ag_ui.core import (
    AssistantMessage,
    DataSource,
    FunctionCall,
    ImagePart,
    ReasoningMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ag_ui.core import TextPart as AguiTextPart

from chat_streams import fold, text_tool_text
from threadstore.chat import (
    FilePart,
    ReasoningPart,
    TextPart,
    ToolPart,
    UIMessage,
    UIToolCall,
    assistant_message_from_turn,
    canonical_from_ui,
    tool_result_message,
    ui_from_messages,
)
from threadstore.models import MediaPart, Message, Reasoning, Role
from threadstore.models import TextPart as StoredTextPart
from threadstore.models import ToolCall as StoredToolCall

CHAT = uuid4()


def ids(prefix: str = "gen"):  # type: ignore[no-untyped-def]
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter)}"


def call(call_id: str, name: str = "search", arguments: str = '{"q": "x"}') -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))


AGUI_HISTORY = [
    SystemMessage(id="s", content="be brief"),
    UserMessage(id="u1", content="weather?"),
    ReasoningMessage(id="r1", content="need a tool"),
    AssistantMessage(id="a1", content="Let me look.", tool_calls=[call("c1")]),
    ToolMessage(id="c1-result", tool_call_id="c1", content="sunny"),
    AssistantMessage(id="a2", content="It is sunny."),
    UserMessage(id="u2", content="thanks"),
]


def test_tool_results_merge_into_the_turn_and_system_messages_are_not_rendered() -> None:
    ui = ui_from_messages(AGUI_HISTORY, ids())

    assert [(m.id, m.role) for m in ui] == [("u1", "user"), ("a1", "assistant"), ("u2", "user")]
    turn = ui[1]
    assert turn.parts == (
        ReasoningPart(text="need a tool"),
        TextPart(text="Let me look."),
        ToolPart(tool_call_id="c1"),
        TextPart(text="It is sunny."),
    )
    assert turn.content == "Let me look.It is sunny."
    assert turn.reasoning == "need a tool"
    (c1,) = turn.tool_calls or ()
    assert (c1.input, c1.output, c1.state) == ({"q": "x"}, "sunny", "result")


def test_a_sub_agents_messages_are_not_rendered_as_the_assistants_words() -> None:
    history = [
        UserMessage(id="u", content="research this"),
        AssistantMessage(id="a", content="Delegating."),
        AssistantMessage(id="s", content="child notes", subagent_run_id="sub-1"),
    ]
    stored_child = stored(Role.ASSISTANT, agui_id="s2", content="stored child notes")
    stored_child.metadata["subagent_run_id"] = "sub-2"

    ui = ui_from_messages([*history, stored_child], ids())

    assert [(m.id, m.content) for m in ui] == [("u", "research this"), ("a", "Delegating.")]


def test_canonical_from_ui_keeps_the_interleave_and_answers_every_executed_call() -> None:
    ui = ui_from_messages(AGUI_HISTORY, ids())
    canonical = canonical_from_ui(ui)

    assert [m.role for m in canonical] == [
        "user",
        "reasoning",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert canonical[2] == AGUI_HISTORY[3]
    assert canonical[3] == AGUI_HISTORY[4]
    assert canonical[4].content == "It is sunny."
    assert ui_from_messages(canonical, ids()) == ui


def test_a_live_turn_converts_to_history_that_renders_the_same_parts() -> None:
    turn = fold(text_tool_text())
    canonical = canonical_from_ui([turn.message])
    (rendered,) = ui_from_messages(canonical, ids())

    live_parts = [p for p in turn.message.parts or () if p.type != "step-start"]
    assert list(rendered.parts or ()) == live_parts
    assert rendered.content == turn.message.content
    assert rendered.tool_calls == tuple(
        c.model_copy(update={"run_state": "output-available"})
        for c in turn.message.tool_calls or ()
    )


def test_a_call_still_waiting_for_its_result_stays_a_bare_tool_call() -> None:
    message = UIMessage(
        id="a",
        role="assistant",
        tool_calls=(UIToolCall(tool_call_id="c", tool_name="approve", arguments="{}"),),
        parts=(ToolPart(tool_call_id="c"),),
    )

    assert canonical_from_ui([message]) == [
        AssistantMessage(id="a", tool_calls=[call("c", "approve", "{}")])
    ]


def test_reasoning_encryption_files_and_call_metadata_survive_the_round_trip() -> None:
    image = ImagePart(source=DataSource(value="aGk=", mime_type="image/png"))
    history = [
        UserMessage(id="u", content=[AguiTextPart(text="what is this?"), image]),
        ReasoningMessage(id="r", content="looking", encrypted_value="opaque"),
        AssistantMessage(
            id="a",
            tool_calls=[
                ToolCall(
                    id="c",
                    function=FunctionCall(name="zoom", arguments="{}"),
                    encrypted_value="thought-signature",
                    metadata={"provider": {"k": 1}},
                )
            ],
        ),
    ]

    ui = ui_from_messages(history, ids())
    assert ui[0].parts == (
        TextPart(text="what is this?"),
        FilePart(media_type="image/png", data="aGk=", source="data", kind="image"),
    )
    assert ui[1].parts[1] == ReasoningPart(text="opaque", encrypted=True)  # type: ignore[index]
    back = canonical_from_ui(ui)
    assert back[0] == history[0]
    assert (back[1].content, back[1].encrypted_value) == ("looking", "opaque")  # type: ignore[union-attr]
    assert back[2] == history[2]


def test_without_parts_a_message_collapses_to_bucket_order() -> None:
    message = UIMessage(
        id="a",
        role="assistant",
        content="answer",
        reasoning="thought",
        tool_calls=(UIToolCall(tool_call_id="c", tool_name="f", arguments="{}"),),
    )

    roles = [(m.role, getattr(m, "content", None)) for m in canonical_from_ui([message])]
    assert roles == [("reasoning", "thought"), ("assistant", "answer")]


def stored(role: Role, run: str | None = "run-1", **fields: object) -> Message:
    return Message(message_uuid=uuid4(), chat_uuid=CHAT, role=role, run_id=run, **fields)  # type: ignore[arg-type]


def test_stored_messages_of_one_run_render_as_one_turn_in_bucket_order() -> None:
    assistant = stored(Role.ASSISTANT, agui_id="m1", content="Here it is.")
    assistant.reasonings = [
        Reasoning(uuid=uuid4(), message_uuid=assistant.message_uuid, content="hmm")
    ]
    assistant.tool_calls = [
        StoredToolCall(
            uuid=uuid4(),
            message_uuid=assistant.message_uuid,
            tool_call_id="c1",
            name="search",
            arguments='{"q": 1}',
            content="result",
        )
    ]
    history = [
        stored(Role.SYSTEM, run=None, content="sys"),
        stored(Role.USER, run=None, content="hi"),
        assistant,
        stored(Role.ASSISTANT, agui_id="m2", content="More."),
        stored(Role.USER, run=None, content="bye", agui_id="u2"),
    ]

    ui = ui_from_messages(history, ids())

    assert [(m.id, m.role) for m in ui] == [("gen-1", "user"), ("m1", "assistant"), ("u2", "user")]
    assert ui[1].parts == (
        ReasoningPart(text="hmm"),
        TextPart(text="Here it is."),
        ToolPart(tool_call_id="c1"),
        TextPart(text="More."),
    )
    assert ui[1].tool_calls[0].output == "result"  # type: ignore[index]


def test_stored_user_attachments_keep_their_bytes() -> None:
    message = stored(
        Role.USER,
        agui_id="u",
        content_parts=[
            StoredTextPart(text="see"),
            MediaPart(type="image", data=b"\x89PNG", mime_type="image/png"),
            MediaPart(type="document", source="url", value="https://example.org/a.pdf"),
        ],
    )

    (ui,) = ui_from_messages([message], ids())

    assert ui.parts == (
        TextPart(text="see"),
        FilePart(media_type="image/png", data=b"\x89PNG", kind="image"),
        FilePart(
            media_type="",
            data="https://example.org/a.pdf",
            url="https://example.org/a.pdf",
            source="url",
            kind="document",
        ),
    )
    (user,) = canonical_from_ui([ui])
    assert isinstance(user, UserMessage) and not isinstance(user.content, str)
    assert user.content[1].source.value == "iVBORw=="  # type: ignore[union-attr]


def test_assistant_message_from_turn_is_text_and_tool_calls_and_nothing_invented() -> None:
    message = assistant_message_from_turn(fold(text_tool_text()))

    assert message == AssistantMessage(
        id="msg-1",
        content="Let me look that up.It is sunny.",
        tool_calls=[call("call-1", "search", '{"q": "weather"}')],
    )
    assert "content" not in assistant_message_from_turn(fold([])).model_dump()


def test_tool_result_message_answers_client_executed_calls() -> None:
    done = UIToolCall(tool_call_id="c", tool_name="f", output={"ok": True}, state="result")
    failed = UIToolCall(tool_call_id="d", tool_name="f", output="denied", is_error=True)

    assert tool_result_message([done, failed]) == [
        ToolMessage(id="c-result", tool_call_id="c", content='{"ok": true}'),
        ToolMessage(id="d-result", tool_call_id="d", content="denied", error="denied"),
    ]
