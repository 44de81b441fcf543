"""RUN_FINISHED means stored: while PostgreSQL is away a run's writes wait in the outbox.

A TCP proxy (``chaos_proxy.py``) sits between the server and PostgreSQL. A run streams
its first half, the proxy cuts (or stalls) the connection, and the run ends: its client
gets ``RUN_FINISHED`` only once the run's writes are journaled in the outbox, and once
the store is back the outbox drains and the run is stored whole, once, ``complete``.
A server killed with ``kill -9`` meanwhile drains the outbox it left when it starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID, uuid4

import httpx
import pytest

from chaos_proxy import ChaosProxy
from postgres_support import clean_database, server_url
from server_support import GatedAgent, LiveServer, read_sse, run_input
from test_server_processes import start_replica, stop_replica
from test_store_outage import run_to_end, through, write_locked
from threadstore import open_store
from threadstore.agui import Outbox
from threadstore.agui._outbox import decode_writes, encode_writes
from threadstore.agui._writer import PersisterConfig
from threadstore.keys import user_uuid_for
from threadstore.models import (
    Chat,
    MessageCreate,
    MessageStatus,
    MessageUpdate,
    Role,
    Run,
    RunStatus,
)
from threadstore.server import create_app
from threadstore.server._auth import LOCAL_USER_UUID
from threadstore.store.ops import CreateMessage, FinishRun, UpdateChatState, UpdateMessage

STORE_TIMEOUT = 1.0
"""The server's store timeout: short, so an outage shows at once."""

ANSWER = "first half second half"
"""What the gated agent streams (server_support.answer_in_halves)."""


@pytest.fixture
async def proxied() -> AsyncIterator[tuple[str, str, ChaosProxy]]:
    """A clean database's direct URL, its URL through a chaos proxy, and the proxy."""
    async with clean_database(server_url()) as url:
        parts = urlsplit(url)
        async with ChaosProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            yield url, through(url, proxy.port), proxy


