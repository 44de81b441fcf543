"""The two-method ChatStore seam, its reference stores and the binary-safe codec."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import AssistantMessage, FunctionCall, ToolCall, ToolMessage, UserMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from threadstore.chatstore import (
    ChatRecord,
    InMemoryChatStore,
    JsonlChatStore,
    Scope,
    delete_chat,
    deserialize_chat_record,
    list_chats,
    load_chat,
    save_chat,
    serialize_chat_record,
)
from threadstore.chatstore._codec import BYTES_TAG, decode_value, encode_value

USER = Scope(user_id="u_1")


def _record(chat_id: str = "chat-42", scope: Scope = USER, **fields: Any) -> ChatRecord:
    messages = fields.pop(
        "messages",
        (
            UserMessage(id="m1", content="What is 2 + 2?"),
            AssistantMessage(
                id="m2",
                tool_calls=[
                    ToolCall(id="c1", function=FunctionCall(name="add", arguments='{"a":2}'))
                ],
            ),
            ToolMessage(id="m3", tool_call_id="c1", content="4"),
            AssistantMessage(id="m4", content="4."),
        ),
    )
    return ChatRecord(chat_id=chat_id, scope=scope, messages=messages, **fields)


# --- the codec ----------------------------------------------------------------------

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.binary()
)
look_alikes = st.sampled_from([BYTES_TAG, "$deuzPlain"]).flatmap(
    lambda key: st.dictionaries(
        st.just(key), st.text() | st.binary() | st.integers(), min_size=1, max_size=1
    )
)
values = st.recursive(
    json_leaves | look_alikes,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=12), children, max_size=4)
        | look_alikes
    ),
    max_leaves=20,
)


@given(values)
def test_any_value_with_bytes_or_look_alikes_round_trips_through_json(value: Any) -> None:
    text = json.dumps(encode_value(value))
    assert decode_value(json.loads(text)) == value


@settings(max_examples=60)
@given(
    metadata=st.dictionaries(st.text(max_size=8), values, max_size=4),
    extra=values,
    parent=st.none() | st.text(min_size=1),
    millis=st.integers(min_value=0, max_value=4_000_000_000_000),
)
def test_a_record_with_bytes_at_any_depth_round_trips(
    metadata: dict[str, Any], extra: Any, parent: str | None, millis: int
) -> None:
    message = UserMessage.model_validate(
        {"id": "m1", "role": "user", "content": "hi", "metadata": metadata, "attachment": extra}
    )
    updated = datetime.fromtimestamp(millis // 1000, UTC).replace(microsecond=millis % 1000 * 1000)
    record = _record(messages=(message,), parent_id=parent, updated_at=updated)
    back = deserialize_chat_record(serialize_chat_record(record))
    assert back == record
    assert back.messages[0].model_dump() == message.model_dump()


def test_bytes_are_written_as_the_typescript_tag_and_read_back_as_bytes() -> None:
    png = b"\x89PNG\r\n\x1a\n\x00"
    record = _record(messages=(UserMessage(id="m1", content="look", metadata={"image": png}),))
    data = json.loads(serialize_chat_record(record))
    assert data["messages"][0]["metadata"] == {"image": {BYTES_TAG: "iVBORw0KGgoA"}}
    assert data["chatId"] == "chat-42"
    assert data["scope"] == {"userId": "u_1"}
    assert isinstance(data["updatedAt"], int)
    assert deserialize_chat_record(json.dumps(data)).messages[0].metadata == {"image": png}


def test_a_record_written_by_the_typescript_codec_loads() -> None:
    text = json.dumps(
        {
            "chatId": "c1",
            "scope": {"userId": "u_1", "tenantId": "acme"},
            "messages": [
                {"id": "a", "role": "user", "content": "hi", "metadata": {"b": {BYTES_TAG: "AAE="}}}
            ],
            "parentId": "c0",
            "updatedAt": 1_700_000_000_123,
        }
    )
    record = deserialize_chat_record(text)
    assert record.scope == Scope(user_id="u_1", tenant_id="acme")
    assert record.parent_id == "c0"
    assert record.messages[0].metadata == {"b": b"\x00\x01"}
    assert record.updated_at == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)


@pytest.mark.parametrize(
    "plain",
    [
        {BYTES_TAG: "not base64!"},
        {BYTES_TAG: 12},
        {BYTES_TAG: "AAE=", "other": 1},
        {BYTES_TAG: None},
    ],
)
def test_values_that_merely_look_like_the_tag_stay_plain(plain: dict[str, Any]) -> None:
    assert decode_value(json.loads(json.dumps(plain))) == plain


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "must be JSON"),
        ("[]", "JSON object"),
        ('{"chatId": "c"}', "needs 'scope'"),
        ('{"chatId": "c", "scope": {}, "messages": [], "updatedAt": 1}', "user_id"),
        (
            '{"chatId": "c", "scope": {"userId": "u"}, "messages": [{"role": "x"}],'
            ' "updatedAt": 1}',
            "not a valid chat record",
        ),
    ],
)
def test_a_bad_record_is_a_value_error_saying_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        deserialize_chat_record(text)


# --- the seam -------------------------------------------------------------------------


class DictChatStore:
    """A ChatStore written by a user: two methods over a dict."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}

    def save_chat(self, record: ChatRecord) -> None:
        self.rows[record.chat_id] = serialize_chat_record(record)

    def load_chat(self, chat_id: str) -> ChatRecord | None:
        row = self.rows.get(chat_id)
        return deserialize_chat_record(row) if row else None


