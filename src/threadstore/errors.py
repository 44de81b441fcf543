"""One rooted exception tree for everything threadstore raises on purpose.

    ThreadstoreError
    ├── StoreError                 a backend could not do what was asked
    │   ├── NotFoundError          a referenced chat/message does not exist (also a ValueError)
    │   ├── ConflictError          a uniqueness or concurrency rule was violated
    │   │   ├── RunLiveError       the chat already has a running run
    │   │   └── VersionConflictError  the seed layer's lost optimistic update (never raised)
    │   ├── CorruptRecordError     a stored row cannot be read back (names the record)
    │   ├── StoreUnavailableError  the database did not answer in time or cannot be reached
    │   └── MigrationError         the schema is missing, too new, or a migration failed
    ├── InvalidInputError          caller-supplied data was rejected (also a ValueError)
    │   └── LimitExceededError     a documented size/count limit was exceeded
    ├── BudgetExceededError        a run was refused: a usage budget is spent
    └── ConfigurationError         a URL, option or file could not be understood

``InvalidInputError`` and ``NotFoundError`` subclass ``ValueError`` so code written
against the seed contract (which documents ``ValueError`` for a missing chat id or
parent message) keeps working unchanged. Reads of an unknown record return ``None``.

:class:`ErrorCodes` names the ``code`` of the ``RUN_ERROR`` events the storage layer
emits, under the seed layer's name.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = [
    "BudgetExceededError",
    "ConfigurationError",
    "ConflictError",
    "CorruptRecordError",
    "ErrorCodes",
    "InvalidInputError",
    "LimitExceededError",
    "MigrationError",
    "NotFoundError",
    "RunLiveError",
    "StoreError",
    "StoreUnavailableError",
    "ThreadstoreError",
    "VersionConflictError",
]


class ThreadstoreError(Exception):
    """Root of every error threadstore raises on purpose."""


class StoreError(ThreadstoreError):
    """A storage backend could not complete an operation."""


class NotFoundError(StoreError, ValueError):
    """A write referenced a chat or message that does not exist."""


class ConflictError(StoreError):
    """A uniqueness or concurrency rule was violated."""


class RunLiveError(ConflictError):
    """``start_run`` refused: the chat already has a run recorded running that holds it.

    One run continuing a chat's leaf at a time (``Run.exclusive``), enforced by the
    database (a unique index over running runs), so two processes cannot both start
    one. ``live_run_id`` names the run that holds the chat (``None`` if it ended since).
    """

    def __init__(self, chat_uuid: Any, live_run_id: str | None) -> None:
        held = f"run {live_run_id}" if live_run_id is not None else "another run"
        super().__init__(f"chat {chat_uuid} already has a running run ({held}): one at a time")
        self.chat_uuid = chat_uuid
        self.live_run_id = live_run_id


class VersionConflictError(ConflictError):
    """The seed layer's error for an update that lost an optimistic-concurrency race.

    Its backend patched whole records guarded by a version and raised this once its
    retries ran out (renaming a chat, updating a message). threadstore's backends update
    a record in one transaction, so no threadstore call raises it; it exists so code that
    catches it keeps importing and working.
    """


class CorruptRecordError(StoreError):
    """A stored row could not be read back into its model (bad JSON, an unknown value).

    ``kind`` is the model (``Message``, ``ToolCall``...), ``record_id`` the row's id and
    ``chat_uuid`` / ``message_uuid`` where it belongs, when the row names them. A
    ``ChatStore`` over a store reads such a chat as ``None`` with a logged warning, as a
    corrupt file of the JSON-file store reads.
    """

    def __init__(
        self,
        kind: str,
        record_id: Any,
        reason: str,
        *,
        chat_uuid: Any = None,
        message_uuid: Any = None,
    ) -> None:
        where = "".join(
            f" of {name} {value}"
            for name, value in (("message", message_uuid), ("chat", chat_uuid))
            if value is not None and value != record_id
        )
        super().__init__(f"stored {kind} {record_id}{where} cannot be read: {reason}")
        self.kind = kind
        self.record_id = record_id
        self.chat_uuid = chat_uuid
        self.message_uuid = message_uuid


class StoreUnavailableError(StoreError):
    """The database did not answer within the store's timeout, or cannot be reached.

    Nothing is known to have been written by the call that raised it; store writes are
    idempotent, so it may be retried. ``code`` is stable (``STORE_UNAVAILABLE``);
    ``timeout`` is the store's timeout in seconds, when one was in force.
    """

    code = "STORE_UNAVAILABLE"

    def __init__(self, message: str, *, timeout: float | None = None) -> None:
        super().__init__(message)
        self.timeout = timeout


class MigrationError(StoreError):
    """The database schema is missing, newer than this code, or a migration failed."""


class InvalidInputError(ThreadstoreError, ValueError):
    """Caller-supplied data was rejected; the message says what was wrong."""


class LimitExceededError(InvalidInputError):
    """A documented limit (size, count) was exceeded."""


class BudgetExceededError(ThreadstoreError):
    """A run was refused before it started: what was used reached a budget the user set."""


class ConfigurationError(ThreadstoreError):
    """A URL, option or configuration file could not be understood."""


class ErrorCodes(StrEnum):
    """The ``code`` of each ``RUN_ERROR`` event the storage layer itself emits."""

    INVALID_INPUT = "INVALID_INPUT"
    """The run's input was refused (a new non-user message, another chat's message...)."""
    INTERNAL_ERROR = "INTERNAL_ERROR"
    """The inner agent raised; the client gets this instead of a hung stream."""
    CANCELLED = "CANCELLED"
    """The run was cancelled."""
    RUN_LIVE = "RUN_LIVE"
    """Another run already holds the chat (:class:`RunLiveError`)."""
    CHAT_DELETED = "CHAT_DELETED"
    """The chat was deleted while the run streamed."""
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    """The store did not answer in time (:class:`StoreUnavailableError`)."""
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    """A usage budget of the chat or its user is spent (:class:`BudgetExceededError`)."""