async def stream_around_an_outage(
    client: httpx.AsyncClient, body: dict[str, Any], agent: GatedAgent, outage: Any
) -> list[str]:
    """POST a run; once its first half is out, start ``outage``, then let the run end.

    Returns the event types the client got; the run's end must not come before the
    outage began (the answer's second half is produced only then).
    """
    types: list[str] = []
    async with client.stream("POST", "/agui", json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for frame in read_sse(response):
            if frame.data is None:
                continue
            types.append(frame.type or "")
            if types.count("TEXT_MESSAGE_CONTENT") == 2 and not agent.gate.is_set():
                await agent.wait_reached()
                await outage()
                agent.gate.set()
    return types


async def outbox_depth(client: httpx.AsyncClient) -> int:
    """The outbox depth ``/readyz`` reports (whatever its status)."""
    depth = (await client.get("/readyz")).json()["outbox_depth"]
    assert isinstance(depth, int)
    return depth


async def drained(client: httpx.AsyncClient) -> None:
    """Wait until ``/readyz`` says ready with an empty outbox."""
    for _ in range(400):
        answer = (await client.get("/readyz")).json()
        if answer == {"status": "ready", "outbox_depth": 0}:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the outbox never drained: {answer}")


async def stored_run(
    url: str, user: UUID, thread_id: str, run_id: str
) -> tuple[Chat, list[tuple[Role, str, MessageStatus]], Run | None]:
    """What the store holds of a thread, read in a store of the test's own: its chat, its
    messages (role, content, status) and the run ``run_id``."""
    store = await open_store(url, setup=False)
    try:
        chat = await store.get_chat_by_thread_id(user, thread_id)
        assert chat is not None
        messages = await store.get_chat_messages(chat.chat_uuid)
        run = await store.get_run(chat.chat_uuid, run_id)
    finally:
        await store.close()
    return chat, [(m.role, m.content, m.status) for m in messages], run


async def assert_stored_whole(
    url: str, user: UUID, body: dict[str, Any], state: dict[str, Any]
) -> None:
    """The run is stored once, whole and complete: nothing lost, nothing twice."""
    chat, messages, run = await stored_run(url, user, body["threadId"], body["runId"])
    assert messages == [
        (Role.USER, "What is 12 * 7 + 3?", MessageStatus.COMPLETE),
        (Role.ASSISTANT, ANSWER, MessageStatus.COMPLETE),
    ]
    assert run is not None and run.status is RunStatus.COMPLETE
    assert chat.state == state


async def run_across(
    url: str, proxied_url: str, proxy: ChaosProxy, tmp_path: Path, how: str
) -> None:
    """A run whose end falls in a cut or a stall: finished once journaled, stored once back."""
    agent = GatedAgent()
    app = create_app(
        proxied_url,
        agent=agent,
        sweep_interval=None,
        store_timeout=STORE_TIMEOUT,
        outbox=tmp_path / "outbox.sqlite3",
    )
    body = run_input()

    async def outage() -> None:
        if how == "cut":
            await proxy.cut()
        else:
            proxy.stall()

    async with (
        LiveServer(app) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        types = await stream_around_an_outage(client, body, agent, outage)
        assert types[-1] == "RUN_FINISHED"  # journaled: durable although the store is away
        assert types.count("TEXT_MESSAGE_CONTENT") == 4
        assert await outbox_depth(client) > 0  # ... and waiting in the outbox
        await proxy.restore()
        await drained(client)
    await assert_stored_whole(url, LOCAL_USER_UUID, body, {"phase": "first"})


async def test_a_run_ending_while_postgres_is_cut_finishes_once_journaled_and_is_stored_whole(
    proxied: tuple[str, str, ChaosProxy], tmp_path: Path
) -> None:
    await run_across(*proxied, tmp_path, "cut")


async def test_a_run_ending_while_postgres_stalls_finishes_once_journaled_and_is_stored_whole(
    proxied: tuple[str, str, ChaosProxy], tmp_path: Path
) -> None:
    await run_across(*proxied, tmp_path, "stall")


async def test_a_run_ending_while_another_process_holds_the_sqlite_lock_is_journaled_then_stored(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'threadstore.db'}"
    agent = GatedAgent()
    app = create_app(
        url,
        agent=agent,
        sweep_interval=None,
        store_timeout=STORE_TIMEOUT,
        outbox=tmp_path / "outbox.sqlite3",
    )
    body = run_input()
    async with contextlib.AsyncExitStack() as lock:

        async def outage() -> None:
            await lock.enter_async_context(write_locked(tmp_path / "threadstore.db"))

        async with (
            LiveServer(app) as server,
            httpx.AsyncClient(base_url=server.url, timeout=30) as client,
        ):
            types = await stream_around_an_outage(client, body, agent, outage)
            assert types[-1] == "RUN_FINISHED"
            assert await outbox_depth(client) > 0
            await lock.aclose()  # the other process lets go
            await drained(client)
    await assert_stored_whole(url, LOCAL_USER_UUID, body, {"phase": "first"})


async def test_a_run_started_while_postgres_is_cut_runs_on_the_clients_messages_and_is_stored_later(
    proxied: tuple[str, str, ChaosProxy], tmp_path: Path
) -> None:
    url, proxied_url, proxy = proxied
    agent = GatedAgent()
    agent.gate.set()  # the answer streams straight through
    app = create_app(
        proxied_url,
        agent=agent,
        sweep_interval=None,
        store_timeout=STORE_TIMEOUT,
        outbox=tmp_path / "outbox.sqlite3",
    )
    first = run_input()
    second = run_input("And now?", thread_id=first["threadId"])
    async with (
        LiveServer(app) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        assert (await run_to_end(client, first))[-1] == "RUN_FINISHED"
        await proxy.cut()
        async with client.stream("POST", "/agui", json=second) as response:
            assert response.status_code == 200, await response.aread()
            frames = [f async for f in read_sse(response) if f.data is not None]
        types = [f.type for f in frames]
        assert types[:2] == ["RUN_STARTED", "CUSTOM"] and types[-1] == "RUN_FINISHED"
        notice = frames[1].data
        assert notice is not None
        assert notice["name"] == "threadstore.history_skipped"
        assert await outbox_depth(client) > 0
        await proxy.restore()
        await drained(client)
    _, messages, run = await stored_run(url, LOCAL_USER_UUID, first["threadId"], second["runId"])
    assert messages == [
        (Role.USER, "What is 12 * 7 + 3?", MessageStatus.COMPLETE),
        (Role.ASSISTANT, ANSWER, MessageStatus.COMPLETE),
        (Role.USER, "And now?", MessageStatus.COMPLETE),
        (Role.ASSISTANT, ANSWER, MessageStatus.COMPLETE),
    ]
    assert run is not None and run.status is RunStatus.COMPLETE


async def test_a_full_outbox_ends_the_run_with_store_unavailable_and_refuses_new_runs(
    proxied: tuple[str, str, ChaosProxy], tmp_path: Path
) -> None:
    _, proxied_url, proxy = proxied
    agent = GatedAgent()
    app = create_app(
        proxied_url,
        agent=agent,
        sweep_interval=None,
        store_timeout=STORE_TIMEOUT,
        outbox=tmp_path / "outbox.sqlite3",
        outbox_max_bytes=16,  # no flush fits
    )
    async with (
        LiveServer(app) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        types = await stream_around_an_outage(client, run_input(), agent, proxy.cut)
        assert types[-1] == "RUN_ERROR" and "RUN_FINISHED" not in types
        refused = await client.post("/agui", json=run_input("Still there?"))
        assert refused.status_code == 503
        assert refused.json()["code"] == "store_unavailable"
        assert "outbox is full" in refused.json()["detail"]
        await proxy.restore()


async def test_a_server_killed_during_a_cut_drains_its_outbox_when_it_starts_again(
    proxied: tuple[str, str, ChaosProxy], tmp_path: Path
) -> None:
    url, proxied_url, proxy = proxied
    journal = str(tmp_path / "outbox.sqlite3")
    headers = {"Authorization": "Bearer token-alice-0"}
    body = run_input()
    replica = await start_replica(proxied_url, "5", journal)
    try:
        async with httpx.AsyncClient(base_url=replica.url, timeout=30, headers=headers) as client:
            types: list[str] = []
            async with client.stream("POST", "/agui", json=body) as response:
                assert response.status_code == 200, await response.aread()
                async for frame in read_sse(response):
                    if frame.data is None:
                        continue
                    types.append(frame.type or "")
                    if (
                        types.count("TEXT_MESSAGE_CONTENT") == 2
                        and len(types) == types.index("TEXT_MESSAGE_CONTENT") + 2
                    ):
                        await proxy.cut()
                        opened = await client.post(f"/test/gates/{body['runId']}")
                        assert opened.status_code == 200
            assert types[-1] == "RUN_FINISHED"  # the client was told: it must be kept
            assert await outbox_depth(client) > 0
    finally:
        replica.process.send_signal(signal.SIGKILL)  # kill -9: no shutdown, no drain
        await replica.process.wait()
        with contextlib.suppress(Exception):
            await stop_replica(replica)
    await proxy.restore()
    again = await start_replica(url, "5", journal)
    try:
        async with httpx.AsyncClient(base_url=again.url, timeout=30) as client:
            await drained(client)
    finally:
        await stop_replica(again)
    await assert_stored_whole(url, user_uuid_for("alice-0"), body, {"run": body["runId"]})


def test_the_flush_backoff_is_capped_before_it_is_computed() -> None:
    config = PersisterConfig()
    assert config.backoff(1100) == config.retry_max_delay
    assert config.backoff(10**9) == config.retry_max_delay


def test_the_outbox_journal_reads_back_every_write_as_it_was() -> None:
    chat, message = uuid4(), uuid4()
    writes = [
        CreateMessage(MessageCreate(chat_uuid=chat, message_uuid=message, role=Role.ASSISTANT)),
        UpdateMessage(message, MessageUpdate(content="é\u2028 ok", status=MessageStatus.COMPLETE)),
        UpdateChatState(chat, {"a": [1, 2.5, None, "x"]}),
        FinishRun(chat, "run-1", RunStatus.COMPLETE, None),
    ]
    assert decode_writes(encode_writes(writes)) == writes


async def test_a_second_process_cannot_open_an_outbox_in_use(tmp_path: Path) -> None:
    from threadstore.errors import StoreError
    from threadstore.store import run_storage

    store = await open_store("memory://")
    first, second = Outbox(tmp_path / "o.sqlite3"), Outbox(tmp_path / "o.sqlite3")
    try:
        await first.open(run_storage(store, store, store))
        with pytest.raises(StoreError, match="another server"):
            await second.open(run_storage(store, store, store))
    finally:
        await first.close()
        await second.close()
        await store.close()


async def test_an_outbox_entry_drained_twice_stores_its_records_once(tmp_path: Path) -> None:
    from threadstore.models import ChatCreate
    from threadstore.store import run_storage

    store = await open_store(f"sqlite:///{tmp_path / 'threadstore.db'}")
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    try:
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id="t"))
        data = MessageCreate(chat_uuid=chat.chat_uuid, message_uuid=uuid4(), role=Role.ASSISTANT)
        flush = [
            CreateMessage(data),
            UpdateMessage(data.message_uuid, MessageUpdate(content="hello")),
        ]
        await outbox.open(run_storage(store, store, store))
        await outbox.append(chat.chat_uuid, "run-1", None, flush)
        assert await outbox.drain() == 1
        # What a crash between the store's commit and the entry's delete leaves behind.
        await outbox.append(chat.chat_uuid, "run-1", None, flush)
        assert await outbox.drain() == 1
        assert outbox.depth == 0
        messages = await store.get_chat_messages(chat.chat_uuid)
        assert [(m.message_uuid, m.content) for m in messages] == [(data.message_uuid, "hello")]
    finally:
        await outbox.close()
        await store.close()


async def test_erasing_a_user_takes_their_writes_waiting_in_the_outbox(tmp_path: Path) -> None:
    # The server registers the outbox as an erasure hook: what a user's runs journaled while
    # the store was away goes with the user, and never reaches the store afterwards.
    from threadstore.models import ChatCreate
    from threadstore.store import run_storage

    store = await open_store(f"sqlite:///{tmp_path / 'threadstore.db'}")
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    try:
        await outbox.open(run_storage(store, store, store))
        store.chats.add_erasure_hook("outbox", outbox.forget)
        written = {}
        for user in (alice := uuid4(), bob := uuid4()):
            chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id="t"))
            data = MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, content="secret")
            for run in ("run-1", "run-2"):
                await outbox.append(chat.chat_uuid, run, None, [CreateMessage(data)], user)
                data = data.model_copy(update={"message_uuid": uuid4()})
            written[user] = chat.chat_uuid
        assert outbox.depth == 4

        receipt = await store.chats.forget_user(alice)

        assert receipt.counts["outbox"] == 2
        assert outbox.depth == 2 and {key[0] for key in outbox.pending_runs()} == {written[bob]}
        assert await outbox.drain() == 2
        assert len(await store.get_chat_messages(written[bob])) == 2
        assert await store.get_chat_by_thread_id(alice, "t") is None
    finally:
        await outbox.close()
        await store.close()


