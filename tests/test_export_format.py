"""The export document: version 2 keeps bytes anywhere; version 1 documents still import."""

from __future__ import annotations

import json
import uuid

from threadstore import Store
from threadstore._steps import OFF_LOOP_ITEMS
from threadstore.models import Chat, MediaPart, Message, Role
from threadstore.testing import AddMessage, MakeChat
from threadstore.transfer import (
    EXPORT_VERSION,
    ChatExport,
    export_chat,
    export_chat_json,
    export_json,
    export_json_pieces,
    import_chat,
)

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


async def test_the_export_built_a_message_at_a_time_is_the_document_serialized_whole() -> None:
    chat = _chat(metadata={"icon": PNG}, state={"frames": [PNG]}, name="Ünïcode \u2028")
    messages = [
        Message(
            message_uuid=uuid.uuid4(),
            chat_uuid=chat.chat_uuid,
            seq=seq,
            role=Role.USER if seq % 2 else Role.ASSISTANT,
            content=f"message {seq} é",
            content_parts=[MediaPart(type="image", data=PNG)] if seq == 3 else [],
            metadata={"raw": PNG, "look-alike": {"$deuzBytes": "aGk="}} if seq == 4 else {},
        )
        for seq in range(1, 2 * OFF_LOOP_ITEMS)
    ]
    for given in (messages, messages[:1], []):
        document = ChatExport(
            chat=chat,
            messages=given,
            export_version=EXPORT_VERSION,
            roots=[m.message_uuid for m in given[:1]],
        )
        whole = document.model_dump_json(by_alias=True).encode()
        assert await export_json(document) == whole
        # What the export route streams: pieces of at most a step of messages each.
        pieces = [piece async for piece in export_json_pieces(document)]
        assert b"".join(pieces) == whole
        if len(given) >= OFF_LOOP_ITEMS:
            assert max(len(piece) for piece in pieces) < len(whole) // 4


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


async def test_the_served_export_reads_the_kept_history_and_writes_the_same_document(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    question = await add_message(chat, "Hi", role=Role.USER)
    await add_message(chat, "Hello!", role=Role.ASSISTANT)
    await store.branches.branch_for_regenerate(chat.chat_uuid, question.message_uuid)
    await add_message(chat, "Hello again", role=Role.ASSISTANT, metadata={"raw": PNG})
    chat = await store.chats.get_chat(chat.chat_uuid) or chat
    kept_before = [m.model_dump() for m in await store.messages.read_history(chat.chat_uuid)]

    served = json.loads(await export_chat_json(store, chat))
    reference = json.loads((await export_chat(store, chat)).model_dump_json(by_alias=True))

    assert served.pop("exported_at") and reference.pop("exported_at")
    assert served == reference
    assert len(served["messages"]) == 3  # both answers: every branch
    assert [
        m.model_dump() for m in await store.messages.read_history(chat.chat_uuid)
    ] == kept_before


async def test_the_export_of_a_chat_that_never_branched_reads_no_tree(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    for n in range(4):
        await add_message(chat, f"m{n}", role=Role.USER if n % 2 == 0 else Role.ASSISTANT)
    trees: list[object] = []
    read_tree = store.branches.get_message_tree

    async def counted(chat_uuid: uuid.UUID) -> object:
        trees.append(chat_uuid)
        return await read_tree(chat_uuid)

    store.branches.get_message_tree = counted  # type: ignore[method-assign]
    served = json.loads(await export_chat_json(store, chat))
    reference = json.loads((await export_chat(store, chat)).model_dump_json(by_alias=True))

    assert served.pop("exported_at") and reference.pop("exported_at")
    assert served == reference and len(served["messages"]) == 4
    # SQLite and PostgreSQL know the chat never branched; the in-memory store does not.
    linear = await store.branches.is_linear(chat.chat_uuid)
    assert linear is (type(store).__name__ != "MemoryStore")
    assert len(trees) == (0 if linear else 2)
