"""The statements of the run registry on SQLite: a run's insert, heartbeat, end and records.

Built per call from the run's values (placeholders only); the store's write primitive
sends them with the rest of a batch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from uuid import UUID

from threadstore import models
from threadstore.store import _sqlite_sql as queries
from threadstore.store._sql import RUN_COLUMNS, params
from threadstore.store._sqlite_sql import ts
from threadstore.store._sqlite_writes import Statement

__all__ = ["heartbeat", "run_finish", "run_insert", "run_records_finalize"]


def run_insert(run: models.Run) -> Statement:
    values = {**run.__dict__, "format_version": models.FORMAT_VERSION}
    return Statement(queries.INSERT_RUN, params(queries.PLANS.run, values))


def heartbeat(owner: str, run_ids: Sequence[tuple[UUID, str]]) -> Statement:
    keys = json.dumps([[str(chat), run] for chat, run in run_ids])
    return Statement(
        "UPDATE runs SET heartbeat_at = ? WHERE owner = ? AND status = 'running'"
        " AND (chat_uuid, run_id) IN"
        " (SELECT value ->> 0, value ->> 1 FROM json_each(?))",
        (ts(models.utcnow()), owner, keys),
    )


def run_finish(
    chat_uuid: UUID, run_id: str, status: models.RunStatus, error: str | None = None
) -> Statement:
    return Statement(
        "UPDATE runs SET status = ?, error = ?, updated_at = ?"
        " WHERE chat_uuid = ? AND run_id = ? RETURNING " + ", ".join(RUN_COLUMNS),
        (status.value, error, ts(models.utcnow()), str(chat_uuid), run_id),
    )


def run_records_finalize(
    chat_uuid: UUID, run_id: str, status: models.MessageStatus
) -> list[Statement]:
    values = (status.value, ts(models.utcnow()), str(chat_uuid), run_id)
    set_ = " SET status = ?1, in_progress = 0, updated_at = ?2"
    children = [
        Statement(
            # Through the run's messages: the chat's other children are never read.
            f"UPDATE {table}{set_} WHERE in_progress = 1 AND message_uuid IN"
            " (SELECT message_uuid FROM messages WHERE chat_uuid = ?3 AND run_id = ?4)"
            " RETURNING 1",
            values,
        )
        for table in ("tool_calls", "reasonings")
    ]
    own = f"UPDATE messages{set_} WHERE chat_uuid = ?3 AND run_id = ?4 AND in_progress = 1"
    return [*children, Statement(own + " RETURNING 1", values)]
