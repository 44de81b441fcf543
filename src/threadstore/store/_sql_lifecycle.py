"""Summaries, receipts and retention policies on SQL tables, for both SQL backends.

Both schemas give these tables the same columns, so the primitives that only store
and read them back are written once here: a backend gives its statements
(:class:`LifecycleSQL`: those alike but for placeholders are built here) and its
driver (``store/_sql_driver.py``). Erasure and expiry, whose statements differ in
kind, stay with each backend.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from threadstore import binary_json
from threadstore.models import (
    FORMAT_VERSION,
    ErasureReceipt,
    ExpiredChat,
    RetentionPolicy,
    ScopedPolicy,
    Summary,
)
from threadstore.store._lifecycle import GLOBAL_SCOPE, SUMMARY_COLUMNS, LifecycleBackend, Scope
from threadstore.store._sql_driver import SQLDriver

__all__ = ["LifecycleSQL", "SQLLifecycle"]

_POLICY_COLUMNS = ("idle_ttl", "absolute_ttl", "keep_run_logs", "deleted_window", "legal_hold")


class LifecycleSQL:
    """The statements of one backend's :class:`SQLLifecycle` (``param(n)``: its n-th
    placeholder); those that differ in more than placeholders are given.

    ``select_expired`` takes ``$1`` now, ``$2`` the default restorable window, ``$3``
    the global scope, ``$4`` the chat to start after and ``$5`` how many.
    """

    def __init__(
        self,
        param: Callable[[int], str],
        *,
        insert_summary: str,
        select_summaries: str,
        insert_receipt: str,
        select_receipts: str,
        select_expired: str,
        before_every_chat: str | None = None,
    ) -> None:
        self.insert_summary = insert_summary
        self.select_summaries = select_summaries
        self.insert_receipt = insert_receipt
        self.select_receipts = select_receipts
        self.select_expired = select_expired
        self.before_every_chat = before_every_chat
        """What ``select_expired`` takes for "from the first chat" (``None``: its own test)."""
        self.delete_summary = (
            f"DELETE FROM summaries WHERE chat_uuid = {param(1)} AND summary_uuid = {param(2)}"
            " RETURNING 1"
        )
        self.tombstone = (
            f"INSERT INTO erased_users (user_uuid, erased_at) VALUES ({param(1)}, {param(2)})"
            " ON CONFLICT DO NOTHING"
        )
        columns = ("scope", "scope_uuid", *_POLICY_COLUMNS, "updated_at")
        self.upsert_policy = (
            f"INSERT INTO retention_policies ({', '.join(columns)})"
            f" VALUES ({', '.join(param(n) for n in range(1, len(columns) + 1))})"
            " ON CONFLICT (scope, scope_uuid) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in columns[2:])
        )
        self.delete_policy = (
            f"DELETE FROM retention_policies WHERE scope = {param(1)} AND scope_uuid = {param(2)}"
            " RETURNING 1"
        )
        self.select_policies = (
            f"SELECT scope, scope_uuid, {', '.join(_POLICY_COLUMNS)} FROM retention_policies"
            " ORDER BY scope, scope_uuid"
        )


class SQLLifecycle(SQLDriver, LifecycleBackend):
    """:class:`LifecycleBackend`'s summaries, receipts and policies on their tables."""

    sql: LifecycleSQL

    async def insert_summary(self, summary: Summary) -> None:
        params = (
            self.uuid_param(summary.summary_uuid),
            self.uuid_param(summary.chat_uuid),
            self.uuid_param(summary.first_message_uuid),
            self.uuid_param(summary.last_message_uuid),
            summary.last_seq,
            summary.message_count,
            summary.content,
            summary.summarizer,
            binary_json.dumps(summary.metadata),
            self.time_param(summary.created_at),
            FORMAT_VERSION,
        )
        missing = f"chat {summary.chat_uuid} does not exist"
        await self._write(self.sql.insert_summary, params, missing=missing)

    async def select_summaries(self, chat_uuid: UUID) -> list[Summary]:
        rows = await self._read(self.sql.select_summaries, (self.uuid_param(chat_uuid),), True)
        return [self._summary(row) for row in rows]

    def _summary(self, row: Any) -> Summary:
        fields = dict(zip(SUMMARY_COLUMNS, row, strict=True))
        fields["metadata"] = binary_json.loads(fields["metadata"]) if fields["metadata"] else {}
        fields["created_at"] = self.time_value(fields["created_at"])
        return Summary.model_validate(fields)

    async def delete_summary(self, chat_uuid: UUID, summary_uuid: UUID) -> bool:
        params = (self.uuid_param(chat_uuid), self.uuid_param(summary_uuid))
        return bool(await self._write(self.sql.delete_summary, params))

    async def tombstone(self, user_uuid: UUID, at: datetime) -> None:
        await self._write(self.sql.tombstone, (self.uuid_param(user_uuid), self.time_param(at)))

    async def save_receipt(self, receipt: ErasureReceipt) -> None:
        params = (
            self.uuid_param(receipt.receipt_uuid),
            self.uuid_param(receipt.user_uuid),
            receipt.requested_by,
            self.time_param(receipt.started_at),
            self.time_param(receipt.finished_at),
            binary_json.dumps(receipt.counts),
        )
        await self._write(self.sql.insert_receipt, params)

    async def select_receipts(self, user_uuid: UUID | None) -> list[ErasureReceipt]:
        key = None if user_uuid is None else self.uuid_param(user_uuid)
        return [
            ErasureReceipt(
                receipt_uuid=row[0],
                user_uuid=row[1],
                requested_by=row[2],
                started_at=self.time_value(row[3]),
                finished_at=self.time_value(row[4]),
                counts=binary_json.loads(row[5]),
            )
            for row in await self._read(self.sql.select_receipts, (key,))
        ]

    async def upsert_policy(
        self, scope: Scope, scope_uuid: UUID, policy: RetentionPolicy, at: datetime
    ) -> None:
        params = (
            scope,
            self.uuid_param(scope_uuid),
            policy.idle_ttl,
            policy.absolute_ttl,
            policy.keep_run_logs,
            policy.deleted_window,
            self.flag_param(policy.legal_hold),
            self.time_param(at),
        )
        await self._write(self.sql.upsert_policy, params)

    async def delete_policy(self, scope: Scope, scope_uuid: UUID) -> bool:
        params = (scope, self.uuid_param(scope_uuid))
        return bool(await self._write(self.sql.delete_policy, params))

    async def select_policies(self) -> list[ScopedPolicy]:
        return [
            ScopedPolicy(
                scope=cast(Scope, row[0]),
                scope_uuid=self.uuid_value(row[1]),
                policy=RetentionPolicy(
                    idle_ttl=row[2],
                    absolute_ttl=row[3],
                    keep_run_logs=row[4],
                    deleted_window=row[5],
                    legal_hold=bool(row[6]),
                ),
            )
            for row in await self._read(self.sql.select_policies, ())
        ]

    async def select_expired(
        self, now: datetime, window: float, after: UUID | None, limit: int
    ) -> list[ExpiredChat]:
        start = self.sql.before_every_chat if after is None else self.uuid_param(after)
        params = (self.time_param(now), window, self.uuid_param(GLOBAL_SCOPE), start, limit)
        rows = await self._read(self.sql.select_expired, params)
        return [ExpiredChat(chat_uuid=row[0], user_uuid=row[1], reason=row[2]) for row in rows]
