"""The chat-history JSON API: list, read, rename, delete, export and import chats.

Every route is scoped to the caller: another user's chat answers 404, exactly like
a chat that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import takewhile
from typing import Annotated
from uuid import UUID, uuid4

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Response, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from threadstore.chat import UIMessage, ui_from_messages
from threadstore.errors import InvalidInputError
from threadstore.models import Chat, Message, Role, Summary
from threadstore.server._deps import (
    ADMINS_ONLY,
    THREAD_TAKEN,
    AppState,
    CurrentUser,
    owned_chat,
    require_admin,
)
from threadstore.server._limits import MAX_CURSOR, check_id, check_json, check_name
from threadstore.store import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Store
from threadstore.transfer import ChatExport, export_chat_json_pieces, import_chat

__all__ = [
    "BranchPoint",
    "ChatList",
    "ChatRename",
    "ChatSummary",
    "MessagePage",
    "admin_router",
    "router",
]

router = APIRouter(prefix="/api/chats", tags=["chats"])

admin_router = APIRouter(prefix="/api/admin", tags=["admin"])


class ChatSummary(Chat):
    """A chat with its newest message (``None`` for an empty chat)."""

    last_message: Message | None = None


class ChatList(BaseModel):
    """One page of the caller's chats, newest activity first."""

    items: list[ChatSummary]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` to get the next page; null on the last page."
    )


class BranchPoint(BaseModel):
    """Where a message stands among its siblings (the versions of its turn)."""

    index: int = Field(description="The message's position among `siblings` (0-based).")
    count: int = Field(description="How many versions the turn has.")
    siblings: list[UUID] = Field(description="Every version's message uuid, in creation order.")


class _HistoryPage(BaseModel):
    """The cursors of a page of a chat's history (``Message.seq`` values)."""

    next_cursor: int | None = Field(
        default=None, description="Pass as `after` for the next (newer) page; null when none."
    )
    prev_cursor: int | None = Field(
        default=None, description="Pass as `before` for the previous (older) page; null when none."
    )


class MessagePage(_HistoryPage):
    """One page of a chat's history (its active branch), oldest first."""

    items: list[Message]
    branches: dict[UUID, BranchPoint] = Field(
        default_factory=dict,
        description="For each message of the page that has siblings, where it stands among "
        "them: enough to draw a '2/3' switcher (switch with `POST .../switch`).",
    )
    summaries: list[Summary] = Field(
        default_factory=list,
        description="The chat's summaries whose span ends at a message of the page, newest "
        "first: the agent is given the newest one of the active branch instead of the "
        "messages it covers (undo with `DELETE .../summaries/{id}`).",
    )


class ChatRename(BaseModel):
    """The body of a rename."""

    name: str = Field(min_length=1)


MAX_SEARCH_CHARS = 200
"""The longest text ``q`` may search chat names for (as long as a name may be)."""

_END_OF_CHAT = 2**62  # above every message seq: "before the end" is the newest page

PageSize = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description="Page size.")]
ListCursor = Annotated[str | None, Query(description="`next_cursor` of the previous page.")]
NameSearch = Annotated[
    str | None,
    Query(
        max_length=MAX_SEARCH_CHARS,
        description="Only chats whose name contains this text, ignoring case.",
    ),
]


@dataclass
class ChatListQuery:
    """Which page of a chat list: its size, the page it follows, and a name filter."""

    limit: PageSize = DEFAULT_PAGE_SIZE
    cursor: ListCursor = None
    q: NameSearch = None


ChatPage = Annotated[ChatListQuery, Depends()]


@dataclass
class AnyUsersChatListQuery(ChatListQuery):
    """A page of every user's chats, or of one user's."""

    user: Annotated[UUID | None, Query(description="Only this user's chats.")] = None


@router.get("", summary="List my chats")
async def list_chats(state: AppState, user: CurrentUser, page: ChatPage) -> ChatList:
    """Return the caller's chats, newest activity first, each with its last message."""
    return await _chat_list(state, user, page)


@admin_router.get(
    "/chats",
    summary="List every user's chats (admins)",
    responses=ADMINS_ONLY,
)
async def list_all_chats(
    state: AppState,
    caller: CurrentUser,
    page: Annotated[AnyUsersChatListQuery, Depends()],
) -> ChatList:
    """Every user's chats, newest activity first, one page at a time.

    The paged form of the store's ``get_all_chats()``: however many chats the store
    holds, a request reads one page. Only the users the app names as ``admins``.
    """
    require_admin(state, caller, "list every chat")
    return await _chat_list(state, page.user, page)


async def _chat_list(state: AppState, user: UUID | None, query: ChatListQuery) -> ChatList:
    page = await state.store.chats.list_chats(
        user, limit=query.limit, cursor=query.cursor, name_contains=query.q
    )
    last = await state.store.get_last_messages([chat.chat_uuid for chat in page.items])
    items = [
        ChatSummary.model_validate({**chat.model_dump(), "last_message": last.get(chat.chat_uuid)})
        for chat in page.items
    ]
    return ChatList(items=items, next_cursor=page.next_cursor)


@router.post(
    "/import",
    status_code=status.HTTP_201_CREATED,
    summary="Import a chat",
    responses=THREAD_TAKEN,
)
async def import_one(
    state: AppState,
    user: CurrentUser,
    document: Annotated[ChatExport, Body(description="A document made by the export route.")],
    thread_id: Annotated[
        str | None, Query(description="Import under this thread id instead of the exported one.")
    ] = None,
) -> Chat:
    """Create a new chat for the caller from an export document (all or nothing)."""
    check_id("thread_id", thread_id or document.chat.thread_id, state.limits)
    if document.chat.name is not None:
        check_name(document.chat.name, state.limits)
    check_json("document", document, state.limits)
    return await import_chat(
        state.store,
        document,
        user_uuid=user,
        thread_id=thread_id,
        max_messages=state.limits.max_import_messages,
    )


@router.get("/{chat_uuid}", summary="Get one chat")
async def get_chat(chat_uuid: UUID, state: AppState, user: CurrentUser) -> Chat:
    """Return one of the caller's chats."""
    return await owned_chat(state, user, chat_uuid)


@dataclass
class HistoryQuery:
    """Where a page of a chat's history starts: at most one of ``after``, ``before``, ``newest``."""

    limit: PageSize = DEFAULT_PAGE_SIZE
    after: Annotated[
        int | None, Query(ge=0, le=MAX_CURSOR, description="Messages newer than this.")
    ] = None
    before: Annotated[
        int | None, Query(ge=0, le=MAX_CURSOR, description="Messages older than this.")
    ] = None
    newest: Annotated[bool, Query(description="The newest page (where a chat view starts).")] = (
        False
    )

    def __post_init__(self) -> None:
        if sum((self.after is not None, self.before is not None, self.newest)) > 1:
            raise InvalidInputError("pass at most one of after, before and newest")


History = Annotated[HistoryQuery, Depends()]


@router.get("/{chat_uuid}/messages", summary="A chat's messages")
async def list_messages(
    chat_uuid: UUID, state: AppState, user: CurrentUser, query: History
) -> MessagePage:
    """Return a page of the chat's history, oldest first.

    Without a cursor: the first page. ``after=next_cursor`` pages forward;
    ``before=prev_cursor`` pages back; ``newest=true`` gives the last page.
    """
    await owned_chat(state, user, chat_uuid)
    page = await _message_page(state.store, chat_uuid, query)
    if page.items:
        points = await state.store.branches.get_branch_points(
            chat_uuid, [message.message_uuid for message in page.items]
        )
        page.branches = {
            uuid: BranchPoint(index=point.index, count=point.count, siblings=list(point.siblings))
            for uuid, point in points.items()
        }
        shown = {message.message_uuid for message in page.items}
        page.summaries = [
            summary
            for summary in await state.store.branches.summaries(chat_uuid)
            if summary.last_message_uuid in shown
        ]
    return page


async def _message_page(store: Store, chat_uuid: UUID, query: HistoryQuery) -> MessagePage:
    limit, after = query.limit, query.after
    before = _END_OF_CHAT if query.newest else query.before
    items = list(await store.get_chat_messages(chat_uuid, after=after, before=before, limit=limit))
    back = before is not None
    # Only a full page can have another past it, and one row past its edge tells. (Asking
    # for limit + 1 rows would refuse the largest page size.)
    more = len(items) == limit and bool(
        await store.get_chat_messages(
            chat_uuid,
            after=None if back else items[-1].seq,
            before=items[0].seq if back else None,
            limit=1,
        )
    )
    if back:
        return MessagePage(items=items, prev_cursor=items[0].seq if more else None)
    return MessagePage(
        items=items,
        next_cursor=items[-1].seq if more else None,
        prev_cursor=items[0].seq if after is not None and items else None,
    )


class UIMessagePage(_HistoryPage):
    """One page of a chat as the chat engine's UI messages, oldest first."""

    items: list[UIMessage]


@router.get("/{chat_uuid}/ui", summary="A chat as UI messages")
async def list_ui_messages(
    chat_uuid: UUID, state: AppState, user: CurrentUser, query: History
) -> UIMessagePage:
    """Return a page of the chat as UI messages with ordered parts (``threadstore.chat``).

    Paged like ``/messages`` (``limit`` counts stored messages, the cursors are theirs),
    except that a page never cuts a turn: it grows to the turn's first and last message,
    so each assistant turn (its reasoning, text, tool calls and their results) arrives
    whole in one page. A message stored without an AG-UI id is named by its uuid.
    """
    await owned_chat(state, user, chat_uuid)
    page = await _message_page(state.store, chat_uuid, query)
    items = list(page.items)
    if items and page.prev_cursor is not None:
        items[:0] = await _turn_edge(state.store, chat_uuid, items[0], backward=True)
        page.prev_cursor = items[0].seq
    if items and page.next_cursor is not None:
        items.extend(await _turn_edge(state.store, chat_uuid, items[-1], backward=False))
        page.next_cursor = items[-1].seq
    named = [
        m if m.agui_id else m.model_copy(update={"agui_id": str(m.message_uuid)}) for m in items
    ]
    ui = ui_from_messages(named, generate_id=lambda: str(uuid4()))
    return UIMessagePage(items=ui, next_cursor=page.next_cursor, prev_cursor=page.prev_cursor)


async def _turn_edge(
    store: Store, chat_uuid: UUID, edge: Message, *, backward: bool
) -> list[Message]:
    """The messages past ``edge`` that belong to its turn (same run, no user message between)."""

    def same_turn(message: Message) -> bool:
        return message.role != Role.USER and message.run_id == edge.run_id

    found: list[Message] = []
    cursor = edge.seq
    # A user message is a UI message of its own: nothing to join.
    while edge.role != Role.USER:
        batch = list(
            await store.get_chat_messages(
                chat_uuid,
                after=None if backward else cursor,
                before=cursor if backward else None,
                limit=_TURN_BATCH,
            )
        )
        ordered = batch[::-1] if backward else batch
        turn = list(takewhile(same_turn, ordered))
        found += turn
        if len(turn) < len(ordered) or len(batch) < _TURN_BATCH:
            break
        cursor = ordered[-1].seq
    return found[::-1] if backward else found


_TURN_BATCH = 50


@router.patch("/{chat_uuid}", summary="Rename a chat")
async def rename_chat(
    chat_uuid: UUID, body: ChatRename, state: AppState, user: CurrentUser
) -> Chat:
    """Set the chat's name."""
    name = check_name(body.name, state.limits)
    await owned_chat(state, user, chat_uuid)
    chat = await state.store.update_chat_name(chat_uuid, name)
    if chat is None:
        raise HTTPException(404, detail=f"chat {chat_uuid} not found")
    return chat


@router.delete("/{chat_uuid}", status_code=status.HTTP_204_NO_CONTENT, summary="Delete a chat")
async def delete_chat(
    chat_uuid: UUID,
    state: AppState,
    user: CurrentUser,
    soft: Annotated[
        bool,
        Query(
            description="Hide the chat instead, restorable with `POST .../restore` until the"
            " store's retention (30 days by default) passes and a sweep purges it."
        ),
    ] = False,
) -> Response:
    """Delete the chat and everything in it; a live run on it is cancelled first."""
    chat = await owned_chat(state, user, chat_uuid)
    for handle in state.manager.live_runs():
        if handle.thread_id == chat.thread_id and handle.user_uuid == user:
            handle.cancel()
            await handle.wait()
    # On PostgreSQL, runs of the chat in other server processes stop too.
    await state.manager.cancel_chat_runs(chat_uuid)
    await state.store.delete_chat(chat_uuid, soft=soft)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{chat_uuid}/restore",
    summary="Restore a soft-deleted chat",
    responses={404: {"description": "No soft-deleted chat of mine to restore."}},
)
async def restore_chat(chat_uuid: UUID, state: AppState, user: CurrentUser) -> Chat:
    """Bring back a chat soft-deleted within the store's retention, as it was."""
    chat = await state.store.chats.restore_chat(chat_uuid, user_uuid=user)
    if chat is None:
        raise HTTPException(
            404,
            detail=f"chat {chat_uuid} has no soft delete to restore"
            " (unknown, not deleted, or deleted longer ago than the retention)",
        )
    return chat


@router.get("/{chat_uuid}/export", response_model=ChatExport, summary="Export a chat as JSON")
async def export_one(chat_uuid: UUID, state: AppState, user: CurrentUser) -> Response:
    """Return the chat and its whole history as one JSON document (see the import route)."""
    chat = await owned_chat(state, user, chat_uuid)
    # Sent as it is serialized: a long chat's document is megabytes, never joined whole.
    pieces = await export_chat_json_pieces(state.store, chat)
    return StreamingResponse(pieces, media_type="application/json")
