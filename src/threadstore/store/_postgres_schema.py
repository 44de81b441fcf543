"""PostgreSQL schema: numbered migrations (the statements the backend runs are in
``store/_postgres_sql.py``).

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

__all__ = [
    "CREATE_MIGRATIONS_TABLE",
    "LOCK_MIGRATIONS",
    "MIGRATIONS",
    "MIGRATIONS_TABLE_EXISTS",
    "MIGRATION_LOCK_KEY",
    "RECORD_MIGRATION",
    "SCHEMA_VERSION",
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
    # Full-text search: one tsvector per message (search_docs, a GIN index) holding its
    # text, its tool calls (name, arguments, result), its reasoning and its owner's
    # lexeme (u + the user's uuid in hex, which every search asks for, so GIN reads that
    # user's entries only), written by triggers in the transaction of each write, in the
    # text search configuration of search_settings. A message's delete cascades to its
    # entry. Messages stored before this migration (or before the configuration changed)
    # are indexed in the background, a few chats per transaction (search_backlog).
    """
    CREATE TABLE search_settings (
        id boolean PRIMARY KEY DEFAULT true CHECK (id),
        language regconfig NOT NULL
    );
    -- No row (a fresh database, or its rows deleted): 'simple'.
    CREATE FUNCTION threadstore_search_language() RETURNS regconfig LANGUAGE sql STABLE AS $$
        SELECT COALESCE((SELECT language FROM search_settings), 'simple'::regconfig)
    $$;
    CREATE TABLE search_docs (
        message_uuid uuid PRIMARY KEY REFERENCES messages (message_uuid) ON DELETE CASCADE,
        doc tsvector NOT NULL
    );
    CREATE INDEX search_docs_words ON search_docs USING gin (doc);
    CREATE VIEW search_sources AS
    SELECT m.message_uuid, m.chat_uuid, c.user_uuid, m.content AS body,
           (SELECT string_agg(t.name || ' ' || t.arguments || ' ' || COALESCE(t.content, ''),
                              ' ' ORDER BY t.seq)
              FROM tool_calls t WHERE t.message_uuid = m.message_uuid) AS tools,
           (SELECT string_agg(r.content, ' ' ORDER BY r.seq)
              FROM reasonings r WHERE r.message_uuid = m.message_uuid) AS reasoning
      FROM messages m JOIN chats c ON c.chat_uuid = m.chat_uuid;
    CREATE FUNCTION threadstore_search_doc(cfg regconfig, s search_sources) RETURNS tsvector
    LANGUAGE sql STABLE AS $$
        SELECT to_tsvector(cfg, s.body) || to_tsvector(cfg, COALESCE(s.tools, ''))
               || to_tsvector(cfg, COALESCE(s.reasoning, ''))
               || ('u' || replace(s.user_uuid::text, '-', ''))::tsvector
    $$;
    CREATE FUNCTION threadstore_search_index() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO search_docs (message_uuid, doc)
        SELECT s.message_uuid, threadstore_search_doc(threadstore_search_language(), s)
          FROM search_sources s WHERE s.message_uuid = NEW.message_uuid
        ON CONFLICT (message_uuid) DO UPDATE SET doc = EXCLUDED.doc;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER messages_search_insert AFTER INSERT ON messages
        FOR EACH ROW WHEN (NEW.content <> '') EXECUTE FUNCTION threadstore_search_index();
    CREATE TRIGGER messages_search_update AFTER UPDATE OF content ON messages
        FOR EACH ROW WHEN (NEW.content IS DISTINCT FROM OLD.content)
        EXECUTE FUNCTION threadstore_search_index();
    CREATE TRIGGER tool_calls_search_insert AFTER INSERT ON tool_calls
        FOR EACH ROW EXECUTE FUNCTION threadstore_search_index();
    CREATE TRIGGER tool_calls_search_update AFTER UPDATE OF name, arguments, content
        ON tool_calls FOR EACH ROW
        WHEN (NEW.name IS DISTINCT FROM OLD.name OR NEW.arguments IS DISTINCT FROM OLD.arguments
              OR NEW.content IS DISTINCT FROM OLD.content)
        EXECUTE FUNCTION threadstore_search_index();
    CREATE TRIGGER reasonings_search_insert AFTER INSERT ON reasonings
        FOR EACH ROW WHEN (NEW.content <> '') EXECUTE FUNCTION threadstore_search_index();
    CREATE TRIGGER reasonings_search_update AFTER UPDATE OF content ON reasonings
        FOR EACH ROW WHEN (NEW.content IS DISTINCT FROM OLD.content)
        EXECUTE FUNCTION threadstore_search_index();
    CREATE TABLE search_backlog (
        id boolean PRIMARY KEY DEFAULT true CHECK (id),
        after_chat uuid
    );
    INSERT INTO search_backlog (after_chat) SELECT NULL WHERE EXISTS (SELECT 1 FROM messages);
    -- One batch of the background indexing: the next ``per_batch`` chats by uuid. true: more
    -- wait; false: none; NULL: another process holds the backlog.
    CREATE FUNCTION threadstore_search_backfill(per_batch integer) RETURNS boolean
    LANGUAGE plpgsql AS $$
    DECLARE
        start uuid;
        batch uuid[];
        n integer;
    BEGIN
        PERFORM 1 FROM search_backlog;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        SELECT after_chat INTO start FROM search_backlog FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        SELECT array_agg(chat_uuid ORDER BY chat_uuid) INTO batch
          FROM (SELECT chat_uuid FROM chats WHERE start IS NULL OR chat_uuid > start
                 ORDER BY chat_uuid LIMIT per_batch) b;
        n := COALESCE(cardinality(batch), 0);
        INSERT INTO search_docs (message_uuid, doc)
        SELECT s.message_uuid, threadstore_search_doc(threadstore_search_language(), s)
          FROM search_sources s WHERE s.chat_uuid = ANY (batch)
        ON CONFLICT (message_uuid) DO UPDATE SET doc = EXCLUDED.doc;
        IF n < per_batch THEN
            DELETE FROM search_backlog;
            RETURN false;
        END IF;
        UPDATE search_backlog SET after_chat = batch[n];
        RETURN true;
    END
    $$;
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
