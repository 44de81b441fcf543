"""Rows stored by older versions, migrated: reasoning messages, errors in metadata, runs.

Stored reasoning messages of older versions fold into the assistant message of their turn,
whether the database holding them is migrated or an export of them is imported.

The databases in ``fixtures/reasoning_messages`` were written by a version that stored each
reasoning block as a ``role="reasoning"`` message (how: ``make_fixture.py`` there). Opening
them migrates them; these tests check the result on SQLite and PostgreSQL: the active
branches, the whole tree of a branched chat, a fork's lineage pointer, a chat whose leaf
was a reasoning message, and the AG-UI history an agent is given on the next run.
``old_exports_v1.jsonl`` and ``old_exports_v2.jsonl`` there are the same chats as the
versions writing export versions 1 and 2 exported them; imported, each chat must equal the
migrated one (tree, active branch, replay).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from typer.testing import CliRunner

import threadstore
from agui_scripts import ScriptedAgent, collect, run_finished, run_input, run_started, user
from postgres_support import fresh_database, server_url
from threadstore import Store
from threadstore.agui import translate_messages
from threadstore.agui._agent import StorageAgent
from threadstore.cli import app as cli_app
from threadstore.errors import RunLiveError
from threadstore.models import Chat, Message, Role, Run, RunStatus
from threadstore.server._auth import user_uuid_for
from threadstore.store._postgres_schema import MIGRATIONS as POSTGRES_MIGRATIONS
from threadstore.transfer import EXPORT_VERSION, ChatExport, export_chat, import_chat

FIXTURES = Path(__file__).parent / "fixtures" / "reasoning_messages"
USER = UUID("00000000-0000-4000-8000-000000000001")

# The PostgreSQL fixture holds rows of a database at schema version 2.
_POSTGRES_FIXTURE_VERSION = 2


@pytest.fixture(params=["sqlite", "postgres"])
async def old_database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of a copy of the frozen old-format database, not yet migrated."""
    if request.param == "sqlite":
        path = tmp_path / "old.sqlite"
        shutil.copyfile(FIXTURES / "old.sqlite", path)
        yield f"sqlite:///{path}"
        return
    import asyncpg

    async with fresh_database(server_url()) as url:
        conn = await asyncpg.connect(url)
        try:
            async with conn.transaction():
                await conn.execute(
                    "CREATE TABLE threadstore_migrations"
                    " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)"
                )
                for migration in POSTGRES_MIGRATIONS[:_POSTGRES_FIXTURE_VERSION]:
                    await conn.execute(migration)
                await conn.execute((FIXTURES / "old_postgres.sql").read_text())
        finally:
            await conn.close()
        yield url


@pytest.fixture
async def migrated(old_database: str) -> AsyncIterator[Store]:
    """A store opened (and so migrated) on the frozen old-format database."""
    store = await threadstore.open_store(old_database)
    try:
        yield store
    finally:
        await store.close()


async def column(url: str, sql: str, message_uuid: UUID) -> Any:
    """One value read with the database's own driver, past the store and its models."""
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return conn.execute(sql.replace("$1", "?"), (str(message_uuid),)).fetchone()[0]
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(sql, message_uuid)
    finally:
        await conn.close()


def shape(messages: list[Message]) -> list[tuple[Any, ...]]:
    return [
        (
            m.role.value,
            m.agui_id,
            m.content,
            [(r.agui_id, r.content, r.encrypted_value) for r in sorted(m.reasonings, key=_seq)],
            [(t.tool_call_id, t.content) for t in sorted(m.tool_calls, key=_seq)],
        )
        for m in messages
    ]


def _seq(record: Any) -> int:
    return int(record.seq)


async def branch(store: Store, thread_id: str) -> list[Message]:
    chat = await store.get_chat_by_thread_id(USER, thread_id)
    assert chat is not None
    return list(await store.get_chat_messages(chat.chat_uuid))


