"""Scripted AG-UI agents, event streams and store wrappers for tests.

Import from any test: ``from agui_scripts import ScriptedAgent, full_turn, ...``.

- Event builders (``text_message``, ``reasoning``, ``tool_call``...) return lists of
  ``ag_ui.core`` events; concatenate them into a script. Every builder is
  deterministic: the same arguments give the same events.
- :func:`full_turn` is one complete, valid run: reasoning, text, a tool call with
  streamed arguments and a result, a state snapshot and delta, a closing text.
- :class:`ScriptedAgent` replays a script (a list, or a function of the run input),
  optionally with a delay, a crash after N events, or a pause at a gate.
- :class:`StoreSpy` wraps a store to count its calls and to fail or block writes;
  :class:`ProtocolOnlyRepo` exposes only the seed's repository Protocols.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any
from uuid import UUID

from ag_ui.core import (
    BaseEvent,
    Message,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)

from threadstore import Store
from threadstore.errors import StoreError
from threadstore.store import Write

__all__ = [
    "RECORD_WRITES",
    "WRITE_METHODS",
    "ProtocolOnlyRepo",
    "ScriptedAgent",
    "StoreSpy",
    "collect",
    "full_turn",
    "reasoning",
    "run_error",
    "run_finished",
    "run_input",
    "run_started",
    "split",
    "state_delta",
    "state_snapshot",
    "text_message",
    "tool_call",
    "user",
]

Script = Sequence[BaseEvent] | Callable[[RunAgentInput], Sequence[BaseEvent]]


# --- inputs ------------------------------------------------------------------------------


def user(message_id: str, content: Any = "Hello!") -> UserMessage:
    """A user message (``content`` may be a string or a list of AG-UI parts)."""
    return UserMessage(id=message_id, content=content)


def run_input(
    thread_id: str = "thread-1",
    run_id: str = "run-1",
    messages: Iterable[Message] = (),
    *,
    state: Any = None,
    parent_run_id: str | None = None,
) -> RunAgentInput:
    """A run input with the given messages and no tools or context."""
    return RunAgentInput(
        thread_id=thread_id,
        run_id=run_id,
        parent_run_id=parent_run_id,
        messages=list(messages),
        state=state,
        tools=[],
        context=[],
        forwarded_props={},
    )


# --- event builders ----------------------------------------------------------------------


def split(text: str, parts: int) -> list[str]:
    """Cut ``text`` into ``parts`` consecutive pieces (the last ones may be empty)."""
    size = -(-len(text) // parts) if text else 0
    return [text[i * size : (i + 1) * size] for i in range(parts)]


def run_started(thread_id: str = "thread-1", run_id: str = "run-1") -> RunStartedEvent:
    """RUN_STARTED for the run."""
    return RunStartedEvent(thread_id=thread_id, run_id=run_id)


def run_finished(thread_id: str = "thread-1", run_id: str = "run-1") -> RunFinishedEvent:
    """RUN_FINISHED for the run."""
    return RunFinishedEvent(thread_id=thread_id, run_id=run_id)


def run_error(message: str = "the model refused", code: str = "MODEL_ERROR") -> RunErrorEvent:
    """An in-band RUN_ERROR."""
    return RunErrorEvent(message=message, code=code)


def text_message(
    message_id: str, text: str, *, deltas: int = 3, role: str | None = None
) -> list[BaseEvent]:
    """TEXT_MESSAGE_START, ``deltas`` CONTENT events spelling ``text``, END."""
    start = TextMessageStartEvent(message_id=message_id, role=role)  # type: ignore[arg-type]
    contents = [
        TextMessageContentEvent(message_id=message_id, delta=d) for d in split(text, deltas)
    ]
    return [start, *contents, TextMessageEndEvent(message_id=message_id)]


def reasoning(message_id: str, text: str, *, deltas: int = 2) -> list[BaseEvent]:
    """A reasoning span holding one reasoning message (both use ``message_id``)."""
    contents = [
        ReasoningMessageContentEvent(message_id=message_id, delta=d) for d in split(text, deltas)
    ]
    return [
        ReasoningStartEvent(message_id=message_id),
        ReasoningMessageStartEvent(message_id=message_id, role="reasoning"),
        *contents,
        ReasoningMessageEndEvent(message_id=message_id),
        ReasoningEndEvent(message_id=message_id),
    ]


def tool_call(
    tool_call_id: str,
    name: str,
    arguments: str,
    *,
    parent_message_id: str | None = None,
    deltas: int = 3,
    result: str | None = None,
    result_message_id: str | None = None,
) -> list[BaseEvent]:
    """TOOL_CALL_START, streamed ARGS, END, and a RESULT when ``result`` is given."""
    events: list[BaseEvent] = [
        ToolCallStartEvent(
            tool_call_id=tool_call_id, tool_call_name=name, parent_message_id=parent_message_id
        ),
        *(ToolCallArgsEvent(tool_call_id=tool_call_id, delta=d) for d in split(arguments, deltas)),
        ToolCallEndEvent(tool_call_id=tool_call_id),
    ]
    if result is not None:
        events.append(
            ToolCallResultEvent(
                message_id=result_message_id or f"{tool_call_id}-result",
                tool_call_id=tool_call_id,
                content=result,
            )
        )
    return events


def state_snapshot(snapshot: Any) -> StateSnapshotEvent:
    """STATE_SNAPSHOT replacing the state."""
    return StateSnapshotEvent(snapshot=snapshot)


def state_delta(*operations: dict[str, Any]) -> StateDeltaEvent:
    """STATE_DELTA with the given JSON Patch operations."""
    return StateDeltaEvent(delta=list(operations))  # type: ignore[arg-type]


def full_turn(
    thread_id: str = "thread-1", run_id: str = "run-1", *, deltas: int = 3
) -> list[BaseEvent]:
    """One complete run: reasoning, text, a tool call with its result, state, closing text.

    Ids derive from ``run_id`` (``<run_id>-reasoning``, ``<run_id>-a1``, ``<run_id>-call``,
    ``<run_id>-call-result``, ``<run_id>-a2``), so several runs never collide.
    """
    return [
        run_started(thread_id, run_id),
        *reasoning(f"{run_id}-reasoning", "The user wants the weather.", deltas=deltas),
        *text_message(f"{run_id}-a1", "Let me check the weather.", deltas=deltas),
        *tool_call(
            f"{run_id}-call",
            "get_weather",
            '{"city": "Paris"}',
            parent_message_id=f"{run_id}-a1",
            deltas=deltas,
            result='{"temp": 21}',
        ),
        state_snapshot({"city": "Paris"}),
        state_delta({"op": "add", "path": "/temp", "value": 21}),
        *text_message(f"{run_id}-a2", "It is 21 degrees in Paris.", deltas=deltas),
        run_finished(thread_id, run_id),
    ]


# --- agents ------------------------------------------------------------------------------


class ScriptedAgent:
    """An AG-UI agent that replays a script, deterministically.

    ``script`` is a list of events or a function of the run input returning one.
    ``delay`` sleeps before each event (0 still yields to the event loop, as an agent
    awaiting a model would); ``fail_after=n`` raises ``error`` (default
    ``RuntimeError("scripted crash")``) instead of yielding event ``n`` (0-based;
    ``len(script)`` crashes after the last one); ``pause_after=n`` stops before event
    ``n`` until :attr:`gate` is set, with :attr:`paused` set while it waits.
    """

    def __init__(
        self,
        script: Script,
        *,
        name: str = "scripted",
        delay: float = 0.0,
        fail_after: int | None = None,
        error: BaseException | None = None,
        pause_after: int | None = None,
    ) -> None:
        self.name = name
        self.script = script
        self.delay = delay
        self.fail_after = fail_after
        self.error = error
        self.pause_after = pause_after
        self.gate = asyncio.Event()
        self.paused = asyncio.Event()
        self.inputs: list[RunAgentInput] = []
        """A deep copy of every input ``run`` received."""
        self.closed = False
        """True once a run's stream was closed before its end (cancel, consumer gone)."""

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the scripted events for ``input``."""
        self.inputs.append(input.model_copy(deep=True))
        events = list(self.script(input) if callable(self.script) else self.script)
        finished = False
        try:
            for index, event in enumerate(events):
                await self._before(index)
                yield event
            await self._before(len(events))
            finished = True
        finally:
            self.closed = not finished

    async def _before(self, index: int) -> None:
        if index == self.pause_after:
            self.paused.set()
            await self.gate.wait()
        if index == self.fail_after:
            raise self.error or RuntimeError("scripted crash")
        await asyncio.sleep(self.delay)


async def collect(
    stream: AsyncIterator[BaseEvent],
    after_each: Callable[[BaseEvent], Awaitable[None]] | None = None,
) -> list[BaseEvent]:
    """Drain ``stream``; await ``after_each(event)`` after receiving each event."""
    events: list[BaseEvent] = []
    async for event in stream:
        events.append(event)
        if after_each is not None:
            await after_each(event)
    return events


# --- store wrappers ----------------------------------------------------------------------

RECORD_WRITES = frozenset(
    {
        "create_message",
        "update_message",
        "create_message_tool_call",
        "update_message_tool_call",
        "create_message_reasoning",
        "update_message_reasoning",
    }
)
"""Store methods that write a message, tool call or reasoning step."""

WRITE_METHODS = RECORD_WRITES | {
    "create_chat",
    "update_chat_state",
    "start_run",
    "finish_run",
    "finalize_run_records",
}
"""Every store method a storage agent writes through."""


class StoreSpy:
    """A store wrapper that counts calls and can fail or block writes.

    ``fail_every=k`` makes every k-th write call raise ``StoreError`` (before it
    reaches the store); ``gate`` (an ``asyncio.Event``) makes write calls wait until
    it is set. Reads and ``transaction()`` pass straight through.
    """

    def __init__(
        self, store: Store, *, fail_every: int | None = None, gate: asyncio.Event | None = None
    ) -> None:
        self.store = store
        self.fail_every = fail_every
        self.gate = gate
        self.calls: Counter[str] = Counter()
        self.writes = 0
        self.failures = 0

    @property
    def record_writes(self) -> int:
        """How many message/tool call/reasoning writes were attempted."""
        return sum(self.calls[name] for name in RECORD_WRITES)

    def transaction(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The wrapped store's transaction (counted)."""
        self.calls["transaction"] += 1
        return self.store.transaction()

    async def apply_writes(self, writes: Sequence[Write]) -> None:
        """Count (and gate, or fail) each write of a batch as its own call, then apply it.

        A failure injected at the k-th write fails the whole batch before it reaches
        the store, as a batch is all or nothing.
        """
        self.calls["apply_writes"] += 1
        for write in writes:
            self.calls[write.method] += 1
            self.writes += 1
            if self.gate is not None:
                await self.gate.wait()
            if self.fail_every and self.writes % self.fail_every == 0:
                self.failures += 1
                raise StoreError(f"injected failure of {write.method}")
        await self.store.apply_writes(writes)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.store, name)
        if name in ("chats", "messages", "runs", "branches"):
            return _SpiedGroup(self, target)  # their calls are counted by method name too
        if not callable(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name in WRITE_METHODS:
                self.writes += 1
                if self.gate is not None:
                    await self.gate.wait()
                if self.fail_every and self.writes % self.fail_every == 0:
                    self.failures += 1
                    raise StoreError(f"injected failure of {name}")
            return await target(*args, **kwargs)

        return call


class _SpiedGroup:
    """A store's group of methods (``store.branches``...) as a :class:`StoreSpy` sees it."""

    def __init__(self, spy: StoreSpy, group: Any) -> None:
        self._spy, self._group = spy, group

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._group, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            self._spy.calls[name] += 1
            return await target(*args, **kwargs)

        return call


class ProtocolOnlyRepo:
    """Only the seed's ``ChatRepositoryLike`` + ``MessageRepositoryLike`` methods.

    Its ``transaction()`` groups nothing (like the seed's document store): writes land
    one by one and a failure does not roll back the earlier ones. There is no
    ``finalize_run_records`` and no ``update_chat_state``.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """A batching scope with no atomicity."""
        yield

    async def create_chat(self, chat_data: Any) -> Any:
        """Create or adopt a chat."""
        return await self._store.create_chat(chat_data)

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Any:
        """Return the chat for (user, thread)."""
        return await self._store.get_chat_by_thread_id(user_uuid, thread_id)

    async def get_all_chats(self, user_uuid: UUID | None = None) -> Any:
        """Return every chat."""
        return await self._store.get_all_chats(user_uuid)

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Any:
        """Rename a chat."""
        return await self._store.update_chat_name(chat_uuid, name)

    async def delete_chat(self, chat_uuid: UUID) -> Any:
        """Delete a chat."""
        return await self._store.delete_chat(chat_uuid)

    async def create_message(self, message_data: Any) -> Any:
        """Create a message."""
        return await self._store.create_message(message_data)

    async def update_message(self, message_uuid: UUID, update: Any) -> Any:
        """Patch a message."""
        return await self._store.update_message(message_uuid, update)

    async def create_message_tool_call(self, data: Any) -> Any:
        """Create a tool call."""
        return await self._store.create_message_tool_call(data)

    async def update_message_tool_call(self, uuid: UUID, update: Any) -> Any:
        """Patch a tool call."""
        return await self._store.update_message_tool_call(uuid, update)

    async def create_message_reasoning(self, data: Any) -> Any:
        """Create a reasoning step."""
        return await self._store.create_message_reasoning(data)

    async def update_message_reasoning(self, uuid: UUID, update: Any) -> Any:
        """Patch a reasoning step."""
        return await self._store.update_message_reasoning(uuid, update)

    async def get_message(self, message_uuid: UUID) -> Any:
        """Return a message."""
        return await self._store.get_message(message_uuid)

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> Any:
        """Return a message by AG-UI id."""
        return await self._store.get_message_by_agui_id(chat_uuid, agui_id)

    async def get_tool_call_by_agui_id(self, message_uuid: UUID, tool_call_id: str) -> Any:
        """Return a tool call by AG-UI id."""
        return await self._store.get_tool_call_by_agui_id(message_uuid, tool_call_id)

    async def get_chat_messages(self, chat_uuid: UUID) -> Any:
        """Return the chat's history."""
        return await self._store.get_chat_messages(chat_uuid)

    async def get_last_messages(self, chat_uuids: list[UUID]) -> Any:
        """Return each chat's last message."""
        return await self._store.get_last_messages(chat_uuids)
