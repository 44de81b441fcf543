"""What a run costs as a chat grows: appends, loads and whole runs on long histories.

For each chat length it appends that many messages through the public API (every
other one an answer that made a tool call), then measures: the median append, a
cold load of the history (a new store, so an empty history cache) and the longest
loop stall during it, a cached load, and five consecutive StorageAgent runs of a
tiny scripted answer, each adding a user message and an answer (the agent takes no
time, so the run's wall time is threadstore's). The first run on the new store
builds what later runs extend; the others are the steady state. During each run a
ticker task wakes every millisecond and records the longest gap between two
wake-ups: the longest stretch the run held the event loop, or the machine ran
something else (so also the event loop's own CPU time in that gap, which the
machine's load does not inflate). Then three times a frontend tool's turn: a run that
ends on a tool call, and the client's next run bringing its result (the median of the
three result runs, and their longest stall): the result changes the last stored
message instead of appending one. With ``--connect``, last, a client connects to the
thread through the server's app (``GET /agui/threads/{id}/connect``, in process): the
whole history as one ``MESSAGES_SNAPSHOT``, then exports the chat
(``GET /api/chats/{id}/export``), each with the same ticker. The app is called as ASGI
and each piece of the body is dropped as it comes, as a client in another process
would take it: an in-process HTTP client would join a body of megabytes in one step
of the loop and the ticker would measure that. (Off by default: the
app and what it caches stay in the process, and each full collection of the later
lengths' runs would scan them too.) ``--freeze`` first moves what the process holds
after its imports out of the collector's generations, as ``threadstore serve`` does: a
full collection that lands in a run then scans what the runs hold, not the imports.

Run ``python benchmarks/bench_long_chats.py`` (``--sizes 300,1200`` to choose the
lengths, ``--backend postgres`` and ``--url`` or ``THREADSTORE_TEST_POSTGRES_URL`` for
PostgreSQL: a temporary database is created on that server and dropped after).
``--side-by-side ROUNDS`` measures only steady runs, on every length in turns in one
store, so the machine's load falls on each alike: the ratio to the first length is the
figure to trust on a shared machine.
Only public API, so the same file measures an older checkout (``PYTHONPATH=src``).
Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit
from uuid import uuid4

from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

from threadstore import (
    ChatCreate,
    MessageCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    Role,
    Store,
    open_store,
)
from threadstore.agui import StorageAgent
from threadstore.store.ops import CreateMessage, CreateToolCall, UpdateToolCall

sys.path.insert(0, str(Path(__file__).parent))
from common import machine_line

RUNS = 5
_T = TypeVar("_T")
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


class TinyAgent:
    """Answers every run with one short text message, at once."""

    name = "tiny"

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        answer = f"{input.run_id}-answer"
        yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
        yield TextMessageStartEvent(message_id=answer, role="assistant")
        yield TextMessageContentEvent(message_id=answer, delta="ok")
        yield TextMessageEndEvent(message_id=answer)
        yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


class AskingAgent:
    """Ends a run on a call for the client to answer (a frontend tool), then answers."""

    name = "asking"

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
        if input.messages and input.messages[-1].role == "tool":
            yield TextMessageStartEvent(message_id=f"{input.run_id}-answer", role="assistant")
            yield TextMessageContentEvent(message_id=f"{input.run_id}-answer", delta="ok")
            yield TextMessageEndEvent(message_id=f"{input.run_id}-answer")
        else:
            call = f"{input.run_id}-call"
            yield ToolCallStartEvent(
                tool_call_id=call, tool_call_name="confirm", parent_message_id=f"{call}-m"
            )
            yield ToolCallArgsEvent(tool_call_id=call, delta="{}")
            yield ToolCallEndEvent(tool_call_id=call)
        yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


async def append(store: Store, chat_uuid: Any, messages: int) -> list[float]:
    """Append ``messages`` records; return each append's seconds (an answer and its call)."""
    times: list[float] = []
    for index in range(messages):
        started = time.perf_counter()
        if index % 2 == 0:
            await store.create_message(
                MessageCreate(chat_uuid=chat_uuid, role=Role.USER, content=f"question {index}")
            )
        else:
            answer = await store.create_message(
                MessageCreate(chat_uuid=chat_uuid, role=Role.ASSISTANT, content=f"answer {index}")
            )
            call = await store.create_message_tool_call(
                MessageToolCallCreate(
                    message_uuid=answer.message_uuid, tool_call_id=f"call{index}", name="lookup"
                )
            )
            await store.update_message_tool_call(
                call.uuid, MessageToolCallUpdate(content="found", status=MessageStatus.COMPLETE)
            )
        times.append(time.perf_counter() - started)
    return times


