"""The usage ledger over HTTP: the caller's totals and runs, budgets they set, and a run
over budget refused with a 402 before its agent is called; nothing of another user's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from uuid import UUID, uuid4

import httpx
from ag_ui.core import BaseEvent, CustomEvent, RunAgentInput

from agui_scripts import ScriptedAgent, run_finished, run_started, text_message
from server_support import collect_sse, run_input
from threadstore import Store
from threadstore.server import LocalUserAuth, create_app


def answer(input: RunAgentInput) -> Sequence[BaseEvent]:
    thread, run = input.thread_id, input.run_id
    usage = CustomEvent(name="usage", value={"inputTokens": 100, "costUsd": 0.6})
    return [
        run_started(thread, run),
        *text_message(f"{run}-a", "ok"),
        usage,
        run_finished(thread, run),
    ]


@asynccontextmanager
async def client(
    store: Store, user: UUID, agent: ScriptedAgent
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(store, agent=agent, auth=LocalUserAuth(user))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http


async def test_usage_and_budgets_over_http(store: Store) -> None:
    me, other = uuid4(), uuid4()
    agent = ScriptedAgent(answer)
    async with client(store, me, agent) as http:
        body = run_input(thread_id="t1")
        async with http.stream("POST", "/agui", json=body) as response:
            assert response.status_code == 200
            frames = await collect_sse(response)
        assert frames[-1].data["type"] == "RUN_FINISHED"
        reply = (await http.get("/api/usage")).json()
        (per_chat,) = reply["totals"]
        assert (per_chat["input_tokens"], per_chat["cost_usd"], per_chat["runs"]) == (100, 0.6, 1)
        assert reply["total"]["cost_usd"] == 0.6 and reply["by"] == "chat"
        chat_uuid = per_chat["chat_uuid"]
        (row,) = (await http.get("/api/usage/runs", params={"chat_uuid": chat_uuid})).json()
        assert row["run_id"] == body["runId"]
        (day,) = (await http.get("/api/usage", params={"by": "day"})).json()["totals"]
        assert day["cost_usd"] == 0.6
        # A budget already spent: the next run, on this thread or a new one, is refused.
        put = await http.put("/api/usage/budget", json={"max_cost_usd": 0.5})
        assert put.status_code == 200 and put.json()["scope"] == "user"
        for thread in ("t1", "t2"):
            refused = await http.post("/agui", json=run_input(thread_id=thread))
            assert refused.status_code == 402
            assert refused.json()["code"] == "budget_exceeded"
            assert "0.6 USD reached the budget of 0.5" in refused.json()["detail"]
        assert len(agent.inputs) == 1  # the agent was never called for them
        # Bad input is a 422 naming the field; clearing twice is a 404 the second time.
        bad = await http.put("/api/usage/budget", json={"max_cost_usd": -1})
        assert bad.status_code == 422 and "max_cost_usd" in bad.json()["detail"]
        assert (await http.get("/api/usage", params={"by": "week"})).status_code == 422
        assert (await http.delete("/api/usage/budget")).status_code == 204
        assert (await http.delete("/api/usage/budget")).status_code == 404
        chat_budget = {"max_tokens": 100, "chat_uuid": chat_uuid}
        assert (await http.put("/api/usage/budget", json=chat_budget)).status_code == 200
        (listed,) = (await http.get("/api/usage/budgets")).json()
        assert listed["scope"] == "chat" and listed["budget"]["max_tokens"] == 100
        again = await http.post("/agui", json=run_input(thread_id="t1"))
        assert again.status_code == 402
        messages = (await http.get(f"/api/chats/{chat_uuid}/messages")).json()["items"]
        question = next(m for m in messages if m["role"] == "user")
        regenerate = f"/api/chats/{chat_uuid}/regenerate"
        branch = await http.post(regenerate, json={"message_uuid": question["message_uuid"]})
        assert branch.status_code == 402 and branch.json()["code"] == "budget_exceeded"
        assert len(agent.inputs) == 1
        fresh = await http.post("/agui", json=run_input(thread_id="t3"))
        assert fresh.status_code == 200  # only that chat's budget is spent
    async with client(store, other, agent) as http:
        assert (await http.get("/api/usage")).json()["totals"] == []
        assert (await http.get("/api/usage/runs")).json() == []
        mine = await http.get("/api/usage", params={"chat_uuid": chat_uuid})
        assert mine.status_code == 404
        theirs = await http.put("/api/usage/budget", json={"max_tokens": 1, "chat_uuid": chat_uuid})
        assert theirs.status_code == 404
