"""Models and DTOs: update semantics, JSON round trips, and the frozen stored format."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from threadstore import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageToolCallUpdate,
    MessageUpdate,
    Reasoning,
    Role,
    Run,
    RunStatus,
    ToolCall,
)
from threadstore.models import FORMAT_VERSION, ContentPart, MediaPart, TextPart
from threadstore.store._queries import update_fields
from threadstore.store._records import ExtrasCodec, split_update

FIXTURES = Path(__file__).parent / "fixtures" / "v1"
NOT_UTF8 = b"\x89PNG\r\n\x1a\n\xff\xfe\x00"
CHAT_UUID = UUID("0b6f1f7e-5d1a-4c2e-9a51-3f1d2c4b5a60")
MESSAGE_UUID = UUID("5e0c8f5a-2f0b-4b7e-8a43-1c9d6e7f8a90")
PARTS: TypeAdapter[list[ContentPart]] = TypeAdapter(list[ContentPart])


def fixture_text(name: str) -> str:
    """The raw JSON of a frozen fixture."""
    return (FIXTURES / name).read_text(encoding="utf-8")


class TeamMessage(Message):
    """A message subclass with a bytes field."""

    team: str = ""
    blob: bytes | None = None


class TeamMessageUpdate(MessageUpdate):
    """The update DTO matching :class:`TeamMessage`."""

    team: str | None = None


def a_message(**fields: Any) -> Message:
    """A minimal valid message."""
    return Message(message_uuid=MESSAGE_UUID, chat_uuid=CHAT_UUID, **fields)


# --- update DTOs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        (MessageUpdate(), {}),
        (MessageUpdate(content="x", name=None), {"content": "x"}),
        (MessageUpdate(content="", in_progress=False), {"content": "", "in_progress": False}),
        (MessageUpdate(metadata={}), {"metadata": {}}),
        (MessageToolCallUpdate(arguments="", error=None), {"arguments": ""}),
        (
            MessageToolCallUpdate(status=MessageStatus.COMPLETE),
            {"status": MessageStatus.COMPLETE},
        ),
        (MessageReasoningUpdate(content="more", name=None), {"content": "more"}),
    ],
)
def test_an_update_applies_only_its_explicitly_set_non_none_fields(
    update: BaseModel, expected: dict[str, Any]
) -> None:
    assert update_fields(update) == expected


def test_a_subclass_update_separates_its_own_fields_from_the_base_ones() -> None:
    base, extra = split_update(
        TeamMessageUpdate(team="core", content="hi", name=None), MessageUpdate
    )

    assert base == {"content": "hi"}
    assert extra is not None and json.loads(extra) == {"team": "core"}
    assert split_update(TeamMessageUpdate(team=None, content="x"), MessageUpdate) == (
        {"content": "x"},
        None,
    )


# --- JSON round trips ---------------------------------------------------------------------------


def test_media_bytes_serialize_as_url_safe_base64() -> None:
    part = MediaPart(type="image", data=NOT_UTF8, mime_type="image/png")

    dumped = json.loads(part.model_dump_json())

    assert dumped["data"] == base64.urlsafe_b64encode(NOT_UTF8).decode()
    assert MediaPart.model_validate_json(part.model_dump_json()).data == NOT_UTF8


@pytest.mark.parametrize(
    "encoded",
    [
        base64.b64encode(NOT_UTF8).decode(),
        base64.urlsafe_b64encode(NOT_UTF8).decode(),
        base64.urlsafe_b64encode(NOT_UTF8).decode().rstrip("="),
    ],
    ids=["standard", "url-safe", "unpadded"],
)
def test_media_bytes_load_from_either_base64_alphabet(encoded: str) -> None:
    loaded = MediaPart.model_validate_json(json.dumps({"type": "image", "data": encoded}))
    assert loaded.data == NOT_UTF8


def test_a_subclass_bytes_field_round_trips_through_json_as_base64() -> None:
    message = TeamMessage(message_uuid=MESSAGE_UUID, chat_uuid=CHAT_UUID, blob=NOT_UTF8)

    dumped = message.model_dump_json()

    assert json.loads(dumped)["blob"] == base64.urlsafe_b64encode(NOT_UTF8).decode()
    assert TeamMessage.model_validate_json(dumped).blob == NOT_UTF8


def test_the_extras_codec_restores_subclass_bytes() -> None:
    codec = ExtrasCodec(TeamMessage, Message)
    extra = TeamMessage(
        message_uuid=MESSAGE_UUID, chat_uuid=CHAT_UUID, team="t", blob=NOT_UTF8
    ).model_dump_json(include={"team", "blob"})

    assert codec.decode(extra) == {"team": "t", "blob": NOT_UTF8}
    assert codec.decode(None) == {}
    assert codec.decode(json.dumps({"team": "only"})) == {"team": "only"}


def test_a_message_with_parts_round_trips_through_json() -> None:
    message = a_message(
        content_parts=[
            TextPart(text="look"),
            MediaPart(type="image", data=NOT_UTF8),
            MediaPart(type="video", source="file", value="file-123", provider="acme"),
        ]
    )

    assert Message.model_validate_json(message.model_dump_json()) == message


def test_empty_strings_round_trip_as_empty_strings() -> None:
    message = a_message(content="", name="", step_name="")
    call = ToolCall(
        uuid=MESSAGE_UUID, message_uuid=MESSAGE_UUID, tool_call_id="", name="", content=""
    )

    loaded = Message.model_validate_json(message.model_dump_json())
    loaded_call = ToolCall.model_validate_json(call.model_dump_json())

    assert (loaded.content, loaded.name, loaded.step_name) == ("", "", "")
    assert (loaded_call.arguments, loaded_call.content, loaded_call.name) == ("", "", "")


def test_content_parts_are_told_apart_by_their_type_tag() -> None:
    parts = PARTS.validate_python(
        [{"type": "text", "text": "hi"}, {"type": "audio", "source": "url", "value": "u"}]
    )

    assert isinstance(parts[0], TextPart) and parts[0].text == "hi"
    assert isinstance(parts[1], MediaPart) and parts[1].type == "audio"
    with pytest.raises(ValidationError):
        PARTS.validate_python([{"type": "hologram", "text": "?"}])


def test_dto_defaults_are_not_shared_between_instances() -> None:
    first, second = ChatCreate(), ChatCreate()
    first.metadata["k"] = "v"

    assert second.metadata == {}
    assert first.chat_uuid != second.chat_uuid
    assert MessageCreate().message_uuid != MessageCreate().message_uuid


# --- the stored format ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [
        Chat(chat_uuid=CHAT_UUID, user_uuid=CHAT_UUID, thread_id="t", dedup_key="k"),
        a_message(),
        ToolCall(uuid=CHAT_UUID, message_uuid=MESSAGE_UUID, tool_call_id="c", name="f"),
        Reasoning(uuid=CHAT_UUID, message_uuid=MESSAGE_UUID),
        Run(chat_uuid=CHAT_UUID, thread_id="t", run_id="r"),
    ],
    ids=lambda record: type(record).__name__,
)
def test_every_stored_model_carries_the_format_version(record: BaseModel) -> None:
    assert json.loads(record.model_dump_json())["format_version"] == FORMAT_VERSION


def test_stored_enum_values_are_the_agui_strings() -> None:
    assert {r.value for r in Role} == {
        "developer",
        "system",
        "assistant",
        "user",
        "tool",
        "reasoning",
        "activity",
    }
    assert {s.value for s in MessageStatus} == {"active", "complete", "interrupted", "errored"}
    assert {s.value for s in RunStatus} == {"running", "complete", "interrupted", "errored"}


def test_v1_chat_fixture_loads() -> None:
    chat = Chat.model_validate_json(fixture_text("chat.json"))

    assert chat.format_version == 1
    assert chat.chat_uuid == CHAT_UUID
    assert chat.user_uuid == UUID("12345678-1234-5678-1234-567812345678")
    assert chat.thread_id == "thread-1"
    assert chat.name == "Trip to Lisbon"
    assert (chat.tenant_id, chat.app_id) == ("acme", "travel")
    assert chat.dedup_key == "685d228f3faaa32ea410a8c3e7f6618f4ed4e31df8f2611b921b7b5a998350ca"
    assert chat.active_leaf_uuid == MESSAGE_UUID
    assert chat.forked_from_chat_uuid == UUID("9d2b7c1e-0f3a-4e5b-8c6d-7e8f9a0b1c2d")
    assert chat.forked_from_message_uuid == UUID("a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d")
    assert chat.state == {"itinerary": [{"day": 1, "city": "Lisbon"}], "budget": 1200.5}
    assert chat.metadata == {"source": "web"}
    assert chat.created_at == datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    assert chat.updated_at == datetime(2024, 5, 1, 12, 5, 30, 250000, tzinfo=UTC)


def test_v1_message_fixture_loads_with_its_tool_call_reasoning_and_parts() -> None:
    message = Message.model_validate_json(fixture_text("message.json"))

    assert message.format_version == 1
    assert message.message_uuid == MESSAGE_UUID
    assert message.chat_uuid == CHAT_UUID
    assert message.parent_uuid == UUID("3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f")
    assert (message.agui_id, message.role, message.name) == (
        "msg-assistant-1",
        Role.ASSISTANT,
        "travel-agent",
    )
    assert message.content == "Here is the weather for Lisbon."
    assert (message.status, message.in_progress) == (MessageStatus.COMPLETE, False)
    assert (message.step_name, message.run_id, message.seq) == ("answer", "run-1", 2)
    assert message.metadata == {"model": "example-1"}
    assert message.created_at == datetime(2024, 5, 1, 12, 5, tzinfo=UTC)

    assert message.content_parts is not None
    text, image, document = message.content_parts
    assert isinstance(text, TextPart) and text.text == "Here is the weather for Lisbon."
    assert isinstance(image, MediaPart)
    assert (image.type, image.source, image.mime_type) == ("image", "data", "image/png")
    assert image.data == bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489fbeffe"
    )
    assert image.metadata == {"alt": "forecast chart"}
    assert isinstance(document, MediaPart)
    assert (document.source, document.value) == ("url", "https://example.com/forecast.pdf")
    assert document.data is None

    (call,) = message.tool_calls
    assert call.format_version == 1
    assert call.uuid == UUID("6f7a8b9c-0d1e-4f2a-8b3c-4d5e6f7a8b9c")
    assert call.message_uuid == MESSAGE_UUID
    assert (call.tool_call_id, call.name) == ("call-weather-1", "get_weather")
    assert json.loads(call.arguments) == {"city": "Lisbon"}
    assert call.content is not None and json.loads(call.content) == {"temp_c": 21, "sky": "clear"}
    assert (call.result_message_id, call.error) == ("msg-tool-1", None)
    assert (call.status, call.in_progress, call.step_name) == (
        MessageStatus.COMPLETE,
        False,
        "tools",
    )

    (reasoning,) = message.reasonings
    assert reasoning.format_version == 1
    assert reasoning.uuid == UUID("7a8b9c0d-1e2f-4a3b-9c4d-5e6f7a8b9c0d")
    assert reasoning.agui_id == "reasoning-1"
    assert reasoning.content == "The user wants the weather; call the tool."
    assert reasoning.encrypted_value == "opaque-provider-blob"
    assert (reasoning.status, reasoning.step_name, reasoning.seq) == (
        MessageStatus.COMPLETE,
        "think",
        1,
    )


def test_v1_activity_message_fixture_loads() -> None:
    message = Message.model_validate_json(fixture_text("activity_message.json"))

    assert message.role == Role.ACTIVITY
    assert message.activity_type == "PLAN"
    assert message.activity_content == {"steps": [{"title": "search flights", "done": True}]}
    assert message.parent_uuid is None
    assert (message.status, message.in_progress) == (MessageStatus.ACTIVE, True)
    assert message.created_at == datetime(2024, 5, 1, 12, 4, 59, 999999, tzinfo=UTC)
    assert message.tool_calls == [] and message.reasonings == []


def test_v1_run_fixture_loads() -> None:
    run = Run.model_validate_json(fixture_text("run.json"))

    assert run.format_version == 1
    assert (run.chat_uuid, run.thread_id) == (CHAT_UUID, "thread-1")
    assert (run.run_id, run.parent_run_id) == ("run-1", "run-0")
    assert run.status == RunStatus.INTERRUPTED
    assert run.owner == "worker-1:4242:9f8e7d"
    assert run.heartbeat_at == datetime(2024, 5, 1, 12, 5, 25, tzinfo=UTC)
    assert run.error == "process exited"


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("chat.json", Chat),
        ("message.json", Message),
        ("activity_message.json", Message),
        ("run.json", Run),
    ],
)
def test_v1_fixtures_are_written_back_in_the_same_shape(name: str, model: type[BaseModel]) -> None:
    frozen = json.loads(fixture_text(name))

    rewritten = json.loads(model.model_validate(frozen).model_dump_json())

    # New fields may appear; every stored key must keep its name and encoding.
    assert {key: rewritten[key] for key in frozen} == frozen


def test_a_record_with_keys_this_version_does_not_know_still_loads() -> None:
    frozen = json.loads(fixture_text("run.json"))
    frozen["added_in_a_later_version"] = {"x": 1}

    run = Run.model_validate(frozen)

    assert run.run_id == "run-1"
