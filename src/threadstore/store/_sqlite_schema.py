"""SQLite schema: numbered migrations and the statements the backend runs.

Migrations are append-only: never edit one that has shipped; add the next.
Every statement takes placeholders only; no value is ever formatted into SQL.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS"]

MIGRATIONS: list[str] = [
    # 1: chats, the message tree, tool calls, reasoning steps and runs.
    """
    CREATE TABLE chats (
        chat_uuid TEXT PRIMARY KEY,
        user_uuid TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        dedup_key TEXT NOT NULL,
        name TEXT,
        tenant_id TEXT,
        app_id TEXT,
        active_leaf_uuid TEXT,
        has_branches INTEGER NOT NULL DEFAULT 0,
        -- Bumped by every committed change to the chat's messages, tool calls or
        -- reasoning (triggers below): a history read at version V is still exact
        -- while the chat is at V, which lets a store reuse it without re-reading.
        version INTEGER NOT NULL DEFAULT 0,
        forked_from_chat_uuid TEXT,
        forked_from_message_uuid TEXT,
        state TEXT,
        metadata TEXT,
        extra TEXT,
        format_version INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (user_uuid, thread_id)
    );
    CREATE INDEX chats_by_user_activity ON chats (user_uuid, updated_at DESC, chat_uuid DESC);

    CREATE TABLE messages (
        -- The rowid: grows with every message of a chat (its earlier messages still
        -- exist), which is all a per-chat cursor needs; no AUTOINCREMENT bookkeeping.
        seq INTEGER PRIMARY KEY,
        message_uuid TEXT NOT NULL UNIQUE,
        chat_uuid TEXT NOT NULL REFERENCES chats (chat_uuid) ON DELETE CASCADE,
        parent_uuid TEXT,
        agui_id TEXT,
        role TEXT NOT NULL,
        name TEXT,
        content TEXT NOT NULL,
        content_parts TEXT,
        encrypted_value TEXT,
        activity_type TEXT,
        activity_content TEXT,
        status TEXT NOT NULL,
        in_progress INTEGER NOT NULL,
        step_name TEXT,
        run_id TEXT,
        metadata TEXT,
        extra TEXT,
        format_version INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX messages_by_chat ON messages (chat_uuid, seq);
    CREATE INDEX messages_by_agui_id ON messages (chat_uuid, agui_id);
    -- Finalizing a run only looks for its records still in progress.
    CREATE INDEX messages_by_run ON messages (chat_uuid, run_id) WHERE in_progress = 1;

    -- A new message becomes the end of the active branch; a parent other than the
    -- previous leaf means the chat now has branches (reads then walk the tree).
    CREATE TRIGGER messages_advance_leaf AFTER INSERT ON messages BEGIN
        UPDATE chats
           SET has_branches = has_branches OR (NEW.parent_uuid IS NOT active_leaf_uuid),
               active_leaf_uuid = NEW.message_uuid,
               updated_at = NEW.created_at,
               version = version + 1
         WHERE chat_uuid = NEW.chat_uuid;
    END;
    CREATE TRIGGER messages_bump_version AFTER UPDATE ON messages BEGIN
        UPDATE chats SET version = version + 1 WHERE chat_uuid = NEW.chat_uuid;
    END;

    CREATE TABLE tool_calls (
        uuid TEXT PRIMARY KEY,
        message_uuid TEXT NOT NULL REFERENCES messages (message_uuid) ON DELETE CASCADE,
        chat_uuid TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        name TEXT NOT NULL,
        arguments TEXT NOT NULL,
        content TEXT,
        result_message_id TEXT,
        error TEXT,
        status TEXT NOT NULL,
        in_progress INTEGER NOT NULL,
        step_name TEXT,
        seq INTEGER NOT NULL,
        metadata TEXT,
        extra TEXT,
        format_version INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX tool_calls_by_message ON tool_calls (message_uuid, tool_call_id);
    CREATE INDEX tool_calls_by_chat ON tool_calls (chat_uuid);
    CREATE TRIGGER tool_calls_bump_version_on_insert AFTER INSERT ON tool_calls BEGIN
        UPDATE chats SET version = version + 1 WHERE chat_uuid = NEW.chat_uuid;
    END;
    CREATE TRIGGER tool_calls_bump_version_on_update AFTER UPDATE ON tool_calls BEGIN
        UPDATE chats SET version = version + 1 WHERE chat_uuid = NEW.chat_uuid;
    END;

    CREATE TABLE reasonings (
        uuid TEXT PRIMARY KEY,
        message_uuid TEXT NOT NULL REFERENCES messages (message_uuid) ON DELETE CASCADE,
        chat_uuid TEXT NOT NULL,
        agui_id TEXT,
        name TEXT,
        content TEXT NOT NULL,
        encrypted_value TEXT,
        status TEXT NOT NULL,
        in_progress INTEGER NOT NULL,
        step_name TEXT,
        seq INTEGER NOT NULL,
        metadata TEXT,
        extra TEXT,
        format_version INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX reasonings_by_message ON reasonings (message_uuid);
    CREATE INDEX reasonings_by_chat ON reasonings (chat_uuid);
    CREATE TRIGGER reasonings_bump_version_on_insert AFTER INSERT ON reasonings BEGIN
        UPDATE chats SET version = version + 1 WHERE chat_uuid = NEW.chat_uuid;
    END;
    CREATE TRIGGER reasonings_bump_version_on_update AFTER UPDATE ON reasonings BEGIN
        UPDATE chats SET version = version + 1 WHERE chat_uuid = NEW.chat_uuid;
    END;

    CREATE TABLE runs (
        chat_uuid TEXT NOT NULL REFERENCES chats (chat_uuid) ON DELETE CASCADE,
        run_id TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        parent_run_id TEXT,
        status TEXT NOT NULL,
        owner TEXT,
        heartbeat_at TEXT NOT NULL,
        error TEXT,
        format_version INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (chat_uuid, run_id)
    );
    CREATE INDEX runs_by_heartbeat ON runs (heartbeat_at) WHERE status = 'running';
    """,
    # Soft delete: a chat with a deleted_at is hidden from every read until restored or
    # purged by a sweep once its retention has passed.
    """
    ALTER TABLE chats ADD COLUMN deleted_at TEXT;
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
    CREATE TABLE reasoning_fold_next (uuid TEXT PRIMARY KEY, next TEXT);
    INSERT INTO reasoning_fold_next (uuid, next)
    SELECT m.message_uuid, (
        SELECT c.message_uuid FROM messages c
         WHERE c.parent_uuid = m.message_uuid AND c.chat_uuid = m.chat_uuid
           AND c.run_id IS m.run_id
           AND (CASE WHEN json_valid(c.metadata)
                     THEN json_extract(c.metadata, '$.subagent_run_id') END)
               IS (CASE WHEN json_valid(m.metadata)
                        THEN json_extract(m.metadata, '$.subagent_run_id') END)
           AND (c.role = 'assistant' OR (c.role = 'reasoning' AND c.content = ''
                AND c.encrypted_value IS NULL
                AND EXISTS (SELECT 1 FROM reasonings r WHERE r.message_uuid = c.message_uuid)))
           AND (SELECT count(*) FROM messages s WHERE s.parent_uuid = m.message_uuid) = 1
           AND NOT EXISTS (SELECT 1 FROM chats h WHERE h.active_leaf_uuid = m.message_uuid))
      FROM messages m
     WHERE m.role = 'reasoning' AND m.content = '' AND m.encrypted_value IS NULL
       AND EXISTS (SELECT 1 FROM reasonings r WHERE r.message_uuid = m.message_uuid);

    CREATE TABLE reasoning_fold (uuid TEXT PRIMARY KEY, holder TEXT NOT NULL);
    INSERT INTO reasoning_fold (uuid, holder)
    WITH RECURSIVE walk (uuid, cur) AS (
        SELECT uuid, uuid FROM reasoning_fold_next
        UNION ALL
        SELECT w.uuid, n.next FROM walk w JOIN reasoning_fold_next n ON n.uuid = w.cur
         WHERE n.next IS NOT NULL
    )
    SELECT w.uuid, w.cur FROM walk w
     WHERE NOT EXISTS (SELECT 1 FROM reasoning_fold_next n
                        WHERE n.uuid = w.cur AND n.next IS NOT NULL);

    -- The folded messages' records, numbered in the order they streamed.
    CREATE TABLE reasoning_fold_child (kind TEXT, uuid TEXT, holder TEXT, seq INTEGER);
    INSERT INTO reasoning_fold_child (kind, uuid, holder, seq)
    SELECT kind, uuid, holder,
           row_number() OVER (PARTITION BY holder ORDER BY message_seq, child_seq, kind)
      FROM (SELECT 'r' AS kind, r.uuid, f.holder, m.seq AS message_seq, r.seq AS child_seq
              FROM reasonings r JOIN reasoning_fold f ON f.uuid = r.message_uuid
              JOIN messages m ON m.message_uuid = r.message_uuid
            UNION ALL
            SELECT 't', t.uuid, f.holder, m.seq, t.seq
              FROM tool_calls t JOIN reasoning_fold f ON f.uuid = t.message_uuid
              JOIN messages m ON m.message_uuid = t.message_uuid);

    -- A holder's own records come after the reasoning that preceded it.
    UPDATE reasonings SET seq = seq + (SELECT count(*) FROM reasoning_fold_child c
                                        WHERE c.holder = reasonings.message_uuid)
     WHERE message_uuid IN (SELECT holder FROM reasoning_fold)
       AND message_uuid NOT IN (SELECT uuid FROM reasoning_fold);
    UPDATE tool_calls SET seq = seq + (SELECT count(*) FROM reasoning_fold_child c
                                        WHERE c.holder = tool_calls.message_uuid)
     WHERE message_uuid IN (SELECT holder FROM reasoning_fold)
       AND message_uuid NOT IN (SELECT uuid FROM reasoning_fold);
    UPDATE reasonings SET message_uuid = c.holder, seq = c.seq
      FROM reasoning_fold_child c WHERE c.kind = 'r' AND c.uuid = reasonings.uuid;
    UPDATE tool_calls SET message_uuid = c.holder, seq = c.seq
      FROM reasoning_fold_child c WHERE c.kind = 't' AND c.uuid = tool_calls.uuid;

    -- The holder takes the place of the first message folded into it.
    UPDATE messages SET parent_uuid = (
        SELECT m.parent_uuid FROM messages m JOIN reasoning_fold f ON f.uuid = m.message_uuid
         WHERE f.holder = messages.message_uuid AND f.uuid <> f.holder
         ORDER BY m.seq LIMIT 1)
     WHERE message_uuid IN (SELECT holder FROM reasoning_fold WHERE uuid <> holder);
    UPDATE messages SET parent_uuid = (SELECT holder FROM reasoning_fold f
                                        WHERE f.uuid = messages.parent_uuid)
     WHERE parent_uuid IN (SELECT uuid FROM reasoning_fold WHERE uuid <> holder);
    UPDATE chats SET active_leaf_uuid = (SELECT holder FROM reasoning_fold f
                                          WHERE f.uuid = chats.active_leaf_uuid)
     WHERE active_leaf_uuid IN (SELECT uuid FROM reasoning_fold WHERE uuid <> holder);
    UPDATE chats SET forked_from_message_uuid = (
        SELECT holder FROM reasoning_fold f WHERE f.uuid = chats.forked_from_message_uuid)
     WHERE forked_from_message_uuid IN (SELECT uuid FROM reasoning_fold WHERE uuid <> holder);
    DELETE FROM messages WHERE message_uuid IN (SELECT uuid FROM reasoning_fold
                                                 WHERE uuid <> holder);
    -- A holder left without an answer is an assistant message that names no AG-UI id
    -- of its own (its steps carry it), as the fold writes one today.
    UPDATE messages SET role = 'assistant', agui_id = NULL
     WHERE message_uuid IN (SELECT holder FROM reasoning_fold) AND role = 'reasoning';

    DROP TABLE reasoning_fold_child;
    DROP TABLE reasoning_fold;
    DROP TABLE reasoning_fold_next;
    """,
    # Message.error has a column; versions before it kept the text in metadata["error"].
    """
    ALTER TABLE messages ADD COLUMN error TEXT;
    UPDATE messages SET error = json_extract(metadata, '$.error'),
                        metadata = json_remove(metadata, '$.error')
     WHERE json_valid(metadata) AND json_type(metadata, '$.error') = 'text';
    """,
    # One running run per chat that continues the chat's leaf (an exclusive run), enforced
    # here so two processes cannot both start one. Runs that branch (regenerate, edit)
    # hang their messages under their own branch point and may run beside it. Runs
    # left running together before (a crashed owner's, say) keep running; all but the
    # newest count as not exclusive, and end as their owner or a sweep ends them.
    """
    ALTER TABLE runs ADD COLUMN exclusive INTEGER NOT NULL DEFAULT 1;
    UPDATE runs SET exclusive = 0
     WHERE status = 'running' AND EXISTS (
           SELECT 1 FROM runs n WHERE n.chat_uuid = runs.chat_uuid AND n.status = 'running'
              AND (n.heartbeat_at, n.created_at, n.run_id)
                  > (runs.heartbeat_at, runs.created_at, runs.run_id));
    CREATE UNIQUE INDEX runs_one_running_per_chat ON runs (chat_uuid)
     WHERE status = 'running' AND exclusive = 1;
    """,
    # Incremental histories: every message, tool call and reasoning row records the
    # chat version it was last written at, so a history kept at version V is brought up
    # to date by reading only the rows written after V. Each trigger moves the chat's
    # version, then stamps its own row with it (the stamp itself moves nothing). A run's
    # finalization finds its own messages by index, and their children through them.
    """
    ALTER TABLE messages ADD COLUMN chat_version INTEGER;
    ALTER TABLE tool_calls ADD COLUMN chat_version INTEGER;
    ALTER TABLE reasonings ADD COLUMN chat_version INTEGER;
    CREATE INDEX messages_by_change ON messages (chat_uuid, chat_version);
    CREATE INDEX tool_calls_by_change ON tool_calls (chat_uuid, chat_version);
    CREATE INDEX reasonings_by_change ON reasonings (chat_uuid, chat_version);
    -- Finalizing a run looks only at the run's own messages and their children.
    CREATE INDEX messages_of_run ON messages (chat_uuid, run_id);

    DROP TRIGGER messages_advance_leaf;
    CREATE TRIGGER messages_advance_leaf AFTER INSERT ON messages BEGIN
        UPDATE chats
           SET has_branches = has_branches OR (NEW.parent_uuid IS NOT active_leaf_uuid),
               active_leaf_uuid = NEW.message_uuid,
               updated_at = NEW.created_at,
               version = version + 1
         WHERE chat_uuid = NEW.chat_uuid;
        UPDATE messages
           SET chat_version = (SELECT version FROM chats WHERE chat_uuid = NEW.chat_uuid)
         WHERE rowid = NEW.rowid;
    END;
    DROP TRIGGER messages_bump_version;
    CREATE TRIGGER messages_bump_version AFTER UPDATE ON messages
    WHEN NEW.chat_version IS OLD.chat_version BEGIN
        UPDATE chats SET version = version + 1 WHERE chat_uuid = NEW.chat_uuid;
        UPDATE messages
           SET chat_version = (SELECT version FROM chats WHERE chat_uuid = NEW.chat_uuid)
         WHERE rowid = NEW.rowid;
    END;

    DROP TRIGGER tool_calls_bump_version_on_insert;
    CREATE TRIGGER tool_calls_bump_version_on_insert AFTER INSERT ON tool_calls BEGIN
        UPDATE chats SET version = version + 1 WHERE chat_uuid = NEW.chat_uuid;
        UPDATE tool_calls
           SET chat_version = (SELECT version FROM chats WHERE chat_uuid = NEW.chat_uuid)
         WHERE rowid = NEW.rowid;
    END;
    DROP TRIGGER tool_calls_bump_version_on_update;
    CREATE TRIGGER tool_calls_bump_version_on_update AFTER UPDATE ON tool_calls
    WHEN NEW.chat_version IS OLD.chat_version BEGIN
        UPDATE chats SET version = version + 1 WHERE chat_uuid = NEW.chat_uuid;
        UPDATE tool_calls
           SET chat_version = (SELECT version FROM chats WHERE chat_uuid = NEW.chat_uuid)
         WHERE rowid = NEW.rowid;
    END;

    DROP TRIGGER reasonings_bump_version_on_insert;
    CREATE TRIGGER reasonings_bump_version_on_insert AFTER INSERT ON reasonings BEGIN
        UPDATE chats SET version = version + 1 WHERE chat_uuid = NEW.chat_uuid;
        UPDATE reasonings
           SET chat_version = (SELECT version FROM chats WHERE chat_uuid = NEW.chat_uuid)
         WHERE rowid = NEW.rowid;
    END;
    DROP TRIGGER reasonings_bump_version_on_update;
    CREATE TRIGGER reasonings_bump_version_on_update AFTER UPDATE ON reasonings
    WHEN NEW.chat_version IS OLD.chat_version BEGIN
        UPDATE chats SET version = version + 1 WHERE chat_uuid = NEW.chat_uuid;
        UPDATE reasonings
           SET chat_version = (SELECT version FROM chats WHERE chat_uuid = NEW.chat_uuid)
         WHERE rowid = NEW.rowid;
    END;
    """,
    # Non-destructive compaction: a summary stands for a span of a chat's active branch in
    # what agents are given; the messages stay as they are. Found by chat, newest first.
    """
    CREATE TABLE summaries (
        summary_uuid TEXT PRIMARY KEY,
        chat_uuid TEXT NOT NULL REFERENCES chats (chat_uuid) ON DELETE CASCADE,
        first_message_uuid TEXT NOT NULL,
        last_message_uuid TEXT NOT NULL,
        last_seq INTEGER NOT NULL,
        message_count INTEGER NOT NULL,
        content TEXT NOT NULL,
        summarizer TEXT,
        metadata TEXT,
        format_version INTEGER NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX summaries_by_chat ON summaries (chat_uuid, created_at);
    """,
    # Erasure: a user forgotten is tombstoned (no chat of theirs can be created again, so a
    # run still flushing writes nothing back), and a receipt of what went is kept, with
    # counts only.
    """
    CREATE TABLE erased_users (
        user_uuid TEXT PRIMARY KEY,
        erased_at TEXT NOT NULL
    );
    CREATE TRIGGER chats_refuse_erased_user BEFORE INSERT ON chats
    WHEN EXISTS (SELECT 1 FROM erased_users WHERE user_uuid = NEW.user_uuid) BEGIN
        SELECT RAISE(ABORT, 'threadstore: this user was erased');
    END;
    CREATE TABLE erasure_receipts (
        receipt_uuid TEXT PRIMARY KEY,
        user_uuid TEXT NOT NULL,
        requested_by TEXT,
        started_at TEXT NOT NULL,
        finished_at TEXT NOT NULL,
        counts TEXT NOT NULL
    );
    CREATE INDEX erasure_receipts_by_user ON erasure_receipts (user_uuid, started_at);
    """,
    # Retention: policies for every chat (global), a user's chats, or one chat; each field
    # unset inherits. A sweep deletes what expired, a few chats per transaction.
    """
    CREATE TABLE retention_policies (
        scope TEXT NOT NULL,
        scope_uuid TEXT NOT NULL,
        idle_ttl REAL,
        absolute_ttl REAL,
        keep_run_logs INTEGER,
        deleted_window REAL,
        legal_hold INTEGER NOT NULL DEFAULT 0,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (scope, scope_uuid)
    );
    """,
    # An append stamps its own chat_version (the chat's version after the append), so the
    # row is written once; the trigger still stamps a row inserted without one.
    """
    DROP TRIGGER messages_advance_leaf;
    CREATE TRIGGER messages_advance_leaf AFTER INSERT ON messages BEGIN
        UPDATE chats
           SET has_branches = has_branches OR (NEW.parent_uuid IS NOT active_leaf_uuid),
               active_leaf_uuid = NEW.message_uuid,
               updated_at = NEW.created_at,
               version = version + 1
         WHERE chat_uuid = NEW.chat_uuid;
        UPDATE messages
           SET chat_version = (SELECT version FROM chats WHERE chat_uuid = NEW.chat_uuid)
         WHERE rowid = NEW.rowid AND NEW.chat_version IS NULL;
    END;
    """,
    # Full-text search: one FTS5 entry per message (rowid = its seq) holding its owner's
    # word (u + the user's uuid in hex, which every search asks for, so a search reads
    # that user's entries only), its text, its tool calls (name, arguments, result) and
    # its reasoning. A write's transaction records, by trigger, which messages changed
    # (search_pending, one row per message however often it changes); the entries of
    # pending messages are rewritten in batches, newest first (an FTS5 write costs about
    # the same for one entry as for a thousand), in the background and before every
    # search, so a search sees every committed write. A deleted message's entry goes in
    # its delete's transaction. Messages stored before this migration start pending.
    """
    CREATE VIRTUAL TABLE search_index USING fts5 (
        owner, body, tools, reasoning, tokenize = 'unicode61 remove_diacritics 2'
    );
    CREATE VIEW search_sources (seq, owner, body, tools, reasoning) AS
    SELECT m.seq, 'u' || replace(c.user_uuid, '-', ''), m.content,
           (SELECT group_concat(t.name || ' ' || t.arguments || ' ' || COALESCE(t.content, ''),
                                ' ')
              FROM tool_calls t WHERE t.message_uuid = m.message_uuid),
           (SELECT group_concat(r.content, ' ') FROM reasonings r
             WHERE r.message_uuid = m.message_uuid)
      FROM messages m JOIN chats c ON c.chat_uuid = m.chat_uuid;
    CREATE TABLE search_pending (seq INTEGER PRIMARY KEY);
    CREATE TRIGGER messages_search_insert AFTER INSERT ON messages
    WHEN NEW.content <> '' BEGIN
        INSERT OR IGNORE INTO search_pending (seq) VALUES (NEW.seq);
    END;
    CREATE TRIGGER messages_search_update AFTER UPDATE OF content ON messages
    WHEN NEW.content IS NOT OLD.content BEGIN
        INSERT OR IGNORE INTO search_pending (seq) VALUES (NEW.seq);
    END;
    CREATE TRIGGER messages_search_delete AFTER DELETE ON messages BEGIN
        DELETE FROM search_index WHERE rowid = OLD.seq;
        DELETE FROM search_pending WHERE seq = OLD.seq;
    END;
    CREATE TRIGGER tool_calls_search_insert AFTER INSERT ON tool_calls BEGIN
        INSERT OR IGNORE INTO search_pending (seq)
        SELECT seq FROM messages WHERE message_uuid = NEW.message_uuid;
    END;
    CREATE TRIGGER tool_calls_search_update AFTER UPDATE OF name, arguments, content
    ON tool_calls WHEN NEW.name IS NOT OLD.name OR NEW.arguments IS NOT OLD.arguments
                       OR NEW.content IS NOT OLD.content BEGIN
        INSERT OR IGNORE INTO search_pending (seq)
        SELECT seq FROM messages WHERE message_uuid = NEW.message_uuid;
    END;
    CREATE TRIGGER reasonings_search_insert AFTER INSERT ON reasonings
    WHEN NEW.content <> '' BEGIN
        INSERT OR IGNORE INTO search_pending (seq)
        SELECT seq FROM messages WHERE message_uuid = NEW.message_uuid;
    END;
    CREATE TRIGGER reasonings_search_update AFTER UPDATE OF content ON reasonings
    WHEN NEW.content IS NOT OLD.content BEGIN
        INSERT OR IGNORE INTO search_pending (seq)
        SELECT seq FROM messages WHERE message_uuid = NEW.message_uuid;
    END;
    INSERT INTO search_pending (seq) SELECT seq FROM messages;
    """,
    # The usage ledger: what each run used (amounts in whole nano-dollars, so sums are
    # exact), kept per (chat, run) beyond the chat's own life, until its user is erased;
    # and budgets per user or chat that stop a run before it starts.
    """
    CREATE TABLE usage_runs (
        chat_uuid TEXT NOT NULL,
        run_id TEXT NOT NULL,
        user_uuid TEXT NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        reasoning_tokens INTEGER NOT NULL,
        cached_input_tokens INTEGER NOT NULL,
        cost_nusd INTEGER NOT NULL,
        cache_savings_nusd INTEGER NOT NULL,
        model TEXT,
        source TEXT NOT NULL,
        recorded_at TEXT NOT NULL,
        PRIMARY KEY (chat_uuid, run_id)
    );
    CREATE INDEX usage_runs_by_user ON usage_runs (user_uuid, recorded_at);
    CREATE TABLE usage_budgets (
        scope TEXT NOT NULL,
        scope_uuid TEXT NOT NULL,
        user_uuid TEXT NOT NULL,
        max_cost_usd REAL,
        max_tokens INTEGER,
        period TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (scope, scope_uuid)
    );
    CREATE INDEX usage_budgets_by_user ON usage_budgets (user_uuid);
    """,
]
