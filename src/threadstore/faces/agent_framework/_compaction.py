"""The framework's compaction strategies as threadstore summarizers.

A threadstore summary stands for a span of a chat, and the messages stay stored. An
Agent Framework ``CompactionStrategy`` (``SummarizationStrategy``, ``SlidingWindowStrategy``,
``ToolResultCompactionStrategy``, ``TokenBudgetComposedStrategy``, ...) compacts a list
of messages in place. :func:`strategy_summarizer` runs one over the span's messages (the
earlier summary first, as a system message the strategies keep) with the framework's own
``apply_compaction``, and the text of what it leaves is the summary.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_framework import CompactionStrategy, Content, apply_compaction
from agent_framework import Message as AFMessage

from threadstore.faces.agent_framework._convert import records_to_messages
from threadstore.lifecycle import Summarizer
from threadstore.models import Message, Summary

__all__ = ["strategy_summarizer"]


def strategy_summarizer(strategy: CompactionStrategy) -> Summarizer:
    """A summarizer that compacts a span with ``strategy`` and keeps the text of the result.

    With ``SummarizationStrategy`` that is its model's summary and the newest messages it
    retains; with the strategies that only drop or shorten messages, the text of those
    left. The summaries record the strategy's class name as their summarizer.
    """

    async def summarize(messages: Sequence[Message], previous: Summary | None) -> str:
        framework = records_to_messages(messages)
        if previous is not None:
            framework.insert(0, AFMessage("system", [previous.content]))
        kept = await apply_compaction(framework, strategy=strategy)
        return "\n".join(line for line in map(_line, kept) if line)

    summarize.__name__ = type(strategy).__name__
    return summarize


def _line(message: AFMessage) -> str:
    """One message of a compacted span as a line: its role, text, calls and results."""
    parts = [_content_text(content) for content in message.contents]
    text = " ".join(part for part in parts if part)
    return f"{message.role}: {text}" if text else ""


def _content_text(content: Content) -> str:
    if content.type == "text":
        return content.text or ""
    if content.type == "function_call":
        return f"[called {content.name}({content.arguments or ''})]"
    if content.type == "function_result":
        return f"[result of {content.call_id}: {content.result}]"
    return ""
