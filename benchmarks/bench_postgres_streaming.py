"""threadstore's streaming path on PostgreSQL with 50 concurrent runs, beside the bare agents.

Fifty scripted agents (the runs of ``bench_streaming.py``: reasoning, text, a tool call
with streamed arguments and its result, per turn) stream at once, one client per run,
along five paths taking turns in one process: the agents read directly (no
persistence); the run manager with no storage agent; ``StreamPersistenceManager`` +
``StorageAgent`` on a PostgreSQL store; and ``DistributedRunManager`` + ``StorageAgent``,
which also relays every event to ``run_events``, read once through the run's handle and
once through ``resume`` (``durable_delivery``, the default: an event reaches that
reader once it is stored). Reported per path: events/s delivered to the clients, the
latency of each event from the agent's yield to its client (p50, p99), the time from
a run's last event to everything of it being stored, the CPU time of this process and
of the database's server processes per event, and the statements and transactions per
run (counted in the warm-up repetition).

Part 1 streams the agents back to back (capacity); part 2 paces each agent at one
event every 20 ms, as a model streaming tokens would, their starts spread over one
interval (latency at a load the machine can carry). Each run of the benchmark works
in a fresh database that is dropped at the end.

Run ``python benchmarks/bench_postgres_streaming.py`` (``--quick`` for a smoke run;
``--url`` or ``THREADSTORE_TEST_POSTGRES_URL`` names the server). Definitions:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import asyncpg

from bench_postgres import DEFAULT_URL, fresh_database
from bench_streaming import (
    USER,
    Script,
    ScriptedAgent,
    alone,
    check_stored,
    latencies,
    run_input,
    storage_factory,
)
from common import Samples, collect_garbage, machine_line, markdown_table, percentile, rotated
from threadstore import Store, open_store
from threadstore.agui import DistributedRunManager, RunHandle, StreamPersistenceManager

ALONE = "agents alone (no persistence)"
MANAGER = "run manager, no StorageAgent"
STORED = "StreamPersistenceManager + StorageAgent"
RELAYED = "DistributedRunManager + StorageAgent, reader on the handle"
RESUMED = "DistributedRunManager + StorageAgent, reader via resume (durable)"
PATHS = (ALONE, MANAGER, STORED, RELAYED, RESUMED)
STORING = (STORED, RELAYED, RESUMED)
EVENTS_PER_TURN = 200
"""A turn (reasoning, text, a tool call and its result) per this many events of a run."""


# --- counting statements and server CPU ----------------------------------------------------


@dataclass
class StatementLog:
    """Statements and transactions sent on the connections it is attached to.

    asyncpg hands each statement to the connection's query loggers once it is done;
    ``BEGIN``/``COMMIT``/``ROLLBACK`` are counted as transaction brackets, and a
    statement outside one is a transaction of its own. Statements on ``run_events``
    (the relay) are counted apart. :meth:`stop` takes the loggers off again, so what
    is timed afterwards pays for none.
    """

    statements: int = 0
    transactions: int = 0
    relay_statements: int = 0
    active: bool = True
    _attached: list[tuple[asyncpg.Connection, Callable[[Any], None]]] = field(default_factory=list)

    async def attach(self, connection: asyncpg.Connection) -> None:
        """Pool ``init`` hook: log this connection's statements while the log is active."""
        if not self.active:
            return
        in_transaction = False

        def log(record: Any) -> None:
            nonlocal in_transaction
            query: str = record.query
            head = query.lstrip()[:8].upper()
            if head.startswith("BEGIN"):
                in_transaction = True
                self.transactions += 1
            elif head.startswith(("COMMIT", "ROLLBACK")):
                in_transaction = False
            elif "run_events" in query:
                self.relay_statements += 1
            else:
                self.statements += 1
                self.transactions += not in_transaction

        connection.add_query_logger(log)
        self._attached.append((connection, log))

    def stop(self) -> None:
        """Stop counting: detach from every connection; new ones get no logger."""
        self.active = False
        for connection, log in self._attached:
            connection.remove_query_logger(log)
        self._attached.clear()

    def snapshot(self) -> tuple[int, int, int]:
        """``(statements, transactions, relay statements)`` so far."""
        return self.statements, self.transactions, self.relay_statements


