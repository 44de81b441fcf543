"""Agent Framework history providers side by side: threadstore's against the framework's own.

Each contender is a real ``HistoryProvider``. A conversation of 2,000 messages is
appended one run at a time (``save_messages`` with the run's user message and answer,
what ``after_run`` calls), then the whole history is loaded (``get_messages``, what
``before_run`` calls), many times. Contenders: threadstore on SQLite and on
PostgreSQL, the framework's ``InMemoryHistoryProvider`` and ``FileHistoryProvider``,
and ``RedisHistoryProvider`` (``agent-framework-redis``; skipped with the reason when
Redis does not answer at ``--redis``).

Run ``python benchmarks/bench_agent_framework.py`` (``--quick`` for a small run).
Needs the ``bench`` extra. Definitions and figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from agent_framework import (
    FileHistoryProvider,
    HistoryProvider,
    InMemoryHistoryProvider,
    Message,
)

from bench_postgres import DEFAULT_URL, fresh_database
from bench_sqlite import conversation
from common import Goal, Samples, collect_garbage, machine_line, markdown_table, rotated, timed
from threadstore import open_store
from threadstore.faces.agent_framework import ThreadstoreHistoryProvider

# The framework marks its file provider experimental; this benchmark knows.
warnings.filterwarnings("ignore", message=r"\[FILE_HISTORY\]")

SESSION = "bench-session"


class Contender:
    """A named provider with the session state it keeps between calls."""

    def __init__(self, name: str, provider: HistoryProvider) -> None:
        self.name = name
        self.provider = provider
        self.state: dict[str, Any] = {}

    async def append(self, runs: Sequence[list[Message]]) -> None:
        for messages in runs:
            await self.provider.save_messages(SESSION, messages, state=self.state)

    async def load(self) -> list[Message]:
        return await self.provider.get_messages(SESSION, state=self.state)

    async def settled_load(self) -> None:
        """One load, its messages dropped, then one turn of the loop.

        What the load left for the loop to release is released within it: the file
        provider builds its messages on a worker thread, whose finished call still holds
        them until the loop turns, and freeing 2,000 messages would otherwise be counted
        in whichever contender's load came next.
        """
        messages = await self.load()
        del messages
        await asyncio.sleep(0)


def runs_of(count: int) -> list[list[Message]]:
    """The conversation as runs: a user message without id, then an answer with one."""
    turns = conversation(count)
    messages = [
        Message(turn.role, [turn.content], message_id=None if turn.role == "user" else turn.agui_id)
        for turn in turns
    ]
    return [messages[i : i + 2] for i in range(0, len(messages), 2)]


async def redis_client(url: str) -> Any | None:
    """A connected async Redis client, or ``None`` (with the reason printed) when unreachable."""
    import redis.asyncio as redis

    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        await client.ping()
    except (OSError, redis.RedisError) as exc:
        print(f"Redis row skipped: no answer at {url} ({exc})\n")
        await client.aclose()
        return None
    return client


@asynccontextmanager
async def contenders(args: argparse.Namespace, rep: int) -> AsyncIterator[list[Contender]]:
    """Fresh contenders for one repetition (new files, databases and keys)."""
    async with AsyncExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ts-bench-af-")))
        user = uuid.uuid4()
        sqlite = await open_store(f"sqlite:///{folder / 'threadstore.db'}")
        stack.push_async_callback(sqlite.close)
        out = [
            Contender("threadstore, SQLite", ThreadstoreHistoryProvider(sqlite, user)),
            Contender("FileHistoryProvider", FileHistoryProvider(folder / "files")),
            Contender("InMemoryHistoryProvider", InMemoryHistoryProvider()),
        ]
        if not args.no_postgres:
            url = await stack.enter_async_context(fresh_database(args.url))
            postgres = await open_store(url)
            stack.push_async_callback(postgres.close)
            out.append(
                Contender("threadstore, PostgreSQL", ThreadstoreHistoryProvider(postgres, user))
            )
        client = await redis_client(args.redis) if rep == 0 or args.redis_ok else None
        if client is not None:
            args.redis_ok = True
            stack.push_async_callback(client.aclose)
            from agent_framework_redis import RedisHistoryProvider

            prefix = f"ts-bench-{uuid.uuid4().hex[:8]}"
            redis_provider = RedisHistoryProvider(
                redis_client=client, key_prefix=prefix, application_id="bench"
            )
            out.append(Contender("RedisHistoryProvider", redis_provider))

            async def drop_keys() -> None:
                keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
                if keys:
                    await client.delete(*keys)

            stack.push_async_callback(drop_keys)
        yield out


async def repetition(
    args: argparse.Namespace, rep: int, runs: list[list[Message]], samples: Samples
) -> list[str]:
    """Append and load once for every contender, interleaved; return their names."""
    async with contenders(args, rep) as each:
        slices = [runs[i : i + args.slice] for i in range(0, len(runs), args.slice)]
        totals = dict.fromkeys((c.name for c in each), 0.0)
        for index, part in enumerate(slices):
            for contender in rotated(each, index + rep):
                collect_garbage()
                totals[contender.name] += await timed(partial(contender.append, part))
        for name, total in totals.items():
            samples.add(f"append {name}", total)
        expected = [m.text for run in runs for m in run]
        for contender in each:
            loaded = await contender.load()
            if [m.text for m in loaded] != expected:
                raise SystemExit(f"{contender.name} did not return the stored history")
        for index in range(args.loads):
            for contender in rotated(each, index + rep):
                collect_garbage()
                samples.add(f"load {contender.name}", await timed(contender.settled_load))
        return [c.name for c in each]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Read the sizes; ``--quick`` shrinks them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a small run (a few seconds)")
    parser.add_argument("--messages", type=int, help="messages appended per contender")
    parser.add_argument("--loads", type=int, help="full loads per contender and repetition")
    parser.add_argument("--reps", type=int, help="interleaved repetitions")
    parser.add_argument("--slice", type=int, default=50, help="runs per interleaved slice")
    parser.add_argument("--url", help="PostgreSQL server to create a throwaway database on")
    parser.add_argument("--no-postgres", action="store_true", help="leave PostgreSQL out")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379", help="Redis URL")
    args = parser.parse_args(argv)
    defaults = (
        {"messages": 200, "loads": 5, "reps": 1}
        if args.quick
        else {"messages": 2000, "loads": 20, "reps": 3}
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.url is None:
        args.url = os.environ.get("THREADSTORE_TEST_POSTGRES_URL", DEFAULT_URL)
    args.redis_ok = False
    return args


async def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print Markdown, and return 1 when a goal is missed."""
    args = parse_args(argv)
    runs = runs_of(args.messages)
    samples = Samples()
    names: list[str] = []
    for rep in range(args.reps):
        names = await repetition(args, rep, runs, samples)
    file = "FileHistoryProvider"
    rows = []
    for name in names:
        append, load = samples.median(f"append {name}"), samples.median(f"load {name}")
        rows.append(
            [
                name,
                f"{append * 1000:.0f}",
                f"{append / args.messages * 1e6:.0f}",
                f"{samples.median(f'append {file}') / append:.2f}x",
                f"{load * 1000:.2f}",
                f"{samples.median(f'load {file}') / load:.2f}x",
            ]
        )
    print(f"{machine_line()} · {args.messages} messages · {args.reps} reps · {args.loads} loads\n")
    headers = [
        "contender",
        "append all (ms)",
        "per message (µs)",
        "append vs file",
        "load (ms)",
        "load vs file",
    ]
    print(markdown_table(headers, rows))
    ours = "threadstore, SQLite"
    goals = [
        Goal(
            f"append {args.messages}: FileHistoryProvider / threadstore on SQLite",
            samples.median(f"append {file}") / samples.median(f"append {ours}"),
            5,
        ),
        Goal(
            f"load {args.messages}: FileHistoryProvider / threadstore on SQLite",
            samples.median(f"load {file}") / samples.median(f"load {ours}"),
            2,
        ),
    ]
    print()
    for goal in goals:
        print(f"- {goal.line()}")
    return 0 if all(goal.met for goal in goals) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
