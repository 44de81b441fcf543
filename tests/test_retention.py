"""Retention: policies global, per user and per chat; idle and absolute TTLs, the window of
soft-deleted chats, legal holds; applied by store.chats.sweep_expired, threadstore sweep
and the server. Times are given (``now=``) rather than waited for."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from typer.testing import CliRunner

import threadstore
from threadstore import ChatCreate, InvalidInputError, MessageCreate, MessageStatus, Role, Store
from threadstore.cli import app as cli
from threadstore.keys import user_uuid_for
from threadstore.models import RetentionPolicy, utcnow

DAY = 86400.0


async def chat_with_messages(
    store: Store, user: UUID, thread: str, messages: int = 2, *, days_ago: float = 0
) -> UUID:
    """A chat whose messages (and so its last activity) are ``days_ago`` old."""
    chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id=thread))
    at = utcnow() - timedelta(days=days_ago)
    for n in range(messages):
        await store.create_message(
            MessageCreate(
                chat_uuid=chat.chat_uuid,
                role=Role.USER if n % 2 == 0 else Role.ASSISTANT,
                content=f"m{n}",
                status=MessageStatus.COMPLETE,
                in_progress=False,
                created_at=at,
            )
        )
    return chat.chat_uuid


async def test_policies_inherit_and_a_sweep_deletes_what_expired(store: Store) -> None:
    alice, bob = uuid4(), uuid4()
    a1 = await chat_with_messages(store, alice, "a1", 3)
    a2 = await chat_with_messages(store, alice, "a2")
    b1 = await chat_with_messages(store, bob, "b1")
    await store.chats.set_retention_policy(RetentionPolicy(idle_ttl=30 * DAY))
    await store.chats.set_retention_policy(RetentionPolicy(idle_ttl=5 * DAY), user_uuid=alice)
    await store.chats.set_retention_policy(RetentionPolicy(idle_ttl=90 * DAY), chat_uuid=a2)
    in_ten_days = utcnow() + timedelta(days=10)

    would = await store.chats.expired_chats(now=in_ten_days)
    report = await store.chats.sweep_expired(now=in_ten_days, batch=1)

    # Alice's 5 days apply to a1; a2's own 90 days and Bob's global 30 keep the others.
    assert [(e.chat_uuid, e.reason) for e in would] == [(a1, "idle")]
    assert (report.chats, report.messages, report.reasons) == (1, 3, {"idle": 1})
    assert await store.chats.get_chat(a1) is None
    assert await store.chats.get_chat(a2) is not None and await store.chats.get_chat(b1)
    later = await store.chats.sweep_expired(now=utcnow() + timedelta(days=40))
    assert later.chats == 1 and await store.chats.get_chat(b1) is None
    scopes = {(p.scope, p.scope_uuid) for p in await store.chats.retention_policies()}
    assert scopes == {("global", UUID(int=0)), ("user", alice), ("chat", a2)}


async def test_absolute_ttl_expires_active_chats_and_a_legal_hold_exempts(store: Store) -> None:
    held_user, other = uuid4(), uuid4()
    kept_by_user = await chat_with_messages(store, held_user, "h")
    kept_by_chat = await chat_with_messages(store, other, "c1")
    expires = await chat_with_messages(store, other, "c2")
    await store.chats.set_retention_policy(RetentionPolicy(absolute_ttl=DAY))
    await store.chats.set_retention_policy(RetentionPolicy(legal_hold=True), user_uuid=held_user)
    await store.chats.set_retention_policy(RetentionPolicy(legal_hold=True), chat_uuid=kept_by_chat)

    report = await store.chats.sweep_expired(now=utcnow() + timedelta(days=2))

    assert report.reasons == {"absolute": 1}
    assert await store.chats.get_chat(expires) is None
    assert await store.chats.get_chat(kept_by_user) and await store.chats.get_chat(kept_by_chat)
    assert await store.chats.clear_retention_policy(user_uuid=held_user)
    assert not await store.chats.clear_retention_policy(user_uuid=held_user)
    assert (await store.chats.sweep_expired(now=utcnow() + timedelta(days=2))).chats == 1


async def test_soft_deleted_chats_are_purged_after_their_window(store: Store) -> None:
    user = uuid4()
    short = await chat_with_messages(store, user, "short")
    default = await chat_with_messages(store, user, "default")
    await store.chats.set_retention_policy(RetentionPolicy(deleted_window=DAY), chat_uuid=short)
    await store.delete_chat(short, soft=True)
    await store.delete_chat(default, soft=True)

    two_days = await store.chats.sweep_expired(now=utcnow() + timedelta(days=2))
    # Without a policy the store's own window (30 days) applies.
    month = await store.chats.sweep_expired(now=utcnow() + timedelta(days=31))

    assert two_days.reasons == {"deleted": 1} and month.reasons == {"deleted": 1}
    assert await store.chats.restore_chat(short) is None
    assert await store.chats.restore_chat(default) is None


async def test_a_sweep_with_a_share_waits_between_batches_in_proportion(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # share=0.25: after each batch the sweep waits three times as long as the batch took,
    # so the runs beside a background sweep keep most of the database's time.
    for n in range(3):
        await chat_with_messages(store, uuid4(), f"old-{n}", days_ago=3)
    await store.chats.set_retention_policy(RetentionPolicy(idle_ttl=DAY))
    waits: list[float] = []
    sleep = asyncio.sleep

    async def recorded(delay: float, *args: object) -> object:
        waits.append(delay)
        return await sleep(0, *args)

    monkeypatch.setattr(asyncio, "sleep", recorded)
    paced = await store.chats.sweep_expired(batch=1, share=0.25)
    paced_waits, waits[:] = [w for w in waits if w > 0], []
    monkeypatch.setattr(asyncio, "sleep", sleep)

    assert paced.chats == 3
    assert len(paced_waits) == 3  # one wait after each batch, longer than nothing
    for n in range(2):
        await chat_with_messages(store, uuid4(), f"older-{n}", days_ago=3)
    monkeypatch.setattr(asyncio, "sleep", recorded)
    unpaced = await store.chats.sweep_expired(batch=1)
    assert unpaced.chats == 2 and [w for w in waits if w > 0] == []


async def test_bad_retention_requests_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        RetentionPolicy(idle_ttl=0)
    with pytest.raises(InvalidInputError, match="not both"):
        await store.chats.set_retention_policy(
            RetentionPolicy(), user_uuid=uuid4(), chat_uuid=uuid4()
        )
    with pytest.raises(InvalidInputError, match="batch"):
        await store.chats.sweep_expired(batch=0)
    with pytest.raises(InvalidInputError, match="share"):
        await store.chats.sweep_expired(share=0)


async def test_the_server_applies_retention_in_the_background(store: Store) -> None:
    from threadstore.server import create_app

    user = uuid4()
    idle = await chat_with_messages(store, user, "idle", days_ago=3)
    active = await chat_with_messages(store, user, "active")
    await store.chats.set_retention_policy(RetentionPolicy(idle_ttl=DAY))
    swept = asyncio.Event()
    sweep = store.chats.sweep_expired

    async def noted(**options: object) -> object:
        report = await sweep(**options)  # type: ignore[arg-type]
        swept.set()
        return report

    store.chats.sweep_expired = noted  # type: ignore[assignment, method-assign]
    app = create_app(store, agent="demo", retention_interval=60, sweep_interval=None)
    async with app.router.lifespan_context(app):
        await swept.wait()  # the first sweep runs as the server starts

    assert await store.chats.get_chat(idle) is None
    assert await store.chats.get_chat(active) is not None


def test_retention_on_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'threadstore.db'}"
    runner = CliRunner()
    env = {"COLUMNS": "200", "THREADSTORE_DB": ""}

    async def seed() -> None:
        async with await threadstore.open_store(url) as store:
            await chat_with_messages(store, user_uuid_for("bob"), "b", days_ago=3)
            await chat_with_messages(store, user_uuid_for("ann"), "a", days_ago=3)

    asyncio.run(seed())

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, [*args, "--db", url], env=env)
        return result.exit_code, result.output

    assert invoke("retention", "set", "--idle-ttl", "2d")[0] == 0
    assert invoke("retention", "hold", "--user", "ann")[0] == 0
    code, shown = invoke("retention", "show")
    assert code == 0 and "a sweep would delete 1 chat(s) now: 1 idle" in shown
    code, swept = invoke("sweep")
    assert code == 0 and "retention: deleted 1 chat(s) (1 idle), 2 message(s)" in swept
    assert "a sweep would delete 0 chat(s)" in invoke("retention", "show")[1]
    # Released, ann's idle chat expires like any other.
    assert invoke("retention", "release", "--user", "ann")[0] == 0
    assert "a sweep would delete 1 chat(s) now: 1 idle" in invoke("retention", "show")[1]
    bad_code, bad = invoke("retention", "set", "--idle-ttl", "soon")
    assert bad_code == 1 and bad.startswith("error: --idle-ttl 'soon' is not a duration")
    both_code, both = invoke("retention", "hold", "--user", "ann", "--chat", "x")
    assert both_code == 1 and "not both" in both