@contextmanager
def logged_pools(log: StatementLog) -> Iterator[None]:
    """Give every pool created meanwhile (the store's own) ``log`` as connection ``init``."""
    create_pool = asyncpg.create_pool

    def create_logged(*args: Any, **kwargs: Any) -> Any:
        return create_pool(*args, init=log.attach, **kwargs)

    with mock.patch.object(asyncpg, "create_pool", create_logged):
        yield


class ServerCPU:
    """CPU seconds used by the PostgreSQL backends serving one database (Linux ``/proc``).

    Backends show their database in their process title; a backend that exits between
    two readings loses what it used since the first, so read while the stores are open.
    """

    def __init__(self, database: str) -> None:
        self.marker = f" {database} ".encode()
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.available = Path("/proc/self/stat").exists()

    def read(self) -> dict[int, int]:
        """Clock ticks (user + system) per backend process of the database."""
        ticks: dict[int, int] = {}
        if not self.available:
            return ticks
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                title = Path(entry.path, "cmdline").read_bytes()
                if not title.startswith(b"postgres: ") or self.marker not in title:
                    continue
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            ticks[int(entry.name)] = int(fields[11]) + int(fields[12])  # utime, stime
        return ticks

    def since(self, before: dict[int, int]) -> float:
        """Seconds used since ``before`` (a backend started meanwhile counts from zero)."""
        after = self.read()
        return sum(t - before.get(pid, 0) for pid, t in after.items()) / self.tick


# --- the paths -----------------------------------------------------------------------------


@dataclass
class Client:
    """What one run's client saw: receipt times, and when the run was all stored."""

    started: int = 0
    """``perf_counter_ns()`` just before the run was started."""
    received: list[int] = field(default_factory=list)
    durable: asyncio.Task[int] | None = None


Stream = Callable[[ScriptedAgent, str, Client], Awaitable[None]]
"""A path: start the run of this agent, read every event as its client would."""


async def durable_at(handle: RunHandle[Any], pump: Any) -> int:
    """``perf_counter_ns()`` once the run's records and relayed events are all stored."""
    await handle.wait()  # returns once the storage agent's final flush committed
    if handle.exception is not None:
        raise handle.exception
    if pump is not None:
        await pump.wait()
    return time.perf_counter_ns()


def relay_pump(manager: StreamPersistenceManager[Any], handle: RunHandle[Any]) -> Any:
    """The pump relaying ``handle``'s events to ``run_events`` (``None`` without a relay)."""
    if not isinstance(manager, DistributedRunManager) or manager.relay is None:
        return None
    # Read from the manager's table, which has no public accessor: the benchmark needs
    # to know when each run's relay is done.
    pump = getattr(manager, "_pumps", {}).get(handle.key)
    if pump is None:
        raise SystemExit("found no relay pump for a run of the DistributedRunManager")
    return pump


def through(manager: StreamPersistenceManager[Any], *, resume: bool = False) -> Stream:
    """A path through ``manager``: read the handle's events, or follow ``resume``."""

    async def stream(inner: ScriptedAgent, run_id: str, client: Client) -> None:
        handle = await manager.run(run_input(run_id), inner)
        pump = relay_pump(manager, handle)
        client.durable = asyncio.create_task(durable_at(handle, pump))
        received = client.received
        if resume:
            assert isinstance(manager, DistributedRunManager)
            events = await manager.resume(handle.thread_id, handle.run_id, user_uuid=USER)
            assert events is not None
            async for _ in events:
                received.append(time.perf_counter_ns())
        else:
            async for _ in handle.events():
                received.append(time.perf_counter_ns())

    return stream


async def read_alone(inner: ScriptedAgent, run_id: str, client: Client) -> None:
    """The bare path: the client iterates the agent itself."""
    await alone(inner, run_id, client.received)


@dataclass
class PathSet:
    """The stores and managers behind the paths, with the statement log they send to."""

    streams: dict[str, Stream]
    stores: dict[str, Store]
    log: StatementLog
    checker: asyncpg.Connection
    """A connection of its own for reading ``run_events`` back (the stores lend none)."""


