"""threadstore's streaming path, side by side with the bare agent it wraps.

Part 1 streams a scripted run of 10,000 events (20 assistant turns of reasoning, text
and a tool call with streamed arguments and a result) to a client, once straight from
the agent and once through ``StreamPersistenceManager`` + ``StorageAgent`` on a SQLite
file, ``handle.wait()`` included; events/s and their ratio. Part 2 stamps each event
as the agent yields it and as the client receives it while every call to a store write
method (or to ``apply_writes``, a whole flush) takes 50 ms, and reports the latency
threadstore adds (p50, p99). Part 3 holds every store write for 10 s (and until the
stream ended) and records the traced peak memory of runs of two content sizes and two
event counts. Part 4 times ``import threadstore`` in fresh
interpreters.

Run ``python benchmarks/bench_streaming.py`` (``--quick`` for a smoke run of a few
seconds, ``--parts 1,4`` for some parts). Definitions: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ag_ui.core import (
    BaseEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from common import Goal, Samples, collect_garbage, machine_line, markdown_table, percentile, rotated
from threadstore import MessageStatus, Store, open_store
from threadstore.agui import StorageAgent, StreamPersistenceManager

USER = uuid.UUID("6b0f3c1e-0000-4000-8000-000000000001")
TEXT = (
    "The forecast for Paris shows light rain in the morning, clearing by noon, with a high"
    " of 21 degrees; I will check the hourly data and the wind before I answer you. "
)
WRITE_METHODS = frozenset(
    {
        "create_chat",
        "update_chat_name",
        "update_chat_state",
        "set_active_leaf",
        "delete_chat",
        "create_message",
        "update_message",
        "create_message_tool_call",
        "update_message_tool_call",
        "create_message_reasoning",
        "update_message_reasoning",
        "start_run",
        "heartbeat_runs",
        "finish_run",
        "finalize_run_records",
    }
)
"""Every Store method that writes (reads pass through the wrappers untouched)."""

TURN_OVERHEAD = 11
"""Events of one turn that carry no delta: step, reasoning, text and tool call brackets."""


# --- the scripted run ----------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """A run of ``events`` events in ``turns`` turns whose deltas carry ``content`` characters."""

    run_id: str
    events: int
    turns: int = 20
    content: int | None = None
    """Total streamed characters; ``None`` gives 8 per delta, about a token each."""

    @property
    def deltas(self) -> int:
        """How many of the events are text, reasoning or argument deltas."""
        return self.events - 2 - TURN_OVERHEAD * self.turns

    @property
    def delta_size(self) -> int:
        """Characters per delta."""
        return 8 if self.content is None else max(1, self.content // self.deltas)

    def __iter__(self) -> Iterator[BaseEvent]:
        """Build the events one by one, so a long run never sits in memory as a list."""
        if self.deltas < 3 * self.turns:
            raise ValueError(f"{self.events} events are too few for {self.turns} turns")
        run = self.run_id
        yield RunStartedEvent(thread_id=run, run_id=run)
        per_turn, extra = divmod(self.deltas, self.turns)
        for turn in range(self.turns):
            count = per_turn + (turn < extra)
            thinking, arguments = count // 4, count // 8
            text = count - thinking - arguments
            yield from self._turn(f"{run}-{turn}", thinking, text, arguments)
        yield RunFinishedEvent(thread_id=run, run_id=run)

    def _turn(self, ids: str, thinking: int, text: int, arguments: int) -> Iterator[BaseEvent]:
        reasoning_id, text_id, call_id = f"{ids}-r", f"{ids}-a", f"{ids}-c"
        yield StepStartedEvent(step_name=f"turn {ids}")
        yield ReasoningStartEvent(message_id=reasoning_id)
        yield ReasoningMessageStartEvent(message_id=reasoning_id, role="reasoning")
        for delta in self._deltas(thinking):
            yield ReasoningMessageContentEvent(message_id=reasoning_id, delta=delta)
        yield ReasoningMessageEndEvent(message_id=reasoning_id)
        yield ReasoningEndEvent(message_id=reasoning_id)
        yield TextMessageStartEvent(message_id=text_id, role="assistant")
        for delta in self._deltas(text):
            yield TextMessageContentEvent(message_id=text_id, delta=delta)
        yield TextMessageEndEvent(message_id=text_id)
        yield ToolCallStartEvent(
            tool_call_id=call_id, tool_call_name="get_weather", parent_message_id=text_id
        )
        for delta in self._deltas(arguments):
            yield ToolCallArgsEvent(tool_call_id=call_id, delta=delta)
        yield ToolCallEndEvent(tool_call_id=call_id)
        yield ToolCallResultEvent(
            message_id=f"{call_id}-result", tool_call_id=call_id, content='{"temp": 21}'
        )
        yield StepFinishedEvent(step_name=f"turn {ids}")

    def _deltas(self, count: int) -> Iterator[str]:
        size, span = self.delta_size, len(TEXT)
        text = TEXT * (size // span + 2)
        for index in range(count):
            start = (index * size) % span
            yield text[start : start + size]


def run_input(run_id: str) -> RunAgentInput:
    """The input of one run: a fresh thread, no messages."""
    return RunAgentInput(
        thread_id=run_id,
        run_id=run_id,
        messages=[],
        state=None,
        tools=[],
        context=[],
        forwarded_props={},
    )


class ScriptedAgent:
    """Replays a script, awaiting the event loop before each event as a model stream would.

    ``pace`` seconds are slept before each event (0 still yields to the loop); ``sent``
    collects ``perf_counter_ns()`` taken just before each yield when ``stamp`` is set;
    ``on_first`` is called before the first event goes out, ``on_end`` after the last.
    """

    def __init__(
        self,
        events: Iterable[BaseEvent],
        *,
        pace: float = 0.0,
        stamp: bool = False,
        on_first: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        self.name = "scripted"
        self.events = events
        self.pace = pace
        self.sent: list[int] | None = [] if stamp else None
        self.on_first = on_first
        self.on_end = on_end

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the script."""
        if self.on_first is not None:
            self.on_first()
        sent, pace = self.sent, self.pace
        for event in self.events:
            await asyncio.sleep(pace)
            if sent is not None:
                sent.append(time.perf_counter_ns())
            yield event
        if self.on_end is not None:
            self.on_end()


