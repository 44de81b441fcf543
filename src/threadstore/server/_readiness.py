"""``GET /readyz``: whether this server can serve now, as orchestrators ask it.

``/healthz`` says the process is up (liveness: restart it when it stops answering);
``/readyz`` says whether it can do its work: ``200`` when the store answers a trivial
query within its timeout (the schema version it reads), ``503`` with a JSON body saying
why otherwise (route no traffic to it meanwhile; it recovers by itself). It does not
compare that version with this code's: a server refuses to start on a schema newer than
it knows, and one already running when a newer server migrates stays ready. Both
bodies carry ``outbox_depth``, the writes waiting locally for the store (the run
manager's ``outbox_depth()``; 0 without an outbox).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from threadstore.errors import StoreError, StoreUnavailableError
from threadstore.server._deps import ServerState
from threadstore.server._errors import error_response, status_for, unavailable_response

__all__ = ["router"]

router = APIRouter(tags=["server"])

_GRACE = 1.0
"""Seconds past the store's own timeout this check waits before it answers 503 itself."""


@router.get(
    "/readyz",
    summary="Readiness",
    responses={503: {"description": "The store does not answer (or the server is starting)."}},
)
async def readyz(request: Request) -> JSONResponse:
    """``{"status": "ready", "outbox_depth": N}``, or a 503 saying why not."""
    state: ServerState | None = getattr(request.app.state, "threadstore", None)
    if state is None:
        return error_response(
            503, "the server is starting or stopping", code="not_ready", status="starting"
        )
    depth = state.manager.outbox_depth()
    timeout = state.store.timeout
    try:
        # The store bounds its own calls; this bounds a store that does not.
        async with asyncio.timeout(None if timeout is None else timeout + _GRACE):
            await state.store.schema_version()
    except TimeoutError:
        late = StoreUnavailableError(
            f"the store did not answer within {timeout} s", timeout=timeout
        )
        return unavailable_response(late, status="unavailable", outbox_depth=depth)
    except StoreUnavailableError as exc:
        return unavailable_response(exc, status="unavailable", outbox_depth=depth)
    except StoreError as exc:  # the store answers, but with an error (its schema, say)
        _, code = status_for(exc)
        return error_response(503, str(exc), code=code, status="unavailable", outbox_depth=depth)
    return JSONResponse({"status": "ready", "outbox_depth": depth})
