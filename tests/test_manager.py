"""StreamPersistenceManager and RunHandle: the numbered event log, readers, cancel, retention,
bounded buffers, heartbeat and sweep."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import timedelta
from typing import Any

import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    EventType,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from ag_ui_validate.pytest_plugin import assert_valid_agui

import threadstore
from agui_scripts import (
    ScriptedAgent,
    StoreSpy,
    full_turn,
    run_input,
    run_started,
    text_message,
    user,
)
from threadstore import (
    Chat,
    ChatCreate,
    ConflictError,
    InvalidInputError,
    MessageCreate,
    MessageStatus,
    Run,
    RunStatus,
    Store,
)
from threadstore.agui._agent import StorageAgent
from threadstore.agui._manager import StreamPersistenceManager
from threadstore.agui._run_handle import (
    CANCELLED_ERROR_CODE,
    INTERNAL_ERROR_CODE,
    EventsDroppedError,
    RunHandle,
)
from threadstore.models import utcnow

THREAD = "thread-1"
RUN = "run-1"
_END = object()
STORAGE_USER = uuid.UUID("00000000-0000-4000-8000-000000000001")


def make_input(thread_id: str = THREAD, run_id: str = RUN) -> RunAgentInput:
    return RunAgentInput(thread_id=thread_id, run_id=run_id, messages=[])


def text(i: int) -> TextMessageContentEvent:
    return TextMessageContentEvent(message_id="m1", delta=f"d{i}")


def conversation(n: int) -> list[BaseEvent]:
    """A valid AG-UI run with ``n`` text deltas."""
    return [
        RunStartedEvent(thread_id=THREAD, run_id=RUN),
        TextMessageStartEvent(message_id="m1", role="assistant"),
        *(text(i) for i in range(n)),
        TextMessageEndEvent(message_id="m1"),
        RunFinishedEvent(thread_id=THREAD, run_id=RUN),
    ]


class FedAgent:
    """An agent whose stream the test drives: it yields what is fed, ends on ``_END``,
    raises a fed exception, and records how its run ended."""

    def __init__(self, *events: Any, user_uuid: uuid.UUID | None = None) -> None:
        self.feed: asyncio.Queue[Any] = asyncio.Queue()
        for event in events:
            self.feed.put_nowait(event)
        self.user_uuid = user_uuid or uuid.uuid4()
        self.chat: Chat | None = None
        self.owner: str | None = None
        self.saw_cancel = False
        self.finished = False
        self.inputs: list[RunAgentInput] = []

    def push(self, *items: Any) -> None:
        for item in items:
            self.feed.put_nowait(item)

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        self.inputs.append(input)
        try:
            while True:
                item = await self.feed.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        except asyncio.CancelledError:
            self.saw_cancel = True
            raise
        finally:
            self.finished = True


class ListAgent:
    """An agent that yields a fixed list of events without ever waiting."""

    def __init__(self, events: list[BaseEvent]) -> None:
        self.events = events
        self.produced = 0

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        for event in self.events:
            self.produced += 1
            yield event


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in stream]


async def settle() -> None:
    """Let every ready task run until none is left runnable."""
    for _ in range(10):
        await asyncio.sleep(0)


class LoopClock:
    """The running loop's clock, stopped: it moves only when the test advances it.

    Timers (``call_later``) then fire exactly when the test says the time has come,
    so a retention of a minute is tested without waiting for it.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        loop = asyncio.get_running_loop()
        self.now = loop.time()
        monkeypatch.setattr(loop, "time", lambda: self.now)

    async def advance(self, seconds: float) -> None:
        """Let what is runnable run (and set its timers), move the clock on, run what is due."""
        await settle()
        self.now += seconds
        for _ in range(50):
            await asyncio.sleep(0)


# --- the log ----------------------------------------------------------------------------


async def test_events_arrive_in_order_numbered_from_one() -> None:
    events = conversation(5)
    async with StreamPersistenceManager(lambda: ListAgent(events)) as manager:
        handle = await manager.run(make_input())
        numbered = await collect(handle.numbered_events())
    assert [event_id for event_id, _ in numbered] == list(range(1, len(events) + 1))
    assert [event for _, event in numbered] == events
    assert handle.last_event_id == len(events)
    assert handle.outcome == RunStatus.COMPLETE


