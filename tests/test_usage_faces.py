"""What a framework face reports of usage lands in the ledger: LangChain's
``usage_metadata`` on the AI messages a history is given, once per message."""

from __future__ import annotations

from uuid import uuid4

from langchain_core.messages import AIMessage, HumanMessage

from threadstore import Store
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
