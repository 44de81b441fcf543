"""``threadstore retention`` and ``threadstore forget``: how long chats are kept, and erasure."""

from __future__ import annotations

import json
from collections import Counter
from typing import Annotated
from uuid import UUID

import typer
from rich.markup import escape

from threadstore.cli._common import (
    DEFAULT_DB,
    AsJson,
    DbOption,
    ScopeChat,
    ScopeUser,
    YesOption,
    app,
    check_store,
    command_group,
    fail,
    out,
    scope_label,
    scope_of,
    with_store,
)
from threadstore.keys import user_uuid_for
from threadstore.models import (
    ExpiredChat,
    RetentionPolicy,
    ScopedPolicy,
)
from threadstore.store import Store

retention_app = command_group(
    "retention", "Retention policies: how long chats are kept, and what a sweep would delete."
)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(text: str | None, option: str) -> float | None:
    """A duration given as seconds or with a unit (90s, 15m, 12h, 30d); ``None`` stays."""
    if text is None:
        return None
    number, unit = (text[:-1], text[-1]) if text and text[-1] in _UNITS else (text, "s")
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        fail(f"{option} {text!r} is not a duration", "use seconds or 90s, 15m, 12h, 30d")
    if not value > 0:
        fail(f"{option} must be more than 0, got {text!r}")
    return value


@retention_app.command("set")
def retention_set(
    db: DbOption = DEFAULT_DB,
    user: ScopeUser = None,
    chat: ScopeChat = None,
    idle_ttl: Annotated[
        str | None, typer.Option(help="Delete chats idle this long (30d, 12h, seconds).")
    ] = None,
    absolute_ttl: Annotated[
        str | None, typer.Option(help="Delete chats this long after they were created.")
    ] = None,
    keep_run_logs: Annotated[
        int | None, typer.Option(min=0, help="Relayed event logs kept: the newest N runs'.")
    ] = None,
    deleted_window: Annotated[
        str | None, typer.Option(help="How long a soft-deleted chat stays restorable.")
    ] = None,
) -> None:
    """Set the retention policy of every chat, a user's (--user) or one chat's (--chat).

    Fields left out inherit (a chat's from its user's, a user's from the global policy);
    the policy replaces the one the scope had. A legal hold is kept as it was.
    """
    check_store(db)
    fields = {
        "idle_ttl": _seconds(idle_ttl, "--idle-ttl"),
        "absolute_ttl": _seconds(absolute_ttl, "--absolute-ttl"),
        "keep_run_logs": keep_run_logs,
        "deleted_window": _seconds(deleted_window, "--deleted-window"),
    }

    async def work(store: Store) -> None:
        scope = await scope_of(store, user, chat)
        held = (await _policy_of(store, scope)).legal_hold
        policy = RetentionPolicy(**fields, legal_hold=held)
        await store.chats.set_retention_policy(policy, **scope)

    with_store(db, work)
    out.print(f"[green]✓[/] retention policy set for {escape(scope_label(user, chat))}")


async def _policy_of(store: Store, scope: dict[str, UUID | None]) -> RetentionPolicy:
    """The policy stored for the scope of ``--user``/``--chat`` (an empty one if none)."""
    key = scope.get("chat_uuid") or scope.get("user_uuid")
    policies = await store.chats.retention_policies()
    return next((p.policy for p in policies if p.scope_uuid == key), RetentionPolicy())


def _hold(db: str, user: str | None, chat: str | None, hold: bool) -> None:
    check_store(db)
    if user is None and chat is None:
        fail("a legal hold is for a user (--user) or a chat (--chat)")

    async def work(store: Store) -> None:
        scope = await scope_of(store, user, chat)
        current = await _policy_of(store, scope)
        updated = current.model_copy(update={"legal_hold": hold})
        await store.chats.set_retention_policy(updated, **scope)

    with_store(db, work)
    what = "placed on" if hold else "released from"
    out.print(f"[green]✓[/] legal hold {what} {escape(scope_label(user, chat))}")


@retention_app.command("hold")
def retention_hold(
    db: DbOption = DEFAULT_DB, user: ScopeUser = None, chat: ScopeChat = None
) -> None:
    """Place a legal hold: nothing of the user (or the chat) expires until it is released."""
    _hold(db, user, chat, True)


@retention_app.command("release")
def retention_release(
    db: DbOption = DEFAULT_DB, user: ScopeUser = None, chat: ScopeChat = None
) -> None:
    """Release a legal hold."""
    _hold(db, user, chat, False)


@retention_app.command("show")
def retention_show(
    db: DbOption = DEFAULT_DB,
    as_json: AsJson = False,
    limit: Annotated[int, typer.Option(min=0, help="Expired chats listed.")] = 20,
) -> None:
    """Show the policies, and what a sweep would delete now (nothing is deleted)."""
    check_store(db)

    async def work(store: Store) -> tuple[list[ScopedPolicy], list[ExpiredChat]]:
        return await store.chats.retention_policies(), await store.chats.expired_chats()

    policies, expired = with_store(db, work)
    if as_json:
        data = {
            "policies": [p.model_dump(mode="json") for p in policies],
            "expired": [e.model_dump(mode="json") for e in expired],
        }
        print(json.dumps(data, indent=2))
        return
    if not policies:
        out.print("no retention policies: nothing expires (soft deletes are purged by sweep)")
    for scoped in policies:
        fields = scoped.policy.model_dump(exclude_none=True, exclude_defaults=True)
        who = "every chat" if scoped.scope == "global" else f"{scoped.scope} {scoped.scope_uuid}"
        out.print(f"{escape(who)}: {escape(json.dumps(fields)) if fields else '(inherits)'}")
    reasons = Counter(item.reason for item in expired)
    summary = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items())) or "nothing"
    out.print(f"a sweep would delete {len(expired)} chat(s) now: {summary}", soft_wrap=True)
    for item in expired[:limit]:
        out.print(f"  {item.chat_uuid}  user {item.user_uuid}  {item.reason}", soft_wrap=True)


# --- erasure -----------------------------------------------------------------------------------


@app.command(epilog="Example:  threadstore forget bob --yes --by admin@example.com")
def forget(
    user: Annotated[
        str, typer.Argument(help="The user id (as the server's auth names it) or UUID.")
    ],
    db: DbOption = DEFAULT_DB,
    yes: YesOption = False,
    by: Annotated[
        str | None, typer.Option(help="Who asks for the erasure (kept in its receipt).")
    ] = None,
) -> None:
    """Remove everything of a user, for good, and print the erasure's receipt (JSON).

    Their chats, messages, tool calls, reasoning, runs, relayed events and summaries go;
    a tombstone keeps anything of theirs from being stored again. The receipt (counts
    per kind, when, by whom; no content) is kept in the store. A running server drops
    the runs it keeps of theirs within its retention (or: DELETE /api/admin/users/ID).
    """
    check_store(db)
    user_uuid = user_uuid_for(user)
    if not yes and not typer.confirm(f"Remove everything of user {user} ({user_uuid}) for good?"):
        raise typer.Exit(1)

    receipt = with_store(db, lambda store: store.chats.forget_user(user_uuid, requested_by=by))
    print(receipt.model_dump_json(indent=2))