async def test_events_yields_the_same_stream_without_ids() -> None:
    events = conversation(3)
    async with StreamPersistenceManager(lambda: ListAgent(events)) as manager:
        handle = await manager.run(make_input())
        assert await collect(handle.events()) == events


async def test_run_forwards_factory_arguments_and_input() -> None:
    built: list[tuple[Any, ...]] = []

    def factory(name: str, *, user: uuid.UUID) -> FedAgent:
        built.append((name, user))
        return FedAgent(_END, user_uuid=user)

    user = uuid.uuid4()
    run_input = make_input()
    async with StreamPersistenceManager(factory) as manager:
        handle = await manager.run(run_input, "assistant", user=user)
        await handle.wait()
    assert built == [("assistant", user)]
    assert handle.agent.user_uuid == user
    assert handle.agent.inputs == [run_input]


async def test_concurrent_readers_get_the_same_full_sequence() -> None:
    agent = FedAgent()
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        readers = [asyncio.create_task(collect(handle.numbered_events())) for _ in range(2)]
        events = conversation(6)
        for event in events:
            agent.push(event)
            await settle()
        agent.push(_END)
        first, second = await asyncio.gather(*readers)
    assert first == second == list(enumerate(events, start=1))


async def test_a_fast_stream_reaches_readers_in_batches_with_no_gap_or_duplicate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(RunHandle, "reader_wake_interval", 3600.0)
    events = conversation(20)
    async with StreamPersistenceManager(lambda: ScriptedAgent(events)) as manager:
        handle = await manager.run(make_input())
        seen: list[tuple[int, int]] = []  # (event id, newest id when it was read)
        async for event_id, _ in handle.numbered_events():
            seen.append((event_id, handle.last_event_id))

    assert [event_id for event_id, _ in seen] == list(range(1, len(events) + 1))
    # Woken at once for the first event, then not before the end, which wakes at once.
    assert len({newest for _, newest in seen}) == 2
    assert seen[-1][1] == len(events)


async def test_the_wake_interval_stretches_while_wakes_find_one_event_and_shrinks_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Room for several doublings between the base and the ceiling, whatever the defaults.
    monkeypatch.setattr(RunHandle, "reader_wake_interval", 100e-6)
    monkeypatch.setattr(RunHandle, "reader_wake_interval_max", 1.6e-3)
    async with StreamPersistenceManager(lambda: FedAgent()) as manager:
        handle = await manager.run(make_input())
        base, ceiling = handle.reader_wake_interval, handle.reader_wake_interval_max
        soon = base * 2  # events a little further apart than the base interval

        intervals = []
        for _ in range(8):
            handle._adapt_wake_interval(delivered=1, since_last=soon)
            intervals.append(handle._wake_interval)
        stretched = handle._wake_interval
        handle._adapt_wake_interval(delivered=1, since_last=ceiling * 10)  # a slow stream
        after_a_pause = handle._wake_interval
        for _ in range(8):
            handle._adapt_wake_interval(delivered=40, since_last=soon)
        handle.cancel()

    assert intervals[:4] == [base * 2, base * 4, base * 8, ceiling]
    assert stretched == ceiling == max(intervals)
    assert after_a_pause == ceiling  # a quiet spell is no reason to stretch (or shrink)
    assert handle._wake_interval == base


async def test_the_wake_interval_stretches_as_far_as_the_loop_is_slow_to_run_readers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(RunHandle, "reader_wake_interval", 100e-6)
    monkeypatch.setattr(RunHandle, "reader_wake_interval_max", 400e-6)
    monkeypatch.setattr(RunHandle, "reader_wake_interval_busy_max", 6.4e-3)
    handle = RunHandle(THREAD, RUN, FedAgent(), max_buffered_events=None)

    def stretch(lag: float, apart: float) -> float:
        """The interval after wakes ``apart`` seconds apart finding one event each."""
        handle._wake_lag = lag
        for _ in range(12):
            handle._adapt_wake_interval(delivered=1, since_last=apart)
        return handle._wake_interval

    paced = stretch(lag=20e-6, apart=1e-3)  # events further apart than the ceiling: as they come
    keeping_up = stretch(lag=20e-6, apart=200e-6)  # readers run at once: the usual ceiling
    busy = stretch(lag=1.5e-3, apart=1e-3)  # the loop takes 1.5 ms to get to a woken reader
    very_busy = stretch(lag=50e-3, apart=1e-3)
    handle._wake_lag = 20e-6
    for _ in range(12):  # the load is gone and wakes find many events again
        handle._adapt_wake_interval(delivered=40, since_last=200e-6)

    assert paced == 100e-6
    assert keeping_up == 400e-6
    assert busy == pytest.approx(3e-3)  # twice the lag
    assert very_busy == 6.4e-3  # never beyond the busy ceiling
    assert handle._wake_interval == 100e-6