EXPECTED = {
    "plain": [
        ("user", "p-u1", "Weather?", [], []),
        (
            "assistant",
            "p1-a1",
            "Let me check.",
            [("p1-r", "The user wants the weather.", None)],
            [("p1-call", '{"temp": 21}')],
        ),
        ("assistant", "p1-a2", "It is 21 degrees.", [], []),
        ("user", "p-u2", "And tomorrow?", [], []),
        (
            "assistant",
            "p2-a1",
            "Answer two.",
            # Two reasoning messages in a row fold into the answer, in their order.
            [("p2-r1", "First thought.", "sealed-1"), ("p2-r2", "Second thought.", None)],
            [],
        ),
        # Reasoning after the answer with nothing following: it holds only that.
        ("assistant", None, "", [("p2-r3", "An afterthought.", None)], []),
    ],
    "branched": [
        ("user", "b-u1", "Tell me a joke.", [], []),
        ("assistant", "b2-a", "Second answer.", [("b2-r", "Thinking twice.", None)], []),
    ],
    # Forked at the first answer's reasoning message: the copy ends there.
    "forked": [
        ("user", "b-u1", "Tell me a joke.", [], []),
        ("assistant", None, "", [("b1-r", "Thinking once.", None)], []),
    ],
    "leaf": [
        ("user", "l-u1", "Hello?", [], []),
        ("assistant", None, "", [("l1-r", "Half a thought.", None)], []),
    ],
    "crashed": [
        ("user", "c-u1", "Explain.", [], []),
        ("assistant", "c1-a", "Half an ans", [("c1-r", "Let me see.", None)], []),
    ],
    # A reasoning message with two children (a run continued from it) stays, holding its
    # reasoning, so both branches keep what they followed.
    "split": [
        ("user", "s-u1", "Which way?", [], []),
        ("assistant", None, "", [("s1-r", "Two ways to go.", None)], []),
        ("user", "s-u2", "Another?", [], []),
        ("assistant", "s2-a", "The other way.", [], []),
    ],
    # So does one the leaf was moved back onto: the active branch still ends there.
    "pinned": [
        ("user", "n-u1", "Question?", [], []),
        ("assistant", None, "", [("n1-r", "Thinking.", None)], []),
    ],
}


@pytest.mark.parametrize("thread_id", sorted(EXPECTED))
async def test_reasoning_messages_fold_into_their_turns_answer(
    migrated: Store, thread_id: str
) -> None:
    assert shape(await branch(migrated, thread_id)) == EXPECTED[thread_id]


async def test_no_reasoning_message_holding_a_step_is_left(migrated: Store) -> None:
    for thread_id in EXPECTED:
        chat = await migrated.get_chat_by_thread_id(USER, thread_id)
        assert chat is not None
        tree = await migrated.branches.get_message_tree(chat.chat_uuid)
        assert all(node.role != Role.REASONING for node in tree), thread_id


async def test_the_branched_chat_keeps_both_answers_and_its_active_branch(
    migrated: Store,
) -> None:
    chat = await migrated.get_chat_by_thread_id(USER, "branched")
    assert chat is not None
    tree = await migrated.branches.get_message_tree(chat.chat_uuid)
    by_id = {node.agui_id: node for node in tree}
    assert sorted(by_id) == ["b-u1", "b1-a", "b2-a"]
    question = by_id["b-u1"].message_uuid
    # Each answer hangs where its reasoning message hung: under the question.
    assert by_id["b1-a"].parent_uuid == question and by_id["b2-a"].parent_uuid == question
    assert chat.active_leaf_uuid == by_id["b2-a"].message_uuid
    siblings = await migrated.branches.get_siblings(chat.chat_uuid, by_id["b2-a"].message_uuid)
    assert list(siblings.siblings) == [by_id["b1-a"].message_uuid, by_id["b2-a"].message_uuid]

    await migrated.branches.switch_branch(chat.chat_uuid, by_id["b1-a"].message_uuid)

    assert shape(await branch(migrated, "branched")) == [
        ("user", "b-u1", "Tell me a joke.", [], []),
        ("assistant", "b1-a", "First answer.", [("b1-r", "Thinking once.", None)], []),
    ]


async def test_a_fork_made_at_a_reasoning_message_points_at_the_answer_holding_it(
    migrated: Store,
) -> None:
    source = await migrated.get_chat_by_thread_id(USER, "branched")
    fork = await migrated.get_chat_by_thread_id(USER, "forked")
    assert source is not None and fork is not None
    tree = await migrated.branches.get_message_tree(source.chat_uuid)
    answer = next(node for node in tree if node.agui_id == "b1-a")
    assert fork.forked_from_chat_uuid == source.chat_uuid
    assert fork.forked_from_message_uuid == answer.message_uuid


