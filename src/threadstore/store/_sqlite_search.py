"""The SQLite backend's full-text search: an FTS5 table, fed by what triggers record.

A write's transaction records which messages it changed (``search_pending``, see the
schema); their entries are rewritten in batches, by a task of the store's and before
each search, because an FTS5 write costs about as much for one entry as for hundreds:
one per append would cost an append half as much again (docs/benchmarks.md).

A search's MATCH asks for the owner's word and every query word (each quoted: plain
words only), so FTS5 intersects the user's entries with the words' and reads no other
user's. The active branch of a chat that ever branched is walked from its leaf.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from threadstore.errors import StoreError
from threadstore.store._search import (
    HIGHLIGHT_START,
    HIGHLIGHT_STOP,
    INDEX_BATCH,
    MAX_RANKED,
    SearchBackend,
    SearchQuery,
    SearchRow,
    bm25,
    fold,
    idf,
    owner_token,
)
from threadstore.store._sqlite_sql import ts
from threadstore.store._sqlite_writes import Statement

if TYPE_CHECKING:
    from threadstore.store.sqlite import SQLiteStore

__all__ = ["SQLiteSearch", "match_expression"]

_log = logging.getLogger("threadstore.store")

# ?1 the MATCH, ?2 the user, ?3 every branch, ?4 the limit, ?5-?6 the cursor.
SELECT_NEWEST = """
WITH hits AS (
    SELECT m.seq, m.message_uuid, m.chat_uuid, c.thread_id, c.name, m.role, m.created_at,
           c.has_branches, c.active_leaf_uuid
      FROM search_index s
      JOIN messages m ON m.seq = s.rowid
      JOIN chats c ON c.chat_uuid = m.chat_uuid
     WHERE search_index MATCH ?1 AND c.user_uuid = ?2 AND c.deleted_at IS NULL
),
{active}
SELECT seq, message_uuid, chat_uuid, thread_id, name, role, created_at FROM hits
 WHERE (NOT has_branches OR ?3 OR message_uuid IN (SELECT uuid FROM active)) AND {after}
 ORDER BY created_at DESC, seq DESC LIMIT ?4
"""
# The messages on the active branch of the chats of ``hits`` that ever branched (?3: all).
_ACTIVE = """active (uuid) AS (
    SELECT DISTINCT active_leaf_uuid FROM hits
     WHERE has_branches AND NOT ?3 AND active_leaf_uuid IS NOT NULL
    UNION
    SELECT m.parent_uuid FROM messages m JOIN active a ON m.message_uuid = a.uuid
     WHERE m.parent_uuid IS NOT NULL
)"""
SELECT = {
    cursor: SELECT_NEWEST.format(
        active=_ACTIVE, after="(created_at, seq) < (?5, ?6)" if cursor else "1"
    )
    for cursor in (False, True)
}
# A search by best match: the user's newest ?4 matches with their words marked, ranked by
# the store (bm25() would read every entry of each word in the index, every user's, per
# search). ?5 and ?6 the marks.
SELECT_BEST = f"""
WITH matched AS MATERIALIZED (
    SELECT rowid AS seq, highlight(search_index, 1, ?5, ?6) AS body,
           highlight(search_index, 2, ?5, ?6) AS tools,
           highlight(search_index, 3, ?5, ?6) AS reasoning
      FROM search_index WHERE search_index MATCH ?1 ORDER BY rowid DESC LIMIT ?4
),
hits AS (
    SELECT m.seq, m.message_uuid, m.chat_uuid, c.thread_id, c.name, m.role, m.created_at,
           c.has_branches, c.active_leaf_uuid, x.body, x.tools, x.reasoning
      FROM matched x
      JOIN messages m ON m.seq = x.seq
      JOIN chats c ON c.chat_uuid = m.chat_uuid
     WHERE c.user_uuid = ?2 AND c.deleted_at IS NULL
),
{_ACTIVE}
SELECT seq, message_uuid, chat_uuid, thread_id, name, role, created_at, body, tools, reasoning
  FROM hits WHERE NOT has_branches OR ?3 OR message_uuid IN (SELECT uuid FROM active)
"""
_COUNT = "(SELECT count(*) FROM search_index WHERE search_index MATCH ?)"
_MARKED = re.compile(f"{HIGHLIGHT_START}(.*?){HIGHLIGHT_STOP}", re.S)
_WORD = re.compile(r"[^\W_]+")
SNIPPETS = (
    "SELECT rowid, "
    + ", ".join(f"snippet(search_index, {column}, ?2, ?3, '…', 16)" for column in (1, 2, 3))
    + " FROM search_index WHERE search_index MATCH ?1"
    " AND rowid IN (SELECT value FROM json_each(?4))"
)
_PICK = "SELECT seq FROM search_pending ORDER BY seq DESC LIMIT ?1"
# One batch of pending messages, newest first: their entries rewritten from what is
# stored now (a message deleted since has none); whether more wait.
FLUSH = (
    f"DELETE FROM search_index WHERE rowid IN ({_PICK})",
    "INSERT INTO search_index (rowid, owner, body, tools, reasoning)"
    f" SELECT * FROM search_sources WHERE seq IN ({_PICK})",
    f"DELETE FROM search_pending WHERE seq IN ({_PICK})",
    "SELECT EXISTS (SELECT 1 FROM search_pending)",
)
PENDING = "SELECT EXISTS (SELECT 1 FROM search_pending)"
BACKLOG = "SELECT count(*) FROM search_pending"

FLUSH_INTERVAL = 1.0
"""Seconds the background indexer waits after a write, so later writes join its batch."""


def match_expression(user_uuid: UUID, words: tuple[str, ...]) -> str:
    """The FTS5 query: the owner's word and every word, each quoted (never an operator)."""
    owner = f'owner : "{owner_token(user_uuid)}"'
    if not words:
        return owner
    quoted = " AND ".join('"' + word.replace('"', '""') + '"' for word in words)
    return f"{owner} AND {{body tools reasoning}} : ({quoted})"


