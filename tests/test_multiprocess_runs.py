"""Many runs on two worker processes, cancelled, resumed and killed at random points."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import threadstore
from postgres_support import clean_database, server_url
from test_crash_recovery import WAIT_LIMIT
from threadstore.agui._distributed import DistributedRunManager

WORKER = Path(__file__).with_name("run_worker.py")
RUNS_PER_WORKER = 25
DIED = "The run's process stopped before the run ended."


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A fresh PostgreSQL database for the test."""
    server = server_url()
    async with clean_database(server) as url:
        yield url


async def start_worker(
    url: str, user_uuid: uuid.UUID, threads: list[str]
) -> asyncio.subprocess.Process:
    """Start ``run_worker.py`` on ``threads``; return once all its runs started."""
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        url,
        str(user_uuid),
        "300",
        "0.01",
        *threads,
        stdout=asyncio.subprocess.PIPE,
        # The tests' own PYTHONPATH too: the worker runs the threadstore under test.
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(WORKER.parent), os.environ.get("PYTHONPATH")) if p
            ),
        },
    )
    assert worker.stdout is not None
    line = await asyncio.wait_for(worker.stdout.readline(), WAIT_LIMIT)
    assert line.startswith(b"owner "), line
    return worker


async def worker_outcomes(worker: asyncio.subprocess.Process) -> dict[str, str]:
    """The ``thread -> outcome`` lines a worker printed before it exited."""
    assert worker.stdout is not None
    outcomes: dict[str, str] = {}
    async with asyncio.timeout(WAIT_LIMIT):
        async for raw in worker.stdout:
            kind, thread, outcome = raw.decode().split()
            assert kind == "outcome"
            outcomes[thread] = outcome
        await worker.wait()
    return outcomes


def never_built() -> Any:
    raise AssertionError("the client-side manager runs nothing itself")


@pytest.mark.postgres
async def test_runs_cancelled_resumed_and_killed_on_two_processes_end_consistent(
    pg_url: str,
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    user_uuid = uuid.uuid4()
    survivors = [f"a{i}" for i in range(RUNS_PER_WORKER)]
    doomed = [f"b{i}" for i in range(RUNS_PER_WORKER)]
    plan = {thread: rng.choice(["follow", "resume", "cancel"]) for thread in survivors + doomed}
    cuts = {thread: rng.randint(1, 120) for thread in plan}
    kill_after_events = rng.randint(50, 1500)

    survivor = await start_worker(pg_url, user_uuid, survivors)
    victim = await start_worker(pg_url, user_uuid, doomed)
    store = await threadstore.open_store(pg_url)
    received: dict[str, list[tuple[int, dict[str, Any]]]] = {thread: [] for thread in plan}
    delivered = asyncio.Event()

    async def client(manager: DistributedRunManager[Any], thread: str) -> None:
        run = f"run-{thread}"
        got = received[thread]
        after = 0
        while True:
            stream = await manager.resume(thread, run, after, user_uuid=user_uuid)
            if stream is None:
                if thread in doomed and victim.returncode is not None:
                    return  # killed before it recorded the run: nothing to follow
                await asyncio.sleep(0.02)  # the worker has not recorded the run yet
                continue
            async with contextlib.aclosing(stream):
                async for event_id, event in stream:
                    got.append((event_id, json.loads(event.model_dump_json(by_alias=True))))
                    if sum(len(received[t]) for t in doomed) >= kill_after_events:
                        delivered.set()
                    if len(got) == cuts[thread] and plan[thread] != "follow":
                        break  # the client disconnects here
                else:
                    return
            if plan[thread] == "cancel":
                await manager.cancel_anywhere(thread, run, user_uuid=user_uuid)
            after = got[-1][0]

    async def kill_victim(clients: asyncio.Future[Any]) -> None:
        waiting = asyncio.ensure_future(delivered.wait())
        await asyncio.wait([waiting, clients], return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        victim.send_signal(signal.SIGKILL)
        await victim.wait()

    async def sweep_until(done: asyncio.Future[Any], manager: DistributedRunManager[Any]) -> None:
        while not done.done():
            await manager.sweep(stale_after=3.0)
            await asyncio.sleep(0.2)

    try:
        async with DistributedRunManager(never_built, store=store, event_retention=3600) as manager:
            assert manager.relay is not None
            manager.relay.liveness_interval = 0.2
            manager.relay.end_grace = 2.0
            clients = asyncio.gather(*(client(manager, thread) for thread in plan))
            async with asyncio.timeout(3 * WAIT_LIMIT):
                await asyncio.gather(clients, kill_victim(clients), sweep_until(clients, manager))
        outcomes = await worker_outcomes(survivor)
    finally:
        for worker in (survivor, victim):
            if worker.returncode is None:
                worker.kill()
                await worker.wait()

    pool = await asyncpg.connect(pg_url)
    try:
        assert sorted(outcomes) == sorted(survivors), seed
        assert set(outcomes.values()) <= {"complete", "interrupted"}, seed
        statuses = await pool.fetch("SELECT status, count(*) FROM runs GROUP BY status")
        assert "running" not in {row["status"] for row in statuses}, seed
        recorded = {row[0] for row in await pool.fetch("SELECT thread_id FROM runs")}
        # The victim may die before its last runs were recorded; every survivor's was.
        assert set(survivors) <= recorded <= set(plan), seed
        for table in ("messages", "tool_calls", "reasonings"):
            open_records = await pool.fetchval(f"SELECT count(*) FROM {table} WHERE in_progress")
            assert open_records == 0, (table, seed)

        for thread, got in received.items():
            chat = await store.get_chat_by_thread_id(user_uuid, thread)
            if not got:
                assert thread in doomed, seed
                continue
            assert chat is not None
            rows = await pool.fetch(
                "SELECT event_id, event::text FROM run_events WHERE chat_uuid = $1"
                " AND run_id = $2 ORDER BY event_id",
                chat.chat_uuid,
                f"run-{thread}",
            )
            stored = {row[0]: json.loads(row[1]) for row in rows}
            assert [event_id for event_id, _ in got] == list(range(1, len(got) + 1)), seed
            assert got[-1][1]["type"] in ("RUN_FINISHED", "RUN_ERROR"), (thread, seed)
            for event_id, event in got:
                if event.get("message") == DIED:
                    assert thread in doomed, seed  # only a killed process leaves no end
                    continue
                assert stored.get(event_id) == event, (thread, event_id, seed)
            if thread in survivors:
                expected = "RUN_FINISHED" if outcomes[thread] == "complete" else "RUN_ERROR"
                assert got[-1][1]["type"] == expected, (thread, seed)
            if got[-1][1]["type"] == "RUN_FINISHED":
                text = "".join(e["delta"] for _, e in got if e["type"] == "TEXT_MESSAGE_CONTENT")
                messages = await store.get_chat_messages(chat.chat_uuid)
                assert messages[-1].content == text, (thread, seed)
    finally:
        await pool.close()
        await store.close()