async def longest_stall(work: Any) -> tuple[float, float, float]:
    """Run ``work`` while a ticker wakes every millisecond.

    Returns (seconds, longest gap, longest loop-thread CPU time within one gap): a gap
    also counts the time the machine ran other processes, the CPU time only what the
    loop thread itself ran before the ticker got its turn.
    """
    gaps = [0.0, 0.0]
    done = asyncio.Event()

    async def tick() -> None:
        last, last_cpu = time.perf_counter(), time.thread_time()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now, cpu = time.perf_counter(), time.thread_time()
            gaps[0] = max(gaps[0], now - last - 0.001)
            gaps[1] = max(gaps[1], cpu - last_cpu)
            last, last_cpu = now, cpu

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    try:
        await work()
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        await ticker
    return elapsed, gaps[0], gaps[1]


async def one_run(
    store: Store,
    user: Any,
    run: int | str,
    thread: str = "long",
    *,
    inner: Any = None,
    message: Any = None,
) -> None:
    agent = StorageAgent("bench", user, store, store, inner or TinyAgent(), run_repo=store)  # type: ignore[arg-type]
    run_input = RunAgentInput(
        thread_id=thread,
        run_id=f"run{run}",
        messages=[message or UserMessage(id=f"ask{run}", content="one more question")],
        state=None,
        tools=[],
        context=[],
        forwarded_props={},
    )
    async for _ in agent.run(run_input):
        pass
    await agent.persisted()


async def measure(url: str, messages: int, *, connect: bool = False) -> dict[str, float]:
    user = uuid4()
    store = await open_store(url)
    try:
        chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id="long"))
        appends = await append(store, chat.chat_uuid, messages)
    finally:
        await store.close()
    store = await open_store(url)  # a new store: nothing cached
    try:
        cold, stall_cold, step_cold = await longest_stall(
            lambda: store.get_chat_messages(chat.chat_uuid)
        )
        started = time.perf_counter()
        await store.get_chat_messages(chat.chat_uuid)
        cached = time.perf_counter() - started
        runs: list[float] = []
        stalls: list[float] = []
        steps: list[float] = []
        for run in range(RUNS):
            elapsed, stall, step = await longest_stall(lambda run=run: one_run(store, user, run))
            runs.append(elapsed)
            stalls.append(stall)
            steps.append(step)
        answers = []
        for run in range(3):  # a frontend tool: the client's result for the last call
            await one_run(store, user, f"ask{run}", inner=AskingAgent())
            result = ToolMessage(id=f"result{run}", tool_call_id=f"runask{run}-call", content="y")
            answers.append(
                await longest_stall(
                    lambda run=run, result=result: one_run(
                        store, user, f"answer{run}", inner=AskingAgent(), message=result
                    )
                )
            )
        connected = exported = (0.0, 0.0, 0.0)
        if connect:
            async with served(store) as app:
                connected = await longest_stall(lambda: connect_thread(app, user, "long"))
                exported = await longest_stall(lambda: export_chat(app, user, chat.chat_uuid))
    finally:
        await store.close()
    return {
        "append_p50": statistics.median(appends),
        "cold": cold,
        "stall_cold": stall_cold,
        "step_cold": step_cold,
        "cached": cached,
        "first": runs[0],
        "run": statistics.median(runs[1:]),
        "stall_first": stalls[0],
        "step_first": steps[0],
        "stall": max(stalls[1:]),
        "step": max(steps[1:]),
        "answer": statistics.median(answer[0] for answer in answers),
        "stall_answer": max(answer[1] for answer in answers),
        "step_answer": max(answer[2] for answer in answers),
        "connect": connected[0],
        "stall_connect": connected[1],
        "step_connect": connected[2],
        "export": exported[0],
        "stall_export": exported[1],
        "step_export": exported[2],
    }


