"""The one place that maps errors to HTTP statuses and JSON error bodies.

Every error response has the same shape: ``{"detail": "<what was wrong>", "code":
"<machine-readable code>"}`` (plus ``errors`` for request-validation failures). A store
that is away answers ``503`` with code ``store_unavailable`` and a ``Retry-After``
header; an error nothing here expected is a JSON ``500``, never a plain-text one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from threadstore.errors import (
    BudgetExceededError,
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    LimitExceededError,
    MigrationError,
    NotFoundError,
    StoreUnavailableError,
    ThreadstoreError,
)

__all__ = [
    "DEFAULT_RETRY_AFTER",
    "error_response",
    "install_error_handlers",
    "status_for",
    "unavailable_response",
]

logger = logging.getLogger(__name__)

DEFAULT_RETRY_AFTER = 5
"""``Retry-After`` seconds of a 503 when the store names no timeout of its own."""

# Most specific first: the first class the error is an instance of wins.
_STATUS: tuple[tuple[type[ThreadstoreError], int, str], ...] = (
    (LimitExceededError, status.HTTP_413_CONTENT_TOO_LARGE, "limit_exceeded"),
    (BudgetExceededError, status.HTTP_402_PAYMENT_REQUIRED, "budget_exceeded"),
    (InvalidInputError, status.HTTP_422_UNPROCESSABLE_CONTENT, "invalid_input"),
    (NotFoundError, status.HTTP_404_NOT_FOUND, "not_found"),
    (ConflictError, status.HTTP_409_CONFLICT, "conflict"),
    (StoreUnavailableError, status.HTTP_503_SERVICE_UNAVAILABLE, "store_unavailable"),
    (MigrationError, status.HTTP_503_SERVICE_UNAVAILABLE, "schema_not_ready"),
    (ConfigurationError, status.HTTP_500_INTERNAL_SERVER_ERROR, "configuration_error"),
    (ThreadstoreError, status.HTTP_500_INTERNAL_SERVER_ERROR, "internal_error"),
)

_CODE_BY_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "limit_exceeded",
    415: "unsupported_media_type",
    422: "invalid_input",
}


def status_for(exc: ThreadstoreError) -> tuple[int, str]:
    """Return (HTTP status, error code) for a threadstore error."""
    # ThreadstoreError, last in _STATUS, matches every error the others do not.
    return next((code_status, code) for cls, code_status, code in _STATUS if isinstance(exc, cls))


def error_response(
    status_code: int,
    detail: str,
    *,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """Build the JSON error body every route returns."""
    body: dict[str, Any] = {
        "detail": detail,
        "code": code or _CODE_BY_STATUS.get(status_code, "error"),
        **extra,
    }
    return JSONResponse(body, status_code=status_code, headers=headers)


def _location(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc) or "body"


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(err.get("type") == "json_invalid" for err in errors):
        ctx = errors[0].get("ctx") or {}
        reason = ctx.get("error", "could not be parsed")
        return error_response(400, f"request body is not valid JSON: {reason}", code="bad_json")
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    detail = f"{_location(first.get('loc', ()))}: {first.get('msg', 'invalid value')}"
    if len(errors) > 1:
        detail += f" (and {len(errors) - 1} more)"
    slim = [
        {"loc": list(err.get("loc", ())), "msg": err.get("msg"), "type": err.get("type")}
        for err in errors[:20]
    ]
    return error_response(422, detail, code="invalid_input", errors=slim)


def unavailable_response(exc: StoreUnavailableError, **extra: Any) -> JSONResponse:
    """The ``503`` for a store that is away: what happened, and when to try again."""
    # About one store timeout: a retry sooner would likely wait out the same outage.
    wait = DEFAULT_RETRY_AFTER if exc.timeout is None else max(1, math.ceil(exc.timeout))
    return error_response(
        503,
        f"{exc}; try again later",
        code="store_unavailable",
        headers={"Retry-After": str(wait)},
        **extra,
    )


async def _on_threadstore_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ThreadstoreError)
    if isinstance(exc, StoreUnavailableError):
        logger.warning("%s %s: %s", request.method, request.url.path, exc)
        return unavailable_response(exc)
    status_code, code = status_for(exc)
    detail = str(exc) if status_code < 500 else "internal server error"
    return error_response(status_code, detail, code=code)


async def _on_unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    # The server's last resort (Starlette logs the traceback after this answer).
    return error_response(500, "internal server error", code="internal_error")


# FastAPI's answer to a body its JSON parser raised on other than with a decode error
# (bytes that are not UTF-8, say); the client learns what the body must be instead.
_FASTAPI_BODY_ERROR = "There was an error parsing the body"


def _http_error_handler(max_json_depth: int) -> Callable[[Request, Exception], Awaitable[Any]]:
    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 400 and detail == _FASTAPI_BODY_ERROR:
            if isinstance(exc.__cause__, RecursionError):
                # Python's JSON parser gives up on nesting about a thousand levels deep;
                # the body is JSON, only deeper than anything threadstore takes.
                return error_response(
                    422,
                    "request body is nested too deeply: objects and arrays may nest at "
                    f"most {max_json_depth} levels",
                    code="invalid_input",
                )
            return error_response(
                400, "request body is not valid JSON: it must be UTF-8 JSON text", code="bad_json"
            )
        return error_response(exc.status_code, detail, headers=exc.headers)

    return on_http_error


def install_error_handlers(app: FastAPI, *, max_json_depth: int) -> None:
    """Register the handlers that turn every error into the common JSON shape.

    ``max_json_depth`` is the nesting limit a body too deep to parse is told about.
    """
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(ThreadstoreError, _on_threadstore_error)
    app.add_exception_handler(Exception, _on_unexpected_error)
    app.add_exception_handler(StarletteHTTPException, _http_error_handler(max_json_depth))
