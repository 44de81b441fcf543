"""Stored history -> AG-UI messages, and client messages -> stored DTOs."""

from __future__ import annotations

import base64
from typing import Any
from uuid import uuid4

import pytest
from ag_ui import core as ag

from agui_validation import assert_valid_stream
from threadstore.codec._messages import (
    AGUI_METADATA_KEY,
    DEFAULT_MIME_TYPE,
    TOOL_CALL_ID_METADATA_KEY,
    message_create_from_agui,
    translate_messages,
)
from threadstore.errors import InvalidInputError
from threadstore.models import (
    MediaPart,
    Message,
    MessageCreate,
    MessageStatus,
    Reasoning,
    Role,
    TextPart,
    ToolCall,
)

CHAT = uuid4()
PNG = b"\x89PNG\r\n\x1a\n\x00\x01binary"


def message(role: Role, content: str = "", agui_id: str | None = None, **fields: Any) -> Message:
    """A stored message as the store would return it."""
    return Message(
        message_uuid=fields.pop("message_uuid", uuid4()),
        chat_uuid=CHAT,
        role=role,
        content=content,
        agui_id=agui_id,
        status=MessageStatus.COMPLETE,
        in_progress=False,
        **fields,
    )


def tool_call(call_id: str, seq: int, **fields: Any) -> ToolCall:
    return ToolCall(
        uuid=uuid4(),
        message_uuid=uuid4(),
        tool_call_id=call_id,
        name=fields.pop("name", "search"),
        seq=seq,
        **fields,
    )


def reasoning(seq: int, content: str, agui_id: str | None = None, **fields: Any) -> Reasoning:
    return Reasoning(
        uuid=fields.pop("uuid", uuid4()),
        message_uuid=uuid4(),
        agui_id=agui_id,
        content=content,
        seq=seq,
        **fields,
    )


def roles_and_ids(messages: list[ag.Message]) -> list[tuple[str, str]]:
    return [(m.role, m.id) for m in messages]


# --- simple roles ----------------------------------------------------------------------


def test_user_system_and_developer_messages_keep_role_content_and_name() -> None:
    history = [
        message(Role.SYSTEM, "Be brief.", "s1", name="policy"),
        message(Role.DEVELOPER, "Use metric units.", "d1"),
        message(Role.USER, "How tall is it?", "u1", name="ann"),
    ]

    assert translate_messages(history) == [
        ag.SystemMessage(id="s1", content="Be brief.", name="policy"),
        ag.DeveloperMessage(id="d1", content="Use metric units."),
        ag.UserMessage(id="u1", content="How tall is it?", name="ann"),
    ]


def test_messages_come_out_in_the_order_given() -> None:
    history = [message(Role.USER, f"q{i}", f"id{i}") for i in (3, 1, 2)]

    assert [m.id for m in translate_messages(history)] == ["id3", "id1", "id2"]


def test_empty_content_stays_an_empty_string() -> None:
    out = translate_messages([message(Role.ASSISTANT, "", "a1"), message(Role.USER, "", "u1")])

    assert [m.content for m in out] == ["", ""]


def test_a_message_without_an_agui_id_uses_its_uuid() -> None:
    stored = message(Role.USER, "hi")

    (out,) = translate_messages([stored])

    assert out.id == str(stored.message_uuid)


def test_encrypted_value_carries_over() -> None:
    (out,) = translate_messages([message(Role.ASSISTANT, "x", "a1", encrypted_value="opaque")])

    assert isinstance(out, ag.AssistantMessage)
    assert out.encrypted_value == "opaque"


def test_a_tool_calls_encrypted_value_carries_over() -> None:
    stored = message(
        Role.ASSISTANT,
        "",
        "a1",
        tool_calls=[
            tool_call("c1", 1, arguments="{}", metadata={"encrypted_value": "sealed"}),
            tool_call("c2", 2, arguments="{}"),
        ],
    )

    (out,) = translate_messages([stored])

    assert isinstance(out, ag.AssistantMessage) and out.tool_calls is not None
    assert [(c.id, c.encrypted_value) for c in out.tool_calls] == [("c1", "sealed"), ("c2", None)]


def test_agui_metadata_is_given_back_and_private_metadata_is_not() -> None:
    stored = message(
        Role.USER, "hi", "u1", metadata={AGUI_METADATA_KEY: {"lang": "fr"}, "internal": 1}
    )

    (out,) = translate_messages([stored])

    assert out.metadata == {"lang": "fr"}
    assert (
        translate_messages([message(Role.USER, "hi", "u2", metadata={"x": 1})])[0].metadata is None
    )