@asynccontextmanager
async def served(store: Store) -> AsyncIterator[Any]:
    """The server's app on ``store``, in process, between its start-up and shut-down."""
    from threadstore.server import DemoAgent, HeaderAuth, create_app

    app = create_app(store, agent=DemoAgent(), auth=HeaderAuth("X-User"))
    async with app.router.lifespan_context(app):
        yield app


async def get(app: Any, path: str, user: Any, marker: bytes) -> bytes:
    """GET ``path`` from the ASGI ``app`` as a client in another process would.

    The body's pieces are counted and dropped as they come, so the ticker measures the
    route, not an in-process client joining a body of many megabytes (which httpx's
    ASGI transport does, in the loop, in one step). Returns the body's first bytes, and
    fails unless some piece holds ``marker``.
    """
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"bench"), (b"x-user", str(user).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("bench", 80),
    }
    status, head, found, done = 0, b"", False, asyncio.Event()

    async def receive() -> dict[str, Any]:
        await done.wait()  # no request body; then the client stays until the end
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, head, found
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            head = head or body[:64]
            found = found or marker in body
            if not message.get("more_body", False):
                done.set()

    await app(scope, receive, send)
    assert status == 200 and found, (path, status, head)
    return head


async def connect_thread(app: Any, user: Any, thread: str) -> None:
    """What a client connecting to the thread gets through the server's app."""
    await get(app, f"/agui/threads/{thread}/connect", user, b'"MESSAGES_SNAPSHOT"')


async def export_chat(app: Any, user: Any, chat_uuid: Any) -> None:
    """The chat's export document through the server's app."""
    head = await get(app, f"/api/chats/{chat_uuid}/export", user, b'"messages"')
    assert head.startswith(b"{"), head


async def side_by_side(url: str, sizes: list[int], rounds: int) -> list[tuple[float, float]]:
    """Steady runs on chats of each length in one store, in turns: (wall, CPU) medians.

    The chats are written in batches (``apply_writes``), each has one run first (which
    builds what later runs extend), then each round runs once on every chat in turn, so
    the machine's load falls on every length alike.
    """
    user = uuid4()
    store = await open_store(url)
    try:
        threads = []
        for size in sizes:
            thread = f"chat{size}"
            chat = await store.create_chat(ChatCreate(user_uuid=user, thread_id=thread))
            await append_batched(store, chat.chat_uuid, size)
            await one_run(store, user, f"{thread}-first", thread)
            threads.append(thread)
        walls: list[list[float]] = [[] for _ in sizes]
        cpus: list[list[float]] = [[] for _ in sizes]
        for round_ in range(rounds):
            for index, thread in enumerate(threads):
                wall, cpu = time.perf_counter(), time.process_time()
                await one_run(store, user, f"{thread}-{round_}", thread)
                walls[index].append(time.perf_counter() - wall)
                cpus[index].append(time.process_time() - cpu)
    finally:
        await store.close()
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus, strict=True)]


