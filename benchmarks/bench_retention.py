"""A retention sweep on a large store: the longest loop stall, and runs' TTFE beside it.

The store holds ``--chats`` chats of ``--messages`` messages each (10,000 x 100: a
million messages by default), written a batch at a time; ``--expired`` of them (10%)
were last active three days ago, the rest now, and the global policy deletes chats idle
a day. Then, on one event loop:

- bursts of ``--burst`` concurrent runs (a storage agent over an agent that answers at
  once, each on a new thread, as a server's burst of new chats), without a sweep: each
  run's time to its first event (TTFE), 1,000 runs so that their p99 is not one outlier;
- the sweep (``store.chats.sweep_expired`` as the server runs it: its default batches, a
  pause of at least 50 ms between them, busy a quarter of the time at most)
  while the same bursts go on, and a ticker that wakes every millisecond records the
  longest gap between two wake-ups (the longest the loop was held, or the machine ran
  something else: the loop thread's own CPU time in that gap is beside it);

and reports the TTFE p50/p99 without and during the sweep, their ratio, the longest
stall (and the longest collection of the cyclic collector within the sweep, which
stops the loop whatever it runs), and what the sweep deleted. The bars: stall at most
20 ms, p99 during at most 1.2x without. ``--freeze`` first moves the start-up heap out of
the collector's generations, as ``threadstore serve`` does before it serves (and sweeps).
``--backend`` sqlite, postgres or both (``--url`` or
``THREADSTORE_TEST_POSTGRES_URL``: a temporary database is made on that server).
Figures: docs/benchmarks.md, "Retention".
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    UserMessage,
)

from threadstore import ChatCreate, MessageCreate, MessageStatus, Role, Store, open_store
from threadstore.agui import StorageAgent
from threadstore.models import RetentionPolicy, utcnow
from threadstore.store.ops import CreateMessage

sys.path.insert(0, str(Path(__file__).parent))
from bench_long_chats import DEFAULT_URL, longest_stall, on_postgres
from common import machine_line, percentile

PAUSE = 0.05
"""Seconds between two batches of the sweep (the server's ``retention_pause``)."""

SHARE = 0.25
"""The most of the time the sweep keeps the database busy (the server's, RETENTION_SHARE)."""


class Answering:
    """Answers every run at once with one short message."""

    name = "answering"

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        answer = f"{input.run_id}-a"
        yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
        yield TextMessageStartEvent(message_id=answer, role="assistant")
        yield TextMessageContentEvent(message_id=answer, delta="ok")
        yield TextMessageEndEvent(message_id=answer)
        yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


async def fill(store: Store, chats: int, messages: int, expired: int) -> None:
    """The store's chats; the first ``expired`` last active three days ago."""
    old = utcnow() - timedelta(days=3)
    writes: list[Any] = []
    started = time.perf_counter()
    for n in range(chats):
        chat = await store.create_chat(ChatCreate(user_uuid=uuid4(), thread_id=f"c{n}"))
        at = old if n < expired else None
        for m in range(messages):
            role = Role.USER if m % 2 == 0 else Role.ASSISTANT
            writes.append(
                CreateMessage(
                    MessageCreate(
                        chat_uuid=chat.chat_uuid,
                        role=role,
                        content=f"message {m} of chat {n}",
                        status=MessageStatus.COMPLETE,
                        in_progress=False,
                        created_at=at,
                    )
                )
            )
        if len(writes) >= 5000:
            await store.apply_writes(writes)
            writes = []
    if writes:
        await store.apply_writes(writes)
    print(
        f"  filled {chats:,} chats x {messages} messages in {time.perf_counter() - started:.0f} s"
    )


async def one_run(store: Store, user: UUID, tag: str) -> float:
    """One run on a new thread: seconds to its first event."""
    agent = StorageAgent("bench", user, store, store, Answering(), run_repo=store)  # type: ignore[arg-type]
    run = RunAgentInput(
        thread_id=f"burst-{tag}",
        run_id=f"run-{tag}",
        messages=[UserMessage(id=f"u-{tag}", content="hello")],
        state=None,
        tools=[],
        context=[],
        forwarded_props={},
    )
    started = time.perf_counter()
    first: float | None = None
    async for _ in agent.run(run):
        if first is None:
            first = time.perf_counter() - started
    await agent.persisted()
    assert first is not None
    return first


async def bursts(store: Store, size: int, until: Any) -> list[float]:
    """Bursts of ``size`` concurrent runs until ``until()``; every run's TTFE."""
    user = uuid4()
    times: list[float] = []
    while not until():
        tags = [uuid4().hex[:12] for _ in range(size)]
        times += await asyncio.gather(*(one_run(store, user, tag) for tag in tags))
    return times


async def measure(url: str, chats: int, messages: int, expired: int, burst: int) -> None:
    store = await open_store(url)
    try:
        await fill(store, chats, messages, expired)
        await store.chats.set_retention_policy(RetentionPolicy(idle_ttl=86400))
        await bursts(store, burst, _rounds(3))  # warm: code paths, connections
        calm = await bursts(store, burst, _rounds(125))
        # As the server sweeps in the background: its batches, a pause between them.
        sweep = asyncio.ensure_future(store.chats.sweep_expired(pause=PAUSE, share=SHARE))
        during: list[float] = []

        async def work() -> None:
            during.extend(await bursts(store, burst, sweep.done))
            await sweep

        with collections() as pauses:
            took, stall, stall_cpu = await longest_stall(work)
        report = sweep.result()
    finally:
        await store.close()
    p99 = (percentile(calm, 99), percentile(during, 99))
    print(
        f"  sweep: {report.chats:,} chats, {report.messages:,} messages deleted in {took:.1f} s;"
        f" longest loop stall {stall * 1000:.1f} ms (the loop's own CPU in it:"
        f" {stall_cpu * 1000:.1f} ms); longest collection in it {max(pauses, default=0) * 1000:.1f}"
        f" ms ({len(pauses)} full collections)"
    )
    print(
        f"  TTFE without the sweep: p50 {statistics.median(calm) * 1000:.1f} ms,"
        f" p99 {p99[0] * 1000:.1f} ms ({len(calm)} runs)"
    )
    print(
        f"  TTFE during the sweep:  p50 {statistics.median(during) * 1000:.1f} ms,"
        f" p99 {p99[1] * 1000:.1f} ms ({len(during)} runs); p99 ratio {p99[1] / p99[0]:.2f}x"
    )


@contextmanager
def collections() -> Iterator[list[float]]:
    """The seconds of each full (oldest generation) collection while the block runs."""
    pauses: list[float] = []
    started = [0.0]

    def note(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started[0])

    gc.callbacks.append(note)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(note)


def _rounds(count: int) -> Any:
    left = [count]

    def done() -> bool:
        left[0] -= 1
        return left[0] < 0

    return done


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--expired", type=float, default=0.1, help="Share of chats expired.")
    parser.add_argument("--burst", type=int, default=8)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--url", default=os.environ.get("THREADSTORE_TEST_POSTGRES_URL"))
    parser.add_argument(
        "--freeze",
        action="store_true",
        help="gc.freeze() the process's start-up heap first, as `threadstore serve` does.",
    )
    args = parser.parse_args()
    expired = int(args.chats * args.expired)
    if args.freeze:
        gc.collect()
        gc.freeze()
    print(machine_line() + ("; start-up heap frozen" if args.freeze else ""))
    if args.backend in ("sqlite", "both"):
        print("SQLite")
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/bench.db"
            await measure(url, args.chats, args.messages, expired, args.burst)
    if args.backend in ("postgres", "both"):
        print("PostgreSQL")

        async def on(url: str) -> None:
            await measure(url, args.chats, args.messages, expired, args.burst)

        await on_postgres(args.url or DEFAULT_URL, on)


if __name__ == "__main__":
    asyncio.run(main())
