"""The web page (``/`` and ``/static``) and the thread lookup it opens chats with."""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from threadstore.models import Chat
from threadstore.server._deps import AppState, CurrentUser
from threadstore.server._limits import check_id
from threadstore.web import CONTENT_SECURITY_POLICY, STATIC_DIR

__all__ = ["ThreadInfo", "install_web", "router"]

router = APIRouter(tags=["threads"])

_PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class ThreadInfo(BaseModel):
    """A thread of the caller: its stored chat (if any) and its runs that are live now."""

    chat: Chat | None
    live_run_ids: list[str] = Field(
        description="Runs of this thread streaming now, newest first; resume them through "
        "`/agui/threads/{thread_id}/runs/{run_id}/events`."
    )


@router.get("/api/threads/{thread_id}", summary="Look up a thread")
async def get_thread(thread_id: str, state: AppState, user: CurrentUser) -> ThreadInfo:
    """Return the caller's chat for ``thread_id`` and the ids of its live runs.

    Live runs of other server processes are included on PostgreSQL. ``404`` when the
    caller has neither a chat nor a live run on this thread.
    """
    check_id("thread_id", thread_id, state.limits)
    chat = await state.store.get_chat_by_thread_id(user, thread_id)
    local = [
        handle.run_id
        for handle in state.manager.live_runs()
        if handle.thread_id == thread_id and handle.user_uuid == user
    ][::-1]
    remote = await state.manager.live_chat_runs(chat.chat_uuid) if chat is not None else []
    live = [*local, *(run_id for run_id in remote if run_id not in local)]
    if chat is None and not live:
        raise HTTPException(404, detail=f"thread {thread_id} not found")
    return ThreadInfo(chat=chat, live_run_ids=live)


@cache
def _page() -> bytes:
    return (STATIC_DIR / "index.html").read_bytes()


def install_web(app: FastAPI) -> None:
    """Serve the page at ``/`` and its files under ``/static``."""

    @app.get("/", include_in_schema=False)
    async def page() -> Any:
        return HTMLResponse(_page(), headers=_PAGE_HEADERS)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.include_router(router)