async def test_a_run_started_while_the_store_was_away_is_heartbeaten_once_drained(
    proxied: tuple[str, str, ChaosProxy], tmp_path: Path
) -> None:
    # Its writes named a provisional chat until the drain set it up; its heartbeats must
    # then reach the run's record in the real chat, or another process would sweep it.
    url, proxied_url, proxy = proxied
    agent = GatedAgent()
    app = create_app(
        proxied_url,
        agent=agent,
        sweep_interval=None,
        store_timeout=STORE_TIMEOUT,
        outbox=tmp_path / "outbox.sqlite3",
        heartbeat_interval=0.1,
    )
    body = run_input()
    store = await open_store(url, setup=True)
    try:
        async with (
            LiveServer(app) as server,
            httpx.AsyncClient(base_url=server.url, timeout=30) as client,
        ):
            await proxy.cut()
            async with client.stream("POST", "/agui", json=body) as response:
                frames = read_sse(response)
                async for frame in frames:
                    if frame.type == "CUSTOM":  # the history was skipped: it runs
                        break
                await agent.wait_reached()
                await proxy.restore()
                await drained(client)
                chat = await store.get_chat_by_thread_id(LOCAL_USER_UUID, body["threadId"])
                assert chat is not None
                run = await store.get_run(chat.chat_uuid, body["runId"])
                assert run is not None and run.status is RunStatus.RUNNING
                beats = [run.heartbeat_at]
                for _ in range(200):
                    later = await store.get_run(chat.chat_uuid, body["runId"])
                    assert later is not None
                    if later.heartbeat_at > beats[0]:
                        beats.append(later.heartbeat_at)
                        break
                    await asyncio.sleep(0.05)
                agent.gate.set()
                rest = [f.type async for f in frames if f.data is not None]
    finally:
        await store.close()
    assert len(beats) == 2, "the live run's record was never heartbeaten after the drain"
    assert rest[-1] == "RUN_FINISHED"
