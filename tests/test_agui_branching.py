"""AG-UI runs that branch: edit-and-resend, a client on another branch, parent_run_id, races."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest
from ag_ui.core import AssistantMessage, BaseEvent, EventType, RunAgentInput

from agui_scripts import ScriptedAgent, collect, run_finished, run_input, run_started, text_message
from agui_scripts import user as user_message
from threadstore import Store
from threadstore.agui import StorageAgent

USER = UUID("00000000-0000-4000-8000-000000000002")


def _answer(input: RunAgentInput) -> list[BaseEvent]:
    """Answers with one text message named after the run."""
    return [
        run_started(input.thread_id, input.run_id),
        *text_message(f"{input.run_id}-a", f"answer of {input.run_id}"),
        run_finished(input.thread_id, input.run_id),
    ]


async def _run(store: Store, input: RunAgentInput) -> tuple[list[BaseEvent], ScriptedAgent]:
    inner = ScriptedAgent(_answer)
    agent = StorageAgent("assistant", USER, store, store, inner, run_repo=store, owner="t")
    return await collect(agent.run(input)), inner


def _reply(run_id: str) -> AssistantMessage:
    return AssistantMessage(id=f"{run_id}-a", content=f"answer of {run_id}")


async def _ids(store: Store) -> list[str | None]:
    chat = await store.get_chat_by_thread_id(USER, "thread-1")
    assert chat is not None
    return [m.agui_id for m in await store.get_chat_messages(chat.chat_uuid)]


async def _two_turns(store: Store) -> list[Any]:
    """u1 -> run-1-a -> u2 -> run-2-a; returns the messages a client holds."""
    first = [user_message("u1", "Hi")]
    await _run(store, run_input(run_id="run-1", messages=first))
    held = [*first, _reply("run-1"), user_message("u2", "Weather?")]
    await _run(store, run_input(run_id="run-2", messages=held))
    return [*held, _reply("run-2")]


def _types(events: list[BaseEvent]) -> list[EventType]:
    return [event.type for event in events]


async def test_resending_a_prefix_with_a_new_user_message_branches(store: Store) -> None:
    held = await _two_turns(store)

    # Edit u2: the client cuts its history before u2 and sends the new version.
    edited = [*held[:2], user_message("u2-edited", "Weather in Lisbon?")]
    events, inner = await _run(store, run_input(run_id="run-3", messages=edited))

    assert EventType.RUN_ERROR not in _types(events)
    assert [m.id for m in inner.inputs[0].messages] == ["u1", "run-1-a", "u2-edited"]
    assert await _ids(store) == ["u1", "run-1-a", "u2-edited", "run-3-a"]
    chat = await store.get_chat_by_thread_id(USER, "thread-1")
    assert chat is not None
    u2 = await store.get_message_by_agui_id(chat.chat_uuid, "u2")
    edited_u2 = await store.get_message_by_agui_id(chat.chat_uuid, "u2-edited")
    assert u2 is not None and edited_u2 is not None
    siblings = await store.branches.get_siblings(chat.chat_uuid, edited_u2.message_uuid)
    assert siblings.siblings == (u2.message_uuid, edited_u2.message_uuid)


async def test_a_client_on_another_branch_continues_it_instead_of_being_refused(
    store: Store,
) -> None:
    held = await _two_turns(store)
    await _run(
        store, run_input(run_id="run-3", messages=[*held[:2], user_message("u2b", "Other?")])
    )

    # A second tab still shows the first branch (with run-2's answer) and goes on there.
    events, _ = await _run(
        store, run_input(run_id="run-4", messages=[*held, user_message("u3", "Thanks")])
    )

    assert EventType.RUN_ERROR not in _types(events)
    assert await _ids(store) == ["u1", "run-1-a", "u2", "run-2-a", "u3", "run-4-a"]


async def test_a_client_that_echoes_only_its_own_messages_still_continues_the_leaf(
    store: Store,
) -> None:
    await _run(store, run_input(run_id="run-1", messages=[user_message("u1")]))

    await _run(store, run_input(run_id="run-2", messages=[user_message("u1"), user_message("u2")]))

    assert await _ids(store) == ["u1", "run-1-a", "u2", "run-2-a"]


async def test_a_run_with_parent_run_id_branches_from_that_runs_turn(store: Store) -> None:
    await _two_turns(store)

    events, inner = await _run(
        store,
        run_input(run_id="run-3", parent_run_id="run-1", messages=[user_message("u3", "Else?")]),
    )

    assert EventType.RUN_ERROR not in _types(events)
    assert [m.id for m in inner.inputs[0].messages] == ["u1", "run-1-a", "u3"]
    assert await _ids(store) == ["u1", "run-1-a", "u3", "run-3-a"]


async def test_two_runs_branching_from_one_message_at_once_both_land_as_siblings(
    store: Store,
) -> None:
    held = await _two_turns(store)
    inputs = [
        run_input(run_id=f"race-{n}", messages=[*held[:2], user_message(f"edit-{n}", f"v{n}")])
        for n in (1, 2)
    ]

    results = await asyncio.gather(*(_run(store, input) for input in inputs))

    for events, _ in results:
        assert EventType.RUN_ERROR not in _types(events)
    chat = await store.get_chat_by_thread_id(USER, "thread-1")
    assert chat is not None
    answer = await store.get_message_by_agui_id(chat.chat_uuid, "run-1-a")
    edits = [await store.get_message_by_agui_id(chat.chat_uuid, f"edit-{n}") for n in (1, 2)]
    assert answer is not None and all(edit is not None for edit in edits)
    assert all(edit.parent_uuid == answer.message_uuid for edit in edits if edit is not None)
    siblings = await store.branches.get_siblings(chat.chat_uuid, edits[0].message_uuid)  # type: ignore[union-attr]
    assert siblings.count == 3  # u2 and the two edits

    # Each run's answer follows its own edit, not whichever message was newest.
    for n in (1, 2):
        reply = await store.get_message_by_agui_id(chat.chat_uuid, f"race-{n}-a")
        assert reply is not None and reply.parent_uuid == edits[n - 1].message_uuid  # type: ignore[union-attr]


async def test_only_runs_naming_another_branch_read_the_whole_tree(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = await _two_turns(store)
    reads: list[UUID] = []
    whole_tree = store.branches.get_message_tree

    async def counted(chat_uuid: UUID) -> Any:
        reads.append(chat_uuid)
        return await whole_tree(chat_uuid)

    monkeypatch.setattr(store.branches, "get_message_tree", counted)

    # Continuing the leaf, and editing on the active branch: the branch read suffices.
    await _run(store, run_input(run_id="run-3", messages=[*held, user_message("u3")]))
    await _run(store, run_input(run_id="run-4", messages=[*held[:2], user_message("u2c")]))
    assert reads == []
    # A client still holding run-3's branch names an answer the active branch lacks.
    await _run(
        store,
        run_input(run_id="run-5", messages=[*held, _reply("run-3"), user_message("u4")]),
    )
    assert len(reads) == 1
    assert (await _ids(store))[-3:] == ["run-3-a", "u4", "run-5-a"]
