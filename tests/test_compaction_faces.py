"""What each framework face gives its agent of a compacted chat: the summary, then the rest.

The LangChain history, the Agents SDK session and the Agent Framework provider read the
same chat; once it is compacted, each gives the summary as a system message followed by
the messages after it, while the chat API still reads every message. The framework's own
compaction strategies write summaries through ``strategy_summarizer``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from agent_framework import (
    ChatResponse,
    SlidingWindowStrategy,
    SummarizationStrategy,
)
from agent_framework import Message as AFMessage
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from threadstore import Store
from threadstore.faces.agent_framework import ThreadstoreHistoryProvider, strategy_summarizer
from threadstore.faces.langchain import ThreadstoreChatMessageHistory
from threadstore.faces.openai_agents import ThreadstoreSession


async def langchain_chat(store: Store, turns: int) -> tuple[ThreadstoreChatMessageHistory, Any]:
    user = uuid4()
    history = ThreadstoreChatMessageHistory(store, user_uuid=user, session_id="s")
    for n in range(turns):
        await history.aadd_messages([HumanMessage(f"question {n}"), AIMessage(f"answer {n}")])
    chat = await store.get_chat_by_thread_id(user, "s")
    assert chat is not None
    return history, chat


async def test_langchain_history_reads_the_summary_then_the_messages_after_it(
    store: Store,
) -> None:
    history, chat = await langchain_chat(store, 5)

    summary = await store.branches.compact(chat.chat_uuid, keep_messages=3)

    assert summary is not None
    messages = await history.aget_messages()
    assert messages[0] == SystemMessage(content=summary.content, id=summary.agui_id)
    # The cut comes before a question: at least three messages stay, four do.
    assert [m.content for m in messages[1:]] == [
        "question 3",
        "answer 3",
        "question 4",
        "answer 4",
    ]
    # New messages go after the rest; the chat API still reads all of them.
    await history.aadd_messages([HumanMessage("question 5")])
    assert (await history.aget_messages())[-1].content == "question 5"
    assert len(await store.get_chat_messages(chat.chat_uuid)) == 11


async def test_agents_sdk_session_items_start_at_the_summary(store: Store) -> None:
    user = uuid4()
    session = ThreadstoreSession("s", store, user_uuid=user)
    for n in range(4):
        await session.add_items(
            [
                {"role": "user", "content": f"question {n}"},
                {"role": "assistant", "content": f"answer {n}"},
            ]
        )
    chat = await store.get_chat_by_thread_id(user, "s")
    assert chat is not None

    summary = await store.branches.compact(chat.chat_uuid, keep_messages=2)

    assert summary is not None
    items = await session.get_items()
    assert items[0] == {"role": "system", "content": summary.content}
    assert [item.get("content") for item in items[1:]] == ["question 3", "answer 3"]
    assert (await session.get_items(limit=2)) == items[-2:]
    assert (await session.get_items(limit=10)) == items


async def test_agent_framework_provider_gives_the_summary_and_keeps_the_whole_session(
    store: Store,
) -> None:
    provider = ThreadstoreHistoryProvider(store, uuid4())
    for n in range(3):
        await provider.save_messages(
            "s",
            [
                AFMessage("user", [f"question {n}"], message_id=f"u{n}"),
                AFMessage("assistant", [f"answer {n}"], message_id=f"a{n}"),
            ],
        )
    chat = await provider.get_chat("s", None)
    assert chat is not None

    summary = await store.branches.compact(chat.chat_uuid, keep_messages=2)

    assert summary is not None
    given = await provider.get_messages("s")
    assert (given[0].role, given[0].text, given[0].message_id) == (
        "system",
        summary.content,
        summary.agui_id,
    )
    assert [m.message_id for m in given[1:]] == ["u2", "a2"]


class _Summarizing:
    """A chat client that answers every request with a fixed summary, and records it."""

    def __init__(self) -> None:
        self.requests: list[Sequence[AFMessage]] = []

    async def get_response(self, messages: Sequence[AFMessage], **kwargs: Any) -> ChatResponse:
        self.requests.append(messages)
        return ChatResponse(messages=[AFMessage("assistant", ["they asked three questions"])])


async def test_agent_framework_strategies_write_summaries(store: Store) -> None:
    history, chat = await langchain_chat(store, 4)
    client = _Summarizing()
    summarizing = strategy_summarizer(SummarizationStrategy(client=client, target_count=1))  # type: ignore[arg-type]

    summary = await store.branches.compact(chat.chat_uuid, summarizing, keep_messages=2)

    assert summary is not None and summary.summarizer == "SummarizationStrategy"
    assert "they asked three questions" in summary.content
    assert "question 0" in str(client.requests[0][-1].text)
    # A strategy that only drops messages: the summary is what it keeps.
    await history.aadd_messages([HumanMessage("question 4"), AIMessage("answer 4")])
    window = strategy_summarizer(SlidingWindowStrategy(keep_last_groups=1))
    second = await store.branches.compact(chat.chat_uuid, window, keep_messages=1)
    assert second is not None and second.summarizer == "SlidingWindowStrategy"
    assert second.content.startswith("system: ")  # the first summary, which it keeps
    assert "assistant: answer 3" in second.content or "user: question 4" in second.content
