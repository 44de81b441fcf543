"""The SQL of the SQLite backend's statements, and how its values are written.

Module constants with placeholders only, built once from the column lists both SQL
backends share (``_sql.py``); the store (``sqlite.py``) picks them per primitive.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from threadstore.store._queries import TreeNode
from threadstore.store._sql import (
    CHAT_COLUMNS,
    CHAT_INSERT,
    JSON_ENCODERS,
    MESSAGE_COLUMNS,
    MESSAGE_INSERT,
    REASONING_COLUMNS,
    REASONING_INSERT,
    RUN_COLUMNS,
    RUN_INSERT,
    TOOL_CALL_COLUMNS,
    TOOL_CALL_INSERT,
    Encoder,
    InsertColumns,
    InsertPlans,
    Kind,
)

__all__ = [
    "BRANCH_FILTER",
    "CHANGED_SELECT",
    "CHAT_FIELD_SET",
    "CHAT_IS_LIVE",
    "CHAT_SELECT",
    "CREATED",
    "ENCODERS",
    "INSERT_CHAT",
    "INSERT_MESSAGE",
    "INSERT_REASONING",
    "INSERT_RUN",
    "INSERT_TOOL_CALL",
    "MESSAGE_SELECT",
    "NEXT_CHILD_SEQ",
    "ONE_RUNNING_RUN",
    "PLANS",
    "REASONING_SELECT",
    "RUN_SELECT",
    "SELECT_SIBLINGS",
    "TOOL_CALL_SELECT",
    "UNRETURNED",
    "key_param",
    "tree_nodes",
    "ts",
]


CHAT_SELECT = "SELECT " + ", ".join(CHAT_COLUMNS) + " FROM chats"
SELECT_SIBLINGS = """
WITH wanted(parent) AS (
    SELECT parent_uuid FROM messages
    WHERE chat_uuid = ?1 AND message_uuid IN (SELECT value FROM json_each(?2))
)
SELECT message_uuid, parent_uuid, role, seq, agui_id, run_id FROM messages
WHERE chat_uuid = ?1
  AND (SELECT has_branches FROM chats WHERE chat_uuid = ?1)
  AND (parent_uuid IN (SELECT parent FROM wanted)
       OR (parent_uuid IS NULL AND EXISTS (SELECT 1 FROM wanted WHERE parent IS NULL)))