# --- store wrappers ------------------------------------------------------------------------


class SlowStore:
    """A store whose write methods first sleep ``delay`` s, and wait while it is stalled.

    :meth:`stall` holds every write from then on; :meth:`resume` lets them go once the
    stall's duration is over. So a run opens its chat, then streams into a store that
    takes nothing for at least that long.
    """

    def __init__(self, store: Store, *, delay: float = 0.0) -> None:
        self.store = store
        self.delay = delay
        self.released = asyncio.Event()
        self.released.set()
        self.writes = 0
        self.calls = 0
        """Calls to the store's write methods and ``apply_writes`` (each one round trip)."""
        self.stalled_writes = 0
        self._release_at = 0.0

    def stall(self, duration: float) -> None:
        """Hold writes from now until ``duration`` s have passed and :meth:`resume` was called."""
        self.released.clear()
        self._release_at = asyncio.get_running_loop().time() + duration

    def resume(self) -> None:
        """Release the held writes, or schedule that for the end of the stall's duration."""
        loop = asyncio.get_running_loop()
        loop.call_at(max(loop.time(), self._release_at), self.released.set)

    def transaction(self) -> Any:
        """The wrapped store's transaction."""
        return self.store.transaction()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.store, name)
        if name not in WRITE_METHODS and name != "apply_writes":
            return target

        async def write(*args: Any, **kwargs: Any) -> Any:
            # A batch is one call to the store (one round trip): one delay, its writes counted.
            self.writes += len(args[0]) if name == "apply_writes" else 1
            self.calls += 1
            if self.delay:
                await asyncio.sleep(self.delay)
            if not self.released.is_set():
                self.stalled_writes += 1
                await self.released.wait()
            return await target(*args, **kwargs)

        return write


