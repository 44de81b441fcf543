"""SQLite schema: numbered migrations and the statements the backend runs.

Migrations are append-only: never edit one that has shipped; add the next.
Every statement takes placeholders only; no value is ever formatted into SQL.
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
    "REASONING_COLUMNS",
    "RUN_COLUMNS",
    "TOOL_CALL_COLUMNS",
]

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
]
