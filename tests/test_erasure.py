"""Erasure: forget_user removes everything of a user, a tombstone keeps a run still
streaming from writing anything back, and the receipt's counts are what went.

On a real SQLite file and the running PostgreSQL (and the memory store), through the
store, the server's routes, the command line and a direct count in the database.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from typer.testing import CliRunner

import threadstore
from agui_scripts import ScriptedAgent, collect, run_finished, run_input, text_message, user
from threadstore import (
    ChatCreate,
    ConflictError,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    Role,
    Run,
    Store,
)
from threadstore.agui import StorageAgent
from threadstore.cli import app as cli
from threadstore.server import LocalUserAuth, create_app
from threadstore.store.ops import CreateMessage, CreateReasoning, CreateToolCall, Write

KINDS = ("chats", "messages", "tool_calls", "reasonings", "runs", "summaries")


async def fill(store: Store, user_uuid: UUID, chats: int, *, prefix: str = "t") -> list[UUID]:
    """``chats`` chats of the user, each a question and an answer with a call and reasoning,
    a finished run, and every tenth a summary."""
    made: list[UUID] = []
    writes: list[Write] = []
    for n in range(chats):
        chat = await store.create_chat(ChatCreate(user_uuid=user_uuid, thread_id=f"{prefix}{n}"))
        made.append(chat.chat_uuid)
        answer = MessageCreate(
            chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, content="secret answer"
        )
        done = {"status": MessageStatus.COMPLETE, "in_progress": False}
        writes += [
            CreateMessage(
                MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content="secret", **done)
            ),
            CreateMessage(answer),
            CreateToolCall(
                MessageToolCallCreate(
                    message_uuid=answer.message_uuid, tool_call_id="c", name="f", content="x"
                )
            ),
            CreateReasoning(
                MessageReasoningCreate(message_uuid=answer.message_uuid, content="thinking")
            ),
        ]
        if len(writes) >= 400:
            await store.apply_writes(writes)
            writes = []
    if writes:
        await store.apply_writes(writes)
    for n, chat_uuid in enumerate(made):
        await store.start_run(Run(chat_uuid=chat_uuid, thread_id=f"{prefix}{n}", run_id="r"))
        await store.finish_run(chat_uuid, "r", threadstore.RunStatus.COMPLETE)
        if n % 10 == 0:
            assert await store.branches.compact(chat_uuid, keep_messages=0) is not None
    return made


async def test_forget_user_removes_everything_of_theirs_and_nothing_of_others(
    store: Store,
) -> None:
    gone, kept = uuid4(), uuid4()
    theirs = await fill(store, gone, 12)
    await fill(store, kept, 3, prefix="other")
    await store.delete_chat(theirs[0], soft=True)
    seen: list[UUID] = []

    async def outbox(user_uuid: UUID) -> int:  # what an outbox's hook does
        seen.append(user_uuid)
        return 2

    store.chats.add_erasure_hook("outbox", outbox)
    receipt = await store.chats.forget_user(gone, requested_by="admin", batch=5)

    assert receipt.user_uuid == gone and receipt.requested_by == "admin"
    assert {kind: receipt.counts[kind] for kind in KINDS} == {
        "chats": 12,
        "messages": 24,
        "tool_calls": 12,
        "reasonings": 12,
        "runs": 12,
        "summaries": 2,
    }
    assert receipt.counts["outbox"] == 2 and seen == [gone]
    assert receipt.started_at <= receipt.finished_at
    assert await store.get_all_chats(gone) == []
    for chat_uuid in theirs:
        assert await store.get_chat_messages(chat_uuid) == []
    assert await store.chats.restore_chat(theirs[0]) is None
    assert len(await store.get_all_chats(kept)) == 3
    # The tombstone: nothing of theirs is stored again.
    with pytest.raises(ConflictError, match="erased"):
        await store.create_chat(ChatCreate(user_uuid=gone, thread_id="again"))
    again = await store.chats.forget_user(gone)
    assert again.counts["chats"] == 0
    assert [r.receipt_uuid for r in await store.chats.erasure_receipts(gone)] == [
        again.receipt_uuid,
        receipt.receipt_uuid,
    ]
    assert "secret" not in receipt.model_dump_json()


async def count_rows(url: str, user_uuid: UUID, chats: list[UUID]) -> dict[str, int]:
    """Rows of the user's chats, counted in the database itself (not through the store)."""
    kinds = ("messages", "tool_calls", "reasonings", "runs", "summaries")
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///").partition("?")[0]
        with sqlite3.connect(path) as conn:
            ids = [str(c) for c in chats]
            marks = ",".join("?" * len(ids))
            sql = "SELECT count(*) FROM chats WHERE user_uuid = ?"
            found = {"chats": conn.execute(sql, (str(user_uuid),)).fetchone()[0]}
            for kind in kinds:
                sql = f"SELECT count(*) FROM {kind} WHERE chat_uuid IN ({marks})"
                found[kind] = conn.execute(sql, ids).fetchone()[0]
            return found
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        sql = "SELECT count(*) FROM chats WHERE user_uuid = $1"
        found = {"chats": await conn.fetchval(sql, user_uuid)}
        for kind in (*kinds, "run_events"):
            sql = f"SELECT count(*) FROM {kind} WHERE chat_uuid = ANY($1)"
            found[kind] = await conn.fetchval(sql, chats)
        return found
    finally:
        await conn.close()


