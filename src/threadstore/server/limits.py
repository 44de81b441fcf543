"""Documented request limits and where they are enforced.

Bodies are capped by :class:`BodyLimitMiddleware` before any parsing; what a run input
may contain (message count and size, id lengths) is checked by
:func:`check_run_input` before a run starts, so a rejected request stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ag_ui.core import RunAgentInput
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from threadstore.errors import InvalidInputError, LimitExceededError
from threadstore.server.errors import error_response

__all__ = ["DEFAULT_LIMITS", "BodyLimitMiddleware", "Limits", "check_id", "check_run_input"]


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


DEFAULT_LIMITS = Limits()


def check_id(kind: str, value: str, limits: Limits) -> None:
    """Reject an empty or over-long id with a message that names it."""
    if not value.strip():
        raise InvalidInputError(f"{kind} must not be empty")
    if len(value) > limits.max_id_chars:
        raise LimitExceededError(
            f"{kind} is {len(value)} characters; the limit is {limits.max_id_chars}"
        )


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
        size = len(message.model_dump_json(by_alias=True).encode("utf-8"))
        if size > limits.max_message_bytes:
            raise LimitExceededError(
                f"messages[{index}] ({message.id!r}) is {size} bytes; "
                f"the limit is {limits.max_message_bytes} bytes per message"
            )


class BodyLimitMiddleware:
    """Reject request bodies over a per-request byte limit with a 413, before parsing.

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


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    response = error_response(
        413,
        f"request body is larger than the limit of {limit} bytes",
        code="body_too_large",
        headers={"Connection": "close"},
    )
    await response(scope, receive, send)
