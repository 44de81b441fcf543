"""What the usage ledger and telemetry add to a streamed run when nothing collects spans.

Side by side in one process, by CPU time (``time.process_time``): one scripted run of
bench_streaming.py through ``StorageAgent`` on a SQLite file, against the calls a run
makes for usage and telemetry with no OpenTelemetry SDK set — its ``RunWatch`` (span,
active-runs count, usage read at the end), the budget check (one read of a store with
no budgets), and per flush a span, the flush-latency and retry metrics — repeated for
as many flushes as the run made. Prints both and their ratio.

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
from common import collect_garbage
from threadstore import _telemetry, open_store
from threadstore.agui import StorageAgent
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=15, help="timed repetitions")
    parser.add_argument("--events", type=int, default=10_000, help="events per run")
    args = parser.parse_args()
    asyncio.run(main(args.reps, args.events))
