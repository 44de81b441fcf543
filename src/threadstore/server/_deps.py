"""What every route depends on: the server's state and the authenticated caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any
from uuid import UUID

from fastapi import Depends, HTTPException, Request

from threadstore.agui import BackgroundCompactor, DistributedRunManager
from threadstore.lifecycle import CompactionPolicy
from threadstore.models import Chat
from threadstore.server._auth import Authenticator
from threadstore.server._limits import Limits
from threadstore.store import Store

if TYPE_CHECKING:
    from threadstore.server._run_gate import RunGate

__all__ = [
    "ADMINS_ONLY",
    "CHAT_NOT_FOUND",
    "THREAD_TAKEN",
    "AppState",
    "CurrentUser",
    "ServerState",
    "current_user",
    "get_state",
    "owned_chat",
    "require_admin",
]

# The OpenAPI ``responses`` of the routes that answer these on their own.
CHAT_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such chat of mine."}}
ADMINS_ONLY: dict[int | str, dict[str, Any]] = {
    403: {"description": "The caller is not one of the server's admins."}
}
THREAD_TAKEN: dict[int | str, dict[str, Any]] = {
    409: {"description": "The caller already has a chat with that thread id."}
}


@dataclass
class ServerState:
    """Everything the routes share; built by the app's lifespan."""

    store: Store
    manager: DistributedRunManager[Any]
    """Runs of this process; on PostgreSQL it also reaches runs of the other processes."""
    auth: Authenticator
    limits: Limits
    keepalive_interval: float
    runs: RunGate
    """Starts runs: each run id once, one live run per thread."""
    stale_after: float = 30.0
    """Seconds without a heartbeat after which the sweep finalizes a run."""
    sweep_interval: float | None = 60.0
    """Seconds between two sweeps of this server (``None``: only at start-up)."""
    admins: frozenset[UUID] = frozenset()
    """Users who may list every user's chats (``GET /api/admin/chats``)."""
    compaction: CompactionPolicy | None = None
    """When chats are compacted after their runs, and with which summarizer (also the
    summarizer of ``POST /api/chats/{id}/compact``)."""
    compactor: BackgroundCompactor | None = None
    """Compacts chats over the policy's budget after their runs (with ``compaction``)."""


# Both dependencies are ``async def`` although they never await: FastAPI runs a plain
# ``def`` dependency in its thread pool, two thread hops per request for nothing.
async def get_state(request: Request) -> ServerState:
    """Return the running app's :class:`ServerState`."""
    state: ServerState | None = getattr(request.app.state, "threadstore", None)
    if state is None:
        raise HTTPException(503, detail="the server is starting or stopping")
    return state


async def current_user(request: Request, state: Annotated[ServerState, Depends(get_state)]) -> UUID:
    """Return the caller's user UUID (401 when the request carries no valid identity).

    The authenticator runs on the event loop, so it must not block.
    """
    return state.auth.authenticate(request)


AppState = Annotated[ServerState, Depends(get_state)]
CurrentUser = Annotated[UUID, Depends(current_user)]


async def owned_chat(state: ServerState, user: UUID, chat_uuid: UUID) -> Chat:
    """Return the caller's chat; 404 when it does not exist or belongs to someone else."""
    chat = await state.store.chats.get_chat(chat_uuid)
    if chat is None or chat.user_uuid != user:
        # The same answer either way, so a caller cannot probe other users' chat ids.
        raise HTTPException(404, detail=f"chat {chat_uuid} not found")
    return chat


def require_admin(state: ServerState, caller: UUID, what: str) -> None:
    """403 unless the caller is one of the server's admins; ``what`` they may not do."""
    if caller not in state.admins:
        raise HTTPException(403, detail=f"only admins may {what}")
