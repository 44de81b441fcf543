"""Draining the outbox when the store refuses what was journaled, not because it is away.

An entry (one flush of a run) is one batch, all or nothing. When the store refuses it
for a reason other than an outage, the drain applies it write by write: every write the
store takes lands, the one it refuses on its own is dropped with an error in the log,
and the entries behind it drain as usual. A run's journaled set-up that can no longer be
replayed (its input refused, or its chat held by another run) is settled the same way:
logged, and never in the way of what follows it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from ag_ui.core import AssistantMessage

from agui_scripts import run_input, user
from threadstore import Store
from threadstore.agui import Outbox
from threadstore.errors import StoreUnavailableError
from threadstore.models import (
    Chat,
    ChatCreate,
    MessageCreate,
    MessageStatus,
    MessageUpdate,
    Role,
    Run,
    RunStatus,
)
from threadstore.store import Write, run_storage
from threadstore.store._run_storage import StoreStorage
from threadstore.store.ops import CreateMessage, FinishRun, UpdateMessage

USER = UUID("00000000-0000-4000-8000-0000000000b0")
OUTBOX_LOGGER = "threadstore.agui._outbox"


# The conftest's store, on a SQLite file of its own.
pytestmark = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)


@pytest.fixture
async def outbox(tmp_path: Path, store: Store) -> AsyncIterator[Outbox]:
    """An open outbox draining into ``store`` (drained by the test, not by a task)."""
    journal = Outbox(tmp_path / "outbox.sqlite3")
    await journal.open(run_storage(store, store, store))
    try:
        yield journal
    finally:
        await journal.close()


def assistant(chat: UUID, content: str) -> MessageCreate:
    return MessageCreate(chat_uuid=chat, message_uuid=uuid4(), role=Role.ASSISTANT, content=content)


async def contents(store: Store, chat: Chat) -> list[tuple[UUID, str, MessageStatus]]:
    return [
        (m.message_uuid, m.content, m.status) for m in await store.get_chat_messages(chat.chat_uuid)
    ]


def dropped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and "dropping an outbox write" in r.getMessage()
    ]


async def test_an_entry_refused_as_a_whole_lands_its_good_writes_and_drops_the_bad_one(
    store: Store, outbox: Outbox, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="t"))
    good = assistant(chat.chat_uuid, "kept")
    orphan = assistant(uuid4(), "for a chat that does not exist")  # the store refuses it
    await outbox.append(
        chat.chat_uuid,
        "run-1",
        None,
        [
            CreateMessage(good),
            CreateMessage(orphan),
            UpdateMessage(
                good.message_uuid,
                MessageUpdate(content="kept, then finished", status=MessageStatus.COMPLETE),
            ),
        ],
        USER,
    )
    later = assistant(chat.chat_uuid, "a later run's answer")
    await outbox.append(chat.chat_uuid, "run-2", None, [CreateMessage(later)], USER)

    with caplog.at_level(logging.WARNING, logger=OUTBOX_LOGGER):
        assert await outbox.drain() == 2

    # Every write the store takes landed, in order; the later run was not held back.
    assert await contents(store, chat) == [
        (good.message_uuid, "kept, then finished", MessageStatus.COMPLETE),
        (later.message_uuid, "a later run's answer", MessageStatus.ACTIVE),
    ]
    assert await store.get_message(orphan.message_uuid) is None
    # The refused write is reported, by what it was, and not kept to fail again.
    reports = dropped(caplog)
    assert len(reports) == 1 and str(orphan.message_uuid) in reports[0]
    assert outbox.depth == 0 and outbox.size == 0 and outbox.pending_runs() == {}
    await outbox.close()
    reopened = Outbox(tmp_path / "outbox.sqlite3")
    try:
        await reopened.open(run_storage(store, store, store))
        assert reopened.depth == 0  # gone from the file too: a restart does not replay it
    finally:
        await reopened.close()


class GoesAway(StoreStorage):
    """A store whose ``write`` call number ``away_at`` finds it away (an outage)."""

    def __init__(self, store: Store, away_at: int) -> None:
        super().__init__(store, store)
        self.away_at = away_at
        self.calls = 0

    async def write(self, writes: Sequence[Write]) -> None:
        self.calls += 1
        if self.calls == self.away_at:
            raise StoreUnavailableError("the store went away")
        await super().write(writes)


async def test_an_outage_while_an_entry_is_applied_write_by_write_keeps_it_for_the_next_drain(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="t"))
    first, second = assistant(chat.chat_uuid, "first"), assistant(chat.chat_uuid, "second")
    orphan = assistant(uuid4(), "for a chat that does not exist")
    flush: list[Write] = [CreateMessage(first), CreateMessage(orphan), CreateMessage(second)]
    # Call 1: the whole entry (refused: the orphan); call 2: ``first`` alone (lands);
    # call 3: the orphan alone, and the store is away.
    storage = GoesAway(store, away_at=3)
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    try:
        await outbox.open(storage)
        await outbox.append(chat.chat_uuid, "run-1", None, flush, USER)
        with pytest.raises(StoreUnavailableError):
            await outbox.drain()
        # Not dropped: the store being away says nothing about the writes.
        assert outbox.depth == 1 and (chat.chat_uuid, "run-1") in outbox.pending_runs()
        assert dropped(caplog) == []

        with caplog.at_level(logging.ERROR, logger=OUTBOX_LOGGER):
            assert await outbox.drain() == 1  # the store is back
        assert outbox.depth == 0 and outbox.pending_runs() == {}
    finally:
        await outbox.close()
    # Replayed whole, once: what landed before the outage is not stored twice.
    assert [(m.message_uuid, m.content) for m in await store.get_chat_messages(chat.chat_uuid)] == [
        (first.message_uuid, "first"),
        (second.message_uuid, "second"),
    ]
    assert len(dropped(caplog)) == 1


def set_up_spec(input: Any, *, records_run: bool = True) -> dict[str, Any]:
    """What a run started while the store was away journals (``StorageAgent``'s spec)."""
    return {
        "input": input.model_dump(mode="json", by_alias=True),
        "user_uuid": str(USER),
        "owner": "owner-1",
        "chat_name": None,
        "tenant_id": None,
        "app_id": None,
        "records_run": records_run,
    }


async def journal_answer(outbox: Outbox, provisional: UUID, content: str) -> MessageCreate:
    """Journal run-1's answer and its end for its provisional chat, as its writer would."""
    answer = assistant(provisional, content)
    finished = FinishRun(provisional, "run-1", RunStatus.COMPLETE, None)
    await outbox.append(provisional, "run-1", "owner-1", [CreateMessage(answer), finished], USER)
    return answer


async def test_a_set_up_refused_because_another_run_holds_the_chat_stores_the_answer_in_that_chat(
    store: Store, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    # While this run's set-up waited in the outbox, another process started a run on the
    # same thread; the run's input cannot be stored, but its answer, streamed to its
    # client, goes to the thread's chat, not to a provisional one nobody can read.
    chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="thread-1"))
    await store.start_run(Run(chat_uuid=chat.chat_uuid, thread_id="thread-1", run_id="run-0"))
    provisional = uuid4()
    await outbox.append_set_up(
        provisional, "run-1", "owner-1", set_up_spec(run_input(messages=[user("u1", "Hi?")]))
    )
    answer = await journal_answer(outbox, provisional, "the streamed answer")
    later = assistant(chat.chat_uuid, "run-0's answer")
    await outbox.append(chat.chat_uuid, "run-0", None, [CreateMessage(later)], USER)

    with caplog.at_level(logging.ERROR, logger=OUTBOX_LOGGER):
        assert await outbox.drain() == 3

    assert outbox.real_chat(provisional) == chat.chat_uuid
    stored = await store.get_chat_messages(chat.chat_uuid)
    assert [(m.message_uuid, m.role, m.content) for m in stored] == [
        (answer.message_uuid, Role.ASSISTANT, "the streamed answer"),
        (later.message_uuid, Role.ASSISTANT, "run-0's answer"),
    ]
    assert await store.get_chat_messages(provisional) == []
    held = await store.get_run(chat.chat_uuid, "run-0")
    assert held is not None and held.status is RunStatus.RUNNING  # the other run is untouched
    reports = [r.getMessage() for r in caplog.records if "could not be set up" in r.getMessage()]
    assert len(reports) == 1 and "run-1" in reports[0] and "nor its answer" not in reports[0]
    assert outbox.depth == 0 and outbox.pending_runs() == {}


