"""The statements the PostgreSQL backend runs, built once from the shared column tables.

Every statement takes placeholders only; no value is ever formatted into SQL.
"""

from __future__ import annotations

from collections.abc import Sequence

from threadstore.store._sql import (
    CHAT_COLUMNS,
    CHAT_INSERT,
    MESSAGE_COLUMNS,
    MESSAGE_INSERT,
    REASONING_COLUMNS,
    REASONING_INSERT,
    RUN_COLUMNS,
    RUN_INSERT,
    TOOL_CALL_COLUMNS,
    TOOL_CALL_INSERT,
    InsertColumns,
    Kind,
)

__all__ = [
    "CHAT_COLUMNS",
    "MESSAGE_COLUMNS",
    "MESSAGE_ROW",
    "REASONING_COLUMNS",
    "RUN_COLUMNS",
    "TOOL_CALL_COLUMNS",
]

# --- selects ---------------------------------------------------------------------------------

_TIMES = frozenset({"created_at", "updated_at"})
_UUIDS = frozenset({"uuid", "message_uuid", "chat_uuid", "parent_uuid"})
"""The uuid columns of a history's rows (messages, tool calls, reasoning steps)."""


def _select(
    columns: tuple[str, ...], table: str, alias: str, uuids: frozenset[str] = _UUIDS
) -> dict[bool, str]:
    """A SELECT of ``columns`` in two forms, by whether the session prints ISO/UTC text
    (``iso_times``); in that form the timestamps come back as text.

    asyncpg decodes a binary timestamptz through three Python objects; in a session
    printing ISO 8601 in UTC, the text form, parsed once per distinct value (a record
    never updated has ``updated_at == created_at``), costs a fraction of that, and
    timestamps were the larger part of decoding a long history.

    The ``uuids`` columns come back as text too (in any session): asyncpg decodes a
    uuid into an object the cyclic collector tracks, three per message row, all held
    until a long history's rows are read, and as many objects built on the event loop
    make the collector scan the whole process there; text is parsed once per distinct
    value, off the loop, and a row then holds no other tracked object.
    """
    # A UTC session prints the offset as "+00"; ":00" completes it to what every
    # ISO 8601 parser (pydantic's included) accepts.
    return {
        iso: "SELECT "
        + ", ".join(
            f"{alias}.{c}::text || ':00'"
            if iso and c in _TIMES
            else f"{alias}.{c}::text"
            if c in uuids
            else f"{alias}.{c}"
            for c in columns
        )
        + f" FROM {table} {alias}"
        for iso in (False, True)
    }


MESSAGE_ROW = (*MESSAGE_COLUMNS, "last_child_seq")
"""A message row as read: its columns, then whether it has tool calls or reasoning steps
(a read of messages without any skips the two statements that look for them)."""

CHAT_SELECT = _select(CHAT_COLUMNS, "chats", "c", uuids=frozenset())
MESSAGE_SELECT = _select(MESSAGE_ROW, "messages", "m")
TOOL_CALL_SELECT = _select(TOOL_CALL_COLUMNS, "tool_calls", "t")
REASONING_SELECT = _select(REASONING_COLUMNS, "reasonings", "r")
RUN_SELECT = "SELECT " + ", ".join(RUN_COLUMNS) + " FROM runs"

CHAT_RETURNING = " RETURNING " + ", ".join(CHAT_COLUMNS)
RUN_RETURNING = " RETURNING " + ", ".join(RUN_COLUMNS)

CHAT_IS_LIVE = (
    "NOT EXISTS (SELECT 1 FROM chats d WHERE d.chat_uuid = m.chat_uuid"
    " AND d.deleted_at IS NOT NULL)"
)
"""A message's chat is not soft-deleted."""

# The active branch of a chat: every message when it never branched (one index range
# scan; the tree walk below is then never evaluated), else the path from the active
# leaf to the root.
BRANCH_FILTER = (
    "m.chat_uuid = $1 AND "
    + CHAT_IS_LIVE
    + " AND (NOT (SELECT has_branches FROM chats WHERE chat_uuid = $1)"
    " OR m.message_uuid IN ("
    "  WITH RECURSIVE branch(uuid) AS ("
    "   SELECT active_leaf_uuid FROM chats WHERE chat_uuid = $1"
    "   UNION ALL SELECT p.parent_uuid FROM messages p JOIN branch b ON p.message_uuid = b.uuid"
    "   WHERE p.parent_uuid IS NOT NULL)"
    "  SELECT uuid FROM branch))"
)

