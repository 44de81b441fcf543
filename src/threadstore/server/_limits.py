"""Documented request limits and where they are enforced.

Bodies are capped (and must be JSON) by :class:`BodyLimitMiddleware` before any
parsing; what a run input may contain (message count and size, id lengths, nesting
depth, characters) is checked by :func:`check_run_input` before a run starts, so a
rejected request stores nothing.

Text is checked here, at the edge, the same way for every backend: a NUL character
(PostgreSQL's ``text`` cannot hold one) or a lone surrogate (not encodable as UTF-8)
anywhere in an id, a name, message content, state or any other JSON value is a 422.
So whatever one store accepted, every other store accepts too: an export from SQLite
imports into PostgreSQL. Likewise a number that is not finite (``NaN``, ``Infinity``, or
``1e400``, which parses as infinity) is a 422 wherever it is: JSON cannot carry one out
again, so a state holding one could never be sent or stored. A date outside
:data:`FIRST_DATE` .. :data:`LAST_DATE` is a 422 too (see there).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from ag_ui.core import RunAgentInput
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from threadstore.errors import InvalidInputError, LimitExceededError
from threadstore.server._errors import error_response

__all__ = [
    "DEFAULT_LIMITS",
    "FIRST_DATE",
    "LAST_DATE",
    "MAX_CURSOR",
    "BodyLimitMiddleware",
    "Limits",
    "check_id",
    "check_json",
    "check_name",
    "check_run_input",
    "check_text",
]

MAX_CURSOR = 2**63 - 1
"""The largest message or event number a query accepts (the stores' 64-bit integers)."""

FIRST_DATE = datetime(1, 1, 2, tzinfo=UTC)
"""The earliest date a request may carry (an import's ``created_at``, say).

PostgreSQL reads the first and the last instant Python can hold back as ``-infinity``
and ``infinity``, which no reader can parse; a day's margin at each end also keeps the
local time of every date, in any time zone, within what Python can hold.
"""
LAST_DATE = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
"""The latest date a request may carry (see :data:`FIRST_DATE`)."""


@dataclass(frozen=True)
class Limits:
    """What one request may carry; every limit answers with a 413 or 422 that names it."""

    max_body_bytes: int = 8 * 1024 * 1024
    """Largest request body, except chat imports (8 MiB)."""
    max_import_bytes: int = 64 * 1024 * 1024
    """Largest chat-import body (64 MiB)."""
    max_message_bytes: int = 1024 * 1024
    """Largest single message of a run input, as JSON (1 MiB)."""
    max_messages: int = 2000
    """Most messages one run input may carry (clients echo the whole history)."""
    max_id_chars: int = 256
    """Longest thread, run or message id."""
    max_name_chars: int = 200
    """Longest chat name."""
    max_import_messages: int = 100_000
    """Most messages one imported chat may carry."""
    max_json_depth: int = 64
    """Deepest nesting of objects and arrays in state, message content, tools and the like."""


DEFAULT_LIMITS = Limits()


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(kind: str, value: str) -> None:
    """Reject text with a NUL character or a lone surrogate (see the module doc)."""
    if "\x00" in value:
        raise InvalidInputError(
            f"{kind} contains a NUL character (U+0000), which threadstore does not store"
        )
    if not value.isascii() and (found := _SURROGATE.search(value)) is not None:
        raise InvalidInputError(
            f"{kind} contains a lone surrogate (U+{ord(found.group()):04X}), which is not "
            "valid Unicode text"
        )


def check_id(kind: str, value: str, limits: Limits) -> None:
    """Reject an empty, over-long or unstorable id with a message that names it."""
    if not value.strip():
        raise InvalidInputError(f"{kind} must not be empty")
    if len(value) > limits.max_id_chars:
        raise LimitExceededError(
            f"{kind} is {len(value)} characters; the limit is {limits.max_id_chars}"
        )
    check_text(kind, value)


def check_name(name: str, limits: Limits) -> str:
    """Return a chat name stripped; reject a blank, over-long or unstorable one."""
    stripped = name.strip()
    if not stripped:
        raise InvalidInputError("name must not be blank")
    if len(stripped) > limits.max_name_chars:
        raise InvalidInputError(
            f"name is {len(stripped)} characters; the limit is {limits.max_name_chars}"
        )
    check_text("name", stripped)
    return stripped


def _check_number(kind: str, value: float) -> None:
    """Reject a number that is not finite (``NaN``, ``Infinity``, ``1e400``)."""
    if not math.isfinite(value):
        raise InvalidInputError(
            f"{kind} is {value!r}, which is not a finite number; JSON numbers must be finite"
        )


def _check_date(kind: str, value: datetime) -> None:
    """Reject a date every backend cannot store and read back (see :data:`FIRST_DATE`)."""
    # A date without a time zone is stored as UTC.
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not FIRST_DATE <= aware <= LAST_DATE:
        raise InvalidInputError(
            f"{kind} is {value.isoformat()}, outside the dates threadstore stores: from "
            f"{FIRST_DATE.date().isoformat()} to {LAST_DATE.date().isoformat()} (UTC)"
        )


def check_json(kind: str, value: object, limits: Limits) -> None:
    """Reject JSON (or a model holding it) nested too deeply or holding unstorable values.

    Unstorable: text :func:`check_text` refuses, numbers that are not finite, dates out
    of range. Walks with an explicit stack, so no input is deep enough to exhaust Python's.
    """
    stack: list[tuple[object, int, str]] = [(value, 0, kind)]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            check_text(where, item)
            continue
        if isinstance(item, float):
            _check_number(where, item)
            continue
        if isinstance(item, datetime):
            _check_date(where, item)
            continue
        if isinstance(item, BaseModel):
            # Iterating a model yields its declared fields, then any extra ones.
            stack.extend((v, depth, f"{where}.{k}") for k, v in item)
            continue
        if not isinstance(item, dict | list | tuple):
            continue
        if depth >= limits.max_json_depth:
            raise InvalidInputError(
                f"{kind} is nested more than {limits.max_json_depth} levels deep"
            )
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    check_text(f"{where} key", key)
                stack.append((child, depth + 1, f"{where}.{key}"))
        else:
            stack.extend((child, depth + 1, f"{where}[{i}]") for i, child in enumerate(item))


def check_run_input(run_input: RunAgentInput, limits: Limits) -> None:
    """Raise ``InvalidInputError``/``LimitExceededError`` when the input breaks a limit."""
    check_id("threadId", run_input.thread_id, limits)
    check_id("runId", run_input.run_id, limits)
    if run_input.parent_run_id is not None:
        check_id("parentRunId", run_input.parent_run_id, limits)
    if len(run_input.messages) > limits.max_messages:
        raise LimitExceededError(
            f"the input carries {len(run_input.messages)} messages; "
            f"the limit is {limits.max_messages} per request"
        )
    seen: set[str] = set()
    for index, message in enumerate(run_input.messages):
        check_id(f"messages[{index}].id", message.id, limits)
        if message.id in seen:
            raise InvalidInputError(f"messages[{index}].id {message.id!r} appears twice")
        seen.add(message.id)
        # Before sizing it: a lone surrogate cannot even be serialized to measure.
        check_json(f"messages[{index}]", message, limits)
        size = len(message.model_dump_json(by_alias=True).encode("utf-8"))
        if size > limits.max_message_bytes:
            raise LimitExceededError(
                f"messages[{index}] ({message.id!r}) is {size} bytes; "
                f"the limit is {limits.max_message_bytes} bytes per message"
            )
    fields = type(run_input).model_fields
    for name, value in run_input:
        if name != "messages":
            # A field this version of AG-UI does not know (a newer client's) is kept under
            # the name it came with, and checked like the rest.
            field = fields.get(name)
            check_json(field.alias or name if field is not None else name, value, limits)


class BodyLimitMiddleware:
    """Reject request bodies over a per-request byte limit (413) or not JSON (415).

    Both before parsing: every route that takes a body takes JSON, and without this a
    ``text/plain`` body would be answered with a 422 about dictionaries.

    The body is read up front (the app would buffer it anyway) and replayed; later
    ``receive`` calls go to the server, so disconnect detection keeps working.
    """

    def __init__(self, app: ASGIApp, limit_for: Callable[[Scope], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Buffer and check the body of an HTTP request, then call the app."""
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        content_type = _header(scope, b"content-type")
        if content_type is not None and not _is_json(content_type):
            if _header(scope, b"content-length") not in (None, b"0") or _header(
                scope, b"transfer-encoding"
            ):
                response = error_response(
                    415,
                    "request body must be JSON (Content-Type: application/json), "
                    f"got {content_type.decode('latin-1')[:80]!r}",
                )
                await response(scope, receive, send)
                return
        limit = self.limit_for(scope)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(scope, receive, send, limit)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _too_large(scope, receive, send, limit)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _header(scope: Scope, wanted: bytes) -> bytes | None:
    for name, value in scope.get("headers", ()):
        if name == wanted:
            return bytes(value)
    return None


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    response = error_response(
        413,
        f"request body is larger than the limit of {limit} bytes",
        code="body_too_large",
        headers={"Connection": "close"},
    )
    await response(scope, receive, send)
