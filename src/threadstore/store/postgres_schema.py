"""PostgreSQL schema: numbered migrations and the statements the backend runs.

Migrations are append-only: never edit one that has shipped; add the next (a
``run_events`` table, say, is migration 2). Every statement takes placeholders
only; no value is ever formatted into SQL.

Column types: ``uuid`` ids, ``timestamptz`` times, ``bigint`` identity for the
message sequence. JSON goes where the database works on it as ``jsonb``: the
``extra`` document (patched in place with ``||``) and ``metadata`` (the field apps
filter on). Documents the database only stores and hands back (state, activity
content, content parts) are ``json``, which keeps them byte for byte: key order,
number spelling and ``\\u0000`` escapes survive, and nothing is converted on the way
in or out.
"""

from __future__ import annotations

from threadstore.store.sql import (
    CHAT_COLUMNS,
    MESSAGE_COLUMNS,
    REASONING_COLUMNS,
    RUN_COLUMNS,
    TOOL_CALL_COLUMNS,
)

__all__ = [
    "CHAT_COLUMNS",
    "MESSAGE_COLUMNS",
    "MIGRATIONS",
    "MIGRATION_LOCK_KEY",
    "REASONING_COLUMNS",
    "RUN_COLUMNS",
    "TOOL_CALL_COLUMNS",
]

MIGRATION_LOCK_KEY = 0x7468_7265_6164  # "thread" in ASCII
"""The advisory lock that serializes ``setup()`` across processes sharing a database."""

MIGRATIONS: list[str] = [
    # 1: chats, the message tree, tool calls, reasoning steps and runs.
    """
    CREATE TABLE chats (
        chat_uuid uuid PRIMARY KEY,
        user_uuid uuid NOT NULL,
        thread_id text NOT NULL,
        dedup_key text NOT NULL,
        name text,
        tenant_id text,
        app_id text,
        active_leaf_uuid uuid,
        has_branches boolean NOT NULL DEFAULT false,
        forked_from_chat_uuid uuid,
        forked_from_message_uuid uuid,
        state json,
        metadata jsonb,
        extra jsonb,
        format_version integer NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        UNIQUE (user_uuid, thread_id)
    );
    CREATE INDEX chats_by_user_activity ON chats (user_uuid, updated_at DESC, chat_uuid DESC);

    CREATE TABLE messages (
        seq bigint GENERATED ALWAYS AS IDENTITY,
        message_uuid uuid PRIMARY KEY,
        chat_uuid uuid NOT NULL REFERENCES chats (chat_uuid) ON DELETE CASCADE,
        parent_uuid uuid,
        agui_id text,
        role text NOT NULL,
        name text,
        content text NOT NULL,
        content_parts json,
        encrypted_value text,
        activity_type text,
        activity_content json,
        status text NOT NULL,
        in_progress boolean NOT NULL,
        step_name text,
        run_id text,
        metadata jsonb,
        extra jsonb,
        format_version integer NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        -- The last position handed to one of this message's tool calls or reasoning
        -- steps: incrementing it in place orders concurrent creates without a gap race.
        last_child_seq integer NOT NULL DEFAULT 0
    );
    CREATE INDEX messages_by_chat ON messages (chat_uuid, seq);
    CREATE INDEX messages_by_agui_id ON messages (chat_uuid, agui_id) WHERE agui_id IS NOT NULL;
    CREATE INDEX messages_by_run ON messages (chat_uuid, run_id) WHERE run_id IS NOT NULL;

    -- A new message becomes the end of the active branch; a parent other than the
    -- previous leaf means the chat now has branches (reads then walk the tree).
    CREATE FUNCTION threadstore_advance_leaf() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE chats
           SET has_branches = has_branches OR NEW.parent_uuid IS DISTINCT FROM active_leaf_uuid,
               active_leaf_uuid = NEW.message_uuid,
               updated_at = NEW.created_at
         WHERE chat_uuid = NEW.chat_uuid;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER messages_advance_leaf AFTER INSERT ON messages
        FOR EACH ROW EXECUTE FUNCTION threadstore_advance_leaf();

    CREATE TABLE tool_calls (
        uuid uuid PRIMARY KEY,
        message_uuid uuid NOT NULL REFERENCES messages (message_uuid) ON DELETE CASCADE,
        chat_uuid uuid NOT NULL,
        tool_call_id text NOT NULL,
        name text NOT NULL,
        arguments text NOT NULL,
        content text,
        result_message_id text,
        error text,
        status text NOT NULL,
        in_progress boolean NOT NULL,
        step_name text,
        seq integer NOT NULL,
        metadata jsonb,
        extra jsonb,
        format_version integer NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    );
    CREATE INDEX tool_calls_by_message ON tool_calls (message_uuid, tool_call_id);
    CREATE INDEX tool_calls_by_chat ON tool_calls (chat_uuid);

    CREATE TABLE reasonings (
        uuid uuid PRIMARY KEY,
        message_uuid uuid NOT NULL REFERENCES messages (message_uuid) ON DELETE CASCADE,
        chat_uuid uuid NOT NULL,
        agui_id text,
        name text,
        content text NOT NULL,
        encrypted_value text,
        status text NOT NULL,
        in_progress boolean NOT NULL,
        step_name text,
        seq integer NOT NULL,
        metadata jsonb,
        extra jsonb,
        format_version integer NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    );
    CREATE INDEX reasonings_by_message ON reasonings (message_uuid);
    CREATE INDEX reasonings_by_chat ON reasonings (chat_uuid);

    CREATE TABLE runs (
        chat_uuid uuid NOT NULL REFERENCES chats (chat_uuid) ON DELETE CASCADE,
        run_id text NOT NULL,
        thread_id text NOT NULL,
        parent_run_id text,
        status text NOT NULL,
        owner text,
        heartbeat_at timestamptz NOT NULL,
        error text,
        format_version integer NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        PRIMARY KEY (chat_uuid, run_id)
    );
    CREATE INDEX runs_by_heartbeat ON runs (heartbeat_at) WHERE status = 'running';
    """,
]