LAST_MESSAGES = (
    " JOIN chats c ON c.active_leaf_uuid = m.message_uuid WHERE c.chat_uuid = ANY($1::uuid[])"
    " AND c.deleted_at IS NULL"
)

# --- inserts: column lists and parameters from the field-to-column tables of store/_sql.py ---

_TYPES = {
    Kind.PLAIN: "text",
    Kind.INT: "integer",
    Kind.DOC: "jsonb",
    Kind.UUID: "uuid",
    Kind.TIME: "timestamptz",
    Kind.BOOL: "boolean",
    Kind.JSON: "json",
    Kind.METADATA: "jsonb",
    Kind.PARTS: "json",
}


def _param(columns: InsertColumns, name: str) -> str:
    return f"${columns.position(name)}"


def _typed(columns: InsertColumns, **instead: str) -> str:
    """``$1::uuid, $2::text, ...`` for ``columns`` (an INSERT ... SELECT types nothing itself)."""
    return ", ".join(
        instead.get(name, f"${i}::{_TYPES[kind]}")
        for i, (name, kind) in enumerate(zip(columns.names, columns.kinds, strict=True), 1)
    )


# --- chats -----------------------------------------------------------------------------------

INSERT_CHAT = (
    f"INSERT INTO chats ({CHAT_INSERT.listed}, updated_at)"
    f" VALUES ({', '.join(f'${i}' for i in range(1, len(CHAT_INSERT.names) + 1))},"
    f" {_param(CHAT_INSERT, 'created_at')})"
    # DO NOTHING takes no row lock: a repeat create then reads the existing chat.
    " ON CONFLICT (user_uuid, thread_id) DO NOTHING" + CHAT_RETURNING
)

# Moving the leaf anywhere but where it is means the history is no longer "every
# message of the chat", so reads start walking the tree.
SET_ACTIVE_LEAF = (
    "UPDATE chats SET has_branches = has_branches OR active_leaf_uuid IS DISTINCT FROM $2,"
    " active_leaf_uuid = $2, leaf_parent_uuid = leaf.parent_uuid, updated_at = $3,"
    " version = nextval('chat_versions')"
    " FROM (SELECT parent_uuid FROM messages WHERE message_uuid = $2 AND chat_uuid = $1) leaf"
    " WHERE chat_uuid = $1" + CHAT_RETURNING
)

SELECT_TREE = (
    "SELECT message_uuid, parent_uuid, role, seq, agui_id, run_id FROM messages"
    " WHERE chat_uuid = $1 ORDER BY seq"
)

# The messages sharing a parent with one of $2, none for a chat that never branched.
SELECT_SIBLINGS = """
WITH wanted AS (
    SELECT parent_uuid FROM messages WHERE chat_uuid = $1 AND message_uuid = ANY($2::uuid[])
)
SELECT message_uuid, parent_uuid, role, seq, agui_id, run_id FROM messages
WHERE chat_uuid = $1
  AND (SELECT has_branches FROM chats WHERE chat_uuid = $1)
  AND (parent_uuid IN (SELECT parent_uuid FROM wanted WHERE parent_uuid IS NOT NULL)
       OR (parent_uuid IS NULL AND EXISTS (SELECT 1 FROM wanted WHERE parent_uuid IS NULL)))
ORDER BY seq
"""

# A new root (the edit of a first message): detached from the leaf it was appended to,
# so reads walk the tree from now on, and the history version changes.
MAKE_ROOT = (
    "WITH detached AS (UPDATE messages SET parent_uuid = NULL"
    " WHERE message_uuid = $2 AND chat_uuid = $1 RETURNING message_uuid)"
    " UPDATE chats SET has_branches = true, leaf_parent_uuid = NULL,"
    " version = nextval('chat_versions')"
    " FROM detached WHERE chat_uuid = $1"
)

DELETE_CHAT = "DELETE FROM chats WHERE chat_uuid = $1" + CHAT_RETURNING
PURGE_DELETED_THREAD = (
    "DELETE FROM chats WHERE user_uuid = $1 AND thread_id = $2 AND deleted_at IS NOT NULL"
)

# --- messages --------------------------------------------------------------------------------

