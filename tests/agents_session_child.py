"""A separate process that continues an Agents SDK session kept in threadstore.

Usage: ``python agents_session_child.py STORE_URL USER_UUID SESSION_ID TEXT REPLY``.
Runs one turn of a scripted agent (it answers ``REPLY``) on the session and prints
the input the model was given, as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from uuid import UUID

from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel, assistant_message

import threadstore
from threadstore.faces.openai_agents import ThreadstoreSession


async def main(url: str, user_uuid: UUID, session_id: str, text: str, reply: str) -> None:
    async with await threadstore.open_store(url) as store:
        model = ScriptedModel([[assistant_message(reply, item_id=f"msg-{reply}")]])
        agent = Agent(name="assistant", model=model)
        session = ThreadstoreSession(session_id, store, user_uuid=user_uuid)
        await Runner.run(agent, text, session=session, run_config=RunConfig(tracing_disabled=True))
        assert model.last_call is not None
        print(json.dumps(model.last_call.input), flush=True)


if __name__ == "__main__":
    url, user, session_id, text, reply = sys.argv[1:6]
    asyncio.run(main(url, UUID(user), session_id, text, reply))
