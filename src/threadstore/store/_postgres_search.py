"""The PostgreSQL backend's full-text search: a tsvector per message, GIN-indexed.

Triggers keep ``search_docs`` in the transaction of each write (see the schema). A
search asks GIN for the owner's lexeme and every query word at once, so it reads that
user's entries only; ``plainto_tsquery`` reads the words (never an operator). The
language is the text search configuration of ``search_settings`` (the store's
``search_language``; ``simple`` by default): changing it indexes every message again
in the background.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import asyncpg

from threadstore.errors import ConfigurationError, StoreError
from threadstore.store._search import (
    HIGHLIGHT_START,
    HIGHLIGHT_STOP,
    SearchBackend,
    SearchQuery,
    SearchRow,
    owner_token,
)

if TYPE_CHECKING:
    from threadstore.store.postgres import PostgresStore

__all__ = ["INDEX_CHATS", "PostgresSearch"]

_log = logging.getLogger("threadstore.store")

INDEX_CHATS = 20
"""Chats the background indexing of existing messages reads per transaction."""

_AFTER = {
    "newest": "(created_at, seq) < ($7, $8)",
    "best": "(score < $9 OR (score = $9 AND (created_at, seq) < ($7, $8)))",
}
_ORDER = {
    "newest": "created_at DESC, seq DESC",
    "best": "score DESC, created_at DESC, seq DESC",
}
_SCORE = {
    "newest": "NULL::float8",
    "best": "ts_rank(d.doc, plainto_tsquery($1::regconfig, $2))::float8",
}
# $1 the configuration, $2 the words, $3 the owner's lexeme, $4 the user, $5 every
# branch, $6 the limit, $7-$9 the cursor.
_SELECT = """
WITH RECURSIVE hits AS (
    SELECT m.seq, m.message_uuid, m.chat_uuid, c.thread_id, c.name, m.role, m.created_at,
           {score} AS score,
           c.has_branches, c.active_leaf_uuid
      FROM search_docs d
      JOIN messages m ON m.message_uuid = d.message_uuid
      JOIN chats c ON c.chat_uuid = m.chat_uuid
     WHERE d.doc @@ (plainto_tsquery($1::regconfig, $2) && $3::tsquery)
       AND numnode(plainto_tsquery($1::regconfig, $2)) > 0
       AND c.user_uuid = $4 AND c.deleted_at IS NULL
),
active (uuid) AS (
    SELECT active_leaf_uuid FROM hits
     WHERE has_branches AND NOT $5 AND active_leaf_uuid IS NOT NULL
    UNION
    SELECT m.parent_uuid FROM messages m JOIN active a ON m.message_uuid = a.uuid
     WHERE m.parent_uuid IS NOT NULL
)
SELECT seq, message_uuid, chat_uuid, thread_id, name, role, created_at, score FROM hits
 WHERE (NOT has_branches OR $5 OR message_uuid IN (SELECT uuid FROM active)) AND {after}
 ORDER BY {order} LIMIT $6
"""
SELECT = {
    (order, cursor): _SELECT.format(
        after=_AFTER[order] if cursor else "$7::timestamptz IS NULL",
        order=_ORDER[order],
        score=_SCORE[order],
    )
    for order in ("newest", "best")
    for cursor in (False, True)
}
_HEADLINE = (
    f"StartSel={HIGHLIGHT_START}, StopSel={HIGHLIGHT_STOP}, MaxWords=24, MinWords=8,"
    ' MaxFragments=2, FragmentDelimiter=" … "'
)
SNIPPETS = (
    "SELECT s.message_uuid, "
    + ", ".join(
        f"CASE WHEN s.{part} <> '' THEN ts_headline($1::regconfig, s.{part}, q, $3) END"
        for part in ("body", "tools", "reasoning")
    )
    + " FROM search_sources s, plainto_tsquery($1::regconfig, $2) q"
    " WHERE s.message_uuid = ANY ($4::uuid[])"
)
LANGUAGE = "SELECT threadstore_search_language()::text"
# A new configuration: every message is indexed again, in the background.
SET_LANGUAGE = (
    "WITH changed AS (INSERT INTO search_settings (language) SELECT $1::regconfig"
    " WHERE threadstore_search_language() <> $1::regconfig"
    " ON CONFLICT (id) DO UPDATE SET language = EXCLUDED.language RETURNING 1)"
    " INSERT INTO search_backlog (after_chat) SELECT NULL FROM changed"
    " ON CONFLICT (id) DO UPDATE SET after_chat = NULL"
)
BACKLOG = (
    "SELECT count(*) FROM messages m, search_backlog b"
    " WHERE b.after_chat IS NULL OR m.chat_uuid > b.after_chat"
)
INDEX_STEP = "SELECT threadstore_search_backfill($1)"


class PostgresSearch(SearchBackend):
    """Search over one :class:`~threadstore.store.postgres.PostgresStore`."""

    def __init__(self, store: PostgresStore, language: str | None) -> None:
        self.store = store
        self.wanted = language
        """The configuration the store was opened with (``None``: keep the stored one)."""
        self.language: str | None = None

    async def _language(self) -> str:
        if self.language is None:
            rows = await self.store._fetch(LANGUAGE)
            self.language = str(rows[0][0])
        return self.language

    async def select(self, query: SearchQuery) -> list[SearchRow]:
        language = await self._language()
        text, user, after = " ".join(query.words), query.user_uuid, query.after
        params: list[Any] = [language, text, owner_token(user), user, query.all_branches]
        params += [query.limit, None if after is None else after.created_at]
        if after is not None:
            params.append(after.seq)
            if query.order == "best":
                params.append(after.score)
        rows = await self.store._fetch(SELECT[(query.order, after is not None)], *params)
        if not rows:
            return []
        found = await self.store._fetch(
            SNIPPETS, language, text, _HEADLINE, [row[1] for row in rows]
        )
        snippets = {row[0]: (row[1], row[2], row[3]) for row in found}
        return [
            SearchRow(
                seq, uuid, chat, thread, name, role, at, score, snippets.get(uuid, (None,) * 3)
            )
            for seq, uuid, chat, thread, name, role, at, score in rows
        ]

    async def backlog(self) -> int:
        rows = await self.store._fetch(BACKLOG)
        return int(rows[0][0])

    async def wait_indexed(self) -> None:
        task = self._indexing
        if task is not None:
            await asyncio.shield(task)

    async def start(self) -> None:
        if self.wanted is not None:
            try:
                await self.store._fetch(SET_LANGUAGE, self.wanted)
            except (StoreError, asyncpg.PostgresError) as exc:
                raise ConfigurationError(
                    f"search_language {self.wanted!r} is not a text search configuration"
                    " of this database (SELECT cfgname FROM pg_ts_config)"
                ) from exc
        self.language = None
        await self._language()
        if self._indexing is None and await self.backlog():
            self._indexing = asyncio.create_task(self._index_existing())

    async def _index_existing(self) -> None:
        """Index the messages stored before search (or its language), a batch per call."""
        try:
            while (await self.store._fetch(INDEX_STEP, INDEX_CHATS))[0][0]:
                await asyncio.sleep(0)
        except StoreError as exc:
            # The next start (the store's next setup) resumes where this one stopped.
            _log.warning("indexing existing messages for search stopped: %s", exc)