# One statement, no trigger. The UPDATE moves the chat's leaf to the new message and
# stamps its activity; waiting on the chat's row lock, it reads the latest leaf, so
# concurrent appends chain one after another, and a concurrent delete_chat either
# waits for this append or leaves it no chat to update. It also checks an explicit
# parent belongs to the chat and the uuid is free. The INSERT then writes only if the
# UPDATE did: no row back means the chat is gone, the parent is foreign or the uuid is
# taken. Nothing is ever upserted.
_M = {name: _param(MESSAGE_INSERT, name) for name in MESSAGE_INSERT.names}
INSERT_MESSAGE = (
    "WITH chat AS (UPDATE chats SET"
    " has_branches = has_branches"
    " OR ({parent_uuid}::uuid IS NOT NULL AND {parent_uuid} IS DISTINCT FROM active_leaf_uuid),"
    " leaf_parent_uuid = COALESCE({parent_uuid}, active_leaf_uuid),"
    " active_leaf_uuid = {message_uuid}, updated_at = {created_at},"
    " version = nextval('chat_versions')"
    " WHERE chat_uuid = {chat_uuid}"
    " AND NOT EXISTS (SELECT 1 FROM messages WHERE message_uuid = {message_uuid})"
    " AND ({parent_uuid}::uuid IS NULL OR EXISTS (SELECT 1 FROM messages p"
    " WHERE p.message_uuid = {parent_uuid} AND p.chat_uuid = {chat_uuid}))"
    " RETURNING leaf_parent_uuid)"
).format(**_M) + (
    f" INSERT INTO messages ({MESSAGE_INSERT.listed}, updated_at)"
    f" SELECT {_typed(MESSAGE_INSERT, parent_uuid='chat.leaf_parent_uuid')},"
    f" {_M['created_at']}::timestamptz FROM chat"
    " RETURNING seq, parent_uuid"
)

# Why an INSERT_MESSAGE returned nothing: (chat exists, uuid taken).
MESSAGE_INSERT_DIAGNOSIS = (
    "SELECT EXISTS (SELECT 1 FROM chats WHERE chat_uuid = $1),"
    " EXISTS (SELECT 1 FROM messages WHERE message_uuid = $2)"
)

# Every write to a chat's history first moves the chat's version, which also takes the
# chat's row lock, then locks its record: always in that order (delete_chat's cascade
# too), so two writers never wait on each other crosswise.
_BUMP_CHAT_OF = (
    "chat AS (UPDATE chats SET version = nextval('chat_versions')"
    " WHERE chat_uuid = (SELECT chat_uuid FROM {table} WHERE {key} = {param})"
    " RETURNING chat_uuid)"
)

# Tool calls and reasoning steps take the next position of their parent message by
# incrementing its counter: the row lock orders concurrent creates on one message.
_NEXT_CHILD = (
    "WITH "
    + _BUMP_CHAT_OF.format(table="messages", key="message_uuid", param="$1")
    + ", parent AS (UPDATE messages SET last_child_seq = last_child_seq + 1"
    " WHERE message_uuid = $1 AND chat_uuid IN (SELECT chat_uuid FROM chat)"
    " RETURNING chat_uuid, last_child_seq)"
)


def _child_insert(table: str, columns: InsertColumns) -> str:
    """A tool call's or reasoning step's insert: the chat and ``seq`` from its parent."""
    assert columns.names[0] == "message_uuid"  # _NEXT_CHILD's $1
    return (
        f"{_NEXT_CHILD} INSERT INTO {table} ({columns.listed}, chat_uuid, seq, updated_at)"
        f" SELECT {_typed(columns)}, parent.chat_uuid, parent.last_child_seq,"
        f" {_param(columns, 'created_at')}::timestamptz FROM parent"
        " ON CONFLICT (uuid) DO NOTHING RETURNING seq"
    )


INSERT_TOOL_CALL = _child_insert("tool_calls", TOOL_CALL_INSERT)
INSERT_REASONING = _child_insert("reasonings", REASONING_INSERT)

MESSAGE_EXISTS = "SELECT EXISTS (SELECT 1 FROM messages WHERE message_uuid = $1)"

# --- runs ------------------------------------------------------------------------------------

INSERT_RUN = (
    f"INSERT INTO runs ({RUN_INSERT.listed}) SELECT {_typed(RUN_INSERT)}"
    f" WHERE EXISTS (SELECT 1 FROM chats WHERE chat_uuid = {_param(RUN_INSERT, 'chat_uuid')})"
    " ON CONFLICT (chat_uuid, run_id) DO NOTHING" + RUN_RETURNING
)