@asynccontextmanager
async def open_paths(url: str, log: StatementLog) -> AsyncIterator[PathSet]:
    """Open one store per storing manager (each its own pool) and the five paths."""
    async with AsyncExitStack() as stack:
        with logged_pools(log):
            plain_store = await open_store(url)
            stack.push_async_callback(plain_store.close)
            relay_store = await open_store(url)
            stack.push_async_callback(relay_store.close)
        # retention=0: a finished run's log (and its events) is dropped at once.
        bare = StreamPersistenceManager[ScriptedAgent](lambda inner: inner, retention=0)
        plain = StreamPersistenceManager(
            storage_factory(plain_store), store=plain_store, retention=0
        )
        relayed = DistributedRunManager(
            storage_factory(relay_store), store=relay_store, retention=0
        )
        for manager in (bare, plain):
            await stack.enter_async_context(manager)
        await stack.enter_async_context(relayed)
        checker = await asyncpg.connect(url)
        stack.push_async_callback(checker.close)
        yield PathSet(
            streams={
                ALONE: read_alone,
                MANAGER: through(bare),
                STORED: through(plain),
                RELAYED: through(relayed),
                RESUMED: through(relayed, resume=True),
            },
            stores={STORED: plain_store, RELAYED: relay_store, RESUMED: relay_store},
            log=log,
            checker=checker,
        )


# --- one round: one path, all runs at once -------------------------------------------------


@dataclass
class Round:
    """One path's concurrent runs, as measured."""

    events: int
    seconds: float
    """From the first ``run`` to the last event reaching its client."""
    latencies: list[float]
    """Milliseconds from each event's yield to its receipt, all runs."""
    first_events: list[float]
    """Milliseconds from each run's start to its first event reaching its client."""
    persist_lags: list[float]
    """Milliseconds from each run's last yield to all of it stored (storing paths)."""
    drain: float
    """Milliseconds from the last event delivered to everything stored."""
    cpu: float
    """Seconds of this process's CPU, first ``run`` to everything stored."""
    server_cpu: float
    """Seconds of the database backends' CPU over the same span."""
    counts: tuple[int, int, int] = (0, 0, 0)


def scripted_agents(scripts: Sequence[Script], pace: float) -> list[ScriptedAgent]:
    """Agents replaying the scripts, each built beforehand so the agents cost little."""
    return [ScriptedAgent(list(script), pace=pace, stamp=True) for script in scripts]


async def run_round(
    paths: PathSet,
    name: str,
    scripts: Sequence[Script],
    inners: Sequence[ScriptedAgent],
    server: ServerCPU,
) -> Round:
    """Stream every script at once along path ``name``; check what was stored.

    Paced agents start spread over one pace interval, so that their events do not all
    fall due in the same turn of the event loop (model streams are not in step).
    """
    clients = [Client() for _ in scripts]
    stream = paths.streams[name]
    pace = inners[0].pace

    async def launch(index: int, inner: ScriptedAgent, client: Client) -> None:
        if pace:
            await asyncio.sleep(pace * index / len(inners))
        client.started = time.perf_counter_ns()
        await stream(inner, scripts[index].run_id, client)

    counted = paths.log.snapshot()
    collect_garbage()
    backends = server.read()
    cpu = time.process_time()
    start = time.perf_counter_ns()
    await asyncio.gather(
        *(
            launch(index, inner, client)
            for index, (inner, client) in enumerate(zip(inners, clients, strict=True))
        )
    )
    delivered = max(client.received[-1] for client in clients)
    durable = [await client.durable for client in clients if client.durable is not None]
    end = max([delivered, *durable])
    cpu = time.process_time() - cpu
    server_cpu = server.since(backends)
    lags: list[float] = []
    measured: list[float] = []
    firsts = [(client.received[0] - client.started) / 1e6 for client in clients]
    for inner, client in zip(inners, clients, strict=True):
        assert inner.sent is not None
        measured += latencies(inner.sent, client.received)
    if name in STORING:
        for inner, stamp in zip(inners, durable, strict=True):
            assert inner.sent is not None
            lags.append((stamp - inner.sent[-1]) / 1e6)
    now = paths.log.snapshot()
    counts = (now[0] - counted[0], now[1] - counted[1], now[2] - counted[2])
    events = sum(len(client.received) for client in clients)
    expected = sum(script.events for script in scripts)
    if events != expected:
        raise SystemExit(f"{name}: {events} events delivered, not {expected}")
    store = paths.stores.get(name)
    if store is not None:
        for script in scripts:
            await check_stored(store, script.run_id, script.turns)
        if name in (RELAYED, RESUMED):
            await check_relayed(paths.checker, scripts)
    return Round(
        events=events,
        seconds=(delivered - start) / 1e9,
        latencies=measured,
        first_events=firsts,
        persist_lags=lags,
        drain=(end - delivered) / 1e6,
        cpu=cpu,
        server_cpu=server_cpu,
        counts=counts,
    )


