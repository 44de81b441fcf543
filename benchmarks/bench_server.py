"""``threadstore serve`` under 200 concurrent streaming runs, side by side with a bare server.

Each round starts two real uvicorn processes on 127.0.0.1, one after the other, both
streaming the same no-delay scripted agent (``server_agent.py``, 100 events per run):

- **threadstore**: ``threadstore serve --db sqlite:///<fresh file> --agent
  server_agent:ScriptedAgent``; every run goes through ``StreamPersistenceManager`` and
  ``StorageAgent``.
- **bare**: a plain FastAPI endpoint that parses the ``RunAgentInput`` and streams the
  agent's events as SSE (``ag_ui.encoder.EventEncoder``), storing nothing.

One client process (``httpx.AsyncClient``, HTTP/1.1) starts all runs at once, each on
its own thread, and reads every event. Per round and server: events/s over the whole
burst, time to first event (p50, p99), server CPU, and server memory (RSS before the
burst, its peak, and after). After each threadstore round every run is checked in the
SQLite file: run ``complete``, every message, tool call and text exactly as streamed. A
missing or unfinished record fails the benchmark.

Run ``python benchmarks/bench_server.py`` (``--quick`` for a smoke run of 20 runs;
``--diagnose`` adds threadstore's app with a pass-through storage agent, which splits
threadstore's cost into serving and storing; ``--store postgres`` serves from a fresh
PostgreSQL database per round instead of a SQLite file; ``--workers 1 2 4`` runs
``threadstore serve --workers N`` for each N, its CPU and memory summed over the
supervisor and its workers). Definitions and figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from common import Samples, machine_line, markdown_table, percentile, rotated
from server_agent import EVENTS_PER_RUN, Transcript, transcript
from threadstore import MessageStatus, RunStatus, Store, open_store
from threadstore.server._auth import LOCAL_USER_UUID

HERE = Path(__file__).resolve().parent
USER_TEXT = "What will the weather be in Paris this week?"
BARE = "bare FastAPI SSE"
NO_STORAGE = "threadstore app, no StorageAgent"
"""Run with ``--diagnose``: threadstore's app with a pass-through storage agent (the HTTP,
SSE and run-manager share of its cost); not part of the ratio."""
STORE_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
WARMUP_RUNS = 10
"""Runs streamed before each measured burst, so imports and first-call costs are paid."""
CLK_TCK = os.sysconf("SC_CLK_TCK")
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def with_database(url: str, database: str) -> str:
    """Return ``url`` pointing at ``database`` instead of the one it names."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


# --- server processes ---------------------------------------------------------------------


def free_port() -> int:
    """A port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Contender:
    """One server of a round: the bare one, or ``threadstore serve`` on a store."""

    kind: str
    """``bare``, ``no-storage`` or ``threadstore``."""
    store: str = "sqlite"
    workers: int = 1
    agent: str = "ScriptedAgent"
    """The agent class in ``server_agent.py`` that threadstore serves."""

    @property
    def name(self) -> str:
        """The row's label."""
        workers = "" if self.workers == 1 else f", {self.workers} workers"
        if self.kind == "bare":
            return BARE + workers
        if self.kind == "no-storage":
            return NO_STORAGE
        return f"threadstore serve ({STORE_NAMES[self.store]}{workers})"


@dataclass
class ServerProcess:
    """One uvicorn server process (or a supervisor and its workers) serving the agent."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    db_url: str | None

    @property
    def url(self) -> str:
        """The AG-UI endpoint."""
        return f"http://127.0.0.1:{self.port}/agui"

    @property
    def pid(self) -> int:
        """The server's process id (with ``--workers``, the supervisor's)."""
        return self.process.pid

    def pids(self) -> list[int]:
        """The server process and all its descendants (the workers)."""
        return process_tree(self.pid)

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Return once ``/healthz`` answers."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.process.returncode}")
                try:
                    response = await client.get(f"http://127.0.0.1:{self.port}/healthz")
                    if response.status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.name} did not start within {timeout} s")

    def stop(self) -> None:
        """Stop the server as Ctrl-C would and wait for it to exit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def server_command(contender: Contender, port: int, db_url: str | None) -> list[str]:
    """The command that serves ``contender`` on ``port``."""
    if contender.kind == "threadstore":
        assert db_url is not None
        return [
            *[sys.executable, "-m", "threadstore.cli", "serve"],
            *["--db", db_url, "--host", "127.0.0.1", "--port", str(port)],
            *["--agent", f"server_agent:{contender.agent}", "--log-level", "warning"],
            *(["--workers", str(contender.workers)] if contender.workers != 1 else []),
        ]
    return [
        *[sys.executable, str(HERE / "server_agent.py"), contender.kind, str(port)],
        str(contender.workers),
    ]


