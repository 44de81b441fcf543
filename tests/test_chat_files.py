"""Files attached in a chat UI, as AG-UI content parts and as stored parts.

``canonical_from_ui`` turns a user message's ``FilePart``s into AG-UI parts: the kind
the message declared, else the one its media type names (``image/*``, ``audio/*``,
``video/*``, anything else a document), with its carrier (base64 text, bytes as base64,
a URL, a provider file id) kept (docs/chat-engine.md).
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from uuid import UUID

from ag_ui.core import (
    AudioPart,
    DataSource,
    DocumentPart,
    FileSource,
    ImagePart,
    UrlSource,
    UserMessage,
    VideoPart,
)
from ag_ui.core import TextPart as AguiTextPart

import threadstore
from agui_scripts import ScriptedAgent, collect, run_finished, run_input, run_started
from threadstore.agui import StorageAgent
from threadstore.chat import FilePart, TextPart, UIMessage, canonical_from_ui, ui_from_messages
from threadstore.models import MediaPart

USER = UUID("00000000-0000-4000-8000-000000000001")
WAV = b"RIFF fake wave"

FILES = (
    TextPart(text="Listen, watch and read."),
    # No kind: the media type says what the file is.
    FilePart(media_type="audio/wav", data=WAV),
    FilePart(media_type="video/mp4", data="https://cdn.example.test/clip.mp4", source="url"),
    FilePart(media_type="image/jpeg", data="aGk=", source="data"),
    FilePart(media_type="application/pdf", data="file-abc123", source="file"),
    # A declared kind wins over the media type.
    FilePart(media_type="application/octet-stream", data="file-v", source="file", kind="video"),
    FilePart(media_type="", data="file-a", source="file", kind="audio"),
)


def ui_user(message_id: str = "u1") -> UIMessage:
    return UIMessage(id=message_id, role="user", content="Listen, watch and read.", parts=FILES)


def test_files_without_a_kind_become_the_part_their_media_type_names() -> None:
    (user,) = canonical_from_ui([ui_user()])

    assert user == UserMessage(
        id="u1",
        content=[
            AguiTextPart(text="Listen, watch and read."),
            AudioPart(
                source=DataSource(value=base64.b64encode(WAV).decode(), mime_type="audio/wav")
            ),
            VideoPart(
                source=UrlSource(value="https://cdn.example.test/clip.mp4", mime_type="video/mp4")
            ),
            ImagePart(source=DataSource(value="aGk=", mime_type="image/jpeg")),
            DocumentPart(source=FileSource(value="file-abc123", mime_type="application/pdf")),
            VideoPart(source=FileSource(value="file-v", mime_type="application/octet-stream")),
            # No media type: none is invented.
            AudioPart(source=FileSource(value="file-a", mime_type=None)),
        ],
    )


def test_a_file_with_an_unknown_media_type_is_a_document() -> None:
    ui = UIMessage(
        id="u1",
        role="user",
        content="",
        parts=(
            FilePart(media_type="text/csv", data="YSxi"),
            FilePart(media_type="", data="https://example.test/x", source="url"),
        ),
    )

    (user,) = canonical_from_ui([ui])

    assert isinstance(user, UserMessage) and isinstance(user.content, list)
    assert [type(part) for part in user.content] == [DocumentPart, DocumentPart]


async def test_files_sent_from_the_ui_are_stored_and_read_back_as_sent(
    tmp_path: Path, sqlite_template: Path
) -> None:
    path = tmp_path / "threadstore.db"
    shutil.copyfile(sqlite_template, path)
    store = await threadstore.open_store(f"sqlite:///{path}")
    try:
        agent = StorageAgent(
            "assistant",
            USER,
            store,
            store,
            ScriptedAgent([run_started(), run_finished()]),
            run_repo=store,
            owner="test",
        )
        await collect(agent.run(run_input(messages=canonical_from_ui([ui_user()]))))

        chat = await store.get_chat_by_thread_id(USER, "thread-1")
        assert chat is not None
        (stored,) = await store.get_chat_messages(chat.chat_uuid)
        assert stored.content == "Listen, watch and read."
        media = [part for part in stored.content_parts or () if isinstance(part, MediaPart)]
        assert [(m.type, m.source, m.data, m.value, m.mime_type) for m in media] == [
            ("audio", "data", WAV, None, "audio/wav"),
            ("video", "url", None, "https://cdn.example.test/clip.mp4", "video/mp4"),
            ("image", "data", b"hi", None, "image/jpeg"),
            ("document", "file", None, "file-abc123", "application/pdf"),
            ("video", "file", None, "file-v", "application/octet-stream"),
            ("audio", "file", None, "file-a", None),
        ]

        # Read back for the UI, every file is the one the user attached, with its kind.
        (ui,) = ui_from_messages([stored], lambda: "unused")
        assert ui.parts is not None
        files = [part for part in ui.parts if isinstance(part, FilePart)]
        assert [(f.kind, f.source, f.data, f.media_type) for f in files] == [
            ("audio", "data", WAV, "audio/wav"),
            ("video", "url", "https://cdn.example.test/clip.mp4", "video/mp4"),
            ("image", "data", b"hi", "image/jpeg"),
            ("document", "file", "file-abc123", "application/pdf"),
            ("video", "file", "file-v", "application/octet-stream"),
            ("audio", "file", "file-a", ""),
        ]
    finally:
        await store.close()