# --- content parts --------------------------------------------------------------------


def test_user_content_parts_become_agui_parts_with_base64_data() -> None:
    stored = message(
        Role.USER,
        "What is in these?",
        "u1",
        content_parts=[
            TextPart(text="What is in these?", metadata={"agui_id": "p1"}),
            MediaPart(type="image", source="data", data=PNG, mime_type="image/png"),
            MediaPart(type="document", source="url", value="https://x.test/a.pdf"),
            MediaPart(
                type="audio",
                source="file",
                value="file-123",
                provider="openai",
                mime_type="audio/wav",
            ),
            MediaPart(type="video", source="data", data=b"\x00\x01"),
        ],
    )

    (out,) = translate_messages([stored])

    assert out == ag.UserMessage(
        id="u1",
        content=[
            ag.TextPart(text="What is in these?", id="p1"),
            ag.ImagePart(
                source=ag.DataSource(value=base64.b64encode(PNG).decode(), mime_type="image/png")
            ),
            ag.DocumentPart(source=ag.UrlSource(value="https://x.test/a.pdf")),
            ag.AudioPart(
                source=ag.FileSource(value="file-123", provider="openai", mime_type="audio/wav")
            ),
            ag.VideoPart(source=ag.DataSource(value="AAE=", mime_type=DEFAULT_MIME_TYPE)),
        ],
    )


def test_parts_of_non_user_roles_fall_back_to_the_text_content() -> None:
    stored = message(
        Role.ASSISTANT, "Here it is.", "a1", content_parts=[TextPart(text="Here it is.")]
    )

    (out,) = translate_messages([stored])

    assert out.content == "Here it is."


@pytest.mark.parametrize(
    "part",
    [
        MediaPart(type="image", source="url"),
        MediaPart(type="image", source="file"),
        MediaPart(type="image", source="data"),
    ],
)
def test_a_media_part_without_its_payload_is_rejected(part: MediaPart) -> None:
    with pytest.raises(InvalidInputError, match="image part"):
        translate_messages([message(Role.USER, "", "u1", content_parts=[part])])


# --- assistant, tools, reasoning ---------------------------------------------------------


def test_assistant_tool_calls_and_their_results_follow_in_call_order() -> None:
    assistant = message(
        Role.ASSISTANT,
        "Let me look.",
        "a1",
        tool_calls=[
            tool_call("c2", 2, name="fetch", arguments='{"url":"u"}', content="page"),
            tool_call("c1", 1, arguments='{"q":"x"}', content="hits", result_message_id="t1"),
        ],
    )
    after = message(Role.ASSISTANT, "Found it.", "a2")

    out = translate_messages([assistant, after])

    assert out == [
        ag.AssistantMessage(
            id="a1",
            content="Let me look.",
            tool_calls=[
                ag.ToolCall(
                    id="c1", function=ag.FunctionCall(name="search", arguments='{"q":"x"}')
                ),
                ag.ToolCall(
                    id="c2", function=ag.FunctionCall(name="fetch", arguments='{"url":"u"}')
                ),
            ],
        ),
        ag.ToolMessage(id="t1", content="hits", tool_call_id="c1"),
        ag.ToolMessage(id="c2-result", content="page", tool_call_id="c2"),
        ag.AssistantMessage(id="a2", content="Found it."),
    ]


def test_a_call_without_a_result_yet_gets_no_tool_message() -> None:
    stored = message(Role.ASSISTANT, "", "a1", tool_calls=[tool_call("c1", 0, arguments="{}")])

    out = translate_messages([stored])

    assert roles_and_ids(out) == [("assistant", "a1")]
    assert isinstance(out[0], ag.AssistantMessage)
    assert out[0].tool_calls is not None
    assert [c.id for c in out[0].tool_calls] == ["c1"]


def test_a_failed_call_gets_a_tool_message_carrying_the_error() -> None:
    stored = message(Role.ASSISTANT, "", "a1", tool_calls=[tool_call("c1", 0, error="timeout")])

    out = translate_messages([stored])

    assert out[1] == ag.ToolMessage(id="c1-result", content="", tool_call_id="c1", error="timeout")


def test_an_empty_tool_result_counts_as_a_result_and_replays_as_completed() -> None:
    stored = message(Role.ASSISTANT, "", "a1", tool_calls=[tool_call("c1", 0, content="")])

    out = translate_messages([stored])

    # As the seed layer replays it: "Completed <tool name>", never an empty tool message.
    assert out[1] == ag.ToolMessage(id="c1-result", content="Completed search", tool_call_id="c1")