class SQLiteSearch(SearchBackend):
    """Search over one :class:`~threadstore.store.sqlite.SQLiteStore`."""

    def __init__(self, store: SQLiteStore) -> None:
        self.executor = store.executor
        self._written = asyncio.Event()
        """Set by a write of this store's: messages may be pending."""
        self._flush = [
            Statement(sql, (INDEX_BATCH,) if "?1" in sql else (), inline=False) for sql in FLUSH
        ]

    async def select(self, query: SearchQuery) -> list[SearchRow]:
        if (await self.executor.read(PENDING, ()))[0][0]:
            # What was written before this search is found by it: the newest pending
            # batch is indexed first (an older backlog goes on in the background).
            if (await self.executor.run(*self._flush))[-1][0][0]:
                self._written.set()
        match = match_expression(query.user_uuid, query.words)
        rows = await (self._ranked if query.order == "best" else self._newest)(query, match)
        if not rows:
            return rows
        wanted = "[" + ",".join(str(row.seq) for row in rows) + "]"
        found = await self.executor.read(SNIPPETS, (match, HIGHLIGHT_START, HIGHLIGHT_STOP, wanted))
        snippets = {row[0]: (row[1], row[2], row[3]) for row in found}
        return [replace(row, snippets=snippets.get(row.seq, row.snippets)) for row in rows]

    async def _newest(self, query: SearchQuery, match: str) -> list[SearchRow]:
        after = query.after
        params: list[Any] = [match, str(query.user_uuid), query.all_branches, query.limit]
        if after is not None:
            params += [ts(after.created_at), after.seq]
        rows = await self.executor.read(SELECT[after is not None], params)
        return [_row(row, None) for row in rows]

    async def _ranked(self, query: SearchQuery, match: str) -> list[SearchRow]:
        """The user's matches ranked by BM25 here, with the words weighed by how many of
        the user's messages hold them."""
        user, words = query.user_uuid, query.words
        marks = (HIGHLIGHT_START, HIGHLIGHT_STOP)
        params = (match, str(user), query.all_branches, MAX_RANKED, *marks)
        rows = await self.executor.read(SELECT_BEST, params)
        if not rows:
            return []
        counting = [match_expression(user, ())] + [match_expression(user, (w,)) for w in words]
        sql = "SELECT " + ", ".join([_COUNT] * len(counting))
        total, *holding = (await self.executor.read(sql, counting))[0]
        weights = {fold(w): idf(total, n) for w, n in zip(words, holding, strict=True)}
        counts, lengths = [], []
        for row in rows:
            text = " ".join(part for part in row[7:] if part)
            counts.append(Counter(fold(word) for word in _MARKED.findall(text)))
            lengths.append(len(_WORD.findall(text)))
        scores = bm25(counts, lengths, weights)
        ranked = sorted(
            (_row(row, score) for row, score in zip(rows, scores, strict=True)),
            key=lambda r: (r.score, r.created_at, r.seq),
            reverse=True,
        )
        after = query.after
        if after is not None:
            key = (after.score, after.created_at, after.seq)
            ranked = [r for r in ranked if (r.score, r.created_at, r.seq) < key]
        return ranked[: query.limit]

    async def backlog(self) -> int:
        rows = await self.executor.read(BACKLOG, ())
        return int(rows[0][0])

    def written(self) -> None:
        """A write of this store's may have left messages pending: index them soon."""
        self._written.set()

    async def flush(self) -> None:
        """Index every pending message now, a batch per transaction."""
        self._written.clear()
        if not (await self.executor.read(PENDING, ()))[0][0]:
            return
        # A flush's priority: every other waiting write goes first.
        while (await self.executor.run(*self._flush, background=True))[-1][0][0]:
            await asyncio.sleep(0)

    async def wait_indexed(self) -> None:
        await self.flush()  # rather than wait for the background indexer

    async def start(self) -> None:
        if self._indexing is None:
            if (await self.executor.read(PENDING, ()))[0][0]:
                self._written.set()  # messages stored before: a backlog to index
            self._indexing = asyncio.create_task(self._keep_indexing())

    async def _keep_indexing(self) -> None:
        """Index pending messages in the background, FLUSH_INTERVAL after a write.

        Idle while nothing is written; a search or :meth:`flush` in the meantime may
        have done it already.
        """
        failing = False
        while True:
            await self._written.wait()
            await asyncio.sleep(FLUSH_INTERVAL)
            if not self._written.is_set():
                continue
            try:
                await self.flush()
                failing = False
            except StoreError as exc:
                self._written.set()  # try again after the next interval
                if not failing:  # once per outage; searches index what they need
                    _log.warning("indexing messages for search failed: %s", exc)
                failing = True


def _row(row: Sequence[Any], score: float | None) -> SearchRow:
    """A row of the first seven columns of SearchRow's fields, uuids and time as text."""
    seq, message, chat, thread_id, name, role, created_at = row[:7]
    created = datetime.fromisoformat(created_at)
    return SearchRow(
        seq, UUID(message), UUID(chat), thread_id, name, role, created, score, (None,) * 3
    )
