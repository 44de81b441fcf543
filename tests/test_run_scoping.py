"""Runs are scoped by their user: two users may use the same thread and run ids at once."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from agui_scripts import ScriptedAgent, run_finished, run_input, run_started, text_message, user
from threadstore import ConflictError, Store
from threadstore.agui._agent import StorageAgent
from threadstore.agui._manager import StreamPersistenceManager

THREAD, RUN = "shared-thread", "shared-run"
ALICE = uuid.UUID("00000000-0000-4000-8000-00000000000a")
BOB = uuid.UUID("00000000-0000-4000-8000-00000000000b")


def script(text: str) -> list[Any]:
    return [run_started(THREAD, RUN), *text_message("a1", text), run_finished(THREAD, RUN)]


def factory(store: Store, inners: dict[uuid.UUID, ScriptedAgent]) -> Any:
    def build(user_uuid: uuid.UUID) -> StorageAgent:
        return StorageAgent("assistant", user_uuid, store, store, inners[user_uuid])

    return build


async def test_two_users_run_the_same_ids_at_once_without_reaching_each_other(
    store: Store,
) -> None:
    inners = {
        ALICE: ScriptedAgent(script("for alice"), pause_after=2),
        BOB: ScriptedAgent(script("for bob"), pause_after=2),
    }
    async with StreamPersistenceManager(factory(store, inners), store=store) as manager:
        alice = await manager.run(run_input(THREAD, RUN, [user("u1")]), ALICE)
        bob = await manager.run(run_input(THREAD, RUN, [user("u1")]), BOB)
        await asyncio.gather(inners[ALICE].paused.wait(), inners[BOB].paused.wait())
        assert (alice.user_uuid, bob.user_uuid) == (ALICE, BOB)
        assert manager.get(THREAD, RUN, user_uuid=ALICE) is alice
        assert manager.get(THREAD, RUN, user_uuid=BOB) is bob
        assert manager.get(THREAD, RUN, user_uuid=uuid.uuid4()) is None
        with pytest.raises(ConflictError, match="pass user_uuid"):
            manager.get(THREAD, RUN)  # which of the two is meant cannot be told
        assert manager.cancel(THREAD, RUN, user_uuid=BOB)
        await bob.wait()
        assert not alice.done
        inners[ALICE].gate.set()
        await alice.wait()
    assert alice.outcome == "complete" and bob.outcome == "interrupted"
    for user_uuid, text, status in ((ALICE, "for alice", "complete"), (BOB, "", "interrupted")):
        chat = await store.get_chat_by_thread_id(user_uuid, THREAD)
        assert chat is not None
        messages = await store.get_chat_messages(chat.chat_uuid)
        assert [(m.role, m.content, m.status) for m in messages][-1] == ("assistant", text, status)


async def test_a_users_retained_run_is_not_replaced_by_another_users_run(store: Store) -> None:
    inners = {ALICE: ScriptedAgent(script("for alice")), BOB: ScriptedAgent(script("for bob"))}
    async with StreamPersistenceManager(factory(store, inners), store=store) as manager:
        alice = await manager.run(run_input(THREAD, RUN, [user("u1")]), ALICE)
        await alice.wait()
        bob = await manager.run(run_input(THREAD, RUN, [user("u1")]), BOB)
        await bob.wait()
        assert manager.get(THREAD, RUN, user_uuid=ALICE) is alice
        assert manager.get(THREAD, RUN, user_uuid=BOB) is bob
        replayed = [event async for event in alice.events()]
    assert "".join(getattr(e, "delta", "") for e in replayed) == "for alice"


async def test_without_a_user_the_one_run_with_the_ids_is_found() -> None:
    async with StreamPersistenceManager(lambda: ScriptedAgent(script("anyone"))) as manager:
        handle = await manager.run(run_input(THREAD, RUN, [user("u1")]))
        assert handle.user_uuid is None
        assert manager.get(THREAD, RUN) is handle
        assert manager.get(THREAD, RUN, user_uuid=ALICE) is None
        await handle.wait()