ONE_RUNNING_RUN = "runs_one_running_per_chat"
"""The unique index over running runs: one per chat."""

RUNNING_RUN_OF_CHAT = (
    "SELECT run_id FROM runs WHERE chat_uuid = $1 AND status = 'running' AND exclusive"
)

HEARTBEAT_RUNS = (
    "UPDATE runs SET heartbeat_at = $1 WHERE owner = $2 AND status = 'running'"
    " AND (chat_uuid, run_id) IN (SELECT * FROM unnest($3::uuid[], $4::text[]))"
)

FINISH_RUN = (
    "UPDATE runs SET status = $1, error = $2, updated_at = $3"
    " WHERE chat_uuid = $4 AND run_id = $5" + RUN_RETURNING
)

STALE_RUNS = RUN_SELECT + " WHERE status = 'running' AND heartbeat_at < $1 ORDER BY heartbeat_at"
BY_RUN_KEY = " WHERE chat_uuid = $1 AND run_id = $2"
# The chat's running runs and its run $2, whatever that one's status.
RUNS_FOR_START = (
    RUN_SELECT
    + " WHERE chat_uuid = $1 AND (status = 'running' OR run_id = $2) ORDER BY heartbeat_at"
)
# $2 NULL: every running run of the chat, whatever its heartbeat.
RUNNING_RUNS_OF_CHAT = (
    RUN_SELECT
    + " WHERE chat_uuid = $1 AND status = 'running'"
    + " AND ($2::timestamptz IS NULL OR heartbeat_at < $2) ORDER BY heartbeat_at"
)

# One statement, so a crash cannot leave a run half-finalized; only the records of
# this (chat, run) still in progress change, found through the run's own messages.
FINALIZE_RUN_RECORDS = (
    "WITH chat AS (UPDATE chats SET version = nextval('chat_versions') WHERE chat_uuid = $3"
    "  RETURNING chat_uuid),"
    " calls AS (UPDATE tool_calls t SET status = $1, in_progress = false, updated_at = $2"
    "  WHERE t.in_progress AND EXISTS (SELECT 1 FROM chat) AND t.message_uuid IN"
    "  (SELECT message_uuid FROM messages WHERE chat_uuid = $3 AND run_id = $4)"
    "  RETURNING 1),"
    " steps AS (UPDATE reasonings r SET status = $1, in_progress = false, updated_at = $2"
    "  WHERE r.in_progress AND EXISTS (SELECT 1 FROM chat) AND r.message_uuid IN"
    "  (SELECT message_uuid FROM messages WHERE chat_uuid = $3 AND run_id = $4)"
    "  RETURNING 1),"
    " own AS (UPDATE messages SET status = $1, in_progress = false, updated_at = $2"
    "  WHERE chat_uuid = $3 AND run_id = $4 AND in_progress AND EXISTS (SELECT 1 FROM chat)"
    "  RETURNING 1)"
    " SELECT (SELECT count(*) FROM calls) + (SELECT count(*) FROM steps)"
    " + (SELECT count(*) FROM own)"
)

CHAT_VERSION = (
    "SELECT version, active_leaf_uuid FROM chats WHERE chat_uuid = $1 AND deleted_at IS NULL"
)

# The messages written after a chat version, or whose tool calls or reasoning were.
CHANGED_SINCE = (
    " WHERE m.message_uuid IN ("
    " SELECT message_uuid FROM messages WHERE chat_uuid = $1 AND chat_version > $2"
    " UNION SELECT message_uuid FROM tool_calls WHERE chat_uuid = $1 AND chat_version > $2"
    " UNION SELECT message_uuid FROM reasonings WHERE chat_uuid = $1 AND chat_version > $2)"
    " ORDER BY m.seq"
)


def versioned_update(
    table: str, key: str, assignments: str, param: str, columns: Sequence[str]
) -> str:
    """An UPDATE of the ``table`` row whose ``key`` is ``param``, returning ``columns``.

    It first moves the version of the record's chat (see ``_BUMP_CHAT_OF``); a record
    whose chat is gone is not updated.
    """
    return (
        "WITH "
        + _BUMP_CHAT_OF.format(table=table, key=key, param=param)
        + f" UPDATE {table} SET {assignments} WHERE {key} = {param}"
        f" AND chat_uuid IN (SELECT chat_uuid FROM chat) RETURNING {', '.join(columns)}"
    )