async def test_a_set_up_whose_input_is_refused_drops_the_runs_writes_and_drains_what_follows(
    store: Store, outbox: Outbox, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The input echoes an answer the thread never had: the set-up refuses it before it
    # writes anything, so the run has no chat, and its writes (for its provisional chat)
    # have nowhere to go. They must not block the runs journaled after it.
    refused = run_input(
        thread_id="never-set-up",
        messages=[AssistantMessage(id="a-unknown", content="?"), user("u1")],
    )
    provisional = uuid4()
    await outbox.append_set_up(provisional, "run-1", "owner-1", set_up_spec(refused))
    lost = await journal_answer(outbox, provisional, "an answer with no chat")
    chat = await store.create_chat(ChatCreate(user_uuid=USER, thread_id="other"))
    later = assistant(chat.chat_uuid, "another run's answer")
    await outbox.append(chat.chat_uuid, "run-2", None, [CreateMessage(later)], USER)

    with caplog.at_level(logging.ERROR, logger=OUTBOX_LOGGER):
        assert await outbox.drain() == 3

    assert await store.get_chat_by_thread_id(USER, "never-set-up") is None
    assert await store.get_message(lost.message_uuid) is None
    assert [m.message_uuid for m in await store.get_chat_messages(chat.chat_uuid)] == [
        later.message_uuid
    ]
    reports = [r.getMessage() for r in caplog.records if "could not be set up" in r.getMessage()]
    assert len(reports) == 1 and "run-1" in reports[0] and "nor its answer" in reports[0]
    assert outbox.depth == 0 and outbox.pending_runs() == {}
    # The verdict (no chat) is kept with the file: a restart drops later writes too.
    await outbox.close()
    reopened = Outbox(tmp_path / "outbox.sqlite3")
    try:
        await reopened.open(run_storage(store, store, store))
        await reopened.append(provisional, "run-1", "owner-1", [CreateMessage(lost)], USER)
        assert await reopened.drain() == 1
        assert await store.get_message(lost.message_uuid) is None
    finally:
        await reopened.close()
