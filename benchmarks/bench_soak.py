"""``threadstore serve`` under a steady load for minutes: latency over time, memory, nothing lost.

One real server process (``threadstore serve``, the paced agent of ``server_agent.py``:
100 events per run at ``--rate`` events per second, as a model streams) and one client
process that keeps ``--concurrency`` runs going: each client slot starts a new run on a
new thread as soon as its last one ended, until ``--duration`` seconds have passed.

Reported per ``--bucket`` seconds (a minute by default): runs started, time to first
event (p50, p99) of the runs started in it, the gap between two events of one run (p50,
p99, p99.9) for the events that arrived in it, and the server's RSS at its end. Memory
is compared between the end of the warm-up (``--warmup`` seconds, by default the run
manager's 60 s retention plus 15 s, so retained runs have reached their steady number)
and the end of the load. After the load every run is checked in the store: its run
``complete``, each assistant message's text and the tool call's arguments exactly what
the client received, and no message twice. Any difference counts as a lost run.

    python benchmarks/bench_soak.py                       # 5 minutes, SQLite
    python benchmarks/bench_soak.py --duration 20 --bucket 5 --warmup 5   # a smoke run
    python benchmarks/bench_soak.py --store postgres

Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench_server import (
    DEFAULT_PG_URL,
    USER_TEXT,
    Contender,
    RunIds,
    cpu_seconds,
    drop_db,
    fresh_db_url,
    new_runs,
    proc_status_kb,
    start_server,
)
from common import machine_line, markdown_table, percentile
from server_agent import EVENTS_PER_RUN, PACE_ENV, transcript
from threadstore import MessageStatus, RunStatus, open_store
from threadstore.server._auth import LOCAL_USER_UUID


@dataclass
class Streamed:
    """What the client received of one run."""

    run: RunIds
    started: float
    """Seconds since the load began when the request was sent."""
    first_event: float | None = None
    gaps: list[tuple[float, float]] = field(default_factory=list)
    """(arrival since the load began, seconds since the run's previous event)."""
    texts: dict[str, str] = field(default_factory=dict)
    arguments: str = ""
    events: int = 0
    last_type: str = ""
    error: str | None = None


async def stream_one(client: httpx.AsyncClient, url: str, run: RunIds, origin: float) -> Streamed:
    """POST one run and read its stream, keeping what the store must hold."""
    sent = time.perf_counter()
    got = Streamed(run, sent - origin)
    previous: float | None = None
    pending = b""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    try:
        async with client.stream("POST", url, content=run.body(), headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                got.error = f"HTTP {response.status_code}"
                return got
            async for chunk in response.aiter_raw():
                pending += chunk
                *frames, pending = pending.split(b"\n\n")
                now = time.perf_counter()
                for frame in frames:
                    data = next(
                        (line[5:] for line in frame.split(b"\n") if line.startswith(b"data:")), None
                    )
                    if data is None:
                        continue
                    event = json.loads(data)
                    got.events += 1
                    got.last_type = event["type"]
                    if previous is None:
                        got.first_event = now - sent
                    else:
                        got.gaps.append((now - origin, now - previous))
                    previous = now
                    if event["type"] == "TEXT_MESSAGE_CONTENT":
                        message = event["messageId"]
                        got.texts[message] = got.texts.get(message, "") + event["delta"]
                    elif event["type"] == "TOOL_CALL_ARGS":
                        got.arguments += event["delta"]
    except httpx.HTTPError as exc:
        got.error = f"{type(exc).__name__} after {got.events} events: {exc}"
    return got


async def client_slot(
    client: httpx.AsyncClient, url: str, origin: float, until: float, out: list[Streamed]
) -> None:
    """Keep one run going until ``until``: a new run as soon as the last one ended."""
    while time.perf_counter() < until:
        (run,) = new_runs(1)
        out.append(await stream_one(client, url, run, origin))


async def check_stored(db_url: str, streamed: Sequence[Streamed]) -> list[str]:
    """Compare every run's stored records with what its client received; list the problems."""
    store = await open_store(db_url, setup=False)
    problems: list[str] = []
    try:
        for got in streamed:
            run = got.run
            chat = await store.get_chat_by_thread_id(LOCAL_USER_UUID, run.thread_id)
            record = await store.get_run(chat.chat_uuid, run.run_id) if chat else None
            if chat is None or record is None or record.status is not RunStatus.COMPLETE:
                problems.append(f"{run.run_id}: run not stored complete")
                continue
            messages = list(await store.get_chat_messages(chat.chat_uuid))
            plan = transcript(run.run_id)
            ids = [m.agui_id for m in messages]
            expected = [f"{run.run_id}-user", *plan.texts]
            stored = {m.agui_id: m.content for m in messages}
            calls = [c for m in messages for c in m.tool_calls]
            if sorted(i or "" for i in ids) != sorted(expected):
                problems.append(f"{run.run_id}: messages {ids}, expected {expected}")
            elif stored[f"{run.run_id}-user"] != USER_TEXT or any(
                stored[k] != v for k, v in got.texts.items()
            ):
                problems.append(f"{run.run_id}: stored text differs from the streamed text")
            elif got.texts != plan.texts:
                problems.append(f"{run.run_id}: the client did not receive the whole text")
            elif len(calls) != 1 or calls[0].arguments != got.arguments:
                problems.append(f"{run.run_id}: tool call missing, doubled or different")
            elif any(m.status is not MessageStatus.COMPLETE for m in messages):
                problems.append(f"{run.run_id}: a message is not complete")
    finally:
        await store.close()
    return problems


def bucket_table(streamed: Sequence[Streamed], bucket: float, rss: dict[int, float]) -> str:
    """Per time bucket: runs started, TTFE p50/p99, inter-event gap p50/p99/p99.9, RSS."""
    starts: dict[int, list[float]] = defaultdict(list)
    gaps: dict[int, list[float]] = defaultdict(list)
    for got in streamed:
        if got.first_event is not None:
            starts[int(got.started // bucket)].append(got.first_event)
        for at, gap in got.gaps:
            gaps[int(at // bucket)].append(gap)
    rows = []
    for index in sorted(set(starts) | set(gaps)):
        ttfe, gap = starts.get(index, []), gaps.get(index, [])

        def ms(values: list[float], q: float) -> str:
            return f"{percentile(values, q) * 1000:.1f}" if values else "-"

        memory = rss.get(index)
        rows.append(
            [
                f"{index * bucket:.0f}-{(index + 1) * bucket:.0f} s",
                str(len(ttfe)),
                ms(ttfe, 50),
                ms(ttfe, 99),
                ms(gap, 50),
                ms(gap, 99),
                ms(gap, 99.9),
                "-" if memory is None else f"{memory:.1f}",
            ]
        )
    return markdown_table(
        [
            "time",
            "runs started",
            "TTFE p50 (ms)",
            "TTFE p99 (ms)",
            "gap p50 (ms)",
            "gap p99 (ms)",
            "gap p99.9 (ms)",
            "server RSS at end (MB)",
        ],
        rows,
    )


async def soak(args: argparse.Namespace) -> int:
    """Run the load once and print its report; non-zero when a run was lost."""
    os.environ[PACE_ENV] = str(args.rate)  # the server process inherits it
    contender = Contender("threadstore", args.store, agent="PacedAgent")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        db_url = await fresh_db_url(contender, Path(tmp), args.pg_url)
        assert db_url is not None
        server = start_server(contender, Path(tmp), db_url)
        try:
            await server.wait_ready()
            rss: dict[int, float] = {}
            streamed: list[Streamed] = []
            # Idle connections expire before uvicorn's 5 s keep-alive timeout closes them,
            # so no request is sent on a connection the server is closing.
            limits = httpx.Limits(max_connections=args.concurrency + 8, keepalive_expiry=2.0)
            timeout = httpx.Timeout(300.0, connect=60.0)
            async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
                origin = time.perf_counter()
                until = origin + args.duration
                cpu_start, client_cpu_start = cpu_seconds(server.pid), time.process_time()
                slots = [
                    asyncio.create_task(client_slot(client, server.url, origin, until, streamed))
                    for _ in range(args.concurrency)
                ]
                warm_rss: float | None = None
                buckets = math.ceil(args.duration / args.bucket)
                marks = sorted(
                    [(args.warmup, -1), *((i * args.bucket, i - 1) for i in range(1, buckets + 1))]
                )
                for at, label in marks:
                    await asyncio.wait(slots, timeout=max(0.0, origin + at - time.perf_counter()))
                    now_rss = proc_status_kb(server.pid, "VmRSS") / 1024
                    if label < 0:
                        warm_rss = now_rss
                    else:
                        rss[label] = now_rss
                await asyncio.gather(*slots)
                elapsed = time.perf_counter() - origin
                end_rss = proc_status_kb(server.pid, "VmRSS") / 1024
                server_cpu = cpu_seconds(server.pid) - cpu_start
                client_cpu = time.process_time() - client_cpu_start
            problems = await check_stored(db_url, [s for s in streamed if s.error is None])
        finally:
            server.stop()
            await drop_db(db_url, args.pg_url)
    errors = [s for s in streamed if s.error is not None or s.events != EVENTS_PER_RUN]
    events = sum(s.events for s in streamed)
    ttfe = [s.first_event for s in streamed if s.first_event is not None]
    first = [
        s.first_event for s in streamed if s.first_event is not None and s.started < args.bucket
    ]
    last = [
        s.first_event
        for s in streamed
        if s.first_event is not None and s.started >= args.duration - args.bucket
    ]
    print(
        f"{args.duration:.0f} s, {args.concurrency} concurrent runs of {EVENTS_PER_RUN} events at"
        f" {args.rate:g} events/s, {contender.name}. {machine_line()};"
        f" load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print()
    print(bucket_table(streamed, args.bucket, rss))
    print()
    ratio = f"{percentile(last, 99) / percentile(first, 99):.2f}" if first and last else "n/a"
    memory = "n/a" if warm_rss is None else f"{end_rss / warm_rss:.3f}"
    print(
        f"runs: {len(streamed)} ({len(errors)} failed or incomplete streams), events:"
        f" {events:,} ({events / elapsed:,.0f}/s); TTFE p50 {percentile(ttfe, 50) * 1000:.1f}"
        f" ms, p99 {percentile(ttfe, 99) * 1000:.1f} ms; TTFE p99 of the last bucket / the first:"
        f" {ratio}; server RSS after warm-up {warm_rss or 0:.1f} MB, at the end {end_rss:.1f}"
        f" MB (x{memory}); server CPU {server_cpu / max(events, 1) * 1e6:.1f} µs/event, client"
        f" CPU {client_cpu / max(events, 1) * 1e6:.1f} µs/event; runs lost or duplicated in"
        f" the store: {len(problems)}"
    )
    for problem in problems[:10]:
        print(f"  {problem}")
    for failed in errors[:10]:
        print(f"  {failed.run.run_id}: {failed.error or f'{failed.events} events'}")
    return 1 if problems or errors else 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    parser.add_argument("--concurrency", type=int, default=100, help="runs going at once")
    parser.add_argument("--rate", type=float, default=50.0, help="events/s of each run")
    parser.add_argument("--bucket", type=float, default=60.0, help="seconds per report row")
    parser.add_argument(
        "--warmup", type=float, default=75.0, help="seconds before the memory baseline"
    )
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--pg-url", default=os.environ.get("THREADSTORE_TEST_POSTGRES_URL", DEFAULT_PG_URL)
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(soak(parse_args())))
