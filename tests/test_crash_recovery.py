"""Crash recovery across processes: a run whose process is killed is swept by another."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import threadstore
from postgres_support import clean_database, server_url
from threadstore import Store
from threadstore.agui._manager import StreamPersistenceManager
from threadstore.models import MessageStatus, RunStatus

CHILD = Path(__file__).with_name("run_child.py")
WAIT_LIMIT = 30.0  # seconds: a generous cap so a broken run fails instead of hanging


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
async def shared_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A store URL several processes can open at once."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    server = server_url()
    async with clean_database(server) as url:
        yield url


async def start_child(
    url: str, user_uuid: uuid.UUID, thread: str, run: str, *, deltas: int, delay: float
) -> asyncio.subprocess.Process:
    """Start ``run_child.py`` in its own process; return once its run has started."""
    # The tests' own PYTHONPATH too: the child runs the threadstore under test.
    paths = (str(CHILD.parent), os.environ.get("PYTHONPATH"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        url,
        str(user_uuid),
        thread,
        run,
        str(deltas),
        str(delay),
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None
    line = await asyncio.wait_for(child.stdout.readline(), WAIT_LIMIT)
    assert line.startswith(b"owner "), line
    return child


async def wait_for_text(store: Store, user_uuid: uuid.UUID, thread: str) -> str:
    """Poll the store until the assistant's message has durable text; return it."""
    async with asyncio.timeout(WAIT_LIMIT):
        while True:
            chat = await store.get_chat_by_thread_id(user_uuid, thread)
            if chat is not None:
                messages = await store.get_chat_messages(chat.chat_uuid)
                text = [m.content for m in messages if m.role == "assistant" and m.content]
                if text:
                    return str(text[-1])
            await asyncio.sleep(0.02)


async def test_a_killed_process_run_is_swept_interrupted_by_another_owner(
    shared_store_url: str,
) -> None:
    user_uuid, thread, run = uuid.uuid4(), "thread-crash", "run-crash"
    child = await start_child(shared_store_url, user_uuid, thread, run, deltas=2000, delay=0.01)
    store = await threadstore.open_store(shared_store_url)
    try:
        durable = await wait_for_text(store, user_uuid, thread)
        child.send_signal(signal.SIGKILL)
        await child.wait()
        assert child.returncode == -signal.SIGKILL

        chat = await store.get_chat_by_thread_id(user_uuid, thread)
        assert chat is not None
        recorded = await store.get_run(chat.chat_uuid, run)
        assert recorded is not None and recorded.status == RunStatus.RUNNING

        async with StreamPersistenceManager(lambda: None, store=store) as other:
            assert other.owner != recorded.owner
            async with asyncio.timeout(WAIT_LIMIT):
                # The heartbeat has stopped: the run turns stale and is swept once.
                while await other.sweep(stale_after=0.5) == 0:
                    await asyncio.sleep(0.1)
            assert await other.sweep(stale_after=0.5) == 0

        finished = await store.get_run(chat.chat_uuid, run)
        assert finished is not None and finished.status == RunStatus.INTERRUPTED
        assert finished.error is not None and recorded.owner in finished.error
        messages = await store.get_chat_messages(chat.chat_uuid)
        assert [m.role for m in messages] == ["user", "assistant"]
        assistant = messages[-1]
        assert assistant.status == MessageStatus.INTERRUPTED
        assert not assistant.in_progress
        # Everything checkpointed before the kill is still there, and only what was streamed.
        assert assistant.content.startswith(durable)
        assert "".join(f"w{i} " for i in range(2000)).startswith(assistant.content)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        await store.close()
