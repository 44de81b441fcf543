"""Full-text search over a user's messages: what every backend shares.

A search finds the messages of one user whose text, tool calls (name, arguments and
result) or reasoning contain every word of the query. The query is plain words: they
are taken out of the user's text (``\\w+``) and each is quoted before it reaches the
database, so no input is ever read as an operator and none is a syntax error there.

Each backend keeps one index entry per message (its text, its tool calls and its
reasoning), written by triggers in the transaction of the write, and answers
:meth:`SearchBackend.select`; paging, limits, cursors, snippets' highlights and the
hits' kinds are decided here, once.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

from threadstore.errors import InvalidInputError
from threadstore.models import SearchHit, SearchPage
from threadstore.store._cursor import SearchCursor, SearchOrder

__all__ = [
    "DEFAULT_SEARCH_LIMIT",
    "HIGHLIGHT_START",
    "HIGHLIGHT_STOP",
    "INDEX_BATCH",
    "KINDS",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_WORDS",
    "MAX_RANKED",
    "MAX_SEARCH_LIMIT",
    "SearchBackend",
    "SearchCursor",
    "SearchOrder",
    "SearchQuery",
    "SearchRow",
    "bm25",
    "fold",
    "idf",
    "owner_token",
    "query_words",
    "search",
]

MAX_QUERY_CHARS = 500
"""Longest query text accepted."""

MAX_QUERY_WORDS = 16
"""Most words a query may hold."""

DEFAULT_SEARCH_LIMIT = 20
"""Hits per page when no limit is given."""

MAX_SEARCH_LIMIT = 100
"""Largest page of hits."""

MAX_RANKED = 10_000
"""A search by best match ranks the user's newest this many matching messages (SQLite)."""

INDEX_BATCH = 500
"""Pending messages whose index entries SQLite rewrites per transaction."""

HIGHLIGHT_START = "\ue000"
HIGHLIGHT_STOP = "\ue001"
"""What a backend puts around each matching word of a snippet (private-use characters)."""

KINDS: tuple[Literal["text", "tool", "reasoning"], ...] = ("text", "tool", "reasoning")
"""The parts of a message a search reads, in the order of :attr:`SearchRow.snippets`."""

_WORD = re.compile(r"[^\W_]+")
"""A word: letters and digits (as the databases' tokenizers read them)."""


def query_words(text: str) -> tuple[str, ...]:
    """The words of a query, lower-cased and without repeats; ``InvalidInputError`` if none."""
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidInputError(f"a search query is at most {MAX_QUERY_CHARS} characters")
    words = tuple(dict.fromkeys(word.lower() for word in _WORD.findall(text)))
    if not words:
        raise InvalidInputError("a search query needs at least one word (letters or digits)")
    if len(words) > MAX_QUERY_WORDS:
        raise InvalidInputError(f"a search query has at most {MAX_QUERY_WORDS} words")
    return words


