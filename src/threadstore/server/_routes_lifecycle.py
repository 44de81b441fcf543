"""A conversation's life over HTTP: compaction (summaries), erasure, retention.

Compaction routes are the caller's, on their own chats (another user's chat answers 404
like one that does not exist); erasure and retention are the server's admins'.
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, HTTPException, Query, Response, status
from pydantic import BaseModel, Field

from threadstore.keys import user_uuid_for
from threadstore.lifecycle import CompactionPolicy
from threadstore.models import ErasureReceipt, Summary
from threadstore.server._deps import (
    ADMINS_ONLY,
    CHAT_NOT_FOUND,
    AppState,
    CurrentUser,
    owned_chat,
    require_admin,
)
from threadstore.server._limits import check_id

__all__ = ["CompactRequest", "CompactResult", "router"]

router = APIRouter(prefix="/api", tags=["lifecycle"])


DEFAULT_POLICY = CompactionPolicy()
"""What a manual compaction uses on a server given no policy: the deterministic summarizer."""


class CompactRequest(BaseModel):
    """How much of the chat stays out of the summary (the server's policy by default)."""

    keep_messages: int | None = Field(
        default=None, ge=0, le=100_000, description="Newest messages kept out of the summary."
    )
    keep_tokens: int | None = Field(
        default=None, ge=0, le=10_000_000, description="Newest tokens (about 4 characters each)."
    )


class CompactResult(BaseModel):
    """The new summary, or ``null`` with why none was made."""

    summary: Summary | None
    detail: str


@router.post(
    "/chats/{chat_uuid}/compact",
    summary="Compact a chat: summarize its older messages for the agent",
    responses=CHAT_NOT_FOUND,
)
async def compact_chat(
    chat_uuid: UUID,
    state: AppState,
    user: CurrentUser,
    body: Annotated[CompactRequest | None, Body()] = None,
) -> CompactResult:
    """Summarize the active branch up to a safe cut; every message stays as it is.

    The agent is given the summary and the messages after it from the next run on; the
    chat's messages, the page and the export still show every message.
    """
    await owned_chat(state, user, chat_uuid)
    policy = (state.compaction or DEFAULT_POLICY).for_chat(chat_uuid)
    given = body is not None and (body.keep_messages, body.keep_tokens) != (None, None)
    summary = await state.store.branches.compact(
        chat_uuid,
        policy.summarizer,
        keep_messages=body.keep_messages if body and given else policy.keep_messages,
        keep_tokens=body.keep_tokens if body and given else policy.keep_tokens,
        name=policy.summarizer_name,
    )
    if summary is None:
        return CompactResult(
            summary=None,
            detail="nothing to compact: every message the agent gets must stay, or is summarized",
        )
    return CompactResult(
        summary=summary, detail=f"summarized {summary.message_count} message(s) for the agent"
    )


@router.get(
    "/chats/{chat_uuid}/summaries",
    summary="A chat's summaries, newest first",
    responses=CHAT_NOT_FOUND,
)
async def list_summaries(chat_uuid: UUID, state: AppState, user: CurrentUser) -> list[Summary]:
    """Every summary of the chat (of any branch), newest first."""
    await owned_chat(state, user, chat_uuid)
    return await state.store.branches.summaries(chat_uuid)


@router.delete(
    "/chats/{chat_uuid}/summaries/{summary_uuid}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Undo a compaction",
    responses={404: {"description": "No such chat of mine, or no such summary in it."}},
)
async def remove_summary(
    chat_uuid: UUID, summary_uuid: UUID, state: AppState, user: CurrentUser
) -> Response:
    """Remove a summary: the agent gets the messages it covered again."""
    await owned_chat(state, user, chat_uuid)
    if not await state.store.branches.remove_summary(chat_uuid, summary_uuid):
        raise HTTPException(404, detail=f"summary {summary_uuid} not found in chat {chat_uuid}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# --- erasure (admins) -------------------------------------------------------------------


@router.delete(
    "/admin/users/{user_id}",
    summary="Forget a user: remove everything of theirs (admins)",
    responses=ADMINS_ONLY,
)
async def forget_user(user_id: str, state: AppState, caller: CurrentUser) -> ErasureReceipt:
    """Remove every chat, message, tool call, reasoning step, run, relayed event and summary
    of the user, and the runs this server keeps of theirs; a tombstone keeps a run still
    streaming from writing anything back. ``user_id`` as the authenticator names users (or
    their UUID). Returns the receipt (counts per kind, when, by whom), which is kept.
    """
    require_admin(state, caller, "forget users")
    check_id("user_id", user_id, state.limits)
    return await state.store.chats.forget_user(user_uuid_for(user_id), requested_by=str(caller))


@router.get(
    "/admin/erasures",
    summary="Receipts of past erasures (admins)",
    responses=ADMINS_ONLY,
)
async def list_erasures(
    state: AppState,
    caller: CurrentUser,
    user: Annotated[str | None, Query(description="Only this user's (id or UUID).")] = None,
) -> list[ErasureReceipt]:
    """Every erasure's receipt, newest first: what went, when, by whom; never content."""
    require_admin(state, caller, "read erasure receipts")
    return await state.store.chats.erasure_receipts(None if user is None else user_uuid_for(user))