ORDER BY seq
"""
"""The messages sharing a parent with one of a list of messages (``_select_siblings``)."""

MESSAGE_SELECT = "SELECT " + ", ".join(f"m.{c}" for c in MESSAGE_COLUMNS) + " FROM messages m"
TOOL_CALL_SELECT = "SELECT " + ", ".join(TOOL_CALL_COLUMNS) + " FROM tool_calls"
REASONING_SELECT = "SELECT " + ", ".join(REASONING_COLUMNS) + " FROM reasonings"
RUN_SELECT = "SELECT " + ", ".join(RUN_COLUMNS) + " FROM runs"


def _numbered(columns: InsertColumns, **instead: str) -> str:
    """``?1, ?2, ...`` for ``columns``, with an expression ``instead`` of some of them."""
    return ", ".join(instead.get(name, f"?{i}") for i, name in enumerate(columns.names, 1))


CREATED = {
    table: f"?{columns.position('created_at')}"
    for table, columns in (
        ("chats", CHAT_INSERT),
        ("messages", MESSAGE_INSERT),
        ("tool_calls", TOOL_CALL_INSERT),
        ("reasonings", REASONING_INSERT),
    )
}

INSERT_CHAT = (
    f"INSERT INTO chats ({CHAT_INSERT.listed}, updated_at, version)"
    f" VALUES ({_numbered(CHAT_INSERT)}, {CREATED['chats']}, ?{len(CHAT_INSERT.names) + 1})"
    # A no-op update makes RETURNING yield the existing row when (user, thread) exists;
    # a soft-deleted one yields nothing (create_chat then purges it).
    " ON CONFLICT (user_uuid, thread_id) DO UPDATE SET thread_id = excluded.thread_id"
    " WHERE chats.deleted_at IS NULL"
    " RETURNING " + ", ".join(CHAT_COLUMNS)
)

INSERT_MESSAGE = (
    f"INSERT INTO messages ({MESSAGE_INSERT.listed}, updated_at, chat_version) VALUES ("
    + _numbered(
        MESSAGE_INSERT,
        # No parent given: the chat's active leaf.
        parent_uuid="COALESCE(?3, (SELECT active_leaf_uuid FROM chats WHERE chat_uuid = ?2))",
    )
    # The chat's version once the insert's trigger has moved it on (schema migration 10).
    + f", {CREATED['messages']}, (SELECT version + 1 FROM chats WHERE chat_uuid = ?2))"
    " RETURNING seq, parent_uuid"
)
assert MESSAGE_INSERT.names[1:3] == ("chat_uuid", "parent_uuid")

# The next position among a message's tool calls and reasoning steps, so the order
# in which they were produced survives across the two tables.
NEXT_CHILD_SEQ = (
    "(SELECT COALESCE(MAX(seq), 0) + 1 FROM ("
    " SELECT seq FROM tool_calls WHERE message_uuid = ?1"
    " UNION ALL SELECT seq FROM reasonings WHERE message_uuid = ?1))"
)


def _child_insert_sql(table: str, columns: InsertColumns) -> str:
    """A tool call's or reasoning step's insert: its chat from the parent, the next ``seq``."""
    assert columns.names[0] == "message_uuid"
    return (
        f"INSERT INTO {table} ({columns.listed}, chat_uuid, seq, updated_at)"
        f" SELECT {_numbered(columns)}, m.chat_uuid, {NEXT_CHILD_SEQ}, {CREATED[table]}"
        " FROM messages m WHERE m.message_uuid = ?1 RETURNING seq"
    )


INSERT_TOOL_CALL = _child_insert_sql("tool_calls", TOOL_CALL_INSERT)
INSERT_REASONING = _child_insert_sql("reasonings", REASONING_INSERT)

INSERT_RUN = (
    f"INSERT INTO runs ({RUN_INSERT.listed}) VALUES ({_numbered(RUN_INSERT)})"
    " ON CONFLICT (chat_uuid, run_id) DO UPDATE SET run_id = excluded.run_id"
    " RETURNING " + ", ".join(RUN_COLUMNS)
)

# How SQLite names a violation of the index runs_one_running_per_chat.
ONE_RUNNING_RUN = "UNIQUE constraint failed: runs.chat_uuid"

# The creates of a batch, whose results nobody reads: without RETURNING, SQLite need
# not collect the new rows (about 3.5 µs a statement).
UNRETURNED = {
    sql: sql.partition(" RETURNING ")[0]
    for sql in (INSERT_MESSAGE, INSERT_TOOL_CALL, INSERT_REASONING)
}

# The messages written after a chat version, or whose tool calls or reasoning were.
CHANGED_SELECT = (
    MESSAGE_SELECT + " WHERE m.message_uuid IN ("
    " SELECT message_uuid FROM messages WHERE chat_uuid = ?1 AND chat_version > ?2"
    " UNION SELECT message_uuid FROM tool_calls WHERE chat_uuid = ?1 AND chat_version > ?2"
    " UNION SELECT message_uuid FROM reasonings WHERE chat_uuid = ?1 AND chat_version > ?2)"
    " ORDER BY m.seq"
)

# The active branch of a chat that has branches: the path from the active leaf to the
# root. A chat that never branched reads every message instead (one index range scan).
BRANCH_FILTER = (
    "m.chat_uuid = ?1 AND m.message_uuid IN ("
    " WITH RECURSIVE branch(uuid) AS ("
    "  SELECT active_leaf_uuid FROM chats WHERE chat_uuid = ?1"
    "  UNION ALL SELECT p.parent_uuid FROM messages p JOIN branch b ON p.message_uuid = b.uuid"
    "  WHERE p.parent_uuid IS NOT NULL)"
    " SELECT uuid FROM branch)"
)


CHAT_IS_LIVE = (
    "NOT EXISTS (SELECT 1 FROM chats c WHERE c.chat_uuid = m.chat_uuid"
    " AND c.deleted_at IS NOT NULL)"
)
"""A message's chat is not soft-deleted."""


def ts(value: datetime) -> str:
    """Store times as fixed-width UTC ISO text so they sort as text."""
    return value.isoformat(timespec="microseconds")


def key_param(value: Any) -> Any:
    """A key value as SQLite takes it (uuids as text)."""
    return str(value) if isinstance(value, UUID) else value


ENCODERS: dict[Kind, Encoder] = {**JSON_ENCODERS, Kind.UUID: str, Kind.TIME: ts, Kind.BOOL: int}
PLANS = InsertPlans(ENCODERS)


CHAT_FIELD_SET = {"name": "name = ?", "state": "state = ?", "metadata": "metadata = ?"}
"""The assignment of each directly set chat field (column names are only taken from here)."""


def tree_nodes(rows: list[Any]) -> list[TreeNode]:
    """Tree nodes of the rows of a tree read."""
    return [
        TreeNode(UUID(uuid), None if parent is None else UUID(parent), role, seq, agui, run)
        for uuid, parent, role, seq, agui, run in rows
    ]