def test_reasoning_steps_precede_their_message_in_seq_order() -> None:
    late = reasoning(3, "then answer", "r2", encrypted_value="sig")
    early = reasoning(0, "first think")
    stored = message(
        Role.ASSISTANT,
        "Answer.",
        "a1",
        reasonings=[late, early],
        tool_calls=[tool_call("c1", 1, content="ok")],
    )

    out = translate_messages([stored])

    assert out == [
        ag.ReasoningMessage(id=str(early.uuid), content="first think"),
        ag.ReasoningMessage(id="r2", content="then answer", encrypted_value="sig"),
        ag.AssistantMessage(
            id="a1",
            content="Answer.",
            tool_calls=[
                ag.ToolCall(id="c1", function=ag.FunctionCall(name="search", arguments=""))
            ],
        ),
        ag.ToolMessage(id="c1-result", content="ok", tool_call_id="c1"),
    ]


def test_records_with_equal_seq_keep_their_stored_order() -> None:
    steps = [reasoning(0, "a", "ra"), reasoning(0, "b", "rb"), reasoning(0, "c", "rc")]

    out = translate_messages([message(Role.ASSISTANT, "", "a1", reasonings=steps)])

    assert [m.id for m in out] == ["ra", "rb", "rc", "a1"]


def test_a_reasoning_message_translates_to_a_reasoning_message() -> None:
    stored = message(Role.REASONING, "thinking aloud", "r1", encrypted_value="enc")

    assert translate_messages([stored]) == [
        ag.ReasoningMessage(id="r1", content="thinking aloud", encrypted_value="enc")
    ]


def test_a_reasoning_message_that_only_groups_steps_is_not_repeated() -> None:
    step = reasoning(0, "inner", "s1")
    stored = message(Role.REASONING, "", "r1", reasonings=[step])

    assert roles_and_ids(translate_messages([stored])) == [("reasoning", "s1")]


def test_a_folded_reasoning_message_sharing_its_steps_id_comes_out_once() -> None:
    step = reasoning(0, "inner", "r1", encrypted_value="sig")
    stored = message(Role.REASONING, "", "r1", reasonings=[step])

    assert translate_messages([stored]) == [
        ag.ReasoningMessage(id="r1", content="inner", encrypted_value="sig")
    ]


def test_activity_messages_keep_type_and_content() -> None:
    stored = message(
        Role.ACTIVITY, "", "act1", activity_type="PLAN", activity_content={"steps": [1, 2]}
    )
    bare = message(Role.ACTIVITY, "", "act2", activity_type="PLAN")

    assert translate_messages([stored, bare]) == [
        ag.ActivityMessage(id="act1", activity_type="PLAN", content={"steps": [1, 2]}),
        ag.ActivityMessage(id="act2", activity_type="PLAN", content={}),
    ]


def test_a_stored_tool_message_needs_its_tool_call_id() -> None:
    answered = message(Role.TOOL, "42", "tm1", metadata={TOOL_CALL_ID_METADATA_KEY: "c9"})
    orphan = message(Role.TOOL, "?", "tm2")

    assert translate_messages([answered, orphan]) == [
        ag.ToolMessage(id="tm1", content="42", tool_call_id="c9")
    ]


# --- ids ---------------------------------------------------------------------------------


def test_ids_are_unique_even_when_a_producer_reused_one() -> None:
    step_uuid = uuid4()
    result_owner = tool_call("c1", 0, content="x", result_message_id="a1")
    stored = message(
        Role.ASSISTANT,
        "",
        "a1",
        reasonings=[reasoning(0, "r", "a1", uuid=step_uuid)],
        tool_calls=[result_owner],
    )

    out = translate_messages([stored])

    assert [m.id for m in out] == [str(step_uuid), "a1", str(result_owner.uuid)]
    assert out[0] == ag.ReasoningMessage(id=str(step_uuid), content="r")


def test_the_same_record_passed_twice_is_emitted_once() -> None:
    stored = message(Role.USER, "hi", "u1")

    out = translate_messages([stored, stored, stored])

    assert [m.id for m in out] == ["u1"]


# --- the whole history is usable by an agent and a client ------------------------------


def _rich_history() -> list[Message]:
    return [
        message(Role.SYSTEM, "Be brief.", "s1"),
        message(
            Role.USER,
            "Look at this",
            "u1",
            content_parts=[
                TextPart(text="Look at this"),
                MediaPart(type="image", source="data", data=PNG, mime_type="image/png"),
            ],
        ),
        message(
            Role.ASSISTANT,
            "Checking.",
            "a1",
            reasonings=[reasoning(0, "It is an image.", "r1")],
            tool_calls=[tool_call("c1", 1, arguments='{"q":"png"}', content="a logo")],
        ),
        message(Role.ACTIVITY, "", "act1", activity_type="PLAN", activity_content={"done": True}),
        message(Role.ASSISTANT, "It is a logo.", "a2"),
    ]