def start_server(contender: Contender, workdir: Path, db_url: str | None) -> ServerProcess:
    """Start ``contender``'s server on a free port (threadstore: on ``db_url``)."""
    port = free_port()
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH", "")]))
    command = server_command(contender, port, db_url)
    log = (workdir / f"server-{port}.log").open("wb")
    process = subprocess.Popen(
        command, env={**os.environ, "PYTHONPATH": path}, stdout=log, stderr=subprocess.STDOUT
    )
    log.close()
    return ServerProcess(contender.name, process, port, db_url)


async def fresh_db_url(contender: Contender, workdir: Path, pg_url: str) -> str | None:
    """A new, empty database for a threadstore contender (None for the others)."""
    if contender.kind != "threadstore":
        return None
    if contender.store == "sqlite":
        return f"sqlite:///{workdir / f'threadstore-{uuid.uuid4().hex[:8]}.db'}"
    name = f"ts_bench_server_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')  # a generated name, never input
    finally:
        await admin.close()
    return with_database(pg_url, name)


async def drop_db(db_url: str | None, pg_url: str) -> None:
    """Drop a database :func:`fresh_db_url` created on PostgreSQL."""
    if db_url is None or not db_url.startswith("postgres"):
        return
    name = db_url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


# --- /proc --------------------------------------------------------------------------------


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (``/proc/<pid>/task/<tid>/children``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").iterdir():
            children = (task / "children").read_text().split()
            todo.extend(int(child) for child in children)
    return found


def proc_status_kb(pids: int | Sequence[int], key: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``), summed over ``pids``."""
    total = 0
    for pid in [pids] if isinstance(pids, int) else pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                total += int(line.split()[1])
    return total


def reset_peak_rss(pids: Sequence[int]) -> None:
    """Reset each process's ``VmHWM`` to its current RSS, so the next peak is the burst's."""
    for pid in pids:
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def cpu_seconds(pids: int | Sequence[int]) -> float:
    """User + system CPU seconds the processes have used."""
    total = 0
    for pid in [pids] if isinstance(pids, int) else pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


# --- the client ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunIds:
    """The ids of one run; the thread is new for every run."""

    thread_id: str
    run_id: str

    def body(self) -> bytes:
        """The ``RunAgentInput`` wire JSON: one new user message."""
        return json.dumps(
            {
                "threadId": self.thread_id,
                "runId": self.run_id,
                "messages": [{"id": f"{self.run_id}-user", "role": "user", "content": USER_TEXT}],
                "state": {},
                "tools": [],
                "context": [],
                "forwardedProps": {},
            }
        ).encode()


def new_runs(count: int) -> list[RunIds]:
    """``count`` runs on distinct new threads."""
    tag = uuid.uuid4().hex[:10]
    return [RunIds(f"bench-{tag}-{index}", f"run-{tag}-{index}") for index in range(count)]


@dataclass(frozen=True)
class StreamResult:
    """What the client saw of one run."""

    first_event: float
    """Seconds from sending the request to the first event's arrival."""
    events: int


def _event_type(frame: bytes) -> str:
    for line in frame.split(b"\n"):
        if line.startswith(b"data:"):
            kind: str = json.loads(line[5:])["type"]
            return kind
    return ""


async def stream_run(client: httpx.AsyncClient, url: str, run: RunIds) -> StreamResult:
    """POST one run and read its whole SSE stream; check it is one complete run."""
    body = run.body()
    start = time.perf_counter()
    first_at: float | None = None
    frames: list[bytes] = []
    pending = b""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    async with client.stream("POST", url, content=body, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:300]}")
        async for chunk in response.aiter_raw():
            pending += chunk
            *complete, pending = pending.split(b"\n\n")
            for frame in complete:
                if b"data:" in frame:
                    if first_at is None:
                        first_at = time.perf_counter()
                    frames.append(frame)
    if first_at is None or len(frames) != EVENTS_PER_RUN:
        raise RuntimeError(f"run {run.run_id}: {len(frames)} events, expected {EVENTS_PER_RUN}")
    kinds = _event_type(frames[0]), _event_type(frames[-1])
    if kinds != ("RUN_STARTED", "RUN_FINISHED"):
        raise RuntimeError(f"run {run.run_id} went {kinds[0]} ... {kinds[1]}")
    return StreamResult(first_event=first_at - start, events=len(frames))


