"""What a framework face reports of usage lands in the ledger: LangChain's
``usage_metadata`` on the AI messages a history is given, once per message; Agent
Framework's ``usage_details`` of each run's response."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from agent_framework import ChatResponse
from langchain_core.messages import AIMessage, HumanMessage

from af_support import ScriptedChatClient, make_agent, say
from threadstore import Store
from threadstore.faces.agent_framework import ThreadstoreHistoryProvider
from threadstore.faces.langchain import ThreadstoreChatMessageHistory


async def test_langchain_usage_metadata_is_recorded_once_per_message(store: Store) -> None:
    user_uuid = uuid4()
    history = ThreadstoreChatMessageHistory(store, user_uuid=user_uuid, session_id="s")
    answer = AIMessage(
        content="4",
        id="lc-answer-1",
        usage_metadata={
            "input_tokens": 30,
            "output_tokens": 7,
            "total_tokens": 37,
            "input_token_details": {"cache_read": 10},
            "output_token_details": {"reasoning": 3},
        },
        response_metadata={"model_name": "m-small"},
    )
    unnamed = AIMessage(
        content="?", usage_metadata={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
    )
    await history.aadd_messages([HumanMessage(content="2+2?"), answer, unnamed])
    await history.aadd_messages([answer])  # the same message again: its row is replaced
    (row,) = await store.usage.runs(user_uuid=user_uuid)
    assert row.run_id == "langchain:lc-answer-1" and row.source == "langchain"
    assert (row.input_tokens, row.output_tokens) == (30, 7)
    assert (row.cached_input_tokens, row.reasoning_tokens, row.model) == (10, 3, "m-small")
    total = await store.usage.total(user_uuid=user_uuid)
    assert (total.runs, total.total_tokens) == (1, 37)


class _MeteredClient(ScriptedChatClient):
    """Answers as ScriptedChatClient, each response with its usage and an id."""

    def _inner_get_response(
        self, *, messages: Any, stream: bool, options: Any, **kwargs: Any
    ) -> Any:
        assert not stream
        answered = super()._inner_get_response(
            messages=messages, stream=False, options=options, **kwargs
        )

        async def metered() -> ChatResponse:
            response = await answered  # type: ignore[misc]
            response.usage_details = {
                "input_token_count": 40,
                "output_token_count": 9,
                "cache_read_input_token_count": 16,
            }
            response.response_id = f"resp-{len(self.seen)}"
            return response

        return metered()


async def test_agent_framework_usage_details_are_recorded_per_response(store: Store) -> None:
    user_uuid = uuid4()
    provider = ThreadstoreHistoryProvider(store, user_uuid=user_uuid)
    agent = make_agent(_MeteredClient([say("one"), say("two")]), [provider])
    session = agent.create_session()
    await agent.run("first", session=session)
    await agent.run("second", session=session)
    rows = await store.usage.runs(user_uuid=user_uuid)
    assert len(rows) == 2 and {row.source for row in rows} == {"agent-framework"}
    total = await store.usage.total(user_uuid=user_uuid)
    assert (total.input_tokens, total.output_tokens, total.cached_input_tokens) == (80, 18, 32)