def storage_factory(store: Any) -> Callable[[ScriptedAgent], StorageAgent]:
    """The manager's agent factory: a ``StorageAgent`` over ``store`` wrapping the agent."""

    def build(inner: ScriptedAgent) -> StorageAgent:
        return StorageAgent("bench", USER, store, store, inner)

    return build


async def through_manager(
    manager: StreamPersistenceManager[Any],
    inner: ScriptedAgent,
    run_id: str,
    received: list[int] | None = None,
) -> int:
    """Start a run, read every event as a client, wait until durable; return the count."""
    handle = await manager.run(run_input(run_id), inner)
    count = 0
    async for _ in handle.events():
        if received is not None:
            received.append(time.perf_counter_ns())
        count += 1
    await handle.wait()
    if handle.exception is not None:
        raise handle.exception
    return count


async def alone(inner: ScriptedAgent, run_id: str, received: list[int] | None = None) -> int:
    """Read every event straight from the agent; return the count."""
    count = 0
    async for _ in inner.run(run_input(run_id)):
        if received is not None:
            received.append(time.perf_counter_ns())
        count += 1
    return count


async def check_stored(store: Store, run_id: str, turns: int) -> None:
    """Fail unless the run's records are all stored and complete.

    A turn is one assistant message holding its reasoning step and its tool call.
    """
    chat = await store.get_chat_by_thread_id(USER, run_id)
    assert chat is not None, f"no chat for {run_id}"
    messages = await store.get_chat_messages(chat.chat_uuid)
    nested = sum(len(m.reasonings) + len(m.tool_calls) for m in messages)
    if len(messages) != turns or nested != 2 * turns:
        raise SystemExit(f"run {run_id}: {len(messages)} messages stored, not {turns}")
    if any(m.status is not MessageStatus.COMPLETE for m in messages):
        raise SystemExit(f"run {run_id}: a message is not complete")


# --- part 1: throughput --------------------------------------------------------------------


async def read_storage_agent(store: Store, inner: ScriptedAgent, run_id: str) -> int:
    """Read every event of a ``StorageAgent`` run directly (no manager); return the count."""
    count = 0
    async for _ in StorageAgent("bench", USER, store, store, inner).run(run_input(run_id)):
        count += 1
    return count


async def run_throughput(args: argparse.Namespace, root: Path) -> list[Goal]:
    """Part 1: events/s of the bare agent and of the same agent through threadstore.

    Two more paths split the cost: the manager with no storage agent, and the storage
    agent read directly. They are reported, not judged.
    """
    store = await open_store(f"sqlite:///{root / 'throughput.db'}")
    samples = Samples()
    bare, stored = "agent alone", "StreamPersistenceManager + StorageAgent (SQLite)"
    manager_only, agent_only = "manager, no StorageAgent", "StorageAgent (SQLite), no manager"
    names = [bare, stored, manager_only, agent_only]
    try:
        async with (
            StreamPersistenceManager(storage_factory(store), store=store) as manager,
            StreamPersistenceManager[ScriptedAgent](lambda inner: inner) as bare_manager,
        ):
            paths: dict[str, Callable[[ScriptedAgent, str], Awaitable[int]]] = {
                bare: alone,
                stored: functools.partial(through_manager, manager),
                manager_only: functools.partial(through_manager, bare_manager),
                agent_only: functools.partial(read_storage_agent, store),
            }
            for rep in range(args.warmup + args.reps):
                for index, name in enumerate(rotated(names, rep)):
                    run_id = f"p1-{rep}-{index}"
                    # Built beforehand, so the agent alone costs as little as an agent can.
                    inner = ScriptedAgent(list(Script(run_id, args.events)))
                    collect_garbage()
                    start = time.perf_counter()
                    count = await paths[name](inner, run_id)
                    elapsed = time.perf_counter() - start
                    if count != args.events:
                        raise SystemExit(f"{name} delivered {count} events, not {args.events}")
                    if name in (stored, agent_only):
                        await check_stored(store, run_id, Script(run_id, args.events).turns)
                    if rep >= args.warmup:
                        samples.add(name, elapsed)
    finally:
        await store.close()
    rate = {name: args.events / samples.median(name) for name in names}
    rows = [
        [
            name,
            f"{samples.median(name) * 1e3:.0f}",
            f"{rate[name]:,.0f}",
            f"{samples.median(name) / args.events * 1e6:.1f}",
            " to ".join(f"{v * 1e3:.0f}" for v in samples.spread(name)),
        ]
        for name in names
    ]
    print(
        f"\n## Part 1: {args.events:,} events to a client; {args.reps} interleaved"
        " repetitions, medians\n"
    )
    print(markdown_table(["path", "run (ms)", "events/s", "µs/event", "min to max (ms)"], rows))
    return [Goal("end-to-end events/s, threadstore/alone", rate[stored] / rate[bare], 0.6)]