async def test_a_chat_whose_leaf_was_a_reasoning_message_keeps_it_as_its_leaf(
    migrated: Store,
) -> None:
    chat = await migrated.get_chat_by_thread_id(USER, "leaf")
    assert chat is not None
    messages = await branch(migrated, "leaf")
    assert chat.active_leaf_uuid == messages[-1].message_uuid
    assert messages[-1].parent_uuid == messages[0].message_uuid


async def test_a_reasoning_message_a_branch_or_the_leaf_starts_from_stays_in_the_tree(
    migrated: Store,
) -> None:
    split = await migrated.get_chat_by_thread_id(USER, "split")
    pinned = await migrated.get_chat_by_thread_id(USER, "pinned")
    assert split is not None and pinned is not None
    tree = await migrated.branches.get_message_tree(split.chat_uuid)
    holder = next(node for node in tree if node.agui_id is None)
    children = sorted(n.agui_id or "" for n in tree if n.parent_uuid == holder.message_uuid)
    assert children == ["s-u2", "s1-a"]
    await migrated.branches.switch_branch(
        split.chat_uuid, next(n for n in tree if n.agui_id == "s1-a").message_uuid
    )
    assert [m.agui_id for m in await branch(migrated, "split")] == ["s-u1", None, "s1-a"]

    tree = await migrated.branches.get_message_tree(pinned.chat_uuid)
    holder = next(node for node in tree if node.agui_id is None)
    assert pinned.active_leaf_uuid == holder.message_uuid
    answer = next(node for node in tree if node.agui_id == "n1-a")
    assert answer.parent_uuid == holder.message_uuid


def replayed(messages: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (m.role, m.id, m.content, getattr(m, "encrypted_value", None))
        if m.role != "assistant"
        else (m.role, m.id, m.content, [c.id for c in m.tool_calls or ()])
        for m in messages
    ]


REPLAYS = {
    "plain": [
        ("user", "p-u1", "Weather?", None),
        ("reasoning", "p1-r", "The user wants the weather.", None),
        ("assistant", "p1-a1", "Let me check.", ["p1-call"]),
        ("tool", "p1-call-result", '{"temp": 21}', None),
        ("assistant", "p1-a2", "It is 21 degrees.", []),
        ("user", "p-u2", "And tomorrow?", None),
        ("reasoning", "p2-r1", "First thought.", "sealed-1"),
        ("reasoning", "p2-r2", "Second thought.", None),
        ("assistant", "p2-a1", "Answer two.", []),
        ("reasoning", "p2-r3", "An afterthought.", None),
    ],
    "branched": [
        ("user", "b-u1", "Tell me a joke.", None),
        ("reasoning", "b2-r", "Thinking twice.", None),
        ("assistant", "b2-a", "Second answer.", []),
    ],
    "forked": [
        ("user", "b-u1", "Tell me a joke.", None),
        ("reasoning", "b1-r", "Thinking once.", None),
    ],
    "leaf": [
        ("user", "l-u1", "Hello?", None),
        ("reasoning", "l1-r", "Half a thought.", None),
    ],
    "crashed": [
        ("user", "c-u1", "Explain.", None),
        ("reasoning", "c1-r", "Let me see.", None),
        ("assistant", "c1-a", "Half an ans", []),
    ],
    "split": [
        ("user", "s-u1", "Which way?", None),
        ("reasoning", "s1-r", "Two ways to go.", None),
        ("user", "s-u2", "Another?", None),
        ("assistant", "s2-a", "The other way.", []),
    ],
    "pinned": [
        ("user", "n-u1", "Question?", None),
        ("reasoning", "n1-r", "Thinking.", None),
    ],
}
"""What a client listed at the end of each run: the same ids, contents and order as
before the migration, and no message a client never saw."""


