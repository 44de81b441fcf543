"""Who is calling: the single local user, bearer tokens, or a trusted proxy header.

Every request resolves to one user UUID before any route runs; routes only ever read
and write that user's chats. User ids that are not UUIDs (a token file's ``alice``, a
proxy's ``X-User-Id: 42``) become one with ``uuid5(USER_NAMESPACE, user_id)``, so the
same id always maps to the same user, in the server and in the CLI's ``--user``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from uuid import UUID

from fastapi import HTTPException, Request, status

from threadstore.errors import ConfigurationError
from threadstore.keys import USER_NAMESPACE, user_uuid_for

__all__ = [
    "LOCAL_USER_ID",
    "LOCAL_USER_UUID",
    "TOKENS_ENV_VAR",
    "USER_NAMESPACE",
    "Authenticator",
    "HeaderAuth",
    "LocalUserAuth",
    "TokenAuth",
    "parse_token_pairs",
    "user_uuid_for",
]

LOCAL_USER_ID = "local"
"""The user id of the single local user (the default when auth is off)."""

TOKENS_ENV_VAR = "THREADSTORE_TOKENS"
"""Environment variable holding ``token=user_id`` pairs for ``--auth tokens``."""


LOCAL_USER_UUID = user_uuid_for(LOCAL_USER_ID)
"""The UUID every chat belongs to when the server runs without auth."""


class Authenticator(Protocol):
    """Resolves the caller of a request to a user UUID, or raises a 401."""

    def authenticate(self, request: Request) -> UUID:
        """Return the caller's user UUID; raise ``HTTPException(401)`` when unknown."""
        ...


@dataclass(frozen=True)
class LocalUserAuth:
    """No auth: every request is the one local user."""

    user_uuid: UUID = LOCAL_USER_UUID

    def authenticate(self, request: Request) -> UUID:
        """Return the local user."""
        return self.user_uuid


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=detail, headers={"WWW-Authenticate": "Bearer"}
    )


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True)
class TokenAuth:
    """``Authorization: Bearer <token>``; each token names one user id."""

    tokens: Mapping[str, str]
    """token -> user id."""
    _by_digest: dict[bytes, UUID] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ConfigurationError("token auth needs at least one token=user_id pair")
        # Keyed by digest so a lookup never compares raw secrets byte by byte.
        by_digest = {_digest(t): user_uuid_for(u) for t, u in self.tokens.items()}
        object.__setattr__(self, "_by_digest", by_digest)

    @classmethod
    def from_file(cls, path: str | Path) -> TokenAuth:
        """Read ``token=user_id`` lines (blank lines and ``#`` comments skipped)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read tokens file {str(path)!r}: {exc}") from exc
        return cls(parse_token_pairs(text))

    @classmethod
    def from_env(cls, var: str = TOKENS_ENV_VAR) -> TokenAuth:
        """Read ``token=user_id`` pairs, separated by commas or newlines, from ``var``."""
        raw = os.environ.get(var)
        if not raw:
            raise ConfigurationError(f"--auth tokens needs a tokens file or the {var} variable")
        return cls(parse_token_pairs(raw.replace(",", "\n")))

    def authenticate(self, request: Request) -> UUID:
        """Return the user of the bearer token; 401 when it is missing, unknown or repeated."""
        values = request.headers.getlist("authorization")
        if len(values) > 1:
            # Which copy counts would be up to each proxy on the way: trust none.
            raise _unauthorized(f"Authorization header appears {len(values)} times; send it once")
        header = values[0] if values else ""
        if not header:
            raise _unauthorized("missing Authorization: Bearer <token> header")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("Authorization header must be 'Bearer <token>'")
        user = self._by_digest.get(_digest(token.strip()))
        if user is None:
            raise _unauthorized("unknown API token")
        return user


@dataclass(frozen=True)
class HeaderAuth:
    """A header set by a trusted proxy names the user (e.g. ``X-User-Id``)."""

    header: str = "X-User-Id"

    def authenticate(self, request: Request) -> UUID:
        """Return the user named by the header; 401 when missing, empty or repeated."""
        values = request.headers.getlist(self.header)
        if len(values) > 1:
            # A proxy that appends rather than replaces would let the client's own copy
            # through; no copy can be trusted then.
            raise _unauthorized(f"{self.header} header appears {len(values)} times; send it once")
        value = values[0].strip() if values else ""
        if not value:
            raise _unauthorized(f"missing {self.header} header")
        if len(value) > 256:
            raise _unauthorized(f"{self.header} header is longer than 256 characters")
        return user_uuid_for(value)


def parse_token_pairs(text: str) -> dict[str, str]:
    """Parse ``token=user_id`` lines into a dict; raise ``ConfigurationError`` on a bad line."""
    pairs: dict[str, str] = {}
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        token, sep, user = line.partition("=")
        if not sep or not token.strip() or not user.strip():
            raise ConfigurationError(f"tokens line {number}: expected 'token=user_id'")
        pairs[token.strip()] = user.strip()
    return pairs