async def append_batched(store: Store, chat_uuid: Any, messages: int) -> None:
    """:func:`append`'s records, written a few thousand per batch."""
    writes: list[Any] = []
    for index in range(messages):
        if index % 2 == 0:
            writes.append(
                CreateMessage(
                    MessageCreate(chat_uuid=chat_uuid, role=Role.USER, content=f"question {index}")
                )
            )
        else:
            answer = MessageCreate(
                chat_uuid=chat_uuid, role=Role.ASSISTANT, content=f"answer {index}"
            )
            call = MessageToolCallCreate(
                message_uuid=answer.message_uuid, tool_call_id=f"call{index}", name="lookup"
            )
            done = MessageToolCallUpdate(content="found", status=MessageStatus.COMPLETE)
            writes += [CreateMessage(answer), CreateToolCall(call), UpdateToolCall(call.uuid, done)]
        if len(writes) >= 2000:
            await store.apply_writes(writes)
            writes = []
    if writes:
        await store.apply_writes(writes)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms" if seconds >= 0.001 else f"{seconds * 1e6:,.0f} µs"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="300,1200,10200,50200")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--url", default=os.environ.get("THREADSTORE_TEST_POSTGRES_URL"))
    parser.add_argument(
        "--connect",
        action="store_true",
        help="Also connect to each thread and export its chat through the app.",
    )
    parser.add_argument(
        "--freeze",
        action="store_true",
        help="gc.freeze() the process's start-up heap first, as `threadstore serve` does.",
    )
    parser.add_argument(
        "--side-by-side",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="Only steady runs, on every length in turns, ROUNDS times (medians, ratios).",
    )
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.freeze:
        gc.collect()
        gc.freeze()
    print(machine_line() + ("; start-up heap frozen" if args.freeze else ""))
    if args.side_by_side:
        await print_side_by_side(args, sizes)
        return
    print(
        f"backend: {args.backend}; {RUNS} consecutive runs per length: the first, then the"
        " median of the others (stall: the longest of the others); x: the median run over"
        " the first length's"
    )
    print()
    print(
        "| messages in the chat | append p50 | load, cold | its longest loop stall (CPU) "
        "| load, cached | first run | its longest loop stall (CPU) | next runs, median | x "
        "| their longest loop stall (CPU) | tool result run | its longest loop stall (CPU) |"
        + (
            " connect | its longest loop stall (CPU) | export | its longest loop stall (CPU) |"
            if args.connect
            else ""
        )
    )
    print("|---" * (16 if args.connect else 12) + "|")
    base: float | None = None
    for size in sizes:
        if args.backend == "sqlite":
            with tempfile.TemporaryDirectory() as directory:
                figures = await measure(
                    f"sqlite:///{directory}/long.db", size, connect=args.connect
                )
        else:
            figures = await on_postgres(
                args.url or DEFAULT_URL,
                functools.partial(measure, messages=size, connect=args.connect),
            )
        base = base or figures["run"]
        print(
            f"| {size:,} | {ms(figures['append_p50'])} | {ms(figures['cold'])} "
            f"| {ms(figures['stall_cold'])} ({ms(figures['step_cold'])}) "
            f"| {ms(figures['cached'])} | {ms(figures['first'])} "
            f"| {ms(figures['stall_first'])} ({ms(figures['step_first'])}) "
            f"| {ms(figures['run'])} | {figures['run'] / base:.1f} "
            f"| {ms(figures['stall'])} ({ms(figures['step'])}) "
            f"| {ms(figures['answer'])} "
            f"| {ms(figures['stall_answer'])} ({ms(figures['step_answer'])}) |"
            + (
                f" {ms(figures['connect'])} "
                f"| {ms(figures['stall_connect'])} ({ms(figures['step_connect'])}) "
                f"| {ms(figures['export'])} "
                f"| {ms(figures['stall_export'])} ({ms(figures['step_export'])}) |"
                if args.connect
                else ""
            ),
            flush=True,
        )


async def print_side_by_side(args: argparse.Namespace, sizes: list[int]) -> None:
    print(
        f"backend: {args.backend}; steady runs, {args.side_by_side} rounds, each length in"
        " turn; medians; x: over the first length's"
    )
    print()
    print("| messages in the chat | run, wall | x | run, CPU | x |")
    print("|---|---|---|---|---|")
    if args.backend == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            url = f"sqlite:///{directory}/long.db"
            figures = await side_by_side(url, sizes, args.side_by_side)
    else:
        figures = await on_postgres(
            args.url or DEFAULT_URL, lambda url: side_by_side(url, sizes, args.side_by_side)
        )
    (wall0, cpu0) = figures[0]
    for size, (wall, cpu) in zip(sizes, figures, strict=True):
        print(f"| {size:,} | {ms(wall)} | {wall / wall0:.2f} | {ms(cpu)} | {cpu / cpu0:.2f} |")


async def on_postgres(url: str, work: Callable[[str], Awaitable[_T]]) -> _T:
    """``work(url)`` on a temporary database of the server ``url`` names."""
    import asyncpg  # the postgres extra

    name = f"bench_long_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        try:
            return await work(urlunsplit(urlsplit(url)._replace(path=f"/{name}")))
        finally:
            await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    finally:
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