# --- migrations bookkeeping ------------------------------------------------------------------

MIGRATIONS_TABLE_EXISTS = "SELECT to_regclass('threadstore_migrations') IS NOT NULL"
CREATE_MIGRATIONS_TABLE = (
    "CREATE TABLE threadstore_migrations"
    " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)"
)
LOCK_MIGRATIONS = "SELECT pg_advisory_xact_lock($1)"
SCHEMA_VERSION = "SELECT COALESCE(MAX(version), 0) FROM threadstore_migrations"
RECORD_MIGRATION = "INSERT INTO threadstore_migrations (version, applied_at) VALUES ($1, $2)"

# --- selects ---------------------------------------------------------------------------------

CHAT_SELECT = "SELECT " + ", ".join(CHAT_COLUMNS) + " FROM chats"
MESSAGE_SELECT = "SELECT " + ", ".join(f"m.{c}" for c in MESSAGE_COLUMNS) + " FROM messages m"
TOOL_CALL_SELECT = "SELECT " + ", ".join(TOOL_CALL_COLUMNS) + " FROM tool_calls"
REASONING_SELECT = "SELECT " + ", ".join(REASONING_COLUMNS) + " FROM reasonings"
RUN_SELECT = "SELECT " + ", ".join(RUN_COLUMNS) + " FROM runs"

CHAT_RETURNING = " RETURNING " + ", ".join(CHAT_COLUMNS)
RUN_RETURNING = " RETURNING " + ", ".join(RUN_COLUMNS)

# The active branch of a chat: every message when it never branched (one index range
# scan; the tree walk below is then never evaluated), else the path from the active
# leaf to the root.
BRANCH_FILTER = (
    "m.chat_uuid = $1 AND (NOT (SELECT has_branches FROM chats WHERE chat_uuid = $1)"
    " OR m.message_uuid IN ("
    "  WITH RECURSIVE branch(uuid) AS ("
    "   SELECT active_leaf_uuid FROM chats WHERE chat_uuid = $1"
    "   UNION ALL SELECT p.parent_uuid FROM messages p JOIN branch b ON p.message_uuid = b.uuid"
    "   WHERE p.parent_uuid IS NOT NULL)"
    "  SELECT uuid FROM branch))"
)

LAST_MESSAGES = (
    MESSAGE_SELECT + " JOIN chats c ON c.active_leaf_uuid = m.message_uuid"
    " WHERE c.chat_uuid = ANY($1::uuid[])"
)

# --- chats -----------------------------------------------------------------------------------

INSERT_CHAT = (
    "INSERT INTO chats (chat_uuid, user_uuid, thread_id, dedup_key, name, tenant_id, app_id,"
    " forked_from_chat_uuid, forked_from_message_uuid, state, metadata, extra, format_version,"
    " created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,"
    " $14, $14)"
    # DO NOTHING takes no row lock: a repeat create then reads the existing chat.
    " ON CONFLICT (user_uuid, thread_id) DO NOTHING" + CHAT_RETURNING
)

# Moving the leaf anywhere but where it is means the history is no longer "every
# message of the chat", so reads start walking the tree.
SET_ACTIVE_LEAF = (
    "UPDATE chats SET has_branches = has_branches OR active_leaf_uuid IS DISTINCT FROM $2,"
    " active_leaf_uuid = $2, updated_at = $3"
    " WHERE chat_uuid = $1"
    " AND EXISTS (SELECT 1 FROM messages WHERE message_uuid = $2 AND chat_uuid = $1)"
    + CHAT_RETURNING
)

DELETE_CHAT = "DELETE FROM chats WHERE chat_uuid = $1" + CHAT_RETURNING

# --- messages --------------------------------------------------------------------------------

