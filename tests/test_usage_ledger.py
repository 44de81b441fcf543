"""The usage ledger: what runs report is what the ledger sums, budgets stop runs before
their agent is called, and erasure takes a user's ledger with them.

On a real SQLite file and the running PostgreSQL (and the memory store), through the
storage agent as an app runs it.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest
from ag_ui.core import BaseEvent, CustomEvent, RunAgentInput, RunErrorEvent, TokenUsage

from agui_scripts import (
    ScriptedAgent,
    collect,
    run_finished,
    run_input,
    run_started,
    text_message,
    user,
)
from threadstore import Store
from threadstore.agui import StorageAgent
from threadstore.errors import BudgetExceededError, InvalidInputError
from threadstore.usage import BUDGET_EXCEEDED_ERROR_CODE, Budget, RunUsage


def usage_event(**value: object) -> CustomEvent:
    return CustomEvent(name="usage", value=value)


def reported_run(thread: str, run: str, reports: list[dict[str, object]]) -> list[BaseEvent]:
    """A run that reports each of ``reports`` as a CUSTOM usage event, between its texts."""
    events: list[BaseEvent] = [run_started(thread, run)]
    for n, report in enumerate(reports):
        events += text_message(f"{run}-m{n}", f"answer {n}")
        events.append(usage_event(**report))
    return [*events, run_finished(thread, run)]


async def run_once(store: Store, user_uuid: UUID, agent: ScriptedAgent, input: RunAgentInput):
    storage = StorageAgent("a", user_uuid, store, store, agent, run_repo=store)
    return await collect(storage.run(input))


async def test_ledger_totals_are_the_sum_of_what_concurrent_runs_reported(store: Store) -> None:
    rng = random.Random(36)
    users = [uuid4() for _ in range(3)]
    runs: list[tuple[UUID, str, list[dict[str, object]]]] = []
    for n in range(24):
        reports = [
            {
                "inputTokens": rng.randrange(0, 5000),
                "outputTokens": rng.randrange(0, 2000),
                "cachedInputTokens": rng.randrange(0, 100),
                "costUsd": rng.randrange(0, 10**6) / 10**7,
                "cacheSavingsUsd": rng.randrange(0, 10**4) / 10**7,
            }
            for _ in range(rng.randrange(1, 4))
        ]
        runs.append((users[n % 3], f"thread-{n % 8}", reports))

    async def one(n: int, user_uuid: UUID, thread: str, reports: list[dict[str, object]]) -> None:
        run_id = f"run-{n}"
        agent = ScriptedAgent(reported_run(thread, run_id, reports))
        events = await run_once(
            store, user_uuid, agent, run_input(thread, run_id, [user(f"u-{n}", "hi")])
        )
        assert events[-1].type == "RUN_FINISHED", events[-1]

    # Runs of one (user, thread) one after another; everything else at once.
    lanes: dict[tuple[UUID, str], list[int]] = {}
    for n, (user_uuid, thread, _) in enumerate(runs):
        lanes.setdefault((user_uuid, thread), []).append(n)

    async def lane(numbers: list[int]) -> None:
        for n in numbers:
            await one(n, *runs[n])

    await asyncio.gather(*(lane(numbers) for numbers in lanes.values()))

    def expected(user_uuid: UUID | None = None) -> dict[str, int]:
        sums = {"input": 0, "output": 0, "cached": 0, "cost": 0, "savings": 0, "runs": 0}
        for who, _, reports in runs:
            if user_uuid is not None and who != user_uuid:
                continue
            sums["runs"] += 1
            for r in reports:
                sums["input"] += r["inputTokens"]  # type: ignore[operator]
                sums["output"] += r["outputTokens"]  # type: ignore[operator]
                sums["cached"] += r["cachedInputTokens"]  # type: ignore[operator]
                sums["cost"] += round(r["costUsd"] * 10**9)  # type: ignore[operator]
                sums["savings"] += round(r["cacheSavingsUsd"] * 10**9)  # type: ignore[operator]
        return sums

    per_user = {t.user_uuid: t for t in await store.usage.totals(by="user")}
    assert set(per_user) == set(users)
    for user_uuid in users:
        want, got = expected(user_uuid), per_user[user_uuid]
        assert got.runs == want["runs"]
        assert (got.input_tokens, got.output_tokens) == (want["input"], want["output"])
        assert got.cached_input_tokens == want["cached"]
        assert got.cost_usd == want["cost"] / 10**9
        assert got.cache_savings_usd == want["savings"] / 10**9
        per_chat = await store.usage.totals(by="chat", user_uuid=user_uuid)
        assert sum(t.input_tokens for t in per_chat) == want["input"]
        assert sum(t.runs for t in per_chat) == want["runs"]
        assert all(t.user_uuid == user_uuid for t in per_chat)
    (today,) = await store.usage.totals(by="day")
    assert today.day == datetime.now(UTC).date()
    assert (today.runs, today.output_tokens) == (len(runs), expected()["output"])
    assert today.cost_usd == expected()["cost"] / 10**9
    # One total over every user: their per-user sums added up.
    everything = await store.usage.total()
    assert everything.user_uuid is None  # the total of several users is no one user's
    assert (everything.runs, everything.input_tokens) == (len(runs), expected()["input"])
    assert everything.cached_input_tokens == expected()["cached"]
    assert everything.cost_usd == expected()["cost"] / 10**9
    assert everything.cache_savings_usd == expected()["savings"] / 10**9


async def test_run_finished_usage_is_the_runs_tokens_and_custom_events_its_cost(
    store: Store,
) -> None:
    user_uuid = uuid4()
    finished = run_finished("t", "r1").model_copy(
        update={
            "usage": [
                TokenUsage(model="m-1", input_tokens=700, output_tokens=50, reasoning_tokens=20),
                TokenUsage(model="m-1", input_tokens=300, output_tokens=25),
            ]
        }
    )
    script = [
        run_started("t", "r1"),
        usage_event(input_tokens=400, output_tokens=40, cost_usd=0.25, model="m-1"),
        usage_event(input_tokens=600, output_tokens=35, cost_usd=0.5, cache_savings_usd=0.125),
        *text_message("m", "ok"),
        finished,
    ]
    await run_once(store, user_uuid, ScriptedAgent(script), run_input("t", "r1", [user("u")]))
    (row,) = await store.usage.runs(user_uuid=user_uuid)
    assert (row.input_tokens, row.output_tokens, row.reasoning_tokens) == (1000, 75, 20)
    assert (row.cost_usd, row.cache_savings_usd, row.model) == (0.75, 0.125, "m-1")
    assert row.run_id == "r1"


async def test_a_run_that_reports_nothing_leaves_no_ledger_row(store: Store) -> None:
    user_uuid = uuid4()
    script = [run_started("t", "r"), *text_message("m", "ok"), run_finished("t", "r")]
    await run_once(store, user_uuid, ScriptedAgent(script), run_input("t", "r", [user("u")]))
    assert await store.usage.runs(user_uuid=user_uuid) == []


async def test_recording_a_run_again_replaces_its_row(store: Store) -> None:
    user_uuid, chat_uuid = uuid4(), uuid4()
    first = RunUsage(chat_uuid=chat_uuid, run_id="r", user_uuid=user_uuid, input_tokens=5)
    assert await store.usage.record(first)
    assert await store.usage.record(first.model_copy(update={"input_tokens": 7}))
    (total,) = await store.usage.totals(by="chat", chat_uuid=chat_uuid)
    assert (total.runs, total.input_tokens) == (1, 7)


class CountingAgent(ScriptedAgent):
    """Counts calls of ``run`` itself: a refused run must never reach it."""

    calls = 0

    def run(self, input: RunAgentInput):  # type: ignore[no-untyped-def,override]
        CountingAgent.calls += 1
        return super().run(input)


@pytest.mark.parametrize("scope", ["user", "chat"])
async def test_a_spent_budget_refuses_the_run_before_its_agent_is_called(
    store: Store, scope: str
) -> None:
    user_uuid = uuid4()
    first = CountingAgent(reported_run("t", "r1", [{"cost_usd": 0.6, "input_tokens": 10}]))
    CountingAgent.calls = 0
    await run_once(store, user_uuid, first, run_input("t", "r1", [user("u1")]))
    assert CountingAgent.calls == 1
    chat = await store.get_chat_by_thread_id(user_uuid, "t")
    assert chat is not None
    where = {"user_uuid": user_uuid} if scope == "user" else {"chat_uuid": chat.chat_uuid}
    await store.usage.set_budget(Budget(max_cost_usd=1.0), **where)  # type: ignore[arg-type]
    # Under budget: the second run goes ahead and takes the spend to 1.2.
    second = CountingAgent(reported_run("t", "r2", [{"cost_usd": 0.6}]))
    events = await run_once(store, user_uuid, second, run_input("t", "r2", [user("u2")]))
    assert events[-1].type == "RUN_FINISHED" and CountingAgent.calls == 2
    with pytest.raises(BudgetExceededError, match="budget of this"):
        await store.usage.check_budget(user_uuid, chat.chat_uuid)
    third = CountingAgent(reported_run("t", "r3", [{"cost_usd": 0.6}]))
    events = await run_once(store, user_uuid, third, run_input("t", "r3", [user("u3")]))
    assert [e.type for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    error = events[-1]
    assert isinstance(error, RunErrorEvent) and error.code == BUDGET_EXCEEDED_ERROR_CODE
    assert "1.2 USD reached the budget of 1" in error.message
    assert CountingAgent.calls == 2 and third.inputs == []
    # Nothing of the refused run was stored; raising the budget lets the next one run.
    assert await store.get_run(chat.chat_uuid, "r3") is None
    await store.usage.set_budget(Budget(max_cost_usd=5.0), **where)  # type: ignore[arg-type]
    fourth = CountingAgent(reported_run("t", "r4", []))
    events = await run_once(store, user_uuid, fourth, run_input("t", "r4", [user("u4")]))
    assert events[-1].type == "RUN_FINISHED" and CountingAgent.calls == 3


async def test_a_token_budget_for_today_counts_only_todays_runs(store: Store) -> None:
    user_uuid, chat_uuid = uuid4(), uuid4()
    yesterday = datetime.now(UTC) - timedelta(days=1)
    old = RunUsage(
        chat_uuid=chat_uuid,
        run_id="old",
        user_uuid=user_uuid,
        input_tokens=900,
        recorded_at=yesterday,
    )
    await store.usage.record(old)
    await store.usage.set_budget(Budget(max_tokens=1000, period="day"), user_uuid=user_uuid)
    await store.usage.check_budget(user_uuid)  # yesterday's 900 do not count today
    await store.usage.record(
        old.model_copy(update={"run_id": "new", "recorded_at": datetime.now(UTC)})
    )
    await store.usage.record(
        old.model_copy(update={"run_id": "new2", "recorded_at": datetime.now(UTC)})
    )
    with pytest.raises(BudgetExceededError, match="today's budget of this user"):
        await store.usage.check_budget(user_uuid)
    days = await store.usage.totals(by="day", user_uuid=user_uuid)
    assert [d.input_tokens for d in days] == [900, 1800]


async def test_budgets_are_listed_cleared_and_checked_for_exactly_one_scope(store: Store) -> None:
    user_uuid = uuid4()
    with pytest.raises(InvalidInputError):
        await store.usage.set_budget(Budget(max_tokens=1))
    with pytest.raises(InvalidInputError):
        await store.usage.set_budget(Budget(max_tokens=1), user_uuid=user_uuid, chat_uuid=uuid4())
    await store.usage.set_budget(Budget(max_tokens=10), user_uuid=user_uuid)
    (kept,) = await store.usage.budgets(user_uuid)
    assert (kept.scope, kept.budget.max_tokens) == ("user", 10)
    assert await store.usage.clear_budget(user_uuid=user_uuid)
    assert not await store.usage.clear_budget(user_uuid=user_uuid)
    assert await store.usage.budgets(user_uuid) == []


async def test_forgetting_a_user_removes_their_ledger_and_budgets(store: Store) -> None:
    user_uuid, other = uuid4(), uuid4()
    agent = ScriptedAgent(reported_run("t", "r", [{"input_tokens": 3, "cost_usd": 0.1}]))
    await run_once(store, user_uuid, agent, run_input("t", "r", [user("u")]))
    other_agent = ScriptedAgent(reported_run("t", "r", [{"input_tokens": 4}]))
    await run_once(store, other, other_agent, run_input("t", "r", [user("u")]))
    await store.usage.set_budget(Budget(max_tokens=10), user_uuid=user_uuid)
    receipt = await store.chats.forget_user(user_uuid)
    assert receipt.counts["usage_records"] == 2  # one run, one budget
    assert await store.usage.runs(user_uuid=user_uuid) == []
    assert await store.usage.budgets(user_uuid) == []
    # A late write for the erased user is not kept; the other user's ledger stays.
    late = RunUsage(chat_uuid=uuid4(), run_id="late", user_uuid=user_uuid, input_tokens=1)
    assert not await store.usage.record(late)
    assert await store.usage.runs(user_uuid=user_uuid) == []
    (kept,) = await store.usage.runs(user_uuid=other)
    assert kept.input_tokens == 4


async def test_times_without_a_zone_count_as_utc(store: Store) -> None:
    user_uuid, chat_uuid = uuid4(), uuid4()
    at = datetime(2026, 12, 1, 23, 30)  # no zone
    usage = RunUsage(chat_uuid=chat_uuid, run_id="r", user_uuid=user_uuid, recorded_at=at)
    await store.usage.record(usage.model_copy(update={"input_tokens": 3}))
    (day,) = await store.usage.totals(by="day", user_uuid=user_uuid, since=datetime(2026, 12, 1))
    assert (str(day.day), day.input_tokens) == ("2026-12-01", 3)
    assert await store.usage.runs(user_uuid=user_uuid, until=datetime(2026, 12, 1, 23)) == []