async def test_a_reader_measures_how_long_the_loop_took_to_run_it_after_a_wake() -> None:
    handle = RunHandle(THREAD, RUN, FedAgent(), max_buffered_events=None)
    batches = handle.numbered_batches()
    reader = asyncio.create_task(anext(batches))
    await asyncio.sleep(0)  # the reader now waits for the first event
    handle._append(RunStartedEvent(thread_id=THREAD, run_id=RUN))  # wakes it at once
    time.sleep(0.005)  # the loop is busy elsewhere before it gets to the reader
    first, batch = await reader
    await batches.aclose()
    assert (first, len(batch)) == (1, 1)
    assert handle._wake_lag >= 0.005


async def test_a_reader_takes_every_buffered_event_in_one_batch_and_loses_none() -> None:
    agent = FedAgent()
    events = conversation(30)
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        agent.push(*events[:10])
        await settle()
        assert handle.last_event_id == 10
        batches = handle.numbered_batches(after=2)
        first_batch = await anext(batches)
        agent.push(*events[10:], _END)
        rest = [batch async for batch in batches]
    assert first_batch[0] == 3 and first_batch[1] == events[2:10]
    flattened = [
        (event_id, event)
        for first, batch in [first_batch, *rest]
        for event_id, event in enumerate(batch, first)
    ]
    assert flattened == list(enumerate(events, start=1))[2:]


async def test_a_reader_cancelled_while_waiting_leaves_the_others_undisturbed() -> None:
    agent = FedAgent()
    events = conversation(3)
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        quitter = asyncio.create_task(collect(handle.events()))
        stayer = asyncio.create_task(collect(handle.numbered_events()))
        await settle()
        quitter.cancel()
        agent.push(*events, _END)
        assert await stayer == list(enumerate(events, start=1))
    with pytest.raises(asyncio.CancelledError):
        await quitter


async def test_reader_resuming_while_live_gets_exactly_the_rest() -> None:
    agent = FedAgent()
    events = conversation(6)
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        agent.push(*events[:4])
        await settle()
        assert handle.last_event_id == 4
        resumed = asyncio.create_task(collect(handle.numbered_events(after=3)))
        await settle()
        agent.push(*events[4:], _END)
        got = await resumed
    assert got == list(enumerate(events, start=1))[3:]


async def test_reader_resuming_after_the_end_gets_the_tail_within_retention() -> None:
    events = conversation(4)
    async with StreamPersistenceManager(lambda: ListAgent(events), retention=60) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        retained = manager.get(THREAD, RUN)
        assert retained is handle
        got = await collect(retained.numbered_events(after=2))
        nothing_left = await collect(retained.numbered_events(after=len(events)))
    assert got == list(enumerate(events, start=1))[2:]
    assert nothing_left == []


async def test_resuming_after_an_event_that_does_not_exist_is_rejected() -> None:
    async with StreamPersistenceManager(lambda: ListAgent(conversation(1))) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        with pytest.raises(InvalidInputError):
            handle.events(after=handle.last_event_id + 1)
        with pytest.raises(InvalidInputError):
            handle.numbered_events(after=-1)


async def test_reader_that_stops_early_does_not_stop_the_producer() -> None:
    agent = FedAgent()
    events = conversation(5)
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        agent.push(*events)
        async with aclosing(handle.events()) as stream:
            async for _ in stream:
                break  # the client disconnected after one event
        agent.push(_END)
        await handle.wait()
    assert handle.outcome == RunStatus.COMPLETE
    assert handle.last_event_id == len(events)
    assert not agent.saw_cancel


# --- how runs end -------------------------------------------------------------------------


async def test_cancel_interrupts_the_agent_and_ends_the_stream_with_a_cancelled_error() -> None:
    agent = FedAgent()
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        agent.push(*conversation(2)[:3])
        reader = asyncio.create_task(collect(handle.events()))
        await settle()
        assert handle.cancel() is True
        await handle.wait()
        got = await reader
        assert handle.cancel() is False
        assert manager.cancel(THREAD, RUN) is False
    assert agent.saw_cancel and agent.finished
    assert handle.outcome == RunStatus.INTERRUPTED
    assert len(got) == 4
    terminal = got[-1]
    assert isinstance(terminal, RunErrorEvent)
    assert terminal.code == CANCELLED_ERROR_CODE
    assert_valid_agui([e.model_dump(mode="json", by_alias=True) for e in got])


