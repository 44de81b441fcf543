"""A conversation's life: compaction (summaries agents get instead of old messages).

Pure, on stored messages: where a chat may be cut (never between a tool call and its
result, or a reasoning block and its message), how far a compaction goes, the policy
that triggers one by a message or token budget, and a deterministic summarizer for
tests and demos. The store applies them (``store.branches.compact``); docs/lifecycle.md
has the model.
"""

from __future__ import annotations

from threadstore.lifecycle._compaction import (
    CompactionPlan,
    CompactionPolicy,
    Summarizer,
    applicable_summary,
    deterministic_summary,
    message_chars,
    message_tokens,
    plan_compaction,
    safe_cuts,
    summarize,
    summarizer_name,
)

__all__ = [
    "CompactionPlan",
    "CompactionPolicy",
    "Summarizer",
    "applicable_summary",
    "deterministic_summary",
    "message_chars",
    "message_tokens",
    "plan_compaction",
    "safe_cuts",
    "summarize",
    "summarizer_name",
]
