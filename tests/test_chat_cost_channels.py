"""The chat engine's seed-001 cost channels: ``cost_usd`` and ``cache_savings_usd`` sum
a turn's usage events as they arrive, ``budget_exceeded`` marks a run refused over a
spent budget; all three stay absent until their event arrives."""

from __future__ import annotations

from ag_ui.core import BaseEvent, CustomEvent, RunErrorEvent

from agui_scripts import run_finished, run_started, text_message
from threadstore.chat import AssistantTurn, apply_event, create_assistant_turn


def fold(events: list[BaseEvent]) -> AssistantTurn:
    turn = create_assistant_turn("t")
    for event in events:
        turn = apply_event(turn, event)
    return turn


def usage(**value: object) -> CustomEvent:
    return CustomEvent(name="usage", value=value)


def test_cost_channels_sum_the_turns_usage_events_live() -> None:
    start = fold([run_started(), *text_message("m", "hi")])
    assert (start.cost_usd, start.cache_savings_usd, start.budget_exceeded) == (None, None, None)
    assert not {"cost_usd", "cache_savings_usd", "budget_exceeded"} & set(start.as_dict())
    one = apply_event(start, usage(costUsd=0.1, cacheSavingsUsd=0.02, inputTokens=10))
    assert (one.cost_usd, one.cache_savings_usd) == (0.1, 0.02)
    two = apply_event(one, usage(cost_usd=0.2))
    assert (two.cost_usd, two.cache_savings_usd) == (0.3, 0.02)
    assert one.cost_usd == 0.1  # the earlier turn is unchanged
    done = apply_event(two, run_finished())
    assert done.as_dict()["cost_usd"] == 0.3 and done.budget_exceeded is None
    # The event is a data part too, as any CUSTOM event, so stored history keeps it.
    assert [p.name for p in done.message.parts if p.type == "data"] == ["usage", "usage"]


def test_a_usage_event_that_is_not_usage_is_a_warning_not_a_cost() -> None:
    turn = fold([run_started(), usage(costUsd="a lot")])
    assert turn.cost_usd is None
    assert turn.warnings is not None and "not counted" in turn.warnings[0]


def test_a_run_refused_over_budget_sets_budget_exceeded() -> None:
    refused = fold([run_started(), RunErrorEvent(message="spent", code="BUDGET_EXCEEDED")])
    assert refused.budget_exceeded is True
    assert refused.as_dict()["budget_exceeded"] is True
    assert refused.error is not None and refused.error.code == "BUDGET_EXCEEDED"
    other = fold([run_started(), RunErrorEvent(message="no", code="MODEL_ERROR")])
    assert other.budget_exceeded is None