class SlowFinalizingAgent(FedAgent):
    """Like the storage agent: on cancel it awaits a final flush before re-raising."""

    def __init__(self) -> None:
        super().__init__()
        self.flush_gate = asyncio.Event()
        self.flushed = False

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        try:
            async for event in super().run(input):
                yield event
        except asyncio.CancelledError:
            await self.flush_gate.wait()
            self.flushed = True
            raise


async def test_repeated_cancel_does_not_abort_the_agents_final_flush() -> None:
    agent = SlowFinalizingAgent()
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        await settle()
        assert handle.cancel() is True
        await settle()
        assert manager.cancel(THREAD, RUN) is True  # still live: finalizing
        await settle()
        agent.flush_gate.set()
        await handle.wait()
    assert agent.flushed
    assert handle.outcome == RunStatus.INTERRUPTED


async def test_manager_cancel_finds_the_run_by_key() -> None:
    agent = FedAgent(RunStartedEvent(thread_id=THREAD, run_id=RUN))
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        await settle()
        assert manager.cancel(THREAD, "unknown-run") is False
        assert manager.cancel(THREAD, RUN) is True
        await handle.wait()
    assert agent.saw_cancel
    assert handle.outcome == RunStatus.INTERRUPTED


async def test_cancel_before_the_producer_starts_still_ends_the_stream() -> None:
    agent = FedAgent()
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        assert handle.cancel() is True
        await handle.wait()
        got = await collect(handle.events())
    assert handle.outcome == RunStatus.INTERRUPTED
    # AG-UI clients expect every run to open with RUN_STARTED, even one that never ran.
    assert [e.type for e in got] == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    assert agent.inputs == []  # the agent never started, so it has nothing to finalize


async def test_a_storage_run_cancelled_before_it_starts_still_settles_its_set_up() -> None:
    # The server's run gate waits for ``set_up``; a run that never began must settle it.
    async with await threadstore.open_store("memory://") as store:
        agent = StorageAgent("assistant", STORAGE_USER, store, store, ScriptedAgent(full_turn()))
        async with StreamPersistenceManager(lambda: agent, store=store) as manager:
            handle = await manager.run(run_input(messages=[user("u1")]))
            handle.cancel()  # before the producer's first step: its body never runs
            await handle.wait()

    assert agent.set_up.is_set() and agent.chat is None
    assert handle.outcome == RunStatus.INTERRUPTED


async def test_cancel_after_the_agent_ended_its_stream_adds_no_event_after_the_end() -> None:
    agent = FedAgent(*conversation(1))  # the run has finished but the agent is still flushing
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        await settle()
        handle.cancel()
        await handle.wait()
        got = await collect(handle.events())
    assert got == conversation(1)
    # RUN_FINISHED had gone out: the run is complete, as its stored records say.
    assert handle.outcome == RunStatus.COMPLETE


async def test_agent_crash_gives_readers_an_internal_error_and_wait_does_not_raise() -> None:
    agent = FedAgent(*conversation(2)[:3], ValueError("model exploded"))
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        got = await collect(handle.events())
    assert handle.outcome == RunStatus.ERRORED
    assert isinstance(handle.exception, ValueError)
    assert len(got) == 4
    terminal = got[-1]
    assert isinstance(terminal, RunErrorEvent)
    assert terminal.code == INTERNAL_ERROR_CODE
    assert terminal.message == "ValueError: model exploded"
    assert_valid_agui([e.model_dump(mode="json", by_alias=True) for e in got])


async def test_crash_after_the_stream_ended_adds_no_event_after_the_end() -> None:
    agent = FedAgent(*conversation(1), RuntimeError("flush failed"))
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        got = await collect(handle.events())
    assert got == conversation(1)
    assert handle.outcome == RunStatus.ERRORED


async def test_in_band_run_error_is_an_errored_outcome() -> None:
    events = [
        RunStartedEvent(thread_id=THREAD, run_id=RUN),
        RunErrorEvent(message="rate limited", code="RATE_LIMIT"),
    ]
    async with StreamPersistenceManager(lambda: ListAgent(events)) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        assert await collect(handle.events()) == events
    assert handle.outcome == RunStatus.ERRORED
    assert handle.exception is None


