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
import uuid
import warnings
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from bench_sqlite import PRAGMAS
from common import machine_line
from face_contest import Contest
from threadstore import Store, open_store
from threadstore.faces.langchain import BackgroundStore, ThreadstoreChatMessageHistory

WORDS = "agent tool call result stream chat history message user assistant model reply".split()


def conversation(count: int) -> list[BaseMessage]:
    """``count`` messages alternating user and assistant, 20 to 120 words each (seeded)."""
    rng = random.Random(7)
    kinds = (HumanMessage, AIMessage)
    return [
        kinds[i % 2](content=" ".join(rng.choices(WORDS, k=rng.randint(20, 120))), id=f"msg-{i}")
        for i in range(count)
    ]


class OursSync:
    """ThreadstoreChatMessageHistory's sync methods; the store runs on a BackgroundStore."""

    name = "threadstore, sync (BackgroundStore)"

    async def open(self, directory: Path) -> None:
        self.background = BackgroundStore(f"sqlite:///{directory / 'ours.db'}")
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

    async def open(self, directory: Path) -> None:
        self.store: Store = await open_store(f"sqlite:///{directory / 'ours.db'}")
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

    async def open(self, directory: Path) -> None:
        from sqlalchemy import create_engine, event

        with warnings.catch_warnings():
            # The package warns that it is being sunset; it is still the one users run.
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.chat_message_histories import SQLChatMessageHistory

        self.engine = create_engine(f"sqlite:///{directory / 'peer.db'}")

        # The pragmas threadstore sets, so both write the same way.
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


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--loads", type=int, default=30)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="200 messages, 2 repetitions")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.loads, args.reps = 200, 10, 2
    contest: Contest[BaseMessage] = Contest(
        [OursSync(), OursAsync()],
        Peer(),
        conversation(args.messages),
        same=lambda message: (message.type, message.id, message.content),
    )
    for rep in range(args.reps):
        await contest.repetition(rep, args.loads)
    print(f"{args.messages} messages, {args.reps} repetitions, {args.loads} loads each")
    print(machine_line())
    print()
    print(contest.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