def test_translated_history_is_valid_agent_input() -> None:
    translated = translate_messages(_rich_history())

    run_input = ag.RunAgentInput.model_validate(
        {
            "threadId": "t1",
            "runId": "r1",
            "messages": [m.model_dump(by_alias=True) for m in translated],
        }
    )

    assert run_input.messages == translated


def test_translated_history_as_a_messages_snapshot_passes_the_validator() -> None:
    translated = translate_messages(_rich_history())

    assert_valid_stream(
        [
            ag.RunStartedEvent(thread_id="t1", run_id="r1", timestamp=1),
            ag.MessagesSnapshotEvent(messages=translated),
            ag.RunFinishedEvent(thread_id="t1", run_id="r1"),
        ],
        max_warnings=0,
    )


# --- client -> store -------------------------------------------------------------------------


def _stored(create: MessageCreate) -> Message:
    """What the store returns after persisting ``create``."""
    assert create.chat_uuid is not None
    return Message(**create.model_dump(exclude={"created_at"}))


def test_client_text_message_becomes_a_complete_stored_message() -> None:
    create = message_create_from_agui(
        ag.UserMessage(id="u1", content="hello", name="ann"), CHAT, "run-1"
    )

    assert create.model_dump(exclude={"message_uuid"}) == MessageCreate(
        chat_uuid=CHAT,
        role=Role.USER,
        agui_id="u1",
        name="ann",
        content="hello",
        status=MessageStatus.COMPLETE,
        in_progress=False,
        run_id="run-1",
    ).model_dump(exclude={"message_uuid"})


def test_client_parts_are_decoded_to_bytes_and_text_is_joined() -> None:
    create = message_create_from_agui(
        ag.UserMessage(
            id="u1",
            content=[
                ag.TextPart(text="one"),
                ag.ImagePart(
                    source=ag.DataSource(
                        value=base64.b64encode(PNG).decode(), mime_type="image/png"
                    )
                ),
                ag.TextPart(text="two"),
            ],
        ),
        CHAT,
        None,
    )

    assert create.content == "one\ntwo"
    assert create.content_parts is not None
    image = create.content_parts[1]
    assert isinstance(image, MediaPart)
    assert (image.type, image.source, image.data, image.mime_type) == (
        "image",
        "data",
        PNG,
        "image/png",
    )


@pytest.mark.parametrize(
    "agui_message",
    [
        ag.UserMessage(id="u1", content="plain", metadata={"lang": "en"}),
        ag.SystemMessage(id="s1", content="rules", name="policy"),
        ag.DeveloperMessage(id="d1", content="dev note", encrypted_value="e"),
        ag.UserMessage(
            id="u2",
            content=[
                ag.TextPart(text="see", id="p1"),
                ag.ImagePart(source=ag.DataSource(value="AAEC", mime_type="image/gif"), id="p2"),
                ag.AudioPart(
                    source=ag.UrlSource(value="https://x.test/a.mp3", mime_type="audio/mpeg")
                ),
                ag.DocumentPart(source=ag.FileSource(value="file-1", provider="anthropic")),
                ag.VideoPart(source=ag.DataSource(value="", mime_type="video/mp4")),
            ],
        ),
    ],
)
def test_client_messages_round_trip_through_the_store(agui_message: ag.Message) -> None:
    create = message_create_from_agui(agui_message, CHAT, "run-1")

    assert translate_messages([_stored(create)]) == [agui_message]


@pytest.mark.parametrize(
    "agui_message",
    [
        ag.AssistantMessage(id="a1", content="I can do that"),
        ag.ToolMessage(id="t1", content="42", tool_call_id="c1"),
        ag.ReasoningMessage(id="r1", content="hm"),
        ag.ActivityMessage(id="x1", activity_type="PLAN", content={}),
    ],
)
def test_client_may_not_store_other_roles(agui_message: ag.Message) -> None:
    with pytest.raises(InvalidInputError, match=f"has role '{agui_message.role}'"):
        message_create_from_agui(agui_message, CHAT, None)


def test_client_part_with_bad_base64_is_rejected() -> None:
    bad = ag.UserMessage(
        id="u1",
        content=[ag.ImagePart(source=ag.DataSource(value="not*base64", mime_type="image/png"))],
    )

    with pytest.raises(InvalidInputError, match="not valid base64"):
        message_create_from_agui(bad, CHAT, None)