# One statement: lock the chat row (so concurrent appends chain one after another and
# a concurrent delete_chat either waits for this insert or makes it find no chat),
# check an explicit parent belongs to the chat, insert. No row back means the chat is
# gone, the parent is foreign, or the uuid is taken; nothing is ever upserted.
INSERT_MESSAGE = (
    "WITH chat AS (SELECT active_leaf_uuid FROM chats WHERE chat_uuid = $2 FOR NO KEY UPDATE)"
    " INSERT INTO messages (message_uuid, chat_uuid, parent_uuid, agui_id, role, name, content,"
    " content_parts, encrypted_value, activity_type, activity_content, status, in_progress,"
    " step_name, run_id, metadata, extra, format_version, created_at, updated_at)"
    " SELECT $1::uuid, $2::uuid, COALESCE($3::uuid, chat.active_leaf_uuid), $4::text,"
    " $5::text, $6::text, $7::text, $8::json, $9::text, $10::text, $11::json, $12::text,"
    " $13::boolean, $14::text, $15::text, $16::jsonb, $17::jsonb, $18::integer,"
    " $19::timestamptz, $19::timestamptz"
    " FROM chat WHERE $3::uuid IS NULL"
    " OR EXISTS (SELECT 1 FROM messages p WHERE p.message_uuid = $3 AND p.chat_uuid = $2)"
    " ON CONFLICT (message_uuid) DO NOTHING"
    " RETURNING seq, parent_uuid"
)

# Why an INSERT_MESSAGE returned nothing: (chat exists, uuid taken).
MESSAGE_INSERT_DIAGNOSIS = (
    "SELECT EXISTS (SELECT 1 FROM chats WHERE chat_uuid = $1),"
    " EXISTS (SELECT 1 FROM messages WHERE message_uuid = $2)"
)

# Tool calls and reasoning steps take the next position of their parent message by
# incrementing its counter: the row lock orders concurrent creates on one message.
_NEXT_CHILD = (
    "WITH parent AS (UPDATE messages SET last_child_seq = last_child_seq + 1"
    " WHERE message_uuid = $1 RETURNING chat_uuid, last_child_seq)"
)

INSERT_TOOL_CALL = (
    _NEXT_CHILD + " INSERT INTO tool_calls (uuid, message_uuid, chat_uuid, tool_call_id, name,"
    " arguments, content, result_message_id, error, status, in_progress, step_name, seq,"
    " metadata, extra, format_version, created_at, updated_at)"
    " SELECT $2::uuid, $1::uuid, parent.chat_uuid, $3::text, $4::text, $5::text, $6::text,"
    " $7::text, $8::text, $9::text, $10::boolean, $11::text, parent.last_child_seq,"
    " $12::jsonb, $13::jsonb, $14::integer, $15::timestamptz, $15::timestamptz FROM parent"
    " ON CONFLICT (uuid) DO NOTHING RETURNING seq"
)

INSERT_REASONING = (
    _NEXT_CHILD + " INSERT INTO reasonings (uuid, message_uuid, chat_uuid, agui_id, name,"
    " content, encrypted_value, status, in_progress, step_name, seq, metadata, extra,"
    " format_version, created_at, updated_at)"
    " SELECT $2::uuid, $1::uuid, parent.chat_uuid, $3::text, $4::text, $5::text, $6::text,"
    " $7::text, $8::boolean, $9::text, parent.last_child_seq, $10::jsonb, $11::jsonb,"
    " $12::integer, $13::timestamptz, $13::timestamptz FROM parent"
    " ON CONFLICT (uuid) DO NOTHING RETURNING seq"
)

MESSAGE_EXISTS = "SELECT EXISTS (SELECT 1 FROM messages WHERE message_uuid = $1)"

# --- runs ------------------------------------------------------------------------------------

INSERT_RUN = (
    "INSERT INTO runs (" + ", ".join(RUN_COLUMNS) + ")"
    " SELECT $1::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, $7::timestamptz,"
    " $8::text, $9::integer, $10::timestamptz, $11::timestamptz"
    " WHERE EXISTS (SELECT 1 FROM chats WHERE chat_uuid = $1)"
    " ON CONFLICT (chat_uuid, run_id) DO NOTHING" + RUN_RETURNING
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

# One statement, so a crash cannot leave a run half-finalized; only the records of
# this (chat, run) that are still in progress change.
FINALIZE_RUN_RECORDS = (
    "WITH run_messages AS ("
    "  SELECT message_uuid FROM messages WHERE chat_uuid = $3 AND run_id = $4),"
    " calls AS (UPDATE tool_calls SET status = $1, in_progress = false, updated_at = $2"
    "  WHERE in_progress AND message_uuid IN (SELECT message_uuid FROM run_messages)"
    "  RETURNING 1),"
    " steps AS (UPDATE reasonings SET status = $1, in_progress = false, updated_at = $2"
    "  WHERE in_progress AND message_uuid IN (SELECT message_uuid FROM run_messages)"
    "  RETURNING 1),"
    " own AS (UPDATE messages SET status = $1, in_progress = false, updated_at = $2"
    "  WHERE chat_uuid = $3 AND run_id = $4 AND in_progress RETURNING 1)"
    " SELECT (SELECT count(*) FROM calls) + (SELECT count(*) FROM steps)"
    " + (SELECT count(*) FROM own)"
)