@pytest.mark.parametrize("thread_id", sorted(REPLAYS))
async def test_the_next_run_replays_the_migrated_history_as_the_client_saw_it(
    migrated: Store, thread_id: str
) -> None:
    inner = ScriptedAgent(
        [
            run_started(thread_id, "next"),
            run_finished(thread_id, "next"),
        ]
    )
    agent = StorageAgent("assistant", USER, migrated, migrated, inner, run_repo=migrated)

    await collect(agent.run(run_input(thread_id, "next", [user("next-u", "More?")])))

    assert replayed(inner.inputs[0].messages) == [
        *REPLAYS[thread_id],
        ("user", "next-u", "More?", None),
    ]
    # The new turn continues the branch the chat was on.
    after = await branch(migrated, thread_id)
    assert shape(after)[:-1] == EXPECTED[thread_id]


async def test_opening_a_migrated_database_again_changes_nothing(migrated: Store) -> None:
    before = {t: shape(await branch(migrated, t)) for t in EXPECTED}
    version = await migrated.schema_version()

    await migrated.setup()

    assert await migrated.schema_version() == version
    assert {t: shape(await branch(migrated, t)) for t in EXPECTED} == before


async def test_an_error_kept_in_metadata_moves_to_the_message_error_column(
    migrated: Store, old_database: str
) -> None:
    messages = await branch(migrated, "crashed")

    answer = messages[-1]
    assert (answer.status.value, answer.error) == ("errored", "RuntimeError: scripted crash")
    assert "error" not in answer.metadata
    assert [m.error for m in messages[:-1]] == [None]
    # Read straight from the column, not through the model's fallback.
    sql = "SELECT error FROM messages WHERE message_uuid = $1"
    assert await column(old_database, sql, answer.message_uuid) == answer.error


async def test_runs_left_running_together_keep_running_once_runs_are_one_per_chat(
    old_database: str,
) -> None:
    # Two runs of one chat recorded running (a crashed owner's beside a newer one), as
    # versions without the one-running-run index could leave them.
    rows = [("dead", "2026-01-01T00:00:00+00:00"), ("newer", "2026-01-02T00:00:00+00:00")]
    chat_sql = "SELECT chat_uuid FROM chats WHERE thread_id = 'plain'"
    insert = (
        "INSERT INTO runs (chat_uuid, run_id, thread_id, status, owner, heartbeat_at,"
        " format_version, created_at, updated_at)"
        " VALUES ({chat}, {run}, 'plain', 'running', 'gone', {at}, 1, {at}, {at})"
    )
    if old_database.startswith("sqlite:"):
        with sqlite3.connect(old_database.removeprefix("sqlite:///")) as conn:
            chat = conn.execute(chat_sql).fetchone()[0]
            for run_id, at in rows:
                conn.execute(insert.format(chat="?1", run="?2", at="?3"), (chat, run_id, at))
    else:
        import asyncpg

        conn = await asyncpg.connect(old_database)
        try:
            chat = await conn.fetchval(chat_sql)
            for run_id, at in rows:
                await conn.execute(
                    insert.format(chat="$1", run="$2", at="$3::text::timestamptz"),
                    chat,
                    run_id,
                    at,
                )
        finally:
            await conn.close()

    store = await threadstore.open_store(old_database)
    try:
        runs = [await store.get_run(UUID(str(chat)), run_id) for run_id, _ in rows]
        with pytest.raises(RunLiveError) as refused:
            await store.start_run(
                Run(chat_uuid=UUID(str(chat)), thread_id="plain", run_id="third", owner="x")
            )
    finally:
        await store.close()

    assert [(r.status, r.exclusive) for r in runs if r is not None] == [
        (RunStatus.RUNNING, False),
        (RunStatus.RUNNING, True),
    ]
    assert refused.value.live_run_id == "newer"


async def test_a_run_continuing_an_old_run_finds_its_last_message_after_the_fold(
    migrated: Store,
) -> None:
    # Runs point at messages through their run id: b1's last message is its answer, which
    # now holds b1's reasoning; a run continuing b1 hangs under it.
    inner = ScriptedAgent([run_started("branched", "again"), run_finished("branched", "again")])
    agent = StorageAgent("assistant", USER, migrated, migrated, inner, run_repo=migrated)

    await collect(
        agent.run(run_input("branched", "again", [user("again-u", "Again?")], parent_run_id="b1"))
    )

    assert replayed(inner.inputs[0].messages) == [
        ("user", "b-u1", "Tell me a joke.", None),
        ("reasoning", "b1-r", "Thinking once.", None),
        ("assistant", "b1-a", "First answer.", []),
        ("user", "again-u", "Again?", None),
    ]
    assert [m.agui_id for m in await branch(migrated, "branched")] == ["b-u1", "b1-a", "again-u"]


