"""A separate process running many slow storage-agent runs at once through one manager.

Usage: ``python run_worker.py STORE_URL USER_UUID DELTAS DELAY THREAD...`` (run id
``run-<thread>``). Prints ``owner <owner>`` once every run started, then
``outcome <thread> <outcome>`` as each run ends. Tests cancel, resume or kill them.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any
from uuid import UUID

import threadstore
from agui_scripts import ScriptedAgent, run_finished, run_input, run_started, text_message, user
from threadstore.agui._agent import StorageAgent
from threadstore.agui._distributed import DistributedRunManager


async def main(url: str, user_uuid: UUID, deltas: int, delay: float, threads: list[str]) -> None:
    store = await threadstore.open_store(url, max_size=4)

    def build(thread: str) -> StorageAgent:
        run = f"run-{thread}"
        script = [
            run_started(thread, run),
            *text_message("a1", "".join(f"{thread}.{i} " for i in range(deltas)), deltas=deltas),
            run_finished(thread, run),
        ]
        inner = ScriptedAgent(script, delay=delay)
        return StorageAgent("assistant", user_uuid, store, store, inner, checkpoint_interval=0.05)

    async def report(handle: Any) -> None:
        await handle.wait()
        print("outcome", handle.thread_id, getattr(handle.outcome, "value", None), flush=True)

    try:
        async with DistributedRunManager(
            build, store=store, heartbeat_interval=0.2, relay_flush_interval=0.05
        ) as manager:
            # Started together: each start checks no other process runs it (one query),
            # and clients should find every run about as young as the first.
            handles = await asyncio.gather(
                *(
                    manager.run(run_input(thread, f"run-{thread}", [user("u1")]), thread)
                    for thread in threads
                )
            )
            print("owner", manager.owner, flush=True)
            await asyncio.gather(*(report(handle) for handle in handles))
    finally:
        await store.close()


if __name__ == "__main__":
    url, user_arg, deltas, delay, *threads = sys.argv[1:]
    asyncio.run(main(url, UUID(user_arg), int(deltas), float(delay), threads))
