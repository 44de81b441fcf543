"""Full-text search over HTTP: the caller's messages, never another user's.

The caller is the only user searched (as ``/api/chats`` lists the caller's chats only);
the query is plain words, and a query with none, or too long, answers 422 (the store's
limits, ``InvalidInputError``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from threadstore.models import SearchPage
from threadstore.server._deps import AppState, CurrentUser
from threadstore.server._limits import MAX_CURSOR

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["search"])


@router.get(
    "/search",
    summary="Search my messages",
    responses={422: {"description": "The query has no words, or too many, or is too long."}},
)
async def search_messages(
    state: AppState,
    user: CurrentUser,
    q: Annotated[
        str,
        Query(
            description="Plain words (at most 16, 500 characters); a message matches when it"
            " holds every one, in any case.",
        ),
    ],
    order: Annotated[
        Literal["newest", "best"], Query(description="Newest first, or best match first.")
    ] = "newest",
    all_branches: Annotated[
        bool, Query(description="Also the branches a chat moved away from (regenerate, edit).")
    ] = False,
    limit: Annotated[
        int | None, Query(description="Hits per page: 1 to 100, 20 when not given.")
    ] = None,
    cursor: Annotated[
        str | None,
        Query(max_length=MAX_CURSOR, description="`next_cursor` of the previous page."),
    ] = None,
) -> SearchPage:
    """The caller's messages (text, tool calls, reasoning) holding every word of ``q``,
    with a highlighted snippet each, in the caller's live chats."""
    return await state.store.messages.search(
        user, q, order=order, all_branches=all_branches, limit=limit, cursor=cursor
    )