# --- exports written by older versions ---------------------------------------------------------

IMPORTER = UUID("00000000-0000-4000-8000-000000000002")


def old_exports(version: int) -> list[ChatExport]:
    """The chats of ``old.sqlite`` as the versions writing export ``version`` exported them."""
    text = (FIXTURES / f"old_exports_v{version}.jsonl").read_text()
    return [ChatExport.model_validate_json(line) for line in text.splitlines()]


def _key(message: Message) -> str:
    """A message named by what survives an import: its AG-UI id, or its first step's."""
    if message.agui_id is not None:
        return message.agui_id
    first = min(message.reasonings, key=_seq)
    return f"holding {first.agui_id}"


def _node(message: Message, keys: dict[UUID, str]) -> tuple[Any, ...]:
    return (
        _key(message),
        keys.get(message.parent_uuid) if message.parent_uuid else None,
        message.role.value,
        message.content,
        message.status.value,
        message.error,
        message.run_id,
        message.metadata,
        [
            (r.agui_id, r.name, r.content, r.encrypted_value, r.status.value, r.metadata)
            for r in sorted(message.reasonings, key=_seq)
        ],
        [
            (t.tool_call_id, t.name, t.arguments, t.content, t.error, t.status.value)
            for t in sorted(message.tool_calls, key=_seq)
        ],
    )


async def tree_of(store: Store, user_uuid: UUID, thread_id: str) -> dict[str, Any]:
    """The whole tree of a chat, its active branch and its replay, by surviving names."""
    chat = await store.get_chat_by_thread_id(user_uuid, thread_id)
    assert chat is not None
    messages = []
    for node in await store.branches.get_message_tree(chat.chat_uuid):
        found = await store.get_message(node.message_uuid)
        assert found is not None
        messages.append(found)
    keys = {message.message_uuid: _key(message) for message in messages}
    active = list(await store.get_chat_messages(chat.chat_uuid))
    replay_keys = dict(keys)
    for message in messages:
        replay_keys.update((r.uuid, f"step {r.agui_id}") for r in message.reasonings)
        replay_keys.update((t.uuid, f"result of {t.tool_call_id}") for t in message.tool_calls)
    return {
        "tree": sorted(_node(message, keys) for message in messages),
        "leaf": keys[chat.active_leaf_uuid] if chat.active_leaf_uuid else None,
        "active": [_node(message, keys) for message in active],
        # A record without an AG-UI id of its own (or with one its message took) replays
        # under its uuid, which an import makes anew.
        "replay": [
            {**dumped, "id": replay_keys.get(_uuid_or_none(dumped["id"]), dumped["id"])}
            for dumped in (m.model_dump() for m in translate_messages(active))
        ],
    }


