"""A separate process that runs one slow, scripted storage-agent run through a manager.

Usage: ``python run_child.py STORE_URL USER_UUID THREAD RUN DELTAS DELAY``. Prints
``owner <owner>`` once the run started, then, when the run ends,
``event <id> <event JSON>`` for each event of its log and ``outcome <outcome>``.
Tests kill it with SIGKILL, cancel its run from another process, or resume it there.
"""

from __future__ import annotations

import asyncio
import sys
from uuid import UUID

import threadstore
from agui_scripts import ScriptedAgent, run_finished, run_input, run_started, text_message, user
from threadstore.agui._agent import StorageAgent
from threadstore.agui._distributed import DistributedRunManager


async def main(url: str, user_uuid: UUID, thread: str, run: str, deltas: int, delay: float) -> None:
    store = await threadstore.open_store(url)
    script = [
        run_started(thread, run),
        *text_message("a1", "".join(f"w{i} " for i in range(deltas)), deltas=deltas),
        run_finished(thread, run),
    ]

    def build() -> StorageAgent:
        inner = ScriptedAgent(script, delay=delay)
        return StorageAgent("assistant", user_uuid, store, store, inner, checkpoint_interval=0.05)

    try:
        async with DistributedRunManager(
            build, store=store, heartbeat_interval=0.1, relay_flush_interval=0.02
        ) as manager:
            handle = await manager.run(run_input(thread, run, [user("u1")]))
            print("owner", manager.owner, flush=True)
            await handle.wait()
            async for event_id, event in handle.numbered_events():
                print("event", event_id, event.model_dump_json(by_alias=True), flush=True)
            print("outcome", getattr(handle.outcome, "value", None), flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    url, user_arg, thread, run, deltas, delay = sys.argv[1:7]
    asyncio.run(main(url, UUID(user_arg), thread, run, int(deltas), float(delay)))
