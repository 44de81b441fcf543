"""What the usage ledger and telemetry add to a streamed run when nothing collects spans.

Side by side in one process, by CPU time (``time.process_time``), on a SQLite file:

1. One scripted run of bench_streaming.py through ``StorageAgent``, against the calls a
   run makes for usage and telemetry with no OpenTelemetry SDK set — its ``RunWatch``
   (span, active-runs count, usage read at the end), the budget check (one read of a
   store with no budgets), and per flush a span, the flush-latency and retry metrics,
   for as many flushes as a run makes. Prints both and the share.
2. The streaming benchmark's run through ``StreamPersistenceManager`` + ``StorageAgent``
   with those calls, and with them replaced by do-nothing stand-ins, interleaved run by
   run: the before/after of this layer without a second process (whose CPU time on a
   shared machine swings by more than the difference). Prints the medians and ratio.

    python benchmarks/bench_observe_cost.py --reps 15
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import bench_streaming as streaming
import threadstore.agui._agent as agent_module
from common import collect_garbage
from threadstore import _telemetry, open_store
from threadstore.agui import StorageAgent, StreamPersistenceManager
from threadstore.agui._usage import RunWatch
from threadstore.fold import RunInfo

FLUSHES = 10
"""Flushes a 10,000-event run makes (a boundary flush at most every 0.25 s, and the last)."""

INNER = 200
"""Repetitions of the per-run calls per timed sample (one would be below the clock's grain)."""


async def per_run_calls(store: object, chat_uuid: uuid.UUID) -> None:
    """The calls one run makes for usage and telemetry, with no SDK set."""
    watch = RunWatch("bench", "thread", "run")
    await store.usage.check_budget(streaming.USER, chat_uuid)  # type: ignore[attr-defined]
    for _ in range(FLUSHES):
        with _telemetry.span("threadstore.flush", chat_uuid):
            pass
        _telemetry.record_flush(0.001, final=False)
        _telemetry.count_retries(0)
    await watch.end(store, None, RunInfo(run_id="run"), "complete", None)  # type: ignore[arg-type]


async def main(reps: int, events: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = await open_store(f"sqlite:///{Path(root) / 'observe.db'}")
        runs: list[float] = []
        calls: list[float] = []
        try:
            chat_uuid = uuid.uuid4()
            for rep in range(reps + 2):
                run_id = f"observe-{rep}"
                inner = streaming.ScriptedAgent(list(streaming.Script(run_id, events)))
                agent = StorageAgent("bench", streaming.USER, store, store, inner)
                collect_garbage()
                start = time.process_time()
                async for _ in agent.run(streaming.run_input(run_id)):
                    pass
                ran = time.process_time() - start
                collect_garbage()
                start = time.process_time()
                for _ in range(INNER):
                    await per_run_calls(store, chat_uuid)
                called = (time.process_time() - start) / INNER
                if rep >= 2:
                    runs.append(ran)
                    calls.append(called)
        finally:
            await store.close()
    run_ms, calls_ms = statistics.median(runs) * 1e3, statistics.median(calls) * 1e3
    print(f"a run of {events:,} events through StorageAgent: {run_ms:.2f} ms CPU")
    print(f"its usage and telemetry calls, no SDK: {calls_ms:.4f} ms CPU")
    print(f"share of the run: {calls_ms / run_ms:.3%}")


class _Unwatched:
    """``RunWatch`` with nothing to do: the run as it was before this layer."""

    def __init__(self, *args: object) -> None:
        pass

    def events(self, stream: object) -> object:
        return stream

    def first_event(self, event: object) -> None:
        pass

    async def end(self, *args: object) -> None:
        pass


async def _no_check(*args: object) -> None:
    return None


def _without() -> dict[tuple[object, str], object]:
    """Replace this layer's per-run calls with stand-ins; what they replaced."""
    saved: dict[tuple[object, str], object] = {}
    stand_ins = {
        (agent_module, "RunWatch"): _Unwatched,
        (agent_module, "check_budget"): _no_check,
        (_telemetry, "span"): lambda *args, **kwargs: _telemetry._NOOP,
        (_telemetry, "record_flush"): lambda *args, **kwargs: None,
        (_telemetry, "count_retries"): lambda *args: None,
    }
    for (module, name), stand_in in stand_ins.items():
        saved[(module, name)] = getattr(module, name)
        setattr(module, name, stand_in)
    return saved


def _restore(saved: dict[tuple[object, str], object]) -> None:
    for (module, name), value in saved.items():
        setattr(module, name, value)


async def side_by_side(reps: int, events: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = await open_store(f"sqlite:///{Path(root) / 'side.db'}")
        cpu: dict[str, list[float]] = {"with usage and telemetry": [], "without": []}
        try:
            async with StreamPersistenceManager(
                streaming.storage_factory(store), store=store
            ) as manager:
                for rep in range(reps + 2):
                    # Each goes first every other time: neither always follows the other.
                    for name in list(cpu)[:: 1 if rep % 2 else -1]:
                        run_id = f"side-{rep}-{len(cpu[name])}-{name.split()[0]}"
                        inner = streaming.ScriptedAgent(list(streaming.Script(run_id, events)))
                        saved = _without() if name == "without" else {}
                        try:
                            collect_garbage()
                            start = time.process_time()
                            await streaming.through_manager(manager, inner, run_id)
                            spent = time.process_time() - start
                        finally:
                            _restore(saved)
                        if rep >= 2:
                            cpu[name].append(spent)
        finally:
            await store.close()
    medians = {name: statistics.median(values) * 1e3 for name, values in cpu.items()}
    for name, value in medians.items():
        print(f"manager + StorageAgent, {name}: {value:.1f} ms CPU")
    ratio = medians["with usage and telemetry"] / medians["without"]
    print(f"ratio with / without: {ratio:.3f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=15, help="timed repetitions")
    parser.add_argument("--events", type=int, default=10_000, help="events per run")
    parser.add_argument("--parts", default="1,2", help="comma-separated parts to run")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if "1" in parts:
        asyncio.run(main(args.reps, args.events))
    if "2" in parts:
        asyncio.run(side_by_side(args.reps, args.events))