def _uuid_or_none(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None


async def test_an_old_export_imports_as_the_migration_folds_the_old_database(
    migrated: Store,
) -> None:
    for document in old_exports(2):
        assert document.export_version == 2
        await import_chat(migrated, document, user_uuid=IMPORTER)

    for thread_id in EXPECTED:
        imported = await tree_of(migrated, IMPORTER, thread_id)
        assert imported == await tree_of(migrated, USER, thread_id), thread_id
        assert shape(await branch(migrated, thread_id)) == EXPECTED[thread_id]


async def test_an_old_export_of_the_active_branch_imports_as_the_migrated_branch(
    migrated: Store,
) -> None:
    for document in old_exports(1):
        assert document.export_version == 1 and document.roots is None
        await import_chat(migrated, document, user_uuid=IMPORTER)

    for thread_id in EXPECTED:
        imported = await tree_of(migrated, IMPORTER, thread_id)
        migrated_chat = await tree_of(migrated, USER, thread_id)
        assert imported["active"] == migrated_chat["active"], thread_id
        assert imported["replay"] == migrated_chat["replay"], thread_id
        assert imported["leaf"] == migrated_chat["leaf"], thread_id


async def test_an_export_of_today_imports_its_reasoning_messages_as_they_are(
    migrated: Store,
) -> None:
    # A snapshot's reasoning message is stored with role "reasoning" today and must
    # round-trip: only documents older than nested reasoning are folded.
    chat = await migrated.get_chat_by_thread_id(USER, "plain")
    assert chat is not None
    document = await export_chat(migrated, chat)
    assert document.export_version == EXPORT_VERSION
    question = document.messages[0]
    snapshot = question.model_copy(
        update={
            "message_uuid": uuid4(),
            "parent_uuid": chat.active_leaf_uuid,
            "role": Role.REASONING,
            "agui_id": "snap-r",
            "seq": document.messages[-1].seq + 1,
            "reasonings": [
                min(document.messages[1].reasonings, key=_seq).model_copy(
                    update={"uuid": uuid4(), "agui_id": "snap-r"}
                )
            ],
            "tool_calls": [],
            "content": "",
        }
    )
    document = document.model_copy(update={"messages": [*document.messages, snapshot]})
    document.chat.active_leaf_uuid = snapshot.message_uuid

    imported = await import_chat(migrated, document, user_uuid=IMPORTER)

    messages = list(await migrated.get_chat_messages(imported.chat_uuid))
    assert (messages[-1].role, messages[-1].agui_id) == (Role.REASONING, "snap-r")
    assert [m.agui_id for m in messages[:-1]] == [m.agui_id for m in document.messages[:-1]]


async def test_threadstore_import_folds_an_old_export_file(
    migrated: Store, old_database: str
) -> None:
    source = str(FIXTURES / "old_exports_v2.jsonl")

    code, output = await asyncio.to_thread(
        invoke, "import", source, "--db", old_database, "--user", "importer"
    )

    assert code == 0, output
    importer = user_uuid_for("importer")
    for thread_id in EXPECTED:
        imported = await tree_of(migrated, importer, thread_id)
        assert imported == await tree_of(migrated, USER, thread_id), thread_id


def invoke(*args: str) -> tuple[int, str]:
    """Run the CLI in-process; return (exit code, stdout + stderr)."""
    result = CliRunner().invoke(cli_app, list(args), env={"THREADSTORE_DB": ""})
    return result.exit_code, result.output


# Rows the frozen chats do not have, added to a copy of the old SQLite database: reasoning
# messages of a sub-agent, holding a tool call, with an encrypted value of their own, and a
# chain ending at a reasoning message whose child is another run's. (message key, parent
# key, role, AG-UI id, run id, sub-agent, encrypted value, steps, tool calls)
EDGE_ROWS: list[tuple[Any, ...]] = [
    ("u1", None, "user", "e-u1", "r1", None, None, [], []),
    # A sub-agent's reasoning before the agent's answer: different scopes, not folded.
    ("r1", "u1", "reasoning", "e-r1", "r1", "sub", None, ["e-r1"], []),
    ("a1", "r1", "assistant", "e-a1", "r1", None, None, [], []),
    # Reasoning holding a tool call, followed by a user message: stays, with both.
    ("r2", "a1", "reasoning", "e-r2", "r1", None, None, ["e-r2"], ["e-call-2"]),
    ("u2", "r2", "user", "e-u2", "r2", None, None, [], []),
    # A chain whose end's child is another run's answer: it folds into that end.
    ("r3", "u2", "reasoning", "e-r3", "r2", None, None, ["e-r3"], []),
    ("r4", "r3", "reasoning", "e-r4", "r2", None, None, ["e-r4"], []),
    ("a3", "r4", "assistant", "e-a3", "r3", None, None, [], []),
    # An encrypted value of the message's own: not of the older kind, left alone.
    ("r5", "a3", "reasoning", "e-r5", "r3", "sub", "sealed-5", ["e-r5"], []),
    # A sub-agent's reasoning before its own answer, which has a step and a call already.
    ("r6", "r5", "reasoning", "e-r6", "r3", "sub", None, ["e-r6"], []),
    ("a6", "r6", "assistant", "e-a6", "r3", "sub", None, ["e-a6-r"], ["e-call-6"]),
]


def add_edge_chat(path: Path) -> None:
    """Write :data:`EDGE_ROWS` as chat ``edge`` into the old-format database at ``path``."""
    at = "2026-01-01T00:00:00+00:00"
    chat = "00000000-0000-4000-8000-0000000000e0"
    uuids = {key: str(uuid4()) for key, *_ in EDGE_ROWS}
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO chats (chat_uuid, user_uuid, thread_id, dedup_key, format_version,"
            " created_at, updated_at) VALUES (?, ?, 'edge', 'edge', 1, ?, ?)",
            (chat, str(USER), at, at),
        )
        for key, parent, role, agui_id, run_id, sub, sealed, steps, calls in EDGE_ROWS:
            metadata = json.dumps({"subagent_run_id": sub}) if sub else None
            conn.execute(
                "INSERT INTO messages (message_uuid, chat_uuid, parent_uuid, agui_id, role,"
                " content, encrypted_value, status, in_progress, run_id, metadata,"
                " format_version, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'complete', 0, ?, ?, 1, ?, ?)",
                (
                    uuids[key],
                    chat,
                    uuids[parent] if parent else None,
                    agui_id,
                    role,
                    "" if role == "reasoning" else f"text of {key}",
                    sealed,
                    run_id,
                    metadata,
                    at,
                    at,
                ),
            )
            seq = 0
            for step in steps:
                seq += 1
                conn.execute(
                    "INSERT INTO reasonings (uuid, message_uuid, chat_uuid, agui_id, content,"
                    " status, in_progress, seq, format_version, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, 'complete', 0, ?, 1, ?, ?)",
                    (str(uuid4()), uuids[key], chat, step, f"thought {step}", seq, at, at),
                )
            for call in calls:
                seq += 1
                conn.execute(
                    "INSERT INTO tool_calls (uuid, message_uuid, chat_uuid, tool_call_id, name,"
                    " arguments, content, status, in_progress, seq, format_version,"
                    " created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, 'look', '{}', 'found', 'complete', 0, ?, 1, ?, ?)",
                    (str(uuid4()), uuids[key], chat, call, seq, at, at),
                )
        conn.execute(
            "UPDATE chats SET active_leaf_uuid = ? WHERE chat_uuid = ?", (uuids["a6"], chat)
        )


def document_from_rows(path: Path, thread_id: str) -> ChatExport:
    """The export document an older version wrote of a chat, built from its rows."""
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row

        def rows(sql: str, *args: Any) -> list[dict[str, Any]]:
            found = [dict(row) for row in conn.execute(sql, args)]
            for row in found:
                row["metadata"] = json.loads(row["metadata"]) if row.get("metadata") else {}
            return found

        (chat,) = rows("SELECT * FROM chats WHERE thread_id = ?", thread_id)
        chat["state"] = None
        messages = []
        for message in rows("SELECT * FROM messages WHERE chat_uuid = ?", chat["chat_uuid"]):
            uuid = message["message_uuid"]
            message["reasonings"] = rows("SELECT * FROM reasonings WHERE message_uuid = ?", uuid)
            message["tool_calls"] = rows("SELECT * FROM tool_calls WHERE message_uuid = ?", uuid)
            messages.append(Message.model_validate(message))
    roots = [m.message_uuid for m in messages if m.parent_uuid is None]
    return ChatExport(
        export_version=2, chat=Chat.model_validate(chat), messages=messages, roots=roots
    )


async def test_an_old_export_folds_as_the_migration_does_where_the_frozen_chats_do_not_go(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.sqlite"
    shutil.copyfile(FIXTURES / "old.sqlite", path)
    add_edge_chat(path)
    document = document_from_rows(path, "edge")

    store = await threadstore.open_store(f"sqlite:///{path}")
    try:
        await import_chat(store, document, user_uuid=IMPORTER)
        imported = await tree_of(store, IMPORTER, "edge")
        migrated = await tree_of(store, USER, "edge")
    finally:
        await store.close()

    assert imported == migrated
    assert [(key, role) for key, _, role, *_ in migrated["tree"]] == [
        ("e-a1", "assistant"),
        ("e-a3", "assistant"),
        ("e-a6", "assistant"),
        ("e-r5", "reasoning"),
        ("e-u1", "user"),
        ("e-u2", "user"),
        ("holding e-r1", "assistant"),
        ("holding e-r2", "assistant"),
        ("holding e-r3", "assistant"),
    ]
    a6 = next(node for node in migrated["tree"] if node[0] == "e-a6")
    assert [step[0] for step in a6[8]] == ["e-r6", "e-a6-r"]
