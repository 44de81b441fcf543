"""Saving a chat through ``StoreChatStore`` as it grows: what one more message costs.

An app that persists whole chats (the ``ChatStore`` seam) saves the full record after
every turn. For each chat length it stores that many messages, then times
``save_chat`` of the loaded record plus one new user message, side by side on SQLite
files: the cost of a save should not grow with the chat. Prints the median save per
length and its ratio to the shortest.

Run ``python benchmarks/bench_chat_store.py`` (``--sizes 100,4000``, ``--saves 30``).
Only public API, so the same file measures an older checkout (``PYTHONPATH=src``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ag_ui.core import UserMessage

try:
    from threadstore.chatstore import ChatRecord, Scope, StoreChatStore
except ImportError:  # an older checkout kept the seam in threadstore.chat
    from threadstore.chat import (  # type: ignore[attr-defined,no-redef]
        ChatRecord,
        Scope,
        StoreChatStore,
    )
from threadstore import ChatCreate, MessageCreate, MessageStatus, Role, open_store
from threadstore.keys import user_uuid_for

sys.path.insert(0, str(Path(__file__).parent))
from common import collect_garbage, machine_line

USER = "bench-user"


async def fill(store: object, chat_id: str, count: int) -> None:
    """``count`` complete messages, user and assistant in turn, stored directly."""
    chat = await store.create_chat(  # type: ignore[attr-defined]
        ChatCreate(user_uuid=user_uuid_for(USER), thread_id=chat_id)
    )
    for index in range(count):
        role = Role.USER if index % 2 == 0 else Role.ASSISTANT
        await store.create_message(  # type: ignore[attr-defined]
            MessageCreate(
                chat_uuid=chat.chat_uuid,
                role=role,
                content=f"message {index} " * 8,
                agui_id=f"{chat_id}-m{index}",
                status=MessageStatus.COMPLETE,
                in_progress=False,
            )
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,4000")
    parser.add_argument("--saves", type=int, default=30)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"# Saving one more message through StoreChatStore\n\n{machine_line()}\n")
    with tempfile.TemporaryDirectory() as root:
        store = await open_store(f"sqlite:///{Path(root) / 'chats.db'}")
        chats = StoreChatStore(store, USER)
        for size in sizes:
            await fill(store, f"chat-{size}", size)
        times: dict[int, list[float]] = {size: [] for size in sizes}
        for turn in range(args.saves):
            for size in sizes:  # in turns, so the machine's load falls on each alike
                chat_id = f"chat-{size}"
                loaded = await chats.load_chat(chat_id)
                assert loaded is not None
                added = UserMessage(id=f"{chat_id}-new{turn}", content=f"one more {turn}")
                record = ChatRecord(
                    chat_id=chat_id, scope=Scope(user_id=USER), messages=(*loaded.messages, added)
                )
                collect_garbage()  # the load's garbage is not the save's to pay
                started = time.perf_counter()
                await chats.save_chat(record)
                times[size].append(time.perf_counter() - started)
        await store.close()
    base = statistics.median(times[sizes[0]])
    print("| messages in the chat | save of one more (ms, median) | x |")
    print("|---|---|---|")
    for size in sizes:
        median = statistics.median(times[size])
        print(f"| {size:,} | {median * 1e3:.2f} | {median / base:.1f} |")


if __name__ == "__main__":
    asyncio.run(main())
