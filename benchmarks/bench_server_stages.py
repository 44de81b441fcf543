"""Where a served event's CPU goes: the agent, the run log, SSE encoding, the fold, the store.

In one process, without HTTP: 200 runs of ``server_agent.ScriptedAgent`` (100 events
each) at once through four paths, each adding one stage to the one before:

1. **agent**: the agent's events, iterated;
2. **+ log**: through ``StreamPersistenceManager`` (producer task, numbered log,
   reader wake-ups), read by one reader per run a batch at a time, as ``POST /agui``
   reads it;
3. **+ SSE**: each event encoded as the SSE frame the server sends;
4. **+ storage (SQLite)**: ``StorageAgent`` on a SQLite file, as ``threadstore serve``
   runs it (set-up, fold, flushes).

And apart, **agent + fold**: the agent's events folded by ``ConversationFold.apply``
(the reference path, no store, no deltas batched), which splits the storage stage into
the fold and the rest (set-up and writes).

The CPU time of the process (all threads) per event of each path, medians of the
rounds (paths interleaved), and the difference of each to the one before.

    python benchmarks/bench_server_stages.py            # 5 rounds
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

from ag_ui.core import RunAgentInput, UserMessage

from common import collect_garbage, machine_line, markdown_table
from server_agent import EVENTS_PER_RUN, PassThrough, ScriptedAgent
from threadstore import open_store
from threadstore.agui import StorageAgent, StreamPersistenceManager
from threadstore.fold import ConversationFold
from threadstore.server._sse import encode_frame

USER = uuid4()


def run_inputs(count: int) -> list[RunAgentInput]:
    """``count`` runs on new threads, one user message each."""
    tag = uuid4().hex[:8]
    return [
        RunAgentInput(
            thread_id=f"t-{tag}-{n}",
            run_id=f"r-{tag}-{n}",
            messages=[UserMessage(id=f"u-{tag}-{n}", content="What will the weather be?")],
            state={},
            tools=[],
            context=[],
            forwarded_props={},
        )
        for n in range(count)
    ]


async def agent_alone(runs: list[RunAgentInput]) -> int:
    agent = ScriptedAgent()

    async def one(run: RunAgentInput) -> int:
        return sum([1 async for _ in agent.run(run)])

    return sum(await asyncio.gather(*(one(run) for run in runs)))


async def agent_and_fold(runs: list[RunAgentInput]) -> int:
    agent = ScriptedAgent()

    async def one(run: RunAgentInput) -> int:
        fold = ConversationFold(run.run_id, thread_id=run.thread_id, history=[], state={})
        count = 0
        async for event in agent.run(run):
            fold.apply(event)
            count += 1
        return count

    return sum(await asyncio.gather(*(one(run) for run in runs)))


async def through_manager(
    factory: Callable[[], Any], runs: list[RunAgentInput], *, encode: bool, store: Any = None
) -> int:
    async with StreamPersistenceManager(factory, store=store) as manager:

        async def one(run: RunAgentInput) -> int:
            handle = await manager.run(run)
            count = 0
            async for first, batch in handle.numbered_batches():
                for event_id, event in enumerate(batch, first):
                    if encode:
                        encode_frame(event, event_id, handle.json_of(event_id, event))
                    count += 1
            await handle.wait()
            return count

        return sum(await asyncio.gather(*(one(run) for run in runs)))


async def main(rounds: int, count: int) -> None:
    inner = ScriptedAgent()
    with tempfile.TemporaryDirectory() as root:
        sqlite = await open_store(f"sqlite:///{Path(root) / 'stages.db'}")

        def storage(store: Any) -> Callable[[], Any]:
            return lambda: StorageAgent("bench", USER, store, store, inner, run_repo=store)

        paths: dict[str, Callable[[list[RunAgentInput]], Awaitable[int]]] = {
            "agent": agent_alone,
            "+ log": lambda runs: through_manager(
                lambda: PassThrough("bench", USER, None, None, inner), runs, encode=False
            ),
            "+ SSE": lambda runs: through_manager(
                lambda: PassThrough("bench", USER, None, None, inner), runs, encode=True
            ),
            "+ storage (SQLite)": lambda runs: through_manager(
                storage(sqlite), runs, encode=True, store=sqlite
            ),
            "agent + fold (apart)": agent_and_fold,
        }
        cpu: dict[str, list[float]] = {name: [] for name in paths}
        try:
            for index in range(rounds + 1):  # the first round warms up
                for name, path in paths.items():
                    runs = run_inputs(count)
                    collect_garbage()
                    start = time.process_time()
                    events = await path(runs)
                    spent = time.process_time() - start
                    assert events == count * EVENTS_PER_RUN, (name, events)
                    if index:
                        cpu[name].append(spent / events * 1e6)
        finally:
            await sqlite.close()
    rows, previous = [], None
    agent = statistics.median(cpu["agent"])
    for name, values in cpu.items():
        median = statistics.median(values)
        if name.startswith("agent +"):
            previous = agent  # the fold, measured apart, is compared with the agent alone
        added = "-" if previous is None else f"{median - previous:+.1f}"
        rows.append([name, f"{median:.1f} ({min(values):.1f} to {max(values):.1f})", added])
        previous = median
    print(f"{count} runs x {EVENTS_PER_RUN} events at once, {rounds} rounds. {machine_line()}")
    print()
    print(markdown_table(["path", "CPU µs/event, median (min to max)", "the stage adds"], rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.runs))