async def check_relayed(conn: asyncpg.Connection, scripts: Sequence[Script]) -> None:
    """Fail unless ``run_events`` holds every event of every run, numbered 1 to N."""
    rows = await conn.fetch(
        "SELECT run_id, count(*), min(event_id), max(event_id) FROM run_events"
        " WHERE run_id = ANY($1::text[]) GROUP BY run_id",
        [script.run_id for script in scripts],
    )
    found = {row[0]: (row[1], row[2], row[3]) for row in rows}
    for script in scripts:
        if found.get(script.run_id) != (script.events, 1, script.events):
            raise SystemExit(f"run_events of {script.run_id}: {found.get(script.run_id)}")


# --- a part: interleaved repetitions -------------------------------------------------------


@dataclass
class PartResult:
    """Everything measured for each path over a part's timed repetitions."""

    rates: Samples = field(default_factory=Samples)
    drains: Samples = field(default_factory=Samples)
    cpu: Samples = field(default_factory=Samples)
    server_cpu: Samples = field(default_factory=Samples)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    first_events: dict[str, list[float]] = field(default_factory=dict)
    lags: dict[str, list[float]] = field(default_factory=dict)
    counts: dict[str, tuple[int, int, int]] = field(default_factory=dict)


async def run_part(
    args: argparse.Namespace, url: str, part: int, events: int, pace: float, reps: int
) -> PartResult:
    """A warm-up repetition that counts statements, then ``reps`` timed ones.

    Each repetition runs every path once, in an order rotated by one per repetition.
    """
    result = PartResult()
    turns = max(1, events // EVENTS_PER_TURN)
    server = ServerCPU(urlsplit(url).path.lstrip("/"))
    async with open_paths(url, StatementLog()) as paths:
        for rep in range(1 + reps):
            for index, name in enumerate(rotated(list(PATHS), rep)):
                scripts = [
                    Script(f"p{part}-{rep}-{index}-{run}", events, turns=turns)
                    for run in range(args.runs)
                ]
                inners = scripted_agents(scripts, pace)
                measured = await run_round(paths, name, scripts, inners, server)
                if rep == 0:
                    result.counts[name] = measured.counts
                    continue
                result.rates.add(name, measured.events / measured.seconds)
                result.drains.add(name, measured.drain)
                result.cpu.add(name, measured.cpu / measured.events * 1e6)
                result.server_cpu.add(name, measured.server_cpu / measured.events * 1e6)
                result.latencies.setdefault(name, []).extend(measured.latencies)
                result.first_events.setdefault(name, []).extend(measured.first_events)
                result.lags.setdefault(name, []).extend(measured.persist_lags)
            if rep == 0:
                paths.log.stop()  # the timed repetitions pay for no query logger
            label = f"repetition {rep}/{reps}" if rep else "warm-up (statements counted)"
            print(f"  part {part}: {label} done", file=sys.stderr)
    return result


def report(args: argparse.Namespace, result: PartResult, events: int) -> None:
    """Print the part's two tables and the statement counts."""
    base = result.rates.median(ALONE)
    rows = []
    for name in PATHS:
        rate = result.rates.median(name)
        low, high = result.rates.spread(name)
        firsts = result.first_events[name]
        rows.append(
            [
                name,
                f"{rate:,.0f} ({low:,.0f} to {high:,.0f})",
                f"{rate / base:.2f}",
                f"{percentile(firsts, 50):.0f} / {max(firsts):.0f}",
                f"{result.cpu.median(name):.1f}",
                f"{result.server_cpu.median(name):.1f}" if name in STORING else "-",
            ]
        )
    headers = [
        "path",
        "events/s (min to max)",
        "x alone",
        "first event p50 / max (ms)",
        "CPU here (µs/event)",
        "PostgreSQL CPU (µs/event)",
    ]
    print(markdown_table(headers, rows))
    print()
    rows = []
    for name in PATHS:
        measured = result.latencies[name]
        lags = result.lags.get(name) or []
        rows.append(
            [
                name,
                f"{percentile(measured, 50):.2f}",
                f"{percentile(measured, 99):.2f}",
                f"{max(measured):.1f}",
                f"{percentile(lags, 50):.0f} / {max(lags):.0f}" if lags else "-",
                f"{result.drains.median(name):.0f}" if name in STORING else "-",
            ]
        )
    headers = [
        "path",
        "latency p50 (ms)",
        "latency p99 (ms)",
        "max (ms)",
        "run's last event -> run stored, p50 / max (ms)",
        "last event delivered -> all stored (ms)",
    ]
    print(markdown_table(headers, rows))
    print("\nPer run, counted in the warm-up repetition (query loggers on the stores' pools):\n")
    rows = []
    for name in STORING:
        statements, transactions, relay = result.counts.get(name, (0, 0, 0))
        rows.append(
            [
                name,
                f"{statements / args.runs:.1f}",
                f"{transactions / args.runs:.1f}",
                f"{relay / args.runs:.1f}",
                f"{events * args.runs / relay:.0f}" if relay else "-",
            ]
        )
    headers = [
        "path",
        "store statements",
        "store transactions",
        "run_events INSERTs (a transaction each)",
        "events per INSERT",
    ]
    print(markdown_table(headers, rows))


# --- entry point ---------------------------------------------------------------------------


def load_average() -> str:
    """The machine's load averages (1, 5, 15 min), to print beside the figures."""
    if not hasattr(os, "getloadavg"):
        return "load average unknown"
    return "load average " + ", ".join(f"{value:.2f}" for value in os.getloadavg())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Read the sizes; ``--quick`` shrinks every one of them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run (about 20 s)")
    parser.add_argument("--url", help="server to create the throwaway database on")
    parser.add_argument("--parts", default="1,2", help="comma-separated parts to run")
    parser.add_argument("--runs", type=int, help="concurrent runs per path (default 50)")
    parser.add_argument("--events", type=int, help="events per run in part 1")
    parser.add_argument("--reps", type=int, help="timed repetitions per path in part 1")
    parser.add_argument("--paced-events", type=int, help="events per run in part 2")
    parser.add_argument("--pace", type=float, help="seconds between an agent's events, part 2")
    parser.add_argument("--paced-reps", type=int, help="timed repetitions per path in part 2")
    args = parser.parse_args(argv)
    defaults: dict[str, Any] = (
        {
            "runs": 10,
            "events": 500,
            "reps": 1,
            "paced_events": 200,
            "pace": 0.02,
            "paced_reps": 1,
        }
        if args.quick
        else {
            "runs": 50,
            "events": 2_000,
            "reps": 5,
            "paced_events": 600,
            "pace": 0.02,
            "paced_reps": 3,
        }
    )
    for name, value in defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    args.url = args.url or os.environ.get("THREADSTORE_TEST_POSTGRES_URL") or DEFAULT_URL
    args.parts = {int(part) for part in args.parts.split(",")}
    return args


async def main(argv: Sequence[str] | None = None) -> int:
    """Run the parts and print Markdown ready for docs/benchmarks.md."""
    args = parse_args(argv)
    print(f"# threadstore streaming on PostgreSQL: {args.runs} concurrent runs\n\n{machine_line()}")
    async with fresh_database(args.url) as url:
        admin = await asyncpg.connect(url)
        try:
            version = await admin.fetchval("SHOW server_version")
            commit = await admin.fetchval("SHOW synchronous_commit")
        finally:
            await admin.close()
        packages = ", ".join(
            f"{package} {metadata.version(package)}"
            for package in ("asyncpg", "pydantic", "ag-ui-protocol")
        )
        print(f"PostgreSQL {version} (synchronous_commit {commit}), {packages}")
        print(f"Started {datetime.now(UTC):%H:%M} UTC, {load_average()}")
        if 1 in args.parts:
            result = await run_part(args, url, 1, args.events, 0.0, args.reps)
            print(
                f"\n## Part 1: {args.runs} runs of {args.events:,} events at once, back to back;"
                f" {args.reps} interleaved repetitions, medians (latency: all events pooled)\n"
            )
            report(args, result, args.events)
            print(f"\nPart 1 done {datetime.now(UTC):%H:%M} UTC, {load_average()}")
        if 2 in args.parts:
            result = await run_part(args, url, 2, args.paced_events, args.pace, args.paced_reps)
            offered = args.runs / args.pace
            print(
                f"\n## Part 2: {args.runs} runs of {args.paced_events:,} events at once, each"
                f" agent one event every {args.pace * 1e3:g} ms ({offered:,.0f} events/s"
                f" offered); {args.paced_reps} interleaved repetitions\n"
            )
            report(args, result, args.paced_events)
            print(f"\nPart 2 done {datetime.now(UTC):%H:%M} UTC, {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
