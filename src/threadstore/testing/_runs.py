"""Contract: the run registry (start, heartbeat, finish, stale sweep) and run finalization."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from threadstore import (
    Chat,
    ChatCreate,
    ConflictError,
    MessageCreate,
    MessageStatus,
    Run,
    RunStatus,
    Store,
)
from threadstore.errors import RunLiveError
from threadstore.models import FORMAT_VERSION
from threadstore.store import capabilities_of
from threadstore.testing._suite import (
    AddMessage,
    MakeChat,
    RunRepository,
    add_reasoning,
    add_tool_call,
    assert_given_fields,
    stored_message,
)

LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)
LATER = datetime(2021, 1, 1, tzinfo=UTC)


def run_of(chat: Chat, run_id: str, **fields: Any) -> Run:
    """A run record for ``chat``."""
    return Run(chat_uuid=chat.chat_uuid, thread_id=chat.thread_id, run_id=run_id, **fields)


async def start_old_run(repo: RunRepository, chat: Chat, run_id: str, owner: str) -> Run:
    """A running run of ``owner`` whose last heartbeat was long ago."""
    return await repo.start_run(run_of(chat, run_id, owner=owner, heartbeat_at=LONG_AGO))


async def test_start_run_records_a_running_run(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    chat = await make_chat()

    run = run_of(chat, "run-1", parent_run_id="run-0", owner="host:1:abc", heartbeat_at=LONG_AGO)

    started = await run_repo.start_run(run)

    assert_given_fields(started, run)
    assert started.status == RunStatus.RUNNING
    assert started.error is None
    assert started.format_version == FORMAT_VERSION
    assert await run_repo.get_run(chat.chat_uuid, "run-1") == started


async def test_start_run_is_idempotent_by_chat_and_run_id(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    first = await run_repo.start_run(run_of(chat, "run-1", owner="first"))

    again = await run_repo.start_run(run_of(chat, "run-1", owner="second"))

    assert again == first
    assert await run_repo.get_run(chat.chat_uuid, "run-1") == first


async def test_a_chat_has_one_running_run_at_a_time(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    if not capabilities_of(run_repo).one_running_run:
        pytest.skip("the repository does not declare one_running_run")
    chat, other = await make_chat(), await make_chat()
    first = await run_repo.start_run(run_of(chat, "run-1", owner="a"))

    with pytest.raises(RunLiveError) as refused:
        await run_repo.start_run(run_of(chat, "run-2", owner="b"))

    assert (refused.value.chat_uuid, refused.value.live_run_id) == (chat.chat_uuid, "run-1")
    assert await run_repo.get_run(chat.chat_uuid, "run-2") is None
    assert await run_repo.start_run(run_of(chat, "run-1", owner="c")) == first  # the same run
    await run_repo.start_run(run_of(other, "run-2", owner="b"))  # another chat is free
    # A run that branches does not hold the chat, nor is it held off.
    branching = await run_repo.start_run(run_of(chat, "branch", owner="d", exclusive=False))
    assert (branching.status, branching.exclusive) == (RunStatus.RUNNING, False)
    await run_repo.finish_run(chat.chat_uuid, "run-1", RunStatus.INTERRUPTED)
    second = await run_repo.start_run(run_of(chat, "run-2", owner="b"))
    assert second.status == RunStatus.RUNNING


async def test_the_same_run_id_on_two_chats_is_two_runs(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    one, two = await make_chat(), await make_chat()
    await run_repo.start_run(run_of(one, "run-1", owner="a"))
    await run_repo.start_run(run_of(two, "run-1", owner="b"))

    await run_repo.finish_run(one.chat_uuid, "run-1", RunStatus.COMPLETE)

    first, second = (
        await run_repo.get_run(one.chat_uuid, "run-1"),
        await run_repo.get_run(two.chat_uuid, "run-1"),
    )
    assert first is not None and (first.owner, first.status) == ("a", RunStatus.COMPLETE)
    assert second is not None and (second.owner, second.status) == ("b", RunStatus.RUNNING)


async def test_start_run_for_an_unknown_chat_raises_value_error(run_repo: RunRepository) -> None:
    run = Run(chat_uuid=uuid.uuid4(), thread_id="t", run_id="r")
    with pytest.raises(ValueError):
        await run_repo.start_run(run)
    assert await run_repo.get_run(run.chat_uuid, "r") is None


async def test_get_run_of_unknown_run_returns_none(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    await run_repo.start_run(run_of(chat, "run-1"))
    assert await run_repo.get_run(chat.chat_uuid, "run-2") is None
    assert await run_repo.get_run(uuid.uuid4(), "run-1") is None


async def test_heartbeat_refreshes_only_the_owners_running_runs(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    # A chat has one running run at a time: each run here has a chat of its own.
    chats = {run_id: await make_chat() for run_id in ("mine", "theirs", "mine-done")}
    for run_id, owner in (("mine", "me"), ("theirs", "them"), ("mine-done", "me")):
        await start_old_run(run_repo, chats[run_id], run_id, owner)
    await run_repo.finish_run(chats["mine-done"].chat_uuid, "mine-done", RunStatus.COMPLETE)
    keys = [(c.chat_uuid, r) for r, c in chats.items()] + [(uuid.uuid4(), "unknown")]

    await run_repo.heartbeat_runs("me", keys)

    mine = await run_repo.get_run(chats["mine"].chat_uuid, "mine")
    theirs = await run_repo.get_run(chats["theirs"].chat_uuid, "theirs")
    done = await run_repo.get_run(chats["mine-done"].chat_uuid, "mine-done")
    assert mine is not None and mine.heartbeat_at > LATER
    assert theirs is not None and theirs.heartbeat_at == LONG_AGO
    assert done is not None and done.heartbeat_at == LONG_AGO


async def test_heartbeat_touches_only_the_runs_it_names(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    chat, other = await make_chat(), await make_chat()
    await start_old_run(run_repo, chat, "named", "me")
    await start_old_run(run_repo, other, "unnamed", "me")

    await run_repo.heartbeat_runs("me", [(chat.chat_uuid, "named"), (chat.chat_uuid, "unnamed")])

    unnamed = await run_repo.get_run(other.chat_uuid, "unnamed")
    assert unnamed is not None and unnamed.heartbeat_at == LONG_AGO


async def test_finish_run_sets_the_terminal_status_and_error(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    await run_repo.start_run(run_of(chat, "ok"))
    ok = await run_repo.finish_run(chat.chat_uuid, "ok", RunStatus.COMPLETE)
    await run_repo.start_run(run_of(chat, "bad"))  # the chat's run before it has ended
    bad = await run_repo.finish_run(chat.chat_uuid, "bad", RunStatus.ERRORED, error="boom")

    assert ok is not None and (ok.status, ok.error) == (RunStatus.COMPLETE, None)
    assert bad is not None and (bad.status, bad.error) == (RunStatus.ERRORED, "boom")
    assert await run_repo.get_run(chat.chat_uuid, "ok") == ok
    assert await run_repo.get_run(chat.chat_uuid, "bad") == bad


async def test_finish_run_of_unknown_run_returns_none(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    assert await run_repo.finish_run(chat.chat_uuid, "nope", RunStatus.COMPLETE) is None
    assert await run_repo.finish_run(uuid.uuid4(), "nope", RunStatus.COMPLETE) is None


async def test_stale_runs_are_running_runs_with_an_old_heartbeat(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    chat, other, third = await make_chat(), await make_chat(), await make_chat()
    await start_old_run(run_repo, chat, "finished", "gone")
    await run_repo.finish_run(chat.chat_uuid, "finished", RunStatus.INTERRUPTED)
    await start_old_run(run_repo, chat, "dead", "gone")
    await start_old_run(run_repo, other, "dead-too", "gone")
    await run_repo.start_run(run_of(third, "alive", owner="here"))

    stale = await run_repo.get_stale_runs(LATER)

    assert {(r.chat_uuid, r.run_id) for r in stale} == {
        (chat.chat_uuid, "dead"),
        (other.chat_uuid, "dead-too"),
    }
    assert all(r.status == RunStatus.RUNNING for r in stale)
    assert list(await run_repo.get_stale_runs(LONG_AGO)) == []


async def test_a_heartbeat_or_finish_takes_a_run_off_the_stale_list(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    chat, other = await make_chat(), await make_chat()
    await start_old_run(run_repo, chat, "revived", "me")
    await start_old_run(run_repo, other, "ended", "me")

    await run_repo.heartbeat_runs("me", [(chat.chat_uuid, "revived")])
    await run_repo.finish_run(other.chat_uuid, "ended", RunStatus.INTERRUPTED)

    assert list(await run_repo.get_stale_runs(LATER)) == []


async def test_running_runs_of_a_chat_are_its_own_whatever_their_heartbeat(
    store: Store, make_chat: MakeChat
) -> None:
    chat, other = await make_chat(), await make_chat()
    await store.start_run(run_of(chat, "done", owner="me"))
    await store.finish_run(chat.chat_uuid, "done", RunStatus.COMPLETE)
    await start_old_run(store, chat, "stale", "gone")
    await store.start_run(run_of(chat, "branch", owner="me", exclusive=False))
    await store.start_run(run_of(other, "elsewhere", owner="me"))

    running = await store.runs.get_running_runs(chat.chat_uuid)

    assert [r.run_id for r in running] == ["stale", "branch"]  # oldest heartbeat first
    assert all(r.status == RunStatus.RUNNING for r in running)
    assert list(await store.runs.get_running_runs(uuid.uuid4())) == []
    # With a run id: that run of the chat too, whatever its status, in the same read.
    with_done = await store.runs.get_running_runs(chat.chat_uuid, with_run="done")
    assert {(r.run_id, r.status) for r in with_done} == {
        ("done", RunStatus.COMPLETE),
        ("stale", RunStatus.RUNNING),
        ("branch", RunStatus.RUNNING),
    }
    with_running = await store.runs.get_running_runs(chat.chat_uuid, with_run="branch")
    assert [r.run_id for r in with_running] == ["stale", "branch"]
    with_other = await store.runs.get_running_runs(chat.chat_uuid, with_run="elsewhere")
    assert [r.run_id for r in with_other] == ["stale", "branch"]  # another chat's run


async def test_mutating_a_returned_run_does_not_change_the_stored_run(
    run_repo: RunRepository, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    run = run_of(chat, "r", owner="me")
    started = await run_repo.start_run(run)

    run.owner = "changed-input"
    started.owner = "changed-output"
    fetched = await run_repo.get_run(chat.chat_uuid, "r")
    assert fetched is not None
    fetched.status = RunStatus.ERRORED

    stored = await run_repo.get_run(chat.chat_uuid, "r")
    assert stored is not None and (stored.owner, stored.status) == ("me", RunStatus.RUNNING)


# --- finalize_run_records --------------------------------------------------------------------


async def test_finalize_run_records_flips_only_that_runs_in_progress_records(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    done = await add_message(
        chat, "done", run_id="r1", status=MessageStatus.COMPLETE, in_progress=False
    )
    streaming = await add_message(chat, "half", run_id="r1")
    call = await add_tool_call(store, streaming)
    finished_call = await add_tool_call(
        store, streaming, "d", "g", status=MessageStatus.COMPLETE, in_progress=False
    )
    reasoning = await add_reasoning(store, streaming, content="hmm")
    other_run = await add_message(chat, "other run", run_id="r2")
    other_call = await add_tool_call(store, other_run, "e", "h")
    other_chat = await make_chat()
    same_run_id_elsewhere = await add_message(other_chat, "elsewhere", run_id="r1")

    changed = await store.finalize_run_records(chat.chat_uuid, "r1", MessageStatus.INTERRUPTED)

    assert changed == 3  # the streaming message, its open tool call and its reasoning
    after = await stored_message(store, streaming)
    assert (after.status, after.in_progress) == (MessageStatus.INTERRUPTED, False)
    assert after.content == "half"
    calls = {tc.uuid: tc for tc in after.tool_calls}
    assert (calls[call.uuid].status, calls[call.uuid].in_progress) == (
        MessageStatus.INTERRUPTED,
        False,
    )
    assert calls[finished_call.uuid].status == MessageStatus.COMPLETE
    assert (after.reasonings[0].uuid, after.reasonings[0].status) == (
        reasoning.uuid,
        MessageStatus.INTERRUPTED,
    )
    assert after.reasonings[0].in_progress is False
    assert await store.get_message(done.message_uuid) == done
    untouched = await stored_message(store, other_run)
    assert (untouched.status, untouched.in_progress) == (MessageStatus.ACTIVE, True)
    assert untouched.tool_calls == [other_call]
    assert await store.get_message(same_run_id_elsewhere.message_uuid) == same_run_id_elsewhere


async def test_finalize_run_records_twice_changes_nothing_the_second_time(
    store: Store, make_chat: MakeChat, add_message: AddMessage
) -> None:
    chat = await make_chat()
    await add_message(chat, "x", run_id="r1")

    assert await store.finalize_run_records(chat.chat_uuid, "r1", MessageStatus.ERRORED) == 1
    assert await store.finalize_run_records(chat.chat_uuid, "r1", MessageStatus.COMPLETE) == 0
    (message,) = await store.get_chat_messages(chat.chat_uuid)
    assert message.status == MessageStatus.ERRORED


async def test_finalize_run_records_of_an_unknown_run_returns_zero(
    store: Store, make_chat: MakeChat
) -> None:
    chat = await make_chat()
    assert await store.finalize_run_records(chat.chat_uuid, "nope", MessageStatus.COMPLETE) == 0
    assert await store.finalize_run_records(uuid.uuid4(), "nope", MessageStatus.COMPLETE) == 0


# --- a new thread's set-up in one write --------------------------------------------------------


async def test_open_chat_stores_the_chat_its_run_and_its_messages_as_one_chain(
    store: Store,
) -> None:
    user = uuid.uuid4()
    chat, messages = await store.chats.open_chat(
        ChatCreate(user_uuid=user, thread_id="t-open", name="First question"),
        run=Run(chat_uuid=uuid.uuid4(), thread_id="t-open", run_id="r1", owner="host:1:abc"),
        messages=[
            MessageCreate(agui_id="u1", content="Hello?"),
            MessageCreate(agui_id="u2", content="Anyone?"),
        ],
    )

    found = await store.get_chat_by_thread_id(user, "t-open")
    assert found is not None and found.chat_uuid == chat.chat_uuid
    assert chat.name == found.name == "First question"
    run = await store.get_run(chat.chat_uuid, "r1")
    assert run is not None and run.status == RunStatus.RUNNING and run.owner == "host:1:abc"
    history = await store.get_chat_messages(chat.chat_uuid)
    assert history == messages
    assert [m.agui_id for m in history] == ["u1", "u2"]
    assert history[0].parent_uuid is None and history[1].parent_uuid == history[0].message_uuid
    assert all(m.chat_uuid == chat.chat_uuid for m in history)
    assert found.active_leaf_uuid == history[-1].message_uuid


async def test_open_chat_on_a_thread_that_has_a_chat_writes_nothing(
    store: Store, make_chat: MakeChat
) -> None:
    existing = await make_chat(thread_id="t-taken")
    create = ChatCreate(user_uuid=existing.user_uuid, thread_id="t-taken")

    for run, messages in (
        (None, []),
        (Run(chat_uuid=uuid.uuid4(), thread_id="t-taken", run_id="r1"), []),
        (None, [MessageCreate(agui_id="u1", content="Hello?")]),
        (
            Run(chat_uuid=uuid.uuid4(), thread_id="t-taken", run_id="r1"),
            [MessageCreate(agui_id="u1", content="Hello?")],
        ),
    ):
        with pytest.raises(ConflictError, match="has a chat already"):
            await store.chats.open_chat(create, run=run, messages=messages)

    assert await store.chats.get_chat(create.chat_uuid) is None
    assert await store.get_run(existing.chat_uuid, "r1") is None
    assert await store.get_chat_messages(existing.chat_uuid) == []