def fold(word: str) -> str:
    """``word`` as an index compares it: lower case, accents dropped."""
    decomposed = unicodedata.normalize("NFKD", word.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


_K1, _B = 1.2, 0.75  # BM25's usual term-frequency saturation and length normalization


def idf(messages: int, holding: int) -> float:
    """How much a word weighs: more the fewer of the user's ``messages`` hold it."""
    return math.log(1 + (messages - holding + 0.5) / (holding + 0.5))


def bm25(
    counts: Sequence[dict[str, int]], lengths: Sequence[int], weights: dict[str, float]
) -> list[float]:
    """BM25 of each message: its query words' ``counts``, its length in words, the words'
    ``weights`` (:func:`idf`); lengths are compared with the average of these messages."""
    average = max(1.0, sum(lengths) / len(lengths)) if lengths else 1.0
    return [
        sum(
            weights.get(word, 0.0) * n * (_K1 + 1) / (n + _K1 * (1 - _B + _B * size / average))
            for word, n in found.items()
        )
        for found, size in zip(counts, lengths, strict=True)
    ]


def owner_token(user_uuid: UUID) -> str:
    """The word an index entry carries for its owner: a search matches it with the query."""
    return "u" + user_uuid.hex


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """What a backend is asked: one user's messages holding every word, one page of them."""

    user_uuid: UUID
    words: tuple[str, ...]
    order: SearchOrder
    all_branches: bool
    after: SearchCursor | None
    limit: int
    """Rows wanted: the page and one more (whether there is a next page)."""


@dataclass(frozen=True, slots=True)
class SearchRow:
    """A backend's answer for one message; ``snippets`` by :data:`KINDS`, marked with
    :data:`HIGHLIGHT_START` and :data:`HIGHLIGHT_STOP` (``None``: that part is empty)."""

    seq: int
    message_uuid: UUID
    chat_uuid: UUID
    thread_id: str
    chat_name: str | None
    role: str
    created_at: datetime
    score: float | None
    """In a search by best match only (ranking costs a look at every entry of each word)."""
    snippets: tuple[str | None, str | None, str | None]


class SearchBackend(abc.ABC):
    """A backend's index of its messages' words, and its reads."""

    _indexing: asyncio.Task[None] | None = None
    """The background indexing that :meth:`start` began, if it runs."""

    @abc.abstractmethod
    async def select(self, query: SearchQuery) -> list[SearchRow]:
        """Up to ``query.limit`` rows of the user's live chats, in ``query.order`` after
        ``query.after``: by score then ``(created_at, seq)`` descending for ``best``, by
        ``(created_at, seq)`` descending for ``newest``; only the active branch of each
        chat unless ``all_branches``."""

    @abc.abstractmethod
    async def backlog(self) -> int:
        """How many existing messages still wait to be indexed (0: every one is)."""

    async def wait_indexed(self) -> None:  # noqa: B027 - optional hook
        """Return once no stored message waits to be indexed (its background work is done)."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Begin indexing existing messages in the background, if any wait."""

    async def stop(self) -> None:
        """Stop the background indexing (it resumes at the next ``start``)."""
        task, self._indexing = self._indexing, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def search(
    backend: SearchBackend,
    user_uuid: UUID,
    text: str,
    *,
    order: SearchOrder = "newest",
    all_branches: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
) -> SearchPage:
    """One page of ``user_uuid``'s messages matching every word of ``text``."""
    if order not in ("newest", "best"):
        raise InvalidInputError(f"order must be 'newest' or 'best', got {order!r}")
    size = DEFAULT_SEARCH_LIMIT if limit is None else limit
    if not 1 <= size <= MAX_SEARCH_LIMIT:
        raise InvalidInputError(f"limit must be between 1 and {MAX_SEARCH_LIMIT}, got {size}")
    after = None if cursor is None else SearchCursor.decode(cursor, order)
    words = query_words(text)
    rows = await backend.select(SearchQuery(user_uuid, words, order, all_branches, after, size + 1))
    items = [_hit(row) for row in rows[:size]]
    next_cursor = None
    if len(rows) > size:
        last = rows[size - 1]
        next_cursor = SearchCursor(order, last.score or 0.0, last.created_at, last.seq).encode()
    return SearchPage(items=items, next_cursor=next_cursor)


def _hit(row: SearchRow) -> SearchHit:
    """The hit of ``row``: the part with the most highlighted words is what matched."""
    best = max(
        range(len(KINDS)),
        key=lambda i: ((row.snippets[i] or "").count(HIGHLIGHT_START), -i),
    )
    snippet, highlights = _unmark(row.snippets[best] or "")
    return SearchHit(
        chat_uuid=row.chat_uuid,
        thread_id=row.thread_id,
        chat_name=row.chat_name,
        message_uuid=row.message_uuid,
        role=row.role,
        kind=KINDS[best],
        snippet=snippet,
        highlights=highlights,
        score=row.score,
        created_at=row.created_at,
    )


def _unmark(marked: str) -> tuple[str, list[tuple[int, int]]]:
    """``marked`` without its highlight marks, and the spans they enclosed."""
    text: list[str] = []
    spans: list[tuple[int, int]] = []
    length, start = 0, None
    for piece in re.split(f"([{HIGHLIGHT_START}{HIGHLIGHT_STOP}])", marked):
        if piece == HIGHLIGHT_START:
            start = length
        elif piece == HIGHLIGHT_STOP:
            if start is not None and length > start:
                spans.append((start, length))
            start = None
        else:
            text.append(piece)
            length += len(piece)
    # The spans move left by the whitespace ``strip`` takes off.
    joined = "".join(text)
    lead = len(joined) - len(joined.lstrip())
    return joined.strip(), [(start - lead, end - lead) for start, end in spans]