# --- part 2: latency under a slow store ----------------------------------------------------


def latencies(sent: Sequence[int], received: Sequence[int]) -> list[float]:
    """Milliseconds from each event's yield to its receipt."""
    if len(sent) != len(received):
        raise SystemExit(f"{len(sent)} events sent, {len(received)} received")
    return [(r - s) / 1e6 for s, r in zip(sent, received, strict=True)]


async def run_latency(args: argparse.Namespace, root: Path) -> list[Goal]:
    """Part 2: added client latency per event while every store write call takes 50 ms."""
    base = await open_store(f"sqlite:///{root / 'latency.db'}")
    store = SlowStore(base, delay=args.write_delay)
    measured: dict[str, list[float]] = {"alone": [], "threadstore": []}
    durations = Samples()
    try:
        async with StreamPersistenceManager(
            storage_factory(store), store=cast(Store, store)
        ) as manager:
            for rep in range(args.latency_reps):
                for name in rotated(list(measured), rep):
                    run_id = f"p2-{rep}-{name}"
                    inner = ScriptedAgent(Script(run_id, args.events), pace=args.pace, stamp=True)
                    received: list[int] = []
                    collect_garbage()
                    start = time.perf_counter()
                    if name == "alone":
                        await alone(inner, run_id, received)
                    else:
                        await through_manager(manager, inner, run_id, received)
                    durations.add(name, time.perf_counter() - start)
                    assert inner.sent is not None
                    measured[name] += latencies(inner.sent, received)
    finally:
        await base.close()
    quantiles = {
        name: (percentile(values, 50), percentile(values, 99), max(values))
        for name, values in measured.items()
    }
    rows = [
        [name, *(f"{q:.3f}" for q in quantiles[name]), f"{durations.median(name):.2f}"]
        for name in measured
    ]
    added = [t - a for t, a in zip(quantiles["threadstore"], quantiles["alone"], strict=True)]
    rows.append(["added by threadstore", *(f"{q:.3f}" for q in added), ""])
    pace = "back to back" if args.pace == 0 else f"one every {args.pace * 1e3:g} ms"
    print(
        f"\n## Part 2: latency from the agent's yield to the client, every store write call"
        f" {args.write_delay * 1e3:g} ms; {args.events:,} events ({pace}),"
        f" {args.latency_reps} interleaved runs per path, all events pooled\n"
    )
    print(markdown_table(["path", "p50 (ms)", "p99 (ms)", "max (ms)", "run (s, median)"], rows))
    runs = args.latency_reps
    print(
        f"\nThe store took {store.writes / runs:.0f} writes per run in {store.calls / runs:.0f}"
        f" calls (a flush is one call), each call delayed {args.write_delay * 1e3:g} ms; `run`"
        " includes `wait()` for the last of them."
    )
    return [
        Goal("added latency p50", added[0], 0.2, at_least=False, unit=" ms"),
        Goal("added latency p99", added[1], 2.0, at_least=False, unit=" ms"),
    ]