async def test_a_stream_that_stops_without_a_terminal_event_is_closed_for_readers() -> None:
    events = conversation(2)[:-1]  # no RUN_FINISHED
    async with StreamPersistenceManager(lambda: ListAgent(events)) as manager:
        handle = await manager.run(make_input())
        got = await collect(handle.events())
    assert got[:-1] == events
    terminal = got[-1]
    assert isinstance(terminal, RunErrorEvent) and terminal.code == INTERNAL_ERROR_CODE
    assert handle.outcome == RunStatus.COMPLETE
    assert_valid_agui([e.model_dump(mode="json", by_alias=True) for e in got])


# --- registry -----------------------------------------------------------------------------


async def test_finished_run_is_retained_then_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = LoopClock(monkeypatch)
    async with StreamPersistenceManager(lambda: ListAgent(conversation(1)), retention=60) as m:
        handle = await m.run(make_input())
        await handle.wait()
        assert m.get(THREAD, RUN) is handle
        assert m.live_runs() == []
        await clock.advance(59.9)
        assert m.get(THREAD, RUN) is handle
        await clock.advance(0.2)
        assert m.get(THREAD, RUN) is None


async def test_zero_retention_forgets_a_run_as_soon_as_it_ends() -> None:
    async with StreamPersistenceManager(lambda: ListAgent(conversation(1)), retention=0) as m:
        handle = await m.run(make_input())
        assert m.get(THREAD, RUN) is handle
        await handle.wait()
        assert m.get(THREAD, RUN) is None


async def test_starting_a_live_run_again_is_a_conflict() -> None:
    built: list[FedAgent] = []
    same_user = uuid.uuid4()

    def factory() -> FedAgent:
        built.append(FedAgent(user_uuid=same_user))
        return built[-1]

    async with StreamPersistenceManager(factory) as manager:
        handle = await manager.run(make_input())
        with pytest.raises(ConflictError):
            await manager.run(make_input())
        assert not built[1].inputs  # the rejected run's agent never ran
        other = await manager.run(make_input(run_id="run-2"))
        assert {h.run_id for h in manager.live_runs()} == {RUN, "run-2"}
        built[0].push(_END)
        await handle.wait()
        assert manager.live_runs() == [other]  # the finished run is retained, not live
        again = await manager.run(make_input())  # a finished, retained run may be restarted
        assert manager.get(THREAD, RUN) is again
        assert manager.live_runs() == [other, again]  # in the order they started
        built[2].push(_END)
        built[3].push(_END)
        await asyncio.gather(other.wait(), again.wait())
        assert manager.live_runs() == []
        discarded = await manager.run(make_input(run_id="run-3"))
        manager.discard(discarded)  # refused before it began: neither live nor retained
        assert manager.live_runs() == [] and manager.get(THREAD, "run-3") is None
        discarded.cancel()


async def test_an_old_runs_retention_timer_does_not_forget_its_replacement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = LoopClock(monkeypatch)
    agents = [FedAgent(), FedAgent(_END)]  # popped from the end
    async with StreamPersistenceManager(agents.pop, retention=60) as manager:
        first = await manager.run(make_input())
        await first.wait()
        second = await manager.run(make_input())
        await clock.advance(120)  # well past the first run's retention
        assert manager.get(THREAD, RUN) is second
        second.cancel()


async def test_close_cancels_live_runs_and_waits_for_them() -> None:
    agents = [FedAgent(), FedAgent()]
    manager = StreamPersistenceManager(agents.pop)
    handles = [await manager.run(make_input(run_id=f"run-{i}")) for i in range(2)]
    await settle()
    await manager.close()
    assert all(h.done and h.outcome == RunStatus.INTERRUPTED for h in handles)
    assert all(a.saw_cancel and a.finished for a in [handles[0].agent, handles[1].agent])
    assert manager.get(THREAD, "run-0") is None
    with pytest.raises(RuntimeError):
        await manager.run(make_input())


# --- bounded buffer -------------------------------------------------------------------------


