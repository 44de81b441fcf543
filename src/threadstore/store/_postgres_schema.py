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
    CREATE SEQUENCE chat_versions;

    CREATE TABLE chats (
        chat_uuid uuid PRIMARY KEY,
        user_uuid uuid NOT NULL,
        thread_id text NOT NULL,
        dedup_key text NOT NULL,
        name text,
        tenant_id text,
        app_id text,
        active_leaf_uuid uuid,
        -- The parent of the active leaf: an append learns its own parent from the same
        -- UPDATE that makes it the leaf (RETURNING shows new values only).
        leaf_parent_uuid uuid,
        has_branches boolean NOT NULL DEFAULT false,
        -- Set from chat_versions by every statement that changes the chat's messages,
        -- tool calls or reasoning, in that statement's transaction: a history read at
        -- one version is exact while the chat still has it, in every process, and a
        -- deleted and re-created chat never meets an old version again.
        version bigint NOT NULL DEFAULT nextval('chat_versions'),
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
    -- Finalizing a run only looks for its records still in progress; a record written
    -- complete (most user messages) costs no entry here.
    CREATE INDEX messages_in_progress ON messages (chat_uuid, run_id) WHERE in_progress;

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
    CREATE INDEX tool_calls_in_progress ON tool_calls (chat_uuid) WHERE in_progress;

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
    CREATE INDEX reasonings_in_progress ON reasonings (chat_uuid) WHERE in_progress;

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
    # 2: the relay of live runs' events, so another process can resume them; runs found
    # by thread (what a client names when it reconnects or cancels).
    """
    CREATE TABLE run_events (
        chat_uuid uuid NOT NULL REFERENCES chats (chat_uuid) ON DELETE CASCADE,
        run_id text NOT NULL,
        event_id integer NOT NULL,
        event json NOT NULL,
        created_at timestamptz NOT NULL,
        PRIMARY KEY (chat_uuid, run_id, event_id)
    );
    CREATE INDEX run_events_by_age ON run_events (created_at);
    CREATE INDEX runs_by_thread ON runs (thread_id, run_id);
    """,
    # Soft delete: a chat with a deleted_at is hidden from every read until restored or
    # purged by a sweep once its retention has passed.
    """
    ALTER TABLE chats ADD COLUMN deleted_at timestamptz;
    CREATE INDEX chats_soft_deleted ON chats (deleted_at) WHERE deleted_at IS NOT NULL;
    """,
    # Reasoning nests in the assistant message of its turn. Versions before it stored each
    # streamed reasoning block as a message of role 'reasoning' holding one step (no text
    # of its own). Each such message folds into the assistant message that follows it in
    # the same run when that is its only child and it is no chat's leaf (a chain of such
    # messages folds into the message the chain ends at); else it stays, as an assistant
    # message holding only reasoning. Steps keep their order ahead of the holder's own
    # records; every pointer at a removed message moves to its holder.
    """
    CREATE TEMPORARY TABLE reasoning_fold_next ON COMMIT DROP AS
    SELECT m.message_uuid AS uuid, (
        SELECT c.message_uuid FROM messages c
         WHERE c.parent_uuid = m.message_uuid AND c.chat_uuid = m.chat_uuid
           AND c.run_id IS NOT DISTINCT FROM m.run_id
           AND c.metadata -> 'subagent_run_id' IS NOT DISTINCT FROM m.metadata -> 'subagent_run_id'
           AND (c.role = 'assistant' OR (c.role = 'reasoning' AND c.content = ''
                AND c.encrypted_value IS NULL
                AND EXISTS (SELECT 1 FROM reasonings r WHERE r.message_uuid = c.message_uuid)))
           AND (SELECT count(*) FROM messages s WHERE s.parent_uuid = m.message_uuid) = 1
           AND NOT EXISTS (SELECT 1 FROM chats h WHERE h.active_leaf_uuid = m.message_uuid)
    ) AS next
      FROM messages m
     WHERE m.role = 'reasoning' AND m.content = '' AND m.encrypted_value IS NULL
       AND EXISTS (SELECT 1 FROM reasonings r WHERE r.message_uuid = m.message_uuid);

    CREATE TEMPORARY TABLE reasoning_fold ON COMMIT DROP AS
    WITH RECURSIVE walk (uuid, cur) AS (
        SELECT uuid, uuid FROM reasoning_fold_next
        UNION ALL
        SELECT w.uuid, n.next FROM walk w JOIN reasoning_fold_next n ON n.uuid = w.cur
         WHERE n.next IS NOT NULL
    )
    SELECT w.uuid, w.cur AS holder FROM walk w
     WHERE NOT EXISTS (SELECT 1 FROM reasoning_fold_next n
                        WHERE n.uuid = w.cur AND n.next IS NOT NULL);

    -- The folded messages' records, numbered in the order they streamed.
    CREATE TEMPORARY TABLE reasoning_fold_child ON COMMIT DROP AS
    SELECT kind, uuid, holder,
           row_number() OVER (PARTITION BY holder ORDER BY message_seq, child_seq, kind) AS seq
      FROM (SELECT 'r' AS kind, r.uuid, f.holder, m.seq AS message_seq, r.seq AS child_seq
              FROM reasonings r JOIN reasoning_fold f ON f.uuid = r.message_uuid
              JOIN messages m ON m.message_uuid = r.message_uuid
            UNION ALL
            SELECT 't', t.uuid, f.holder, m.seq, t.seq
              FROM tool_calls t JOIN reasoning_fold f ON f.uuid = t.message_uuid
              JOIN messages m ON m.message_uuid = t.message_uuid) AS children;

    -- A holder's own records come after the reasoning that preceded it.
    UPDATE reasonings r SET seq = r.seq + n.moved
      FROM (SELECT holder, count(*) AS moved FROM reasoning_fold_child GROUP BY holder) n
     WHERE r.message_uuid = n.holder
       AND r.message_uuid NOT IN (SELECT uuid FROM reasoning_fold);
    UPDATE tool_calls t SET seq = t.seq + n.moved
      FROM (SELECT holder, count(*) AS moved FROM reasoning_fold_child GROUP BY holder) n
     WHERE t.message_uuid = n.holder
       AND t.message_uuid NOT IN (SELECT uuid FROM reasoning_fold);
    UPDATE reasonings r SET message_uuid = c.holder, seq = c.seq
      FROM reasoning_fold_child c WHERE c.kind = 'r' AND c.uuid = r.uuid;
    UPDATE tool_calls t SET message_uuid = c.holder, seq = c.seq
      FROM reasoning_fold_child c WHERE c.kind = 't' AND c.uuid = t.uuid;
    UPDATE messages m SET last_child_seq = (
        SELECT COALESCE(max(seq), 0) FROM (
            SELECT seq FROM reasonings WHERE message_uuid = m.message_uuid
            UNION ALL SELECT seq FROM tool_calls WHERE message_uuid = m.message_uuid) AS s)
     WHERE m.message_uuid IN (SELECT holder FROM reasoning_fold);

    -- The holder takes the place of the first message folded into it.
    UPDATE messages h SET parent_uuid = (
        SELECT m.parent_uuid FROM messages m JOIN reasoning_fold f ON f.uuid = m.message_uuid
         WHERE f.holder = h.message_uuid AND f.uuid <> f.holder
         ORDER BY m.seq LIMIT 1)
     WHERE h.message_uuid IN (SELECT holder FROM reasoning_fold WHERE uuid <> holder);
    UPDATE messages m SET parent_uuid = f.holder
      FROM reasoning_fold f WHERE f.uuid = m.parent_uuid AND f.uuid <> f.holder;
    UPDATE chats c SET active_leaf_uuid = f.holder
      FROM reasoning_fold f WHERE f.uuid = c.active_leaf_uuid AND f.uuid <> f.holder;
    UPDATE chats c SET forked_from_message_uuid = f.holder
      FROM reasoning_fold f WHERE f.uuid = c.forked_from_message_uuid AND f.uuid <> f.holder;
    DELETE FROM messages WHERE message_uuid IN (SELECT uuid FROM reasoning_fold
                                                 WHERE uuid <> holder);
    -- A holder left without an answer is an assistant message that names no AG-UI id
    -- of its own (its steps carry it), as the fold writes one today.
    UPDATE messages SET role = 'assistant', agui_id = NULL
     WHERE message_uuid IN (SELECT holder FROM reasoning_fold) AND role = 'reasoning';
    -- The leaf's parent as an append reads it, and a new version for every chat changed.
    UPDATE chats c SET leaf_parent_uuid = m.parent_uuid, version = nextval('chat_versions')
      FROM messages m
     WHERE m.message_uuid = c.active_leaf_uuid
       AND c.chat_uuid IN (SELECT m2.chat_uuid FROM messages m2 JOIN reasoning_fold f
                            ON f.holder = m2.message_uuid);
    """,
    # Message.error has a column; versions before it kept the text in metadata["error"].
    """
    ALTER TABLE messages ADD COLUMN error text;
    UPDATE messages SET error = metadata ->> 'error', metadata = metadata - 'error'
     WHERE jsonb_typeof(metadata -> 'error') = 'string';
    """,
    # One running run per chat that continues the chat's leaf (an exclusive run), enforced
    # here so two processes cannot both start one. Runs that branch (regenerate, edit)
    # hang their messages under their own branch point and may run beside it. Runs
    # left running together before (a crashed owner's, say) keep running; all but the
    # newest count as not exclusive, and end as their owner or a sweep ends them.
    """
    ALTER TABLE runs ADD COLUMN exclusive boolean NOT NULL DEFAULT true;
    UPDATE runs r SET exclusive = false
     WHERE r.status = 'running' AND EXISTS (
           SELECT 1 FROM runs n WHERE n.chat_uuid = r.chat_uuid AND n.status = 'running'
              AND (n.heartbeat_at, n.created_at, n.run_id)
                  > (r.heartbeat_at, r.created_at, r.run_id));
    CREATE UNIQUE INDEX runs_one_running_per_chat ON runs (chat_uuid)
     WHERE status = 'running' AND exclusive;
    """,
    # Incremental histories: every message, tool call and reasoning row records a chat
    # version drawn when it was last written, after its statement moved the chat's
    # version (and took the chat's row lock), so it is above every version committed
    # before it: a history kept at version V is brought up to date by reading only the
    # rows whose chat_version is above V.
    """
    ALTER TABLE messages ADD COLUMN chat_version bigint;
    ALTER TABLE tool_calls ADD COLUMN chat_version bigint;
    ALTER TABLE reasonings ADD COLUMN chat_version bigint;
    CREATE INDEX messages_by_change ON messages (chat_uuid, chat_version);
    CREATE INDEX tool_calls_by_change ON tool_calls (chat_uuid, chat_version);
    CREATE INDEX reasonings_by_change ON reasonings (chat_uuid, chat_version);
    -- Finalizing a run looks only at the run's own messages and their children.
    CREATE INDEX messages_of_run ON messages (chat_uuid, run_id);
    CREATE FUNCTION threadstore_stamp_chat_version() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.chat_version := nextval('chat_versions');
        RETURN NEW;
    END
    $$;
    CREATE TRIGGER messages_stamp_chat_version BEFORE INSERT OR UPDATE ON messages
        FOR EACH ROW EXECUTE FUNCTION threadstore_stamp_chat_version();
    CREATE TRIGGER tool_calls_stamp_chat_version BEFORE INSERT OR UPDATE ON tool_calls
        FOR EACH ROW EXECUTE FUNCTION threadstore_stamp_chat_version();
    CREATE TRIGGER reasonings_stamp_chat_version BEFORE INSERT OR UPDATE ON reasonings
        FOR EACH ROW EXECUTE FUNCTION threadstore_stamp_chat_version();
    """,
    # Non-destructive compaction: a summary stands for a span of a chat's active branch in
    # what agents are given; the messages stay as they are. Found by chat, newest first.
    """
    CREATE TABLE summaries (
        summary_uuid uuid PRIMARY KEY,
        chat_uuid uuid NOT NULL REFERENCES chats (chat_uuid) ON DELETE CASCADE,
        first_message_uuid uuid NOT NULL,
        last_message_uuid uuid NOT NULL,
        last_seq bigint NOT NULL,
        message_count integer NOT NULL,
        content text NOT NULL,
        summarizer text,
        metadata jsonb,
        format_version integer NOT NULL,
        created_at timestamptz NOT NULL
    );
    CREATE INDEX summaries_by_chat ON summaries (chat_uuid, created_at);
    """,
    # Erasure: a user forgotten is tombstoned (no chat of theirs can be created again, so a
    # run still flushing writes nothing back), and a receipt of what went is kept, with
    # counts only.
    """
    CREATE TABLE erased_users (
        user_uuid uuid PRIMARY KEY,
        erased_at timestamptz NOT NULL
    );
    CREATE FUNCTION threadstore_refuse_erased_user() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM erased_users WHERE user_uuid = NEW.user_uuid) THEN
            RAISE EXCEPTION 'threadstore: this user was erased' USING ERRCODE = 'TS001';
        END IF;
        RETURN NEW;
    END
    $$;
    CREATE TRIGGER chats_refuse_erased_user BEFORE INSERT ON chats
        FOR EACH ROW EXECUTE FUNCTION threadstore_refuse_erased_user();
    CREATE TABLE erasure_receipts (
        receipt_uuid uuid PRIMARY KEY,
        user_uuid uuid NOT NULL,
        requested_by text,
        started_at timestamptz NOT NULL,
        finished_at timestamptz NOT NULL,
        counts jsonb NOT NULL
    );
    CREATE INDEX erasure_receipts_by_user ON erasure_receipts (user_uuid, started_at);
    """,
    # Retention: policies for every chat (global), a user's chats, or one chat; each field
    # unset inherits. A sweep deletes what expired, a few chats per transaction.
    """
    CREATE TABLE retention_policies (
        scope text NOT NULL,
        scope_uuid uuid NOT NULL,
        idle_ttl double precision,
        absolute_ttl double precision,
        keep_run_logs integer,
        deleted_window double precision,
        legal_hold boolean NOT NULL DEFAULT false,
        updated_at timestamptz NOT NULL,
        PRIMARY KEY (scope, scope_uuid)
    );
    """,
    # The usage ledger: what each run used (amounts in whole nano-dollars, so sums are
    # exact), kept per (chat, run) beyond the chat's own life, until its user is erased;
    # and budgets per user or chat that stop a run before it starts.
    """
    CREATE TABLE usage_runs (
        chat_uuid uuid NOT NULL,
        run_id text NOT NULL,
        user_uuid uuid NOT NULL,
        input_tokens bigint NOT NULL,
        output_tokens bigint NOT NULL,
        reasoning_tokens bigint NOT NULL,
        cached_input_tokens bigint NOT NULL,
        cost_nusd bigint NOT NULL,
        cache_savings_nusd bigint NOT NULL,
        model text,
        source text NOT NULL,
        recorded_at timestamptz NOT NULL,
        PRIMARY KEY (chat_uuid, run_id)
    );
    CREATE INDEX usage_runs_by_user ON usage_runs (user_uuid, recorded_at);
    CREATE TABLE usage_budgets (
        scope text NOT NULL,
        scope_uuid uuid NOT NULL,
        user_uuid uuid NOT NULL,
        max_cost_usd double precision,
        max_tokens bigint,
        period text NOT NULL,
        updated_at timestamptz NOT NULL,
        PRIMARY KEY (scope, scope_uuid)
    );
    CREATE INDEX usage_budgets_by_user ON usage_budgets (user_uuid);
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

_TIMES = frozenset({"created_at", "updated_at"})
_UUIDS = frozenset({"uuid", "message_uuid", "chat_uuid", "parent_uuid"})
"""The uuid columns of a history's rows (messages, tool calls, reasoning steps)."""


def _select(
    columns: tuple[str, ...],
    table: str,
    alias: str,
    *,
    iso_times: bool,
    uuids: frozenset[str] = frozenset(),
) -> str:
    """A SELECT of ``columns``; with ``iso_times`` the timestamps come back as text.

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
    names = [
        f"{alias}.{c}::text || ':00'"
        if iso_times and c in _TIMES
        else f"{alias}.{c}::text"
        if c in uuids
        else f"{alias}.{c}"
        for c in columns
    ]
    return f"SELECT {', '.join(names)} FROM {table} {alias}"


MESSAGE_ROW = (*MESSAGE_COLUMNS, "last_child_seq")
"""A message row as read: its columns, then whether it has tool calls or reasoning steps
(a read of messages without any skips the two statements that look for them)."""

# Each read comes in two forms, indexed by whether the session prints ISO/UTC text.
CHAT_SELECT = {iso: _select(CHAT_COLUMNS, "chats", "c", iso_times=iso) for iso in (False, True)}
MESSAGE_SELECT = {
    iso: _select(MESSAGE_ROW, "messages", "m", iso_times=iso, uuids=_UUIDS) for iso in (False, True)
}
TOOL_CALL_SELECT = {
    iso: _select(TOOL_CALL_COLUMNS, "tool_calls", "t", iso_times=iso, uuids=_UUIDS)
    for iso in (False, True)
}
REASONING_SELECT = {
    iso: _select(REASONING_COLUMNS, "reasonings", "r", iso_times=iso, uuids=_UUIDS)
    for iso in (False, True)
}
RUN_SELECT = "SELECT " + ", ".join(RUN_COLUMNS) + " FROM runs"

CHAT_RETURNING = " RETURNING " + ", ".join(CHAT_COLUMNS)
RUN_RETURNING = " RETURNING " + ", ".join(RUN_COLUMNS)

# The active branch of a chat: every message when it never branched (one index range
# scan; the tree walk below is then never evaluated), else the path from the active
# leaf to the root.
CHAT_IS_LIVE = (
    "NOT EXISTS (SELECT 1 FROM chats d WHERE d.chat_uuid = m.chat_uuid"
    " AND d.deleted_at IS NOT NULL)"
)
"""A message's chat is not soft-deleted."""

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


def _names(columns: InsertColumns) -> str:
    return ", ".join(columns.names)


# --- chats -----------------------------------------------------------------------------------

INSERT_CHAT = (
    f"INSERT INTO chats ({_names(CHAT_INSERT)}, updated_at)"
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
    f" INSERT INTO messages ({_names(MESSAGE_INSERT)}, updated_at)"
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
        f"{_NEXT_CHILD} INSERT INTO {table} ({_names(columns)}, chat_uuid, seq, updated_at)"
        f" SELECT {_typed(columns)}, parent.chat_uuid, parent.last_child_seq,"
        f" {_param(columns, 'created_at')}::timestamptz FROM parent"
        " ON CONFLICT (uuid) DO NOTHING RETURNING seq"
    )


INSERT_TOOL_CALL = _child_insert("tool_calls", TOOL_CALL_INSERT)
INSERT_REASONING = _child_insert("reasonings", REASONING_INSERT)

MESSAGE_EXISTS = "SELECT EXISTS (SELECT 1 FROM messages WHERE message_uuid = $1)"

# --- runs ------------------------------------------------------------------------------------

INSERT_RUN = (
    f"INSERT INTO runs ({_names(RUN_INSERT)}) SELECT {_typed(RUN_INSERT)}"
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
