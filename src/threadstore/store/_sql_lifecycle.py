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

__all__ = ["LifecycleSQL", "RetentionSQL", "SQLLifecycle"]

_POLICY_COLUMNS = ("idle_ttl", "absolute_ttl", "keep_run_logs", "deleted_window", "legal_hold")
"""A retention policy's fields, as its table's columns (``legal_hold`` last)."""


class RetentionSQL:
    """The SQL of a chat's (``c``) retention in one dialect: its policies, whether one
    holds it, and why it expired. ``param(n)``: the n-th placeholder, with ``param(1)``
    the time compared with, ``param(2)`` the default restorable window of a deleted chat
    and ``param(3)`` the global scope; ``false``: the dialect's; ``age(column)``: the
    seconds from the chat's ``column`` to ``param(1)``."""

    def __init__(
        self, param: Callable[[int], str], *, false: str, age: Callable[[str], str]
    ) -> None:
        self.policies = self.joins(param(3))
        self.held = (
            "("
            + " OR ".join(f"COALESCE({p}.legal_hold, {false})" for p in ("pc", "pu", "pg"))
            + ")"
        )
        """Whether a legal hold of any of the chat's policies holds it."""

        def older(column: str, field: str, fallback: str = "") -> str:
            return f"{age(column)} > COALESCE(pc.{field}, pu.{field}, pg.{field}{fallback})"

        window = param(2)
        self.reason = (
            "CASE WHEN c.deleted_at IS NOT NULL THEN"
            f" CASE WHEN {older('deleted_at', 'deleted_window', f', {window}')} THEN 'deleted' END"
            f" WHEN {older('created_at', 'absolute_ttl')} THEN 'absolute'"
            f" WHEN {older('updated_at', 'idle_ttl')} THEN 'idle' END"
        )
        """Why the chat expired (NULL: it has not), by its policies."""

    def still_expired(self, among: str) -> str:
        """The chats of ``among`` (a test of ``c.chat_uuid``) still expired and not held:
        each is checked again as it goes, so one written to since it was found stays."""
        return (
            f"SELECT c.chat_uuid FROM chats c{self.policies} WHERE c.chat_uuid {among}"
            f" AND NOT {self.held} AND ({self.reason}) IS NOT NULL"
        )

    @staticmethod
    def joins(global_scope: str) -> str:
        """Each chat's policies: its own (``pc``), its user's (``pu``) and the global one
        (``pg``, whose scope uuid is the parameter ``global_scope``); a chat's policy is
        each field of its own, else its user's, else the global policy's."""
        return (
            " LEFT JOIN retention_policies pc ON pc.scope = 'chat' AND pc.scope_uuid = c.chat_uuid"
            " LEFT JOIN retention_policies pu ON pu.scope = 'user' AND pu.scope_uuid = c.user_uuid"
            " LEFT JOIN retention_policies pg ON pg.scope = 'global'"
            f" AND pg.scope_uuid = {global_scope}"
        )


class LifecycleSQL:
    """The statements of one backend's :class:`SQLLifecycle`: a backend's subclass gives
    those that differ in more than placeholders; ``param(n)`` is its n-th placeholder,
    ``json(n)`` that of a JSON document."""

    select_summaries: str
    """The summaries of a live chat (``param(1)``), newest first, in ``SUMMARY_COLUMNS``."""
    select_receipts: str
    """Receipts of one user (``param(1)``; NULL: all), newest first."""
    select_expired: str
    """Expired chats (id, user, reason) past ``param(4)``, by chat uuid, ``param(5)`` at
    most; ``param(1)`` now, ``param(2)`` the default restorable window, ``param(3)`` the
    global scope."""
    before_every_chat: str | None = None
    """What ``select_expired`` takes for "from the first chat"."""

    def __init__(self, param: Callable[[int], str], json: Callable[[int], str]) -> None:
        values = (json(n) if n == 9 else param(n) for n in range(1, 12))
        # Only onto a live chat: a summary of a deleted chat would outlive it.
        self.insert_summary = (
            f"INSERT INTO summaries ({', '.join(SUMMARY_COLUMNS)}, format_version)"
            f" SELECT {', '.join(values)} WHERE EXISTS (SELECT 1 FROM chats"
            f" WHERE chat_uuid = {param(2)} AND deleted_at IS NULL) RETURNING 1"
        )
        self.insert_receipt = (
            "INSERT INTO erasure_receipts"
            " (receipt_uuid, user_uuid, requested_by, started_at, finished_at, counts)"
            f" VALUES ({', '.join(param(n) for n in range(1, 6))}, {json(6)})"
        )
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
        values = [getattr(policy, name) for name in _POLICY_COLUMNS]
        values[-1] = self.flag_param(policy.legal_hold)
        params = (scope, self.uuid_param(scope_uuid), *values, self.time_param(at))
        await self._write(self.sql.upsert_policy, params)

    async def delete_policy(self, scope: Scope, scope_uuid: UUID) -> bool:
        params = (scope, self.uuid_param(scope_uuid))
        return bool(await self._write(self.sql.delete_policy, params))

    async def select_policies(self) -> list[ScopedPolicy]:
        return [
            ScopedPolicy(
                scope=cast(Scope, row[0]),
                scope_uuid=self.uuid_value(row[1]),
                policy=RetentionPolicy.model_validate(
                    dict(zip(_POLICY_COLUMNS, row[2:], strict=True))
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
