"""``threadstore chats show`` prints a message's parts in the order they streamed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ag_ui.core import BaseEvent, CustomEvent
from typer.testing import CliRunner

from agui_scripts import ScriptedAgent, collect, run_input, user
from chat_streams import END, RUN, text, thinking, tool
from threadstore import open_store
from threadstore.agui import StorageAgent
from threadstore.cli import app
from threadstore.server import LOCAL_USER_UUID

WEATHER = [
    *RUN,
    *thinking("r-1", "The user wants\nthe weather."),
    *text("m-1", "Let me check."),
    *tool("c-1", "weather", '{"city": "Oslo"}', parent="m-1", result="4 °C, rain"),
    *text("m-1", "Take an umbrella."),
    *END,
]


async def _store_a_run(db: str, events: list[BaseEvent] = WEATHER) -> None:
    store = await open_store(db)
    try:
        inner = ScriptedAgent(events)
        agent = StorageAgent("assistant", LOCAL_USER_UUID, store, store, inner, run_repo=store)
        await collect(agent.run(run_input("weather-chat", "r-1", [user("u-1", "Weather?")])))
    finally:
        await store.close()


def test_chats_show_prints_the_tool_card_between_the_sentences_it_belongs_between(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'threadstore.db'}"
    asyncio.run(_store_a_run(db))

    result = CliRunner().invoke(
        app, ["chats", "show", "weather-chat", "--db", db], env={"COLUMNS": "200"}
    )

    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines() if line.strip()]
    start = lines.index("assistant")
    assert lines[start + 1 :] == [
        "thinking: The user wants the weather.",  # collapsed to one line
        "Let me check.",
        '→ weather({"city": "Oslo"})',
        "← 4 °C, rain",
        "Take an umbrella.",
    ]


def test_chats_show_prints_custom_data_and_citations_where_they_came(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'threadstore.db'}"
    events = [
        *RUN,
        CustomEvent(name="status", value={"id": "job", "state": "searching"}),
        *text("m-1", "Oslo is wet today."),
        CustomEvent(name="citation", value={"url": "https://met.example/oslo"}),
        CustomEvent(name="status", value={"id": "job", "state": "done"}),  # replaces it
        *END,
    ]
    asyncio.run(_store_a_run(db, events))

    result = CliRunner().invoke(
        app, ["chats", "show", "weather-chat", "--db", db], env={"COLUMNS": "200"}
    )

    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines() if line.strip()]
    start = lines.index("assistant")
    assert lines[start + 1 :] == [
        '◆ status: {"id": "job", "state": "done"}',
        "Oslo is wet today.",
        'cites {"url": "https://met.example/oslo"}',
    ]