async def burst(url: str, runs: Sequence[RunIds]) -> tuple[float, list[StreamResult]]:
    """Start every run at once on its own connection; return (seconds, results)."""
    limits = httpx.Limits(max_connections=len(runs) + 8, max_keepalive_connections=len(runs) + 8)
    timeout = httpx.Timeout(300.0, connect=60.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout, http2=False) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(stream_run(client, url, run) for run in runs))
        return time.perf_counter() - start, list(results)


# --- the store check ----------------------------------------------------------------------


async def wait_until_complete(store: Store, runs: Sequence[RunIds], timeout: float) -> float:
    """Wait until every run's record is ``complete``; return how long that took."""
    start = time.perf_counter()
    waiting = list(runs)
    while waiting:
        still: list[RunIds] = []
        for run in waiting:
            chat = await store.get_chat_by_thread_id(LOCAL_USER_UUID, run.thread_id)
            record = await store.get_run(chat.chat_uuid, run.run_id) if chat else None
            if record is None or record.status is RunStatus.RUNNING:
                still.append(run)
            elif record.status is not RunStatus.COMPLETE:
                raise RuntimeError(f"run {run.run_id} ended {record.status}")
        waiting = still
        if waiting:
            if time.perf_counter() - start > timeout:
                raise RuntimeError(f"{len(waiting)} runs not complete after {timeout} s")
            await asyncio.sleep(0.05)
    return time.perf_counter() - start


async def check_run_stored(store: Store, run: RunIds, plan: Transcript) -> None:
    """Raise unless the run's chat holds exactly what was streamed, all ``complete``."""
    chat = await store.get_chat_by_thread_id(LOCAL_USER_UUID, run.thread_id)
    if chat is None:
        raise RuntimeError(f"thread {run.thread_id} was not stored")
    messages = list(await store.get_chat_messages(chat.chat_uuid))
    problems: list[str] = []
    by_id = {m.agui_id: m for m in messages}
    user = by_id.get(f"{run.run_id}-user")
    if user is None or user.content != USER_TEXT:
        problems.append("user message missing or changed")
    for message_id, text in plan.texts.items():
        found = by_id.get(message_id)
        if found is None or found.content != text:
            problems.append(f"assistant message {message_id} missing or text differs")
    calls = [call for m in messages for call in m.tool_calls]
    call = next((c for c in calls if c.tool_call_id == plan.tool_call_id), None)
    if call is None or call.arguments != plan.arguments or call.content != plan.result:
        problems.append("tool call missing, or its arguments or result differ")
    states = [(m.status, m.in_progress) for m in messages] + [
        (c.status, c.in_progress) for c in calls
    ]
    unfinished = [s for s in states if s != (MessageStatus.COMPLETE, False)]
    if unfinished:
        problems.append(f"{len(unfinished)} records not complete")
    if problems:
        raise RuntimeError(f"run {run.run_id}: " + "; ".join(problems))


async def verify_store(db_url: str, runs: Sequence[RunIds]) -> float:
    """Check every run in the store; return seconds until all were complete."""
    store = await open_store(db_url, setup=False)
    try:
        settle = await wait_until_complete(store, runs, timeout=120.0)
        for run in runs:
            await check_run_stored(store, run, transcript(run.run_id))
        return settle
    finally:
        await store.close()


async def relay_work(db_url: str, runs: Sequence[RunIds]) -> tuple[int, int, int]:
    """The relay's work for ``runs``: rows, INSERT statements, NOTIFYs.

    One INSERT gives all its rows one ``created_at`` and sends one NOTIFY per run it
    carries, so the distinct values count the statements and notifications.
    """
    conn = await asyncpg.connect(db_url)
    try:
        row = await conn.fetchrow(
            "SELECT count(*), count(DISTINCT created_at), count(DISTINCT (created_at, run_id))"
            " FROM run_events WHERE run_id = ANY($1::text[])",
            [run.run_id for run in runs],
        )
    finally:
        await conn.close()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


# --- one round ----------------------------------------------------------------------------


@dataclass
class Round:
    """One server's measured burst."""

    seconds: float
    results: list[StreamResult]
    rss_before_kb: int
    rss_peak_kb: int
    rss_after_kb: int
    server_cpu: float
    client_cpu: float
    settle: float | None = None
    """Threadstore only: seconds after the burst until every run was complete in the store."""
    relay: tuple[int, int, int] | None = None
    """PostgreSQL only: the burst's relayed rows, relay INSERT statements and NOTIFYs."""

    @property
    def events(self) -> int:
        """Events the client received."""
        return sum(r.events for r in self.results)

    def ttfe(self, q: float) -> float:
        """The ``q``-th percentile of time to first event, in seconds."""
        return percentile([r.first_event for r in self.results], q)