class AsyncDictChatStore(DictChatStore):
    async def save_chat(self, record: ChatRecord) -> None:  # type: ignore[override]
        super().save_chat(record)

    async def load_chat(self, chat_id: str) -> ChatRecord | None:  # type: ignore[override]
        return super().load_chat(chat_id)


@pytest.mark.parametrize("store_class", [DictChatStore, AsyncDictChatStore])
async def test_a_two_method_store_sync_or_async_saves_and_loads(store_class: type) -> None:
    store = store_class()
    record = _record()
    await save_chat(store, record)
    assert await load_chat(store, "chat-42") == record
    assert await load_chat(store, "missing") is None
    with pytest.raises(TypeError, match="no delete_chat"):
        await delete_chat(store, "chat-42")
    with pytest.raises(TypeError, match="no list_chats"):
        await list_chats(store)


def test_a_record_needs_an_owner_and_an_id() -> None:
    with pytest.raises(ValueError, match="user_id"):
        Scope(user_id="")
    with pytest.raises(ValueError, match="chat_id"):
        ChatRecord(chat_id="", scope=USER)
    with pytest.raises(TypeError, match="Scope"):
        ChatRecord(chat_id="c", scope={"user_id": "u"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timezone"):
        ChatRecord(chat_id="c", scope=USER, updated_at=datetime(2026, 1, 1))


def _stores(tmp_path: Path) -> list[Any]:
    return [InMemoryChatStore(), JsonlChatStore(tmp_path / "chats")]


async def test_reference_stores_save_load_list_and_delete(tmp_path: Path) -> None:
    for store in _stores(tmp_path):
        acme = Scope(user_id="u_1", tenant_id="acme")
        await save_chat(store, _record("a", acme))
        await save_chat(store, _record("b", Scope(user_id="u_1", tenant_id="other")))
        await save_chat(store, _record("c", Scope(user_id="u_2", tenant_id="acme")))
        assert sorted(await list_chats(store)) == ["a", "b", "c"]
        assert sorted(await list_chats(store, Scope(user_id="u_1"))) == ["a", "b"]
        assert await list_chats(store, acme) == ["a"]
        # A save replaces the earlier version whole.
        longer = _record("a", acme, messages=(UserMessage(id="x", content="new"),))
        await save_chat(store, longer)
        assert await load_chat(store, "a") == longer
        await delete_chat(store, "a")
        await delete_chat(store, "a")  # a missing chat is not an error
        assert await load_chat(store, "a") is None
        assert sorted(await list_chats(store)) == ["b", "c"]


async def test_the_in_memory_store_copies_on_save_and_on_load() -> None:
    store = InMemoryChatStore()
    metadata: dict[str, Any] = {"tags": ["a"]}
    record = _record(messages=(UserMessage(id="m1", content="hi", metadata=metadata),))
    store.save_chat(record)
    metadata["tags"].append("changed after the save")
    loaded = store.load_chat("chat-42")
    assert loaded is not None and loaded.messages[0].metadata == {"tags": ["a"]}
    assert loaded.messages[0].metadata is not None
    loaded.messages[0].metadata["tags"].append("changed after the load")
    again = store.load_chat("chat-42")
    assert again is not None and again.messages[0].metadata == {"tags": ["a"]}


def test_the_file_store_creates_its_directory_and_any_id_is_a_file_name(tmp_path: Path) -> None:
    directory = tmp_path / "not" / "yet"
    store = JsonlChatStore(directory)
    assert store.load_chat("x") is None
    assert store.list_chats() == []
    assert not directory.exists()
    ids = ["plain", "a/b", "..", ".hidden", "ünï cödé", "x" * 500, "\ud800"]
    for chat_id in ids:
        store.save_chat(_record(chat_id))
    for chat_id in ids:
        loaded = store.load_chat(chat_id)
        assert loaded is not None and loaded.chat_id == chat_id
    assert sorted(store.list_chats()) == sorted(ids)
    assert all(path.parent == directory for path in directory.iterdir())


def test_a_corrupt_or_foreign_file_loads_as_none(tmp_path: Path) -> None:
    store = JsonlChatStore(tmp_path)
    store.save_chat(_record("good"))
    store.save_chat(_record("torn"))
    (tmp_path / "torn.json").write_text('{"chatId": "torn", "scope": {"userId"')
    (tmp_path / "stray.json").write_text("[1, 2, 3]")
    assert store.load_chat("torn") is None
    assert store.load_chat("stray") is None
    assert store.list_chats() == ["good"]


_SAVER = textwrap.dedent(
    """
    import os
    import sys
    from ag_ui.core import UserMessage
    from threadstore.chatstore import ChatRecord, JsonlChatStore, Scope

    directory, kill_at = sys.argv[1], int(sys.argv[2])
    store = JsonlChatStore(directory)
    real_fsync = os.fsync
    version = 0

    def fsync(fd):
        # The new version is in the temporary file, not yet renamed: stop here for the kill.
        if version == kill_at:
            print("in the middle of a save", flush=True)
            sys.stdin.read()
        real_fsync(fd)

    os.fsync = fsync
    while True:
        version += 1
        messages = [UserMessage(id=f"m{i}", content="x" * 100_000) for i in range(version)]
        messages.append(UserMessage(id="version", content=str(version)))
        store.save_chat(ChatRecord(chat_id="c", scope=Scope(user_id="u"), messages=messages))
    """
)


@pytest.mark.parametrize("kill_at", [1, 2, 5])
def test_a_process_killed_during_a_save_leaves_the_earlier_version_loadable(
    tmp_path: Path, kill_at: int
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _SAVER, str(tmp_path), str(kill_at)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "in the middle of a save"
        os.kill(child.pid, signal.SIGKILL)
    assert list(tmp_path.glob(".*.tmp")), "the kill did not land inside a save"
    store = JsonlChatStore(tmp_path)
    record = store.load_chat("c")
    if kill_at == 1:
        assert record is None
        assert store.list_chats() == []
        return
    assert record is not None
    assert record.messages[-1].content == str(kill_at - 1)
    assert len(record.messages) == kill_at
    assert store.list_chats() == ["c"]