# --- part 3: memory under a stalled store --------------------------------------------------


MEMORY_PATHS: dict[str, int | None] = {
    "StorageAgent, client reads agent.run": 0,
    "manager + StorageAgent, log bounded to 1,000 events": 1000,
    "manager + StorageAgent, full log (the default)": None,
}
"""How part 3 runs: straight through the storage agent (0), or a manager with that log bound."""


@dataclass
class MemoryCase:
    """One stalled-store run and the traced peak it reached."""

    path: str
    content: int
    events: int
    peak: int = 0
    held_writes: int = 0
    seconds: float = 0.0


async def stalled_run(case: MemoryCase, root: Path, stall: float, index: int) -> None:
    """Run one case with every write held from the first event until the stall is over."""
    base = await open_store(f"sqlite:///{root / f'memory-{index}.db'}")
    store = SlowStore(base)
    run_id = f"p3-{index}"
    script = Script(run_id, case.events, content=case.content)
    inner = ScriptedAgent(script, on_first=lambda: store.stall(stall), on_end=store.resume)
    bound = MEMORY_PATHS[case.path]
    count = 0
    try:
        collect_garbage()
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        if bound == 0:
            async for _ in StorageAgent("bench", USER, store, store, inner).run(run_input(run_id)):
                count += 1
        else:
            async with StreamPersistenceManager(
                storage_factory(store), store=cast(Store, store), max_buffered_events=bound
            ) as manager:
                count = await through_manager(manager, inner, run_id)
        case.seconds = time.perf_counter() - start
        case.peak = tracemalloc.get_traced_memory()[1] - before
        case.held_writes = store.stalled_writes
        if count != case.events:
            raise SystemExit(f"{case.path}: {count} events delivered, not {case.events}")
        await check_stored(base, run_id, script.turns)
    finally:
        await base.close()


async def run_memory(args: argparse.Namespace, root: Path) -> None:
    """Part 3: traced peak memory of stalled-store runs by content size and event count."""
    cases = [
        MemoryCase(path, content, events)
        for path in MEMORY_PATHS
        for content in args.contents
        for events in args.event_counts
    ]
    tracemalloc.start()
    try:
        for index, case in enumerate(cases):
            await stalled_run(case, root, args.stall, index)
            print(
                f"  {case.path}: {case.content:,} chars in {case.events:,} events:"
                f" peak {case.peak / 1e6:.1f} MB, {case.held_writes} write calls held,"
                f" {case.seconds:.1f} s",
                file=sys.stderr,
            )
    finally:
        tracemalloc.stop()
    print(
        f"\n## Part 3: traced peak memory (MB) of one run; every store write held from the"
        f" first event until {args.stall:g} s have passed and the stream has ended\n"
    )
    headers = ["path"] + [
        f"{content / 1e3:,.0f} KB in {events / 1e3:,.0f}k events"
        f" ({Script('x', events, content=content).delta_size}-char deltas)"
        for content in args.contents
        for events in args.event_counts
    ]
    rows = [
        [path] + [f"{c.peak / 1e6:.1f}" for c in cases if c.path == path] for path in MEMORY_PATHS
    ]
    print(markdown_table(headers, rows))
    print("\nHow the peak moves, at the larger other size:")
    for path in MEMORY_PATHS:
        peak = {(c.content, c.events): c.peak for c in cases if c.path == path}
        (few, many), (small, large) = args.event_counts, args.contents
        print(
            f"- {path}: {many // few}x the events -> x{peak[large, many] / peak[large, few]:.2f};"
            f" {large // small}x the content -> x{peak[large, many] / peak[small, many]:.2f}"
        )


# --- part 4: import time -------------------------------------------------------------------