async def measure(contender: Contender, runs: int, workdir: Path, pg_url: str) -> Round:
    """Start a fresh server, warm it up, stream ``runs`` at once, check and stop it."""
    db_url = await fresh_db_url(contender, workdir, pg_url)
    server = start_server(contender, workdir, db_url)
    try:
        await server.wait_ready()
        warmup = new_runs(WARMUP_RUNS * contender.workers)
        await burst(server.url, warmup)
        await asyncio.sleep(0.5)  # let the warm-up's final flushes land
        measured = new_runs(runs)
        pids = server.pids()
        before = proc_status_kb(pids, "VmRSS")
        reset_peak_rss(pids)
        cpu_server, cpu_client = cpu_seconds(pids), time.process_time()
        seconds, results = await burst(server.url, measured)
        server_cpu = cpu_seconds(pids) - cpu_server
        client_cpu = time.process_time() - cpu_client
        peak = proc_status_kb(pids, "VmHWM")
        after = proc_status_kb(pids, "VmRSS")
        settle = relay = None
        if server.db_url is not None:
            settle = await verify_store(server.db_url, [*warmup, *measured])
            if server.db_url.startswith("postgres"):
                relay = await relay_work(server.db_url, measured)
        return Round(seconds, results, before, peak, after, server_cpu, client_cpu, settle, relay)
    finally:
        server.stop()
        await drop_db(db_url, pg_url)


# --- report -------------------------------------------------------------------------------


def record(samples: Samples, name: str, result: Round, runs: int) -> None:
    """Add one round's figures to ``samples`` under ``name/<figure>``."""
    figures = {
        "events/s": result.events / result.seconds,
        "burst s": result.seconds,
        "ttfe p50 ms": result.ttfe(50) * 1000,
        "ttfe p99 ms": result.ttfe(99) * 1000,
        "server cpu us/event": result.server_cpu / result.events * 1e6,
        "client cpu us/event": result.client_cpu / result.events * 1e6,
        "rss before MB": result.rss_before_kb / 1024,
        "peak KB/run": (result.rss_peak_kb - result.rss_before_kb) / runs,
        "after KB/run": (result.rss_after_kb - result.rss_before_kb) / runs,
    }
    if result.settle is not None:
        figures["settle s"] = result.settle
    if result.relay is not None:
        rows, statements, notifies = result.relay
        figures["relayed rows/event"] = rows / result.events
        figures["relay INSERTs per 1000 events"] = statements / result.events * 1000
        figures["NOTIFYs per 1000 events"] = notifies / result.events * 1000
    for figure, value in figures.items():
        samples.add(f"{name}/{figure}", value)


RATIO_FIGURES = ("events/s", "ttfe p50 ms", "ttfe p99 ms", "server cpu us/event", "peak KB/run")


def record_ratios(samples: Samples, contenders: Sequence[Contender]) -> None:
    """Add this round's ratio of each figure to the bare server's (all were just recorded),
    and of each server's CPU per event with N workers to the same server's with one."""
    figure = "server cpu us/event"
    for contender in contenders:
        if contender.workers != 1:
            one = samples.values[f"{replace(contender, workers=1).name}/{figure}"]
            ours = samples.values[f"{contender.name}/{figure}"]
            samples.add(f"{contender.name} / one worker/{figure}", ours[-1] / one[-1])
    for contender in contenders:
        if contender.kind != "threadstore":
            continue
        for figure in RATIO_FIGURES:
            ours = samples.values[f"{contender.name}/{figure}"]
            bare = samples.values[f"{BARE}/{figure}"]
            samples.add(f"{contender.name} / bare/{figure}", ours[-1] / bare[-1])


