"""Branches of a chat over HTTP: switch, regenerate, edit-and-resend and fork.

A chat is a tree of messages; its active leaf picks the branch every read returns
(see docs/branching.md). Regenerate and edit start a run of the server's agent that
answers on the new branch and answer ``202`` with the run's ids: the client follows
it on ``GET /agui/threads/{thread_id}/runs/{run_id}/events``. Every route is scoped
to the caller: another user's chat answers 404, exactly like a chat that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from uuid import UUID, uuid4

from ag_ui.core import RunAgentInput
from fastapi import APIRouter, status
from pydantic import BaseModel, Field

from threadstore.errors import InvalidInputError, LimitExceededError, NotFoundError
from threadstore.models import Chat, MessageCreate, Role
from threadstore.server._deps import THREAD_TAKEN, AppState, CurrentUser, ServerState, owned_chat
from threadstore.server._limits import check_id

__all__ = ["BranchRun", "EditRequest", "ForkRequest", "MessageRef", "router"]

router = APIRouter(prefix="/api/chats", tags=["branches"])
_Route = TypeVar("_Route", bound=Callable[..., Any])

_MESSAGE_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "The chat, or the message in it, does not exist."}
}


def _branch_run_route(path: str, *, summary: str) -> Callable[[_Route], _Route]:
    """A route that starts a run on a new branch and answers 202 with its ids."""
    return router.post(
        path,
        status_code=status.HTTP_202_ACCEPTED,
        summary=summary,
        responses=_MESSAGE_NOT_FOUND,
    )


class MessageRef(BaseModel):
    """Names one message of the chat."""

    message_uuid: UUID


class EditRequest(MessageRef):
    """A new version of a user message: ``content`` replaces its text on a new branch."""

    content: str = Field(min_length=1)


class ForkRequest(MessageRef):
    """Fork the branch ending at ``message_uuid`` into a new chat."""

    thread_id: str | None = Field(
        default=None, description="The new chat's thread id (default: a fresh one)."
    )


class BranchRun(BaseModel):
    """The run that answers on the new branch; follow it on the AG-UI events route."""

    thread_id: str
    run_id: str
    message_uuid: UUID | None = Field(default=None, description="The new user message (edit only).")


@router.post(
    "/{chat_uuid}/switch",
    summary="Switch to the branch through a message",
    responses=_MESSAGE_NOT_FOUND,
)
async def switch_branch(
    chat_uuid: UUID, body: MessageRef, state: AppState, user: CurrentUser
) -> Chat:
    """Make the branch through ``message_uuid`` active: its newest leaf becomes the chat's leaf.

    Pass a sibling from a page's ``branches`` to show that version of the turn.
    """
    await owned_chat(state, user, chat_uuid)
    return await state.store.branches.switch_branch(chat_uuid, body.message_uuid)


async def _start_run(state: ServerState, user: UUID, chat: Chat, branch_from: UUID) -> str:
    """Start a run of the server's agent answering after ``branch_from``; its run id.

    The run hangs its messages under ``branch_from`` itself, so another request moving
    the chat's leaf meanwhile does not move the answer.
    """
    if state.store.usage.kept:  # as POST /agui: a spent budget answers 402, no run starts
        await state.store.usage.check_budget(user, chat.chat_uuid)
    run_id = f"run-{uuid4().hex}"
    run_input = RunAgentInput(
        thread_id=chat.thread_id,
        run_id=run_id,
        state=chat.state if chat.state is not None else {},
        messages=[],
        tools=[],
        context=[],
        forwarded_props={},
    )
    await state.manager.run(run_input, user, chat, branch_from=branch_from)
    return run_id


@_branch_run_route("/{chat_uuid}/regenerate", summary="Regenerate an answer")
async def regenerate(
    chat_uuid: UUID, body: MessageRef, state: AppState, user: CurrentUser
) -> BranchRun:
    """Answer a user turn again: the new answer is a sibling of the answers before it.

    ``message_uuid`` is the user message, or an answer to it (its user turn is used).
    """
    chat = await owned_chat(state, user, chat_uuid)
    turn = await state.store.branches.user_turn_of(chat_uuid, body.message_uuid)
    run_id = await _start_run(state, user, chat, turn)
    return BranchRun(thread_id=chat.thread_id, run_id=run_id)


@_branch_run_route("/{chat_uuid}/edit", summary="Edit a user message and resend it")
async def edit(chat_uuid: UUID, body: EditRequest, state: AppState, user: CurrentUser) -> BranchRun:
    """Store ``content`` as a new version of the user message and answer it.

    The new message is the old one's sibling (a new first message when it was the
    first); the old version and what followed it stay, one switch away.
    """
    chat = await owned_chat(state, user, chat_uuid)
    size = len(body.content.encode())
    if size > state.limits.max_message_bytes:
        raise LimitExceededError(
            f"content is {size} bytes; the limit is {state.limits.max_message_bytes}"
        )
    old = await state.store.get_message(body.message_uuid)
    if old is None or old.chat_uuid != chat_uuid:
        raise NotFoundError(f"message {body.message_uuid} is not in chat {chat_uuid}")
    if old.role != Role.USER:
        raise InvalidInputError(f"message {body.message_uuid} is not a user message")
    created = await state.store.branches.edit_message(
        body.message_uuid,
        MessageCreate(role=Role.USER, content=body.content, agui_id=f"user-{uuid4().hex}"),
    )
    run_id = await _start_run(state, user, chat, created.message_uuid)
    return BranchRun(thread_id=chat.thread_id, run_id=run_id, message_uuid=created.message_uuid)


@router.post(
    "/{chat_uuid}/fork",
    status_code=status.HTTP_201_CREATED,
    summary="Fork a chat at a message",
    responses={**_MESSAGE_NOT_FOUND, **THREAD_TAKEN},
)
async def fork(chat_uuid: UUID, body: ForkRequest, state: AppState, user: CurrentUser) -> Chat:
    """A new chat of the caller holding a copy of the branch up to ``message_uuid``.

    The new chat records where it came from in ``forked_from_chat_uuid`` and
    ``forked_from_message_uuid``.
    """
    if body.thread_id is not None:
        check_id("thread_id", body.thread_id, state.limits)
    await owned_chat(state, user, chat_uuid)
    return await state.store.branches.fork_chat(
        chat_uuid, body.message_uuid, thread_id=body.thread_id, user_uuid=user
    )