async def test_bounded_log_keeps_the_newest_events_and_rejects_older_resumes() -> None:
    events = conversation(20)
    async with StreamPersistenceManager(
        lambda: ListAgent(events), max_buffered_events=5
    ) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        last = handle.last_event_id
        assert handle.first_event_id == last - 4
        tail = await collect(handle.numbered_events(after=last - 5))
        with pytest.raises(EventsDroppedError) as dropped:
            handle.events(after=0)
    assert tail == list(enumerate(events, start=1))[-5:]
    assert isinstance(dropped.value, InvalidInputError)
    assert dropped.value.first_available == last - 4
    assert len(handle._events) < 2 * 5  # memory stays bounded


async def test_bounded_log_does_not_disturb_a_reader_that_keeps_up() -> None:
    agent = FedAgent()
    events = conversation(12)
    async with StreamPersistenceManager(lambda: agent, max_buffered_events=2) as manager:
        handle = await manager.run(make_input())
        reader = asyncio.create_task(collect(handle.events()))
        for event in events:
            agent.push(event)
            await settle()
        agent.push(_END)
        assert await reader == events


async def test_a_bounded_log_wakes_readers_before_they_could_fall_out_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(RunHandle, "reader_wake_interval", 3600.0)
    agent = FedAgent()
    events = conversation(30)
    async with StreamPersistenceManager(lambda: agent, max_buffered_events=4) as manager:
        handle = await manager.run(make_input())
        reader = asyncio.create_task(collect(handle.events()))
        for event in events:
            agent.push(event)
            await settle()
        agent.push(_END)
        assert await reader == events


async def test_reader_falling_behind_a_bounded_log_gets_a_clear_error() -> None:
    agent = FedAgent(*conversation(1)[:2])
    async with StreamPersistenceManager(lambda: agent, max_buffered_events=3) as manager:
        handle = await manager.run(make_input())
        await settle()
        stream = handle.events()
        async with aclosing(stream):
            await anext(stream)
            agent.push(*(text(i) for i in range(10)), _END)
            await handle.wait()
            with pytest.raises(EventsDroppedError):
                await collect(stream)


async def test_invalid_buffer_limit_is_rejected() -> None:
    with pytest.raises(InvalidInputError):
        StreamPersistenceManager(FedAgent, max_buffered_events=0)


# --- heartbeat and sweep ----------------------------------------------------------------------


@pytest.fixture
async def memory_store() -> AsyncIterator[Store]:
    store = await threadstore.open_store("memory://")
    try:
        yield store
    finally:
        await store.close()


async def _chat_with_run(
    store: Store, thread_id: str, run_id: str, owner: str, *, age: timedelta
) -> tuple[Chat, uuid.UUID]:
    """A chat with a running run record (heartbeat ``age`` old) and one in-progress message."""
    chat = await store.create_chat(ChatCreate(user_uuid=uuid.uuid4(), thread_id=thread_id))
    await store.start_run(
        Run(
            chat_uuid=chat.chat_uuid,
            thread_id=thread_id,
            run_id=run_id,
            owner=owner,
            heartbeat_at=utcnow() - age,
        )
    )
    message = await store.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, content="half an ans", run_id=run_id)
    )
    return chat, message.message_uuid


async def test_sweep_finalizes_a_dead_owners_run_and_leaves_live_runs_alone(
    memory_store: Store,
) -> None:
    agent = FedAgent()
    manager = StreamPersistenceManager(lambda: agent, store=memory_store)
    old = timedelta(minutes=5)
    dead_chat, dead_message = await _chat_with_run(
        memory_store, "dead-thread", "dead-run", "other-host:1:dead", age=old
    )
    # Our own live run, whose recorded heartbeat is just as old (e.g. a missed beat).
    live_chat, live_message = await _chat_with_run(
        memory_store, THREAD, RUN, manager.owner, age=old
    )
    agent.chat = live_chat
    async with manager:
        live = await manager.run(make_input())
        assert await manager.sweep(stale_after=60) == 1
        assert not live.done

        dead_run = await memory_store.get_run(dead_chat.chat_uuid, "dead-run")
        assert dead_run is not None and dead_run.status == RunStatus.INTERRUPTED
        swept = await memory_store.get_message(dead_message)
        assert swept is not None
        assert (swept.status, swept.in_progress) == (MessageStatus.INTERRUPTED, False)

        live_run = await memory_store.get_run(live_chat.chat_uuid, RUN)
        assert live_run is not None and live_run.status == RunStatus.RUNNING
        untouched = await memory_store.get_message(live_message)
        assert untouched is not None and untouched.in_progress
        assert await manager.sweep(stale_after=60) == 0


