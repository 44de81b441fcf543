"""What an agent's input costs on a compacted long chat, against a short chat's.

Two chats in one store: one of ``--short`` messages (300) with no summary, one of
``--long`` messages (50,000) compacted so a summary covers all but its newest 20. For
each, in turns (so the machine's load falls on both alike), the median over
``--rounds`` of:

- the storage agent's input: from ``StorageAgent.run`` until the inner agent is handed
  its ``input.messages`` (the set-up: the chat, its kept history, the summaries, the
  input screened and stored, the translation); the whole run (to ``RUN_FINISHED``,
  durable) beside it;
- a framework face's input: the LangChain history's ``aget_messages`` with the store's
  history cache warm, and cold (a new store: nothing kept).

Each run appends two messages to its chat, so both keep growing alike. The bar: the
long chat's input is the summary and the tail, built in at most twice the short one's
time. ``--backend postgres`` (``--url`` or ``THREADSTORE_TEST_POSTGRES_URL``) runs on a
temporary database of that server. Figures: docs/benchmarks.md, "Compaction".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
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

from threadstore import ChatCreate, Store, open_store
from threadstore.agui import StorageAgent
from threadstore.faces.langchain import ThreadstoreChatMessageHistory

sys.path.insert(0, str(Path(__file__).parent))
from bench_long_chats import DEFAULT_URL, append_batched, ms, on_postgres
from common import machine_line


class TimedAgent:
    """Answers at once, and notes when it was handed its input and how long that was."""

    name = "timed"

    def __init__(self) -> None:
        self.handed_at = 0.0
        self.given = 0

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        self.handed_at = time.perf_counter()
        self.given = len(input.messages)
        answer = f"{input.run_id}-answer"
        yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
        yield TextMessageStartEvent(message_id=answer, role="assistant")
        yield TextMessageContentEvent(message_id=answer, delta="ok")
        yield TextMessageEndEvent(message_id=answer)
        yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


async def one_run(store: Store, user: UUID, thread: str, run: str) -> tuple[float, float, int]:
    """One run: (seconds to the agent's input, seconds to the end, messages given)."""
    inner = TimedAgent()
    agent = StorageAgent("bench", user, store, store, inner, run_repo=store)  # type: ignore[arg-type]
    run_input = RunAgentInput(
        thread_id=thread,
        run_id=run,
        messages=[UserMessage(id=f"{run}-ask", content="one more question")],
        state=None,
        tools=[],
        context=[],
        forwarded_props={},
    )
    started = time.perf_counter()
    async for _ in agent.run(run_input):
        pass
    await agent.persisted()
    return inner.handed_at - started, time.perf_counter() - started, inner.given


async def face_input(store: Store, user: UUID, thread: str) -> tuple[float, int]:
    history = ThreadstoreChatMessageHistory(store, user_uuid=user, session_id=thread)
    started = time.perf_counter()
    messages = await history.aget_messages()
    return time.perf_counter() - started, len(messages)


async def measure(url: str, short: int, long: int, rounds: int) -> None:
    user = uuid4()
    store = await open_store(url)
    try:
        for thread, size in (("short", short), ("long", long)):
            chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id=thread))
            await append_batched(store, chat.chat_uuid, size)
        long_chat = await store.get_chat_by_thread_id(user, "long")
        assert long_chat is not None
        summary = await store.branches.compact(long_chat.chat_uuid, keep_messages=20)
        assert summary is not None
        print(f"  summary of the long chat: {summary.message_count:,} messages covered")
        samples: dict[str, dict[str, list[float]]] = {
            t: {"input": [], "run": [], "warm": [], "cold": []} for t in ("short", "long")
        }
        given: dict[str, int] = {}
        for thread in ("short", "long"):  # the first run builds what later runs keep
            await one_run(store, user, thread, f"{thread}-first")
            await face_input(store, user, thread)
        # Runs, then face loads, each in turns: a face load between two runs would read
        # (and keep) the history the next run then finds kept, for one chat and not the other.
        for round_ in range(rounds):
            for thread in ("short", "long") if round_ % 2 == 0 else ("long", "short"):
                to_input, whole, count = await one_run(store, user, thread, f"{thread}-{round_}")
                samples[thread]["input"].append(to_input)
                samples[thread]["run"].append(whole)
                given[thread] = count
        for round_ in range(rounds):
            for thread in ("short", "long") if round_ % 2 == 0 else ("long", "short"):
                warm, _ = await face_input(store, user, thread)
                samples[thread]["warm"].append(warm)
        # Cold: a new store each time, nothing kept (on SQLite its file's pages are still
        # in the operating system's cache).
        for round_ in range(max(3, rounds // 3)):
            for thread in ("short", "long") if round_ % 2 == 0 else ("long", "short"):
                fresh = await open_store(url, setup=False)
                try:
                    cold, _ = await face_input(fresh, user, thread)
                finally:
                    await fresh.close()
                samples[thread]["cold"].append(cold)
    finally:
        await store.close()
    med = {t: {k: statistics.median(v) for k, v in s.items()} for t, s in samples.items()}
    heads = (f"short ({short:,})", f"long ({long:,})")
    print(f"  {'':>22} {heads[0]:>16} {heads[1]:>18} {'ratio':>7}")
    rows = [
        ("agent given (messages)", None),
        ("storage agent's input", "input"),
        ("whole run", "run"),
        ("LangChain input, warm", "warm"),
        ("LangChain input, cold", "cold"),
    ]
    for label, key in rows:
        if key is None:
            print(f"  {label:>22} {given['short']:>16,} {given['long']:>18,}")
            continue
        a, b = med["short"][key], med["long"][key]
        print(f"  {label:>22} {ms(a):>16} {ms(b):>18} {b / a:>6.2f}x")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=300)
    parser.add_argument("--long", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--url", default=os.environ.get("THREADSTORE_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    print(machine_line())
    if args.backend in ("sqlite", "both"):
        print("SQLite")
        with tempfile.TemporaryDirectory() as folder:
            await measure(f"sqlite:///{folder}/bench.db", args.short, args.long, args.rounds)
    if args.backend in ("postgres", "both"):
        print("PostgreSQL")

        async def on(url: str) -> None:
            await measure(url, args.short, args.long, args.rounds)

        await on_postgres(args.url or DEFAULT_URL, on)


if __name__ == "__main__":
    asyncio.run(main())
