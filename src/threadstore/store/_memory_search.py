"""The in-memory backend's full-text search: a scan of the user's messages.

Plain and correct rather than fast: it reads every message of the user's live chats,
matches whole words ignoring case and accents, ranks by BM25 as the SQLite store does
(each word weighed by how many of the user's messages hold it), and cuts a snippet around
the first match, in the order and pages the SQL backends use.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from threadstore.store._search import (
    HIGHLIGHT_START,
    HIGHLIGHT_STOP,
    SearchBackend,
    SearchQuery,
    SearchRow,
    bm25,
    fold,
    idf,
)

if TYPE_CHECKING:
    from threadstore.store.memory import MemoryStore

__all__ = ["MemorySearch"]

_WORD = re.compile(r"[^\W_]+")
_SNIPPET_WORDS = 16


class MemorySearch(SearchBackend):
    """Search over one :class:`~threadstore.store.memory.MemoryStore`."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def select(self, query: SearchQuery) -> list[SearchRow]:
        state = self.store._state
        words = {fold(word) for word in query.words}
        rows: list[SearchRow] = []
        counts: list[dict[str, int]] = []
        lengths: list[int] = []
        holding: Counter[str] = Counter()  # of the user's messages, how many hold each word
        total = 0
        for chat_uuid, chat in state.chats.items():
            if chat["user_uuid"] != query.user_uuid or state.live_chat(chat_uuid) is None:
                continue
            branch = {m["message_uuid"] for m in self.store._branch(chat_uuid)}
            for message in state.messages.values():
                if message["chat_uuid"] != chat_uuid:
                    continue
                parts = self._parts(message)
                found = [fold(w) for part in parts if part for w in _WORD.findall(part)]
                total += bool(found)
                holding.update(words.intersection(found))
                visible = query.all_branches or message["message_uuid"] in branch
                if not visible or not words <= set(found):
                    continue
                counts.append(Counter(w for w in found if w in words))
                lengths.append(len(found))
                rows.append(
                    SearchRow(
                        seq=message["seq"],
                        message_uuid=message["message_uuid"],
                        chat_uuid=chat_uuid,
                        thread_id=chat["thread_id"],
                        chat_name=chat["name"],
                        role=str(message["role"]),
                        created_at=message["created_at"],
                        score=None,
                        snippets=(
                            _snippet(parts[0], words),
                            _snippet(parts[1], words),
                            _snippet(parts[2], words),
                        ),
                    )
                )
        best = query.order == "best"
        if best:
            weights = {word: idf(total, holding[word]) for word in words}
            scores = bm25(counts, lengths, weights)
            rows = [replace(row, score=score) for row, score in zip(rows, scores, strict=True)]
        # A search by newest has no scores: every row's (and its cursor's) counts as 0.
        rows.sort(key=lambda r: (r.score or 0.0, r.created_at, r.seq), reverse=True)
        if query.after is not None:
            at = query.after
            key = (at.score if best else 0.0, at.created_at, at.seq)
            rows = [r for r in rows if (r.score or 0.0, r.created_at, r.seq) < key]
        return rows[: query.limit]

    def _parts(self, message: dict[str, Any]) -> tuple[str, str | None, str | None]:
        """The message's text, its tool calls and its reasoning, as the SQL indexes read them."""
        state = self.store._state
        tools: list[str] = []
        reasoning: list[str] = []
        for table, uuid in state.children.get(message["message_uuid"], ()):
            if table == "tool_calls":
                call = state.tool_calls[uuid]
                tools.append(f"{call['name']} {call['arguments']} {call['content'] or ''}")
            else:
                reasoning.append(state.reasonings[uuid]["content"])
        return message["content"], " ".join(tools) or None, " ".join(reasoning) or None

    async def backlog(self) -> int:
        return 0


def _snippet(text: str | None, words: set[str]) -> str | None:
    """About :data:`_SNIPPET_WORDS` words of ``text`` from a little before the first match."""
    if not text:
        return None
    tokens = list(_WORD.finditer(text))
    first = next((i for i, t in enumerate(tokens) if fold(t.group()) in words), 0)
    start = max(0, first - 4)
    shown = tokens[start : start + _SNIPPET_WORDS]
    if not shown:
        return text[:200]
    out: list[str] = ["…" if start else ""]
    at = shown[0].start()
    for token in shown:
        out.append(text[at : token.start()])
        if fold(token.group()) in words:
            out.append(HIGHLIGHT_START + token.group() + HIGHLIGHT_STOP)
        else:
            out.append(token.group())
        at = token.end()
    if start + _SNIPPET_WORDS < len(tokens):
        out.append("…")
    return "".join(out)