async def test_sweep_without_a_store_is_a_configuration_error() -> None:
    manager = StreamPersistenceManager(FedAgent)
    with pytest.raises(threadstore.errors.ConfigurationError):
        await manager.sweep()


async def test_heartbeat_refreshes_live_runs_under_the_managers_owner(
    memory_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = LoopClock(monkeypatch)
    agent = FedAgent()
    manager = StreamPersistenceManager(lambda: agent, store=memory_store, heartbeat_interval=30)
    chat, _ = await _chat_with_run(
        memory_store, THREAD, RUN, manager.owner, age=timedelta(minutes=5)
    )
    async with manager:
        handle = await manager.run(make_input())
        assert agent.owner == manager.owner  # stamped so the store accepts its heartbeats
        agent.chat = chat
        await clock.advance(29)
        run = await memory_store.get_run(chat.chat_uuid, RUN)
        assert run is not None and utcnow() - run.heartbeat_at > timedelta(minutes=4)
        await clock.advance(2)  # the first beat is due
        run = await memory_store.get_run(chat.chat_uuid, RUN)
        assert run is not None and utcnow() - run.heartbeat_at < timedelta(minutes=1)
        handle.cancel()


# --- with the real storage agent ------------------------------------------------------------


def storage_agent_factory(store: Store, inner: ScriptedAgent) -> Any:
    def build() -> StorageAgent:
        agent = StorageAgent("assistant", STORAGE_USER, store, store, inner)
        agent.retry_base_delay = 0.001
        return agent

    return build


async def stored_history(store: Store) -> tuple[Chat, list[Any]]:
    chat = await store.get_chat_by_thread_id(STORAGE_USER, THREAD)
    assert chat is not None
    return chat, list(await store.get_chat_messages(chat.chat_uuid))


async def test_storage_agent_run_through_the_manager_is_recorded_and_completed(
    memory_store: Store,
) -> None:
    script = full_turn(THREAD, RUN)
    manager = StreamPersistenceManager(
        storage_agent_factory(memory_store, ScriptedAgent(script)), store=memory_store
    )
    async with manager:
        handle = await manager.run(run_input(THREAD, RUN, [user("u1")]))
        streamed = await collect(handle.events())
        await handle.wait()
    assert streamed == script
    chat, messages = await stored_history(memory_store)
    assert all(m.status == MessageStatus.COMPLETE and not m.in_progress for m in messages)
    assert messages[-1].content == "It is 21 degrees in Paris."
    run = await memory_store.get_run(chat.chat_uuid, RUN)
    assert run is not None
    assert (run.status, run.owner) == (RunStatus.COMPLETE, manager.owner)


class TaggedStreamAgent(StorageAgent):
    """Overrides ``run`` to add a CUSTOM event after RUN_STARTED (what the client sees)."""

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:  # type: ignore[override]
        async for event in super().run(input):
            yield event
            if isinstance(event, RunStartedEvent):
                yield CustomEvent(name="tag", value="added by the subclass")


async def test_a_storage_agent_overriding_run_is_streamed_through_its_override(
    memory_store: Store,
) -> None:
    script = full_turn(THREAD, RUN)

    def build() -> StorageAgent:
        return TaggedStreamAgent(
            "assistant", STORAGE_USER, memory_store, memory_store, ScriptedAgent(script)
        )

    async with StreamPersistenceManager(build, store=memory_store) as manager:
        handle = await manager.run(run_input(THREAD, RUN, [user("u1")]))
        streamed = await collect(handle.events())
        await handle.wait()

    assert streamed == [
        script[0],
        CustomEvent(name="tag", value="added by the subclass"),
        *script[1:],
    ]
    _, messages = await stored_history(memory_store)
    assert messages[-1].content == "It is 21 degrees in Paris."


async def test_storage_agent_cancelled_through_the_manager_is_interrupted(
    memory_store: Store,
) -> None:
    script = [run_started(THREAD, RUN), *text_message("m1", "Partial answer")]
    inner = ScriptedAgent(script, pause_after=len(script) - 1)  # before m1's END
    async with StreamPersistenceManager(
        storage_agent_factory(memory_store, inner), store=memory_store
    ) as manager:
        handle = await manager.run(run_input(THREAD, RUN, [user("u1")]))
        await inner.paused.wait()
        assert manager.cancel(THREAD, RUN)
        await handle.wait()
        streamed = await collect(handle.events())
    terminal = streamed[-1]
    assert isinstance(terminal, RunErrorEvent) and terminal.code == CANCELLED_ERROR_CODE
    chat, messages = await stored_history(memory_store)
    assert (messages[-1].content, messages[-1].status) == ("Partial answer", "interrupted")
    run = await memory_store.get_run(chat.chat_uuid, RUN)
    assert run is not None and run.status == RunStatus.INTERRUPTED


async def test_a_cancel_during_the_final_write_of_a_finished_run_leaves_it_complete(
    memory_store: Store,
) -> None:
    script = full_turn(THREAD, RUN)
    gate = asyncio.Event()  # holds every record write until the run has been cancelled
    spy = StoreSpy(memory_store, gate=gate)

    def build() -> StorageAgent:
        return StorageAgent("assistant", STORAGE_USER, memory_store, spy, ScriptedAgent(script))

    async with StreamPersistenceManager(build, store=memory_store) as manager:
        handle = await manager.run(run_input(THREAD, RUN, []))
        async with aclosing(handle.events()) as events:
            async for _ in events:
                if handle.last_event_id == len(script) - 1:
                    break  # all but RUN_FINISHED, which waits for the records
        agent = handle.agent
        while agent._persister is None or agent._persister.final is None:
            await asyncio.sleep(0)  # until the run has ended and its final write waits
        assert handle.cancel() is True  # the run has ended; its records are being written
        gate.set()
        await handle.wait()
        streamed = await collect(handle.events())

    assert streamed == script
    assert handle.outcome == RunStatus.COMPLETE
    chat, messages = await stored_history(memory_store)
    assert messages and all(m.status == MessageStatus.COMPLETE for m in messages)
    run = await memory_store.get_run(chat.chat_uuid, RUN)
    assert run is not None and run.status == RunStatus.COMPLETE


async def test_storage_agent_crash_through_the_manager_is_errored_for_store_and_client(
    memory_store: Store,
) -> None:
    script = [run_started(THREAD, RUN), *text_message("m1", "Half a sentence")[:-1]]
    inner = ScriptedAgent(script, fail_after=len(script), error=KeyError("tool"))
    async with StreamPersistenceManager(
        storage_agent_factory(memory_store, inner), store=memory_store
    ) as manager:
        handle = await manager.run(run_input(THREAD, RUN, [user("u1")]))
        await handle.wait()
        streamed = await collect(handle.events())
    terminal = streamed[-1]
    assert isinstance(terminal, RunErrorEvent)
    assert (terminal.code, terminal.message) == (INTERNAL_ERROR_CODE, "KeyError: 'tool'")
    assert handle.outcome == RunStatus.ERRORED
    _, messages = await stored_history(memory_store)
    assert (messages[-1].content, messages[-1].status) == ("Half a sentence", "errored")


async def test_storage_agent_run_survives_a_client_that_disconnects(memory_store: Store) -> None:
    script = full_turn(THREAD, RUN)
    inner = ScriptedAgent(script, pause_after=3)
    async with StreamPersistenceManager(
        storage_agent_factory(memory_store, inner), store=memory_store
    ) as manager:
        handle = await manager.run(run_input(THREAD, RUN, [user("u1")]))
        async with aclosing(handle.events()) as stream:
            await anext(stream)  # the client goes away after the first event
        inner.gate.set()
        await handle.wait()
    assert handle.outcome == RunStatus.COMPLETE
    _, messages = await stored_history(memory_store)
    assert messages[-1].content == "It is 21 degrees in Paris."
    assert all(m.status == MessageStatus.COMPLETE for m in messages)


async def test_storage_agent_run_is_heartbeated_and_not_swept_while_live(
    memory_store: Store,
) -> None:
    inner = ScriptedAgent([run_started(THREAD, RUN)], pause_after=1)
    manager = StreamPersistenceManager(
        storage_agent_factory(memory_store, inner), store=memory_store
    )
    async with manager:
        handle = await manager.run(run_input(THREAD, RUN, [user("u1")]))
        await inner.paused.wait()
        chat, _ = await stored_history(memory_store)
        before = await memory_store.get_run(chat.chat_uuid, RUN)
        assert before is not None
        await manager.heartbeat()
        after = await memory_store.get_run(chat.chat_uuid, RUN)
        assert after is not None and after.heartbeat_at > before.heartbeat_at
        assert await manager.sweep(stale_after=1e-6) == 0
        assert not handle.done
