"""Part 1 of bench_streaming.py by CPU time: what wrapping an agent costs, on a busy machine.

Wall-clock throughput swings by tens of percent when other processes share the cores;
the CPU time a run takes (``time.process_time``, every thread of this process,
SQLite's included) moves far less. Same scripted run, same paths, interleaved; prints
the medians and the ratio agent alone / manager + StorageAgent.

    python benchmarks/bench_streaming_cpu.py --reps 15
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import bench_streaming as streaming
from common import collect_garbage
from threadstore import open_store
from threadstore.agui import StreamPersistenceManager


async def main(reps: int, events: int, warmup: int = 2) -> None:
    """Run every path ``warmup + reps`` times, interleaved, and print the CPU-time medians."""
    with tempfile.TemporaryDirectory() as root:
        store = await open_store(f"sqlite:///{Path(root) / 'cpu.db'}")
        cpu: dict[str, list[float]] = {"agent alone": [], "manager + StorageAgent": []}
        cpu["StorageAgent, no manager"] = []
        try:
            async with StreamPersistenceManager(
                streaming.storage_factory(store), store=store
            ) as manager:
                paths: dict[str, Callable[[streaming.ScriptedAgent, str], Awaitable[int]]] = {
                    "agent alone": streaming.alone,
                    "manager + StorageAgent": functools.partial(streaming.through_manager, manager),
                    "StorageAgent, no manager": functools.partial(
                        streaming.read_storage_agent, store
                    ),
                }
                for rep in range(warmup + reps):
                    for name, path in paths.items():
                        run_id = f"cpu-{rep}-{len(cpu[name])}-{name[:5]}"
                        inner = streaming.ScriptedAgent(list(streaming.Script(run_id, events)))
                        collect_garbage()
                        start = time.process_time()
                        await path(inner, run_id)
                        if rep >= warmup:
                            cpu[name].append(time.process_time() - start)
        finally:
            await store.close()
    medians = {name: statistics.median(values) * 1e3 for name, values in cpu.items()}
    for name, value in medians.items():
        print(f"{name}: {value:.1f} ms CPU")
    ratio = medians["agent alone"] / medians["manager + StorageAgent"]
    print(f"CPU ratio, agent alone / manager + StorageAgent: {ratio:.3f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=15, help="timed repetitions per path")
    parser.add_argument("--events", type=int, default=10_000, help="events per run")
    args = parser.parse_args()
    asyncio.run(main(args.reps, args.events))
