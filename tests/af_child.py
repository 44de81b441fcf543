"""An agent process for the Agent Framework face's multi-process tests.

Usage: ``python af_child.py STORE_URL USER_UUID SESSION_KEY TURNS TAG``. Restores the
session stored under SESSION_KEY (or starts one with that id), runs TURNS scripted
turns, storing the session after each, and prints one JSON line: the messages the
model was sent on its first call.
"""

from __future__ import annotations

import asyncio
import json
import sys
from uuid import UUID

from agent_framework import AgentSession

from af_support import ScriptedChatClient, make_agent, say, texts
from threadstore import open_store
from threadstore.faces.agent_framework import ThreadstoreHistoryProvider, ThreadstoreSessionStore


async def main(url: str, user: UUID, key: str, turns: int, tag: str) -> None:
    async with await open_store(url) as store:
        sessions = ThreadstoreSessionStore(store, user)
        session = await sessions.get(key) or AgentSession(session_id=key)
        client = ScriptedChatClient([say(f"{tag} answer {turn}") for turn in range(turns)])
        agent = make_agent(client, [ThreadstoreHistoryProvider(store, user)])
        for turn in range(turns):
            await agent.run(f"{tag} question {turn}", session=session)
            await sessions.set(key, session)
    print(json.dumps({"seen": texts(client.seen[0])}))


if __name__ == "__main__":
    url, user, key, turns, tag = sys.argv[1:6]
    asyncio.run(main(url, UUID(user), key, int(turns), tag))
