"""The export document: version 2 keeps bytes anywhere; version 1 documents still import."""

from __future__ import annotations

import json
import uuid

from threadstore import Store
from threadstore.models import Chat, MediaPart, Message, Role
from threadstore.transfer import EXPORT_VERSION, ChatExport, import_chat

PNG = b"\x89PNG\x00\xff"


def _chat(**fields: object) -> Chat:
    data: dict[str, object] = {"user_uuid": uuid.uuid4(), "thread_id": "t", "dedup_key": "-"}
    return Chat.model_validate({"chat_uuid": uuid.uuid4(), **data, **fields})


def test_bytes_in_parts_and_metadata_survive_the_json_text() -> None:
    chat = _chat(metadata={"icon": PNG}, state={"frames": [PNG]})
    part = MediaPart(type="image", data=PNG, metadata={"thumb": PNG})
    message = Message(
        message_uuid=uuid.uuid4(),
        chat_uuid=chat.chat_uuid,
        seq=1,
        content_parts=[part],
        metadata={"raw": PNG, "look-alike": {"$deuzBytes": "aGk="}},
    )
    document = ChatExport(chat=chat, messages=[message], export_version=EXPORT_VERSION)

    text = document.model_dump_json()
    back = ChatExport.model_validate_json(text)

    assert '"$deuzBytes"' in text
    assert back.chat.metadata == {"icon": PNG} and back.chat.state == {"frames": [PNG]}
    assert back.messages[0].content_parts == [part]
    assert back.messages[0].metadata == {"raw": PNG, "look-alike": {"$deuzBytes": "aGk="}}
    # The same document parsed first (as a web framework does) reads the same.
    assert ChatExport.model_validate(json.loads(text)) == back


async def test_a_version_1_document_imports_as_the_linear_history_it_holds(store: Store) -> None:
    chat = _chat(name="old")

    def stored(seq: int, **fields: object) -> dict[str, object]:
        message = Message(message_uuid=uuid.uuid4(), chat_uuid=chat.chat_uuid, seq=seq)
        return {**message.model_dump(mode="json"), **fields}

    # As version 1 wrote it: no export_version, no roots, inline data as base64 text.
    # (A message without a parent that ``roots`` does not list continues the one before.)
    text = json.dumps(
        {
            "format": "threadstore.chat",
            "format_version": 1,
            "chat": chat.model_dump(mode="json"),
            "messages": [
                stored(1, role="user", content="hi"),
                stored(2, role="assistant", content_parts=[{"type": "image", "data": "iVBORw=="}]),
            ],
        }
    )

    document = ChatExport.model_validate_json(text)
    imported = await import_chat(store, document, user_uuid=uuid.uuid4())

    history = await store.get_chat_messages(imported.chat_uuid)
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT]
    assert history[1].parent_uuid == history[0].message_uuid
    assert history[1].content_parts == [MediaPart(type="image", data=b"\x89PNG")]
