"""The OpenAI Agents SDK face side by side with the SDK's own SQLiteSession.

Appends a conversation one item per ``add_items`` call and loads it with
``get_items()``, for ``ThreadstoreSession`` on SQLite (and on PostgreSQL with
``--postgres SERVER_URL``, in a throwaway database, for information) and
``SQLiteSession`` on a file. The goal: ours within 2x of SQLiteSession's time on both.

Run ``python benchmarks/bench_agents_sdk_face.py`` (``--quick`` for a small run).
Figures and definitions: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Protocol

from agents import SQLiteSession
from agents.items import TResponseInputItem

from bench_postgres import fresh_database
from common import Goal, Samples, collect_garbage, machine_line, markdown_table, rotated, timed
from threadstore import Store, open_store
from threadstore.faces.openai_agents import ThreadstoreSession

WORDS = "agent tool call result stream chat history message user assistant model reply".split()


def conversation(count: int) -> list[TResponseInputItem]:
    """``count`` items alternating a user message and an assistant output message (seeded)."""
    rng = random.Random(7)
    items: list[TResponseInputItem] = []
    for i in range(count):
        text = " ".join(rng.choices(WORDS, k=rng.randint(20, 120)))
        if i % 2 == 0:
            items.append({"role": "user", "content": text})
        else:
            items.append(
                {
                    "type": "message",
                    "id": f"msg-{i}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            )
    return items


class Contender(Protocol):
    name: str

    async def open(self, directory: Path) -> None: ...
    async def append(self, items: list[TResponseInputItem]) -> None: ...
    async def load(self) -> list[TResponseInputItem]: ...
    async def close(self) -> None: ...


class Ours:
    """ThreadstoreSession on a threadstore store (SQLite unless a URL is given)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url
        self.name = "ThreadstoreSession, " + ("PostgreSQL" if url else "SQLite")

    async def open(self, directory: Path) -> None:
        self.store: Store = await open_store(self.url or f"sqlite:///{directory / 'ours.db'}")
        self.session = ThreadstoreSession(
            f"bench-{uuid.uuid4()}", self.store, user_uuid=uuid.uuid4()
        )

    async def append(self, items: list[TResponseInputItem]) -> None:
        for item in items:
            await self.session.add_items([item])

    async def load(self) -> list[TResponseInputItem]:
        return await self.session.get_items()

    async def close(self) -> None:
        await self.session.clear_session()
        await self.store.close()


class Peer:
    """The SDK's SQLiteSession on a file."""

    name = "SQLiteSession"

    async def open(self, directory: Path) -> None:
        self.session = SQLiteSession("bench", directory / "peer.db")

    async def append(self, items: list[TResponseInputItem]) -> None:
        for item in items:
            await self.session.add_items([item])

    async def load(self) -> list[TResponseInputItem]:
        return await self.session.get_items()

    async def close(self) -> None:
        self.session.close()


async def repetition(
    rep: int,
    contenders: list[Contender],
    items: list[TResponseInputItem],
    loads: int,
    slices: int,
    samples: Samples,
) -> None:
    """One repetition: fresh databases, interleaved appends, a correctness check, loads."""
    with tempfile.TemporaryDirectory(prefix="bench-agents-") as directory:
        for contender in contenders:
            await contender.open(Path(directory))
        try:
            size = len(items) // slices
            totals = dict.fromkeys((c.name for c in contenders), 0.0)
            for part in range(slices):
                chunk = items[part * size : (part + 1) * size]
                for contender in rotated(contenders, rep + part):
                    collect_garbage()
                    totals[contender.name] += await timed(appending(contender, chunk))
            for name, total in totals.items():
                samples.add(f"append {name}", total)
            for contender in contenders:
                assert await contender.load() == items[: size * slices], contender.name
            for turn in range(loads):
                for contender in rotated(contenders, turn):
                    samples.add(f"load {contender.name}", await timed(contender.load))
        finally:
            for contender in contenders:
                await contender.close()


def appending(contender: Contender, chunk: list[TResponseInputItem]) -> Any:
    return lambda: contender.append(chunk)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--loads", type=int, default=30)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--postgres",
        metavar="SERVER_URL",
        help="also time ThreadstoreSession on PostgreSQL, in a throwaway database on this server",
    )
    parser.add_argument("--quick", action="store_true", help="200 items, 2 repetitions")
    args = parser.parse_args()
    if args.quick:
        args.items, args.loads, args.reps = 200, 10, 2
    items = conversation(args.items)
    samples = Samples()
    ours = Ours()
    contenders: list[Contender] = [ours, Peer()]
    async with AsyncExitStack() as stack:
        if args.postgres:
            contenders.append(Ours(await stack.enter_async_context(fresh_database(args.postgres))))
        for rep in range(args.reps):
            await repetition(rep, contenders, items, args.loads, 20, samples)

    peer_append = samples.median(f"append {Peer.name}")
    peer_load = samples.median(f"load {Peer.name}")
    rows = []
    for contender in contenders:
        append = samples.median(f"append {contender.name}")
        load = samples.median(f"load {contender.name}")
        rows.append(
            [
                contender.name,
                f"{append * 1000:.0f} ms",
                f"{append / args.items * 1e6:.0f} µs",
                f"{append / peer_append:.2f}x",
                f"{load * 1000:.1f} ms",
                f"{load / peer_load:.2f}x",
            ]
        )
    print(f"{args.items} items, {args.reps} repetitions, {args.loads} loads each")
    print(machine_line())
    print()
    headers = [
        "contender",
        "append all",
        "per item",
        "append time vs SQLiteSession",
        "load all (median)",
        "load time vs SQLiteSession",
    ]
    print(markdown_table(headers, rows))
    print()
    goals = [
        Goal(
            f"append time vs SQLiteSession, {ours.name}",
            samples.median(f"append {ours.name}") / peer_append,
            2,
            at_least=False,
        ),
        Goal(
            f"load time vs SQLiteSession, {ours.name}",
            samples.median(f"load {ours.name}") / peer_load,
            2,
            at_least=False,
        ),
    ]
    for goal in goals:
        print(goal.line())
    return 0 if all(goal.met for goal in goals) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