def _as(user_uuid: UUID) -> LocalUserAuth:
    """Every request is made by ``user_uuid``."""
    return LocalUserAuth(user_uuid)


@pytest.fixture
async def erasable(store_url: str) -> AsyncIterator[tuple[str, Store]]:
    if store_url.startswith("memory"):
        pytest.skip("counted in the database itself: SQLite and PostgreSQL")
    async with await threadstore.open_store(store_url) as opened:
        yield store_url, opened


async def test_erasing_a_user_with_1000_chats_while_a_run_streams_leaves_nothing_readable(
    erasable: tuple[str, Store],
) -> None:
    url, store = erasable
    gone, kept = uuid4(), uuid4()
    chats = await fill(store, gone, 1000)
    await fill(store, kept, 2, prefix="other")
    before = await count_rows(url, gone, chats)
    assert before["chats"] == 1000

    # A run of theirs that keeps streaming (and flushing) while they are forgotten.

    def script(run: Any) -> list[Any]:
        return [
            *text_message("late", "a late secret answer", deltas=40),
            run_finished("t0", run.run_id),
        ]

    agent = ScriptedAgent(script, delay=0.001, pause_after=5)
    storage = StorageAgent("a", gone, store, store, agent, run_repo=store)
    running = asyncio.ensure_future(
        collect(storage.run(run_input("t0", "late-run", [user("late-u", "one more secret")])))
    )
    await agent.paused.wait()  # its input and first flush are stored
    mid = await count_rows(url, gone, chats)
    agent.gate.set()  # it streams on, flushing, while the erasure runs
    receipt = await store.chats.forget_user(gone, requested_by="admin", batch=50)
    events = await running

    after = await count_rows(url, gone, chats)
    assert all(value == 0 for value in after.values()), after
    # The receipt counts what each batch removed, the run's rows included.
    for kind in KINDS:
        assert receipt.counts[kind] >= before[kind]
        assert receipt.counts[kind] <= mid[kind] + (2 if kind in ("messages", "runs") else 0)
    assert receipt.counts["chats"] == 1000
    assert events[-1].type in ("RUN_ERROR", "RUN_FINISHED")
    # Nothing of theirs through the store, the routes or the command line.
    assert await store.get_all_chats(gone) == []
    assert await store.get_chat_by_thread_id(gone, "t0") is None
    app = create_app(store, agent="demo", auth=_as(gone), admins=[kept])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            assert (await http.get("/api/chats")).json()["items"] == []
            assert (await http.get(f"/api/chats/{chats[0]}")).status_code == 404
            assert (await http.get(f"/api/chats/{chats[0]}/messages")).status_code == 404
            assert (await http.get("/api/threads/t0")).status_code == 404
            connect = await http.get("/agui/threads/t0/runs/late-run/events")
            assert connect.status_code == 404
    runner = CliRunner()
    env = {"COLUMNS": "200", "THREADSTORE_DB": ""}

    def invoke(*args: str) -> Any:  # on a thread of its own: the command runs its own loop
        return asyncio.to_thread(runner.invoke, cli, [*args, "--db", url], env=env)

    listed = await invoke("chats", "list", "--user", str(gone))
    shown = await invoke("chats", "show", str(chats[0]))
    exported = await invoke("export", "--user", str(gone))
    assert "no chats yet" in listed.output
    assert shown.exit_code == 1 and "no chat matches" in shown.output
    assert "secret" not in exported.output
    # Another user's chats are all there.
    assert len(await store.get_all_chats(kept)) == 2


async def test_erasure_over_http_is_for_admins_and_returns_the_kept_receipt(
    store: Store,
) -> None:
    admin, gone = uuid4(), uuid4()
    await fill(store, gone, 3)
    app = create_app(store, agent="demo", auth=_as(admin), admins=[admin])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            response = await http.delete(f"/api/admin/users/{gone}")
            receipts = (await http.get("/api/admin/erasures", params={"user": str(gone)})).json()
            empty = await http.delete("/api/admin/users/%20")
    outsider = create_app(store, agent="demo", auth=_as(gone), admins=[admin])
    async with outsider.router.lifespan_context(outsider):
        transport = httpx.ASGITransport(app=outsider)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            refused = await http.delete(f"/api/admin/users/{admin}")

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["counts"]["chats"] == 3 and body["counts"]["messages"] == 6
    assert body["requested_by"] == str(admin)
    assert [r["receipt_uuid"] for r in receipts] == [body["receipt_uuid"]]
    assert empty.status_code == 422 and "user_id must not be empty" in empty.text
    assert refused.status_code == 403 and refused.json()["detail"] == "only admins may forget users"


def test_forget_on_the_command_line_prints_the_receipt(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'threadstore.db'}"

    async def seed() -> None:
        async with await threadstore.open_store(url) as store:
            await fill(store, threadstore.keys.user_uuid_for("bob"), 4)

    asyncio.run(seed())
    runner = CliRunner()
    env = {"COLUMNS": "200", "THREADSTORE_DB": ""}
    result = runner.invoke(cli, ["forget", "bob", "--db", url, "--yes", "--by", "ops"], env=env)
    refused = runner.invoke(cli, ["forget", "bob", "--db", url], input="n\n", env=env)

    assert result.exit_code == 0, result.output
    assert '"chats": 4' in result.output and '"requested_by": "ops"' in result.output
    assert refused.exit_code == 1
