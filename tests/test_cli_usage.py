"""``threadstore usage``: totals per chat, user and day, the runs, and budgets set and
cleared from the command line, on a real SQLite file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cli_support import invoke
from threadstore import ChatCreate, open_store
from threadstore.errors import BudgetExceededError
from threadstore.keys import user_uuid_for
from threadstore.usage import RunUsage


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'threadstore.db'}"

    async def seed() -> None:
        async with await open_store(url) as store:
            chat = await store.create_chat(
                ChatCreate(user_uuid=user_uuid_for("ann"), thread_id="t")
            )
            for n, cost in enumerate((0.25, 0.5)):
                await store.usage.record(
                    RunUsage(
                        chat_uuid=chat.chat_uuid,
                        run_id=f"r{n}",
                        user_uuid=chat.user_uuid,
                        input_tokens=1000,
                        output_tokens=200,
                        cost_usd=cost,
                        model="m-1",
                    )
                )

    asyncio.run(seed())
    return url


def test_usage_show_and_runs(db: str) -> None:
    code, shown = invoke("usage", "show", "--db", db, "--user", "ann")
    assert code == 0, shown
    assert "2,000" in shown and "0.750000" in shown and "total" in shown
    code, as_json = invoke("usage", "show", "--db", db, "--by", "day", "--json")
    data = json.loads(as_json)
    assert data["total"]["cost_usd"] == 0.75 and data["totals"][0]["runs"] == 2
    code, runs = invoke("usage", "runs", "--db", db, "--chat", "t")
    assert code == 0 and "r0" in runs and "r1" in runs and "m-1" in runs
    code, bad = invoke("usage", "show", "--db", db, "--by", "week")
    assert code == 1 and "--by must be chat, user or day" in bad


def test_usage_budget_set_listed_enforced_and_cleared(db: str) -> None:
    code, out = invoke("usage", "budget", "--db", db, "--user", "ann", "--max-cost", "0.5")
    assert code == 0 and "budget set for user ann" in out, out
    code, listed = invoke("usage", "budgets", "ann", "--db", db, "--json")
    (budget,) = json.loads(listed)
    assert budget["budget"]["max_cost_usd"] == 0.5 and budget["scope"] == "user"

    async def check() -> None:
        async with await open_store(db) as store:
            with pytest.raises(BudgetExceededError):
                await store.usage.check_budget(user_uuid_for("ann"))

    asyncio.run(check())
    code, cleared = invoke("usage", "budget", "--db", db, "--user", "ann", "--clear")
    assert code == 0 and "removed" in cleared
    code, missing = invoke("usage", "budget", "--db", db, "--user", "ann")
    assert code == 1 and "give --max-cost" in missing
    code, both = invoke("usage", "budget", "--db", db, "--max-tokens", "5")
    assert code == 1 and "pass one of them" in both
