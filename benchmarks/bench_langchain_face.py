"""The LangChain face on SQLite, side by side with langchain-community's SQLChatMessageHistory.

Appends a conversation one message per call and loads the whole history, for
``ThreadstoreChatMessageHistory`` through its sync methods (store on a
``BackgroundStore``) and its async methods (a plain store), and for
``SQLChatMessageHistory`` (sync, a SQLAlchemy engine with threadstore's pragmas).

Run ``python benchmarks/bench_langchain_face.py`` (``--quick`` for a small run). Needs
the ``bench`` extra. Figures and definitions: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import tempfile
import uuid
import warnings
from pathlib import Path
from typing import Any, Protocol

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from common import Goal, Samples, collect_garbage, machine_line, markdown_table, rotated, timed
from threadstore import Store, open_store
from threadstore.faces.langchain import BackgroundStore, ThreadstoreChatMessageHistory

PRAGMAS = (
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
    "PRAGMA busy_timeout = 10000",
)
"""threadstore's SQLite pragmas; the peer's connections get the same."""

WORDS = "agent tool call result stream chat history message user assistant model reply".split()


def conversation(count: int) -> list[BaseMessage]:
    """``count`` messages alternating user and assistant, 20 to 120 words each (seeded)."""
    rng = random.Random(7)
    kinds = (HumanMessage, AIMessage)
    return [
        kinds[i % 2](content=" ".join(rng.choices(WORDS, k=rng.randint(20, 120))), id=f"msg-{i}")
        for i in range(count)
    ]


class Contender(Protocol):
    name: str

    async def open(self, path: Path) -> None: ...
    async def append(self, messages: list[BaseMessage]) -> None: ...
    async def load(self) -> list[BaseMessage]: ...
    async def close(self) -> None: ...


class OursSync:
    """ThreadstoreChatMessageHistory's sync methods; the store runs on a BackgroundStore."""

    name = "threadstore, sync (BackgroundStore)"

    async def open(self, path: Path) -> None:
        self.background = BackgroundStore(f"sqlite:///{path}")
        self.history = ThreadstoreChatMessageHistory(
            self.background, user_uuid=uuid.uuid4(), session_id="bench"
        )

    async def append(self, messages: list[BaseMessage]) -> None:
        for message in messages:
            self.history.add_message(message)

    async def load(self) -> list[BaseMessage]:
        return self.history.messages

    async def close(self) -> None:
        self.background.close()


class OursAsync:
    """ThreadstoreChatMessageHistory's async methods on a store of this event loop."""

    name = "threadstore, async"

    async def open(self, path: Path) -> None:
        self.store: Store = await open_store(f"sqlite:///{path}")
        self.history = ThreadstoreChatMessageHistory(
            self.store, user_uuid=uuid.uuid4(), session_id="bench"
        )

    async def append(self, messages: list[BaseMessage]) -> None:
        for message in messages:
            await self.history.aadd_messages([message])

    async def load(self) -> list[BaseMessage]:
        return await self.history.aget_messages()

    async def close(self) -> None:
        await self.store.close()


class Peer:
    """langchain-community's SQLChatMessageHistory on a SQLAlchemy engine, same pragmas."""

    name = "SQLChatMessageHistory"

    async def open(self, path: Path) -> None:
        from sqlalchemy import create_engine, event

        with warnings.catch_warnings():
            # The package warns that it is being sunset; it is still the one users run.
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.chat_message_histories import SQLChatMessageHistory

        self.engine = create_engine(f"sqlite:///{path}")

        @event.listens_for(self.engine, "connect")
        def set_pragmas(dbapi_conn: sqlite3.Connection, _record: object) -> None:
            for pragma in PRAGMAS:
                dbapi_conn.execute(pragma)

        self.history = SQLChatMessageHistory(session_id="bench", connection=self.engine)

    async def append(self, messages: list[BaseMessage]) -> None:
        for message in messages:
            self.history.add_message(message)

    async def load(self) -> list[BaseMessage]:
        return self.history.messages

    async def close(self) -> None:
        self.engine.dispose()


async def repetition(
    rep: int, messages: list[BaseMessage], loads: int, slices: int, samples: Samples
) -> None:
    """One repetition: fresh files, interleaved appends, a correctness check, loads."""
    contenders: list[Contender] = [OursSync(), OursAsync(), Peer()]
    with tempfile.TemporaryDirectory(prefix="bench-lc-") as directory:
        for index, contender in enumerate(contenders):
            await contender.open(Path(directory) / f"{index}.db")
        try:
            size = len(messages) // slices
            totals = dict.fromkeys((c.name for c in contenders), 0.0)
            for part in range(slices):
                chunk = messages[part * size : (part + 1) * size]
                for contender in rotated(contenders, rep + part):
                    collect_garbage()
                    totals[contender.name] += await timed(partial_append(contender, chunk))
            for name, total in totals.items():
                samples.add(f"append {name}", total)
            for contender in contenders:
                loaded = await contender.load()
                expected = messages[: size * slices]
                assert [(m.id, m.content) for m in loaded] == [
                    (m.id, m.content) for m in expected
                ], contender.name
            for turn in range(loads):
                for contender in rotated(contenders, turn):
                    samples.add(f"load {contender.name}", await timed(contender.load))
        finally:
            for contender in contenders:
                await contender.close()


def partial_append(contender: Contender, chunk: list[BaseMessage]) -> Any:
    return lambda: contender.append(chunk)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--loads", type=int, default=30)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="200 messages, 2 repetitions")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.loads, args.reps = 200, 10, 2
    messages = conversation(args.messages)
    samples = Samples()
    for rep in range(args.reps):
        await repetition(rep, messages, args.loads, 20, samples)

    names = [OursSync.name, OursAsync.name, Peer.name]
    peer_append, peer_load = (
        samples.median(f"append {Peer.name}"),
        samples.median(f"load {Peer.name}"),
    )
    rows = []
    for name in names:
        append, load = samples.median(f"append {name}"), samples.median(f"load {name}")
        rows.append(
            [
                name,
                f"{append * 1000:.0f} ms",
                f"{append / args.messages * 1e6:.0f} µs",
                f"{peer_append / append:.2f}x",
                f"{load * 1000:.1f} ms",
                f"{peer_load / load:.2f}x",
            ]
        )
    print(f"{args.messages} messages, {args.reps} repetitions, {args.loads} loads each")
    print(machine_line())
    print()
    print(
        markdown_table(
            [
                "contender",
                "append all",
                "per message",
                "append speed vs peer",
                "load all (median)",
                "load speed vs peer",
            ],
            rows,
        )
    )
    print()
    goals = [
        Goal(f"append speed vs peer, {name}", peer_append / samples.median(f"append {name}"), 1)
        for name in names[:2]
    ] + [
        Goal(f"load speed vs peer, {name}", peer_load / samples.median(f"load {name}"), 1)
        for name in names[:2]
    ]
    for goal in goals:
        print(goal.line())
    return 0 if all(goal.met for goal in goals) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
