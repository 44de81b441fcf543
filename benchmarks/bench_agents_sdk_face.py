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
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

from agents import SQLiteSession
from agents.items import TResponseInputItem

from bench_postgres import fresh_database
from common import Goal, machine_line
from face_contest import Contest
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
    ours = Ours()
    async with AsyncExitStack() as stack:
        contenders = [ours]
        if args.postgres:
            contenders.append(Ours(await stack.enter_async_context(fresh_database(args.postgres))))
        contest: Contest[TResponseInputItem] = Contest(contenders, Peer(), conversation(args.items))
        for rep in range(args.reps):
            await contest.repetition(rep, args.loads)
    print(f"{args.items} items, {args.reps} repetitions, {args.loads} loads each")
    print(machine_line())
    print()
    print(contest.table())
    print()
    goals = [
        Goal(f"{what} time / SQLiteSession, {ours.name}", contest.ratio(what, ours), 2, False)
        for what in ("append", "load")
    ]
    for goal in goals:
        print(goal.line())
    return 0 if all(goal.met for goal in goals) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