def interpreter_seconds(code: str) -> float:
    """Wall-clock seconds of a fresh interpreter running ``code``."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def slowest_imports(count: int) -> list[tuple[str, float]]:
    """``threadstore`` and its ``count`` slowest direct imports (cumulative seconds).

    ``-X importtime`` prints an import's own imports, one level deeper, just before it.
    """
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import threadstore"],
        check=True,
        capture_output=True,
        text=True,
    )
    children: list[tuple[str, float]] = []
    for line in result.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name, seconds = parts[2].rstrip(), int(parts[1]) / 1e6
        depth = (len(name) - len(name.lstrip())) // 2
        if depth == 1:
            children.append((name.strip(), seconds))
        elif depth == 0 and name.strip() == "threadstore":
            return [(name.strip(), seconds), *sorted(children, key=lambda c: -c[1])[:count]]
        elif depth == 0:
            children = []
    raise SystemExit("`-X importtime` printed no line for threadstore")


def run_import(args: argparse.Namespace) -> list[Goal]:
    """Part 4: median ``import threadstore`` minus median bare interpreter start."""
    samples = Samples()
    codes = {"import": "import threadstore", "bare": "pass"}
    for rep in range(args.import_runs):
        for name in rotated(list(codes), rep):
            samples.add(name, interpreter_seconds(codes[name]))
    cost = samples.median("import") - samples.median("bare")
    print(f"\n## Part 4: `import threadstore`, {args.import_runs} fresh interpreters each\n")
    rows = [
        ["`python -c 'pass'`", f"{samples.median('bare'):.3f}"],
        ["`python -c 'import threadstore'`", f"{samples.median('import'):.3f}"],
        ["difference", f"{cost:.3f}"],
    ]
    print(markdown_table(["command", "median (s)"], rows))
    print("\n`python -X importtime -c 'import threadstore'` (cumulative; its slowest imports):")
    for name, seconds in slowest_imports(6):
        print(f"- {name}: {seconds * 1e3:.0f} ms")
    return [Goal("import threadstore", cost, 0.3, at_least=False, unit=" s")]


# --- entry point ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Read the sizes; ``--quick`` shrinks every one of them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--parts", default="1,2,3,4", help="comma-separated parts to run")
    parser.add_argument("--events", type=int, help="events per run in parts 1 and 2")
    parser.add_argument("--reps", type=int, help="timed repetitions per path in part 1")
    parser.add_argument("--pace", type=float, help="seconds between events in part 2")
    parser.add_argument("--stall", type=float, help="seconds the store stalls in part 3")
    args = parser.parse_args(argv)
    defaults: dict[str, Any] = (
        {
            "events": 2_000,
            "reps": 3,
            "warmup": 1,
            "pace": 0.0,
            "latency_reps": 1,
            "stall": 1.0,
            "contents": (10_000, 100_000),
            "event_counts": (1_000, 10_000),
            "import_runs": 3,
        }
        if args.quick
        else {
            "events": 10_000,
            "reps": 7,
            "warmup": 1,
            "pace": 0.0,
            "latency_reps": 3,
            "stall": 10.0,
            "contents": (100_000, 1_000_000),
            "event_counts": (10_000, 100_000),
            "import_runs": 10,
        }
    )
    for name, value in defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    args.write_delay = 0.05
    args.parts = {int(part) for part in args.parts.split(",")}
    return args


async def main(argv: Sequence[str] | None = None) -> int:
    """Run the parts and print Markdown ready for docs/benchmarks.md."""
    args = parse_args(argv)
    print(f"# threadstore streaming: the agent alone vs through threadstore\n\n{machine_line()}")
    goals: list[Goal] = []
    with tempfile.TemporaryDirectory(prefix="threadstore-bench-") as folder:
        if 1 in args.parts:
            goals += await run_throughput(args, Path(folder))
        if 2 in args.parts:
            goals += await run_latency(args, Path(folder))
        if 3 in args.parts:
            await run_memory(args, Path(folder))
    if 4 in args.parts:
        goals += run_import(args)
    print()
    for goal in goals:
        print(goal.line())
    return 0 if all(goal.met for goal in goals) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
