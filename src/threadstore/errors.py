"""One rooted exception tree for everything threadstore raises on purpose.

    ThreadstoreError
    ├── StoreError                 a backend could not do what was asked
    │   ├── NotFoundError          a referenced chat/message does not exist (also a ValueError)
    │   ├── ConflictError          a uniqueness or concurrency rule was violated
    │   └── MigrationError         the schema is missing, too new, or a migration failed
    ├── InvalidInputError          caller-supplied data was rejected (also a ValueError)
    │   └── LimitExceededError     a documented size/count limit was exceeded
    └── ConfigurationError         a URL, option or file could not be understood

``InvalidInputError`` and ``NotFoundError`` subclass ``ValueError`` so code written
against the seed contract (which documents ``ValueError`` for a missing chat id or
parent message) keeps working unchanged. Reads of an unknown record return ``None``.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "ConflictError",
    "InvalidInputError",
    "LimitExceededError",
    "MigrationError",
    "NotFoundError",
    "StoreError",
    "ThreadstoreError",
]


class ThreadstoreError(Exception):
    """Root of every error threadstore raises on purpose."""


class StoreError(ThreadstoreError):
    """A storage backend could not complete an operation."""


class NotFoundError(StoreError, ValueError):
    """A write referenced a chat or message that does not exist."""


class ConflictError(StoreError):
    """A uniqueness or concurrency rule was violated."""


class MigrationError(StoreError):
    """The database schema is missing, newer than this code, or a migration failed."""


class InvalidInputError(ThreadstoreError, ValueError):
    """Caller-supplied data was rejected; the message says what was wrong."""


class LimitExceededError(InvalidInputError):
    """A documented limit (size, count) was exceeded."""


class ConfigurationError(ThreadstoreError):
    """A URL, option or configuration file could not be understood."""
