"""A separate process that starts runs when told to, to race another one for a chat.

Usage: ``python run_claim_child.py STORE_URL OWNER``. Prints ``ready`` once its store is
open; then for each line ``CHAT_UUID THREAD RUN_ID`` read from stdin it calls
``start_run`` and prints ``started`` or ``refused <live run id>``; it exits at the end
of its input.
"""

from __future__ import annotations

import asyncio
import sys
from uuid import UUID

import threadstore
from threadstore import Run
from threadstore.errors import RunLiveError


async def main(url: str, owner: str) -> None:
    store = await threadstore.open_store(url, setup=False)
    loop = asyncio.get_running_loop()
    try:
        print("ready", flush=True)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            chat, thread, run_id = line.split()
            try:
                await store.start_run(
                    Run(chat_uuid=UUID(chat), thread_id=thread, run_id=run_id, owner=owner)
                )
            except RunLiveError as exc:
                print("refused", exc.live_run_id, flush=True)
            else:
                print("started", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