def summary(
    samples: Samples, contenders: Sequence[Contender], runs: int, rounds: int, load: str
) -> str:
    """The Markdown tables of the run: medians, min to max, and the ratios."""

    def cell(name: str, figure: str, fmt: str) -> str:
        key = f"{name}/{figure}"
        if key not in samples.values:
            return "-"
        low, high = samples.spread(key)
        return f"{samples.median(key):{fmt}} ({low:{fmt}} to {high:{fmt}})"

    rows = []
    for name in (c.name for c in contenders):
        rows.append(
            [
                name,
                cell(name, "events/s", ",.0f"),
                cell(name, "ttfe p50 ms", ".0f"),
                cell(name, "ttfe p99 ms", ".0f"),
                cell(name, "server cpu us/event", ".1f"),
                cell(name, "peak KB/run", ".0f"),
                cell(name, "after KB/run", ".0f"),
            ]
        )
    table = markdown_table(
        [
            "server",
            "events/s",
            "TTFE p50 (ms)",
            "TTFE p99 (ms)",
            "server CPU (µs/event)",
            "peak RSS (KB/run)",
            "RSS after (KB/run)",
        ],
        rows,
    )

    ours = [c.name for c in contenders if c.kind == "threadstore"]
    ratios = markdown_table(
        ["ratio to bare, median of rounds (min to max)", *ours],
        [
            [label, *(cell(f"{name} / bare", figure, ".2f") for name in ours)]
            for label, figure in (
                ("events/s", "events/s"),
                ("TTFE p50", "ttfe p50 ms"),
                ("TTFE p99", "ttfe p99 ms"),
                ("server CPU per event", "server cpu us/event"),
                ("peak RSS per run", "peak KB/run"),
            )
        ],
    )
    scaled = [c for c in contenders if c.workers != 1]
    workers = markdown_table(
        ["server CPU per event / one worker's, median of rounds (min to max)", "ratio"],
        [[c.name, cell(f"{c.name} / one worker", "server cpu us/event", ".2f")] for c in scaled],
    )
    relay_rows = [
        [
            name,
            cell(name, "relayed rows/event", ".2f"),
            cell(name, "relay INSERTs per 1000 events", ".1f"),
            cell(name, "NOTIFYs per 1000 events", ".1f"),
        ]
        for name in ours
        if f"{name}/relayed rows/event" in samples.values
    ]
    relay = (
        markdown_table(
            ["server", "relayed rows/event", "relay INSERTs per 1000 events", "NOTIFYs per 1000"],
            relay_rows,
        )
        if relay_rows
        else ""
    )
    extra = " ".join(
        f"{name}: RSS before the burst {samples.median(f'{name}/rss before MB'):.1f} MB, "
        f"client CPU {samples.median(f'{name}/client cpu us/event'):.1f} µs/event"
        + (
            f", every run complete in the store {samples.median(f'{name}/settle s'):.2f} s"
            " (median) after its burst."
            if f"{name}/settle s" in samples.values
            else "."
        )
        for name in (c.name for c in contenders)
    )
    head = (
        f"{runs} concurrent runs x {EVENTS_PER_RUN} events, {rounds} rounds; "
        f"medians (min to max). {machine_line()}; load average {load}"
    )
    parts = (head, table, ratios, workers if scaled else "", relay, extra)
    return "\n\n".join(part for part in parts if part)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20 runs, 1 round")
    parser.add_argument("--runs", type=int, help="concurrent runs per burst (default 200)")
    parser.add_argument("--rounds", type=int, help="rounds, each server once (default 5)")
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help="also run threadstore's app with a pass-through storage agent, to split its cost",
    )
    parser.add_argument(
        "--store",
        choices=sorted(STORE_NAMES),
        nargs="+",
        default=["sqlite"],
        help="threadstore's store(s): a fresh SQLite file or PostgreSQL database per round",
    )
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1], help="threadstore serve --workers N"
    )
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("THREADSTORE_TEST_POSTGRES_URL", DEFAULT_PG_URL),
        help="a PostgreSQL server to create the round's databases on",
    )
    return parser.parse_args(argv)


async def main(argv: Sequence[str] | None = None) -> int:
    """Run the rounds, print the per-round lines and the summary tables."""
    args = parse_args(argv)
    runs = args.runs or (20 if args.quick else 200)
    rounds = args.rounds or (1 if args.quick else 5)
    contenders = [
        Contender("bare"),
        # The bare server with as many workers: what more processes cost by themselves.
        *(Contender("bare", workers=n) for n in args.workers if n != 1),
        *(Contender("threadstore", store, n) for store in args.store for n in args.workers),
        *([Contender("no-storage")] if args.diagnose else []),
    ]
    samples = Samples()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        for index in range(rounds):
            for contender in rotated(contenders, index):
                name = contender.name
                result = await measure(contender, runs, Path(tmp), args.pg_url)
                record(samples, name, result, runs)
                settle = "" if result.settle is None else f", stored {result.settle:.2f} s after"
                print(
                    f"round {index + 1} {name}: {result.events / result.seconds:,.0f} events/s,"
                    f" TTFE p50 {result.ttfe(50) * 1000:.0f} ms p99 {result.ttfe(99) * 1000:.0f}"
                    f" ms, server CPU {result.server_cpu:.2f} s, RSS"
                    f" {result.rss_before_kb / 1024:.0f} -> peak {result.rss_peak_kb / 1024:.0f}"
                    f" -> {result.rss_after_kb / 1024:.0f} MB{settle}",
                    flush=True,
                )
            record_ratios(samples, contenders)
    print()
    load = f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    print(summary(samples, contenders, runs, rounds, load))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
