"""A run whose end falls in a long PostgreSQL outage: when its client hears, what is stored.

A live server (uvicorn in a thread, an outbox file, the default 5 s store timeout) runs on
PostgreSQL through a TCP proxy (``tests/chaos_proxy.py``). A run streams the first half
of its answer; the proxy then cuts the connection (or stalls it) for the scenario's
length, and the run's second half and its end come during the outage. Per scenario:
how long after the agent's end its client got ``RUN_FINISHED`` (the run's writes
journaled in the outbox), the outbox depth meanwhile, how long after the store came back
the outbox was empty, and what the store holds then: characters lost and duplicated
against what was streamed, the message's and the run's status. The same mechanism is
tested with short outages in ``tests/test_outbox.py``.

Run ``python benchmarks/bench_outbox.py`` (cuts of 5 s and 45 s, a 60 s stall; ``--cuts``
and ``--stalls`` give other lengths in seconds, e.g. ``--cuts 300``; ``--url`` or
``THREADSTORE_TEST_POSTGRES_URL`` names a PostgreSQL server the run may create a
database on, dropped afterwards). Figures: docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_outage import new_database, through
from chaos_proxy import ChaosProxy
from common import machine_line
from server_support import GatedAgent, LiveServer, read_sse, run_input
from threadstore import open_store
from threadstore.models import Role
from threadstore.server import create_app
from threadstore.server._auth import LOCAL_USER_UUID

ANSWER = "first half second half"


@dataclass
class Outcome:
    scenario: str
    end: str
    finished_after: float
    depth: int
    drained_after: float
    lost: int
    duplicated: int
    message_status: str
    run_status: str


async def one(server_url: str, how: str, seconds: float) -> Outcome:
    """One run whose end falls in an outage of ``seconds`` (``how``: cut or stall)."""
    async with new_database(server_url) as url:
        parts = urlsplit(url)
        async with ChaosProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            with tempfile.TemporaryDirectory() as tmp:
                agent = GatedAgent()
                app = create_app(
                    through(url, proxy.port),
                    agent=agent,
                    sweep_interval=None,
                    outbox=Path(tmp) / "outbox.sqlite3",
                )
                body = run_input()
                async with (
                    LiveServer(app) as server,
                    httpx.AsyncClient(base_url=server.url, timeout=600) as client,
                ):
                    types: list[str] = []
                    started = outage_began = 0.0
                    async with client.stream("POST", "/agui", json=body) as response:
                        async for frame in read_sse(response):
                            if frame.data is None:
                                continue
                            types.append(frame.type or "")
                            if types.count("TEXT_MESSAGE_CONTENT") == 2 and not started:
                                await agent.wait_reached()
                                if how == "cut":
                                    await proxy.cut()
                                else:
                                    proxy.stall()
                                outage_began = started = time.perf_counter()
                                agent.gate.set()
                    finished_after = time.perf_counter() - started
                    depth = (await client.get("/readyz")).json()["outbox_depth"]
                    rest = seconds - (time.perf_counter() - outage_began)
                    if rest > 0:
                        await asyncio.sleep(rest)
                    await proxy.restore()
                    back = time.perf_counter()
                    while (await client.get("/readyz")).json() != {
                        "status": "ready",
                        "outbox_depth": 0,
                    }:
                        await asyncio.sleep(0.02)
                    drained_after = time.perf_counter() - back
            store = await open_store(url, setup=False)
            try:
                chat = await store.get_chat_by_thread_id(LOCAL_USER_UUID, body["threadId"])
                assert chat is not None
                messages = await store.get_chat_messages(chat.chat_uuid)
                run = await store.get_run(chat.chat_uuid, body["runId"])
            finally:
                await store.close()
    answers = [m for m in messages if m.role == Role.ASSISTANT]
    stored = "".join(m.content or "" for m in answers)
    lost = len(ANSWER) - len(stored) if ANSWER.startswith(stored) else len(ANSWER)
    duplicated = max(0, len(stored) - len(ANSWER))
    return Outcome(
        f"PostgreSQL {how} {seconds:g} s",
        types[-1],
        finished_after,
        depth,
        drained_after,
        lost,
        duplicated,
        ", ".join(str(m.status.value) for m in answers) or "none",
        run.status.value if run is not None else "none",
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cuts", type=float, nargs="*", default=[5.0, 45.0])
    parser.add_argument("--stalls", type=float, nargs="*", default=[60.0])
    parser.add_argument("--url", default=os.environ.get("THREADSTORE_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    if not args.url:
        raise SystemExit("give --url or set THREADSTORE_TEST_POSTGRES_URL")
    outcomes = [await one(args.url, "cut", s) for s in args.cuts]
    outcomes += [await one(args.url, "stall", s) for s in args.stalls]
    print(machine_line())
    print(
        "| scenario | client's end | end after agent's, s | outbox depth | drained after "
        "store back, s | chars lost | chars duplicated | message | run |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for o in outcomes:
        print(
            f"| {o.scenario} | {o.end} | {o.finished_after:.2f} | {o.depth} | "
            f"{o.drained_after:.2f} | {o.lost} | {o.duplicated} | {o.message_status} | "
            f"{o.run_status} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
