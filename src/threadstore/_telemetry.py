"""OpenTelemetry spans and metrics of threadstore, free when nothing collects them.

The ``opentelemetry-api`` package is optional (``threadstore[otel]``) and never
imported here: an SDK that was set up has imported it, so this module looks for it in
``sys.modules``. Without it, or while no SDK has set a tracer (meter) provider,
:func:`span` hands out one shared do-nothing context manager and the metric helpers
return at their first check: a call site costs a dict lookup or two. Call sites are
per run, per flush and per store operation of the groups, never per event. Names and
attributes are in docs/observability.md; GenAI semantic-convention attributes are used
where one exists (``gen_ai.conversation.id``, ``gen_ai.operation.name``,
``gen_ai.agent.name``, ``gen_ai.usage.*``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, ParamSpec, TypeVar
from uuid import UUID

__all__ = [
    "CONVERSATION_ID",
    "OPERATION_NAME",
    "RunSpan",
    "add_active_runs",
    "count_retries",
    "observe_gauge",
    "record_flush",
    "run_span",
    "span",
    "traced",
]

P = ParamSpec("P")
R = TypeVar("R")

SCOPE = "threadstore"
"""The instrumentation scope of every span and instrument."""

CONVERSATION_ID = "gen_ai.conversation.id"
OPERATION_NAME = "gen_ai.operation.name"
AGENT_NAME = "gen_ai.agent.name"

_NOOP: contextlib.nullcontext[None] = contextlib.nullcontext()
# Provider class names that record nothing: until an SDK sets a provider, the API's
# global is one of these.
_SILENT = frozenset(
    {"ProxyTracerProvider", "NoOpTracerProvider", "_ProxyMeterProvider", "NoOpMeterProvider"}
)

_gauges: dict[str, list[Callable[[], int | float]]] = {}


def _attributes(conversation: UUID | str | None, given: dict[str, Any]) -> dict[str, Any]:
    found = {key: value for key, value in given.items() if value is not None}
    if conversation is not None:
        found[CONVERSATION_ID] = str(conversation)
    return found


def span(
    name: str, conversation: UUID | str | None = None, /, **attributes: Any
) -> contextlib.AbstractContextManager[Any]:
    """A span named ``name`` around a block (the current span inside it), or a no-op.

    ``conversation`` becomes ``gen_ai.conversation.id``; attribute names are taken as
    given (``None`` values left out), so pass dotted ones as a dict:
    ``span("threadstore.search", chat_uuid, **{"gen_ai.operation.name": "retrieval"})``.
    """
    tracer = _tracer()
    if tracer is None:
        return _NOOP
    return tracer.start_as_current_span(  # type: ignore[no-any-return]
        name, attributes=_attributes(conversation, attributes)
    )


def traced(
    name: str, *, conversation: bool = False, attributes: dict[str, Any] | None = None
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Decorate an async method: each call is a span ``name`` (a no-op without an SDK).

    ``conversation``: the method's first argument after ``self`` is the chat's uuid,
    which becomes ``gen_ai.conversation.id``.
    """

    def wrap(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(method)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            tracer = _tracer()
            if tracer is None:
                return await method(*args, **kwargs)
            chat = args[1] if conversation and len(args) > 1 else None
            given = _attributes(chat if isinstance(chat, UUID) else None, attributes or {})
            with tracer.start_as_current_span(name, attributes=given):
                return await method(*args, **kwargs)

        return call

    return wrap


class RunSpan:
    """A run's span: opened when it starts, an event at its first event, ended with its status.

    Not a context manager: a run's events cross ``yield``, so the span is not made the
    current one (that would leak into the consumer's context).
    """

    __slots__ = ("_first", "_span")

    def __init__(self, opened: Any) -> None:
        self._span = opened
        self._first = False

    def set(self, **attributes: Any) -> None:
        """Add attributes (``None`` values are left out)."""
        self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def first_event(self, event_type: str) -> None:
        """Mark the run's first event from the agent (once)."""
        if not self._first:
            self._first = True
            self._span.add_event("threadstore.run.first_event", {"ag_ui.event.type": event_type})

    def end(self, status: str, error: str | None = None) -> None:
        """End the span with the run's final status (``errored`` sets an error status)."""
        opened = self._span
        opened.set_attribute("threadstore.run.status", status)
        if error is not None:
            trace = sys.modules["opentelemetry.trace"]  # loaded: it made the span
            opened.set_attribute("error.type", error.split(":", 1)[0][:100])
            opened.set_status(trace.Status(trace.StatusCode.ERROR, error[:1000]))
        opened.end()


def run_span(agent_name: str, thread_id: str, run_id: str) -> RunSpan | None:
    """Open a run's span (``invoke_agent``), or ``None`` when nothing records spans."""
    tracer = _tracer()
    if tracer is None:
        return None
    opened = tracer.start_span(
        f"invoke_agent {agent_name}",
        attributes={
            OPERATION_NAME: "invoke_agent",
            AGENT_NAME: agent_name,
            "threadstore.thread_id": thread_id,
            "threadstore.run_id": run_id,
        },
    )
    return RunSpan(opened)


# --- metrics ---------------------------------------------------------------------------


def _observe(name: str) -> Callable[[Any], Iterable[Any]]:
    def observe(options: Any) -> Iterator[Any]:
        observation = sys.modules["opentelemetry.metrics"].Observation  # it called this
        for callback in list(_gauges.get(name, ())):
            yield observation(callback())

    return observe


class _PerProvider:
    """What was made of the provider an OpenTelemetry API module has set now.

    Made again when the provider changes (an SDK set up after threadstore's first
    call); ``None`` while nothing records.
    """

    def __init__(self, module: str, getter: str, make: Callable[[Any], Any]) -> None:
        self._module, self._getter, self._make = module, getter, make
        self._of: tuple[Any, Any] = (None, None)  # (provider, what was made of it)

    def __call__(self) -> Any:
        api = sys.modules.get(self._module)
        if api is None:
            return None
        provider = getattr(api, self._getter)()
        if provider is not self._of[0]:
            made = None if type(provider).__name__ in _SILENT else self._make(provider)
            self._of = (provider, made)
        return self._of[1]


def _made_instruments(provider: Any) -> dict[str, Any]:
    meter = provider.get_meter(SCOPE)
    instruments: dict[str, Any] = {
        "active": meter.create_up_down_counter(
            "threadstore.runs.active", unit="{run}", description="Runs streaming now"
        ),
        "flush": meter.create_histogram(
            "threadstore.flush.duration", unit="s", description="Time a flush took"
        ),
        "retries": meter.create_counter(
            "threadstore.flush.retries", unit="{attempt}", description="Failed flush attempts"
        ),
    }
    for name in _gauges:
        meter.create_observable_gauge(name, callbacks=[_observe(name)])
    instruments["meter"], instruments["gauges"] = meter, set(_gauges)
    return instruments


_tracer = _PerProvider(
    "opentelemetry.trace", "get_tracer_provider", lambda provider: provider.get_tracer(SCOPE)
)
"""The tracer of the provider set now, or ``None`` when nothing records spans."""

_instruments = _PerProvider("opentelemetry.metrics", "get_meter_provider", _made_instruments)
"""The instruments of the meter provider set now, or ``None`` when nothing records."""


def add_active_runs(delta: int) -> None:
    """A run started (+1) or ended (-1): ``threadstore.runs.active``."""
    instruments = _instruments()
    if instruments is not None:
        instruments["active"].add(delta)


def record_flush(seconds: float, *, final: bool) -> None:
    """A flush took ``seconds``: ``threadstore.flush.duration``."""
    instruments = _instruments()
    if instruments is not None:
        instruments["flush"].record(seconds, {"threadstore.flush.final": final})


def count_retries(attempts: int) -> None:
    """``attempts`` flush attempts failed (and were retried): ``threadstore.flush.retries``."""
    instruments = _instruments()
    if instruments is not None and attempts:
        instruments["retries"].add(attempts)


def observe_gauge(name: str, callback: Callable[[], int | float]) -> Callable[[], None]:
    """Report ``callback()`` as the gauge ``name`` at each collection; returns an unregister.

    For values kept elsewhere: the outbox registers ``threadstore.outbox.depth`` (entries
    waiting) here. The gauge is created with the instruments, on the first metric use
    after an SDK sets a meter provider (or at once when one is set already).
    """
    callbacks = _gauges.setdefault(name, [])
    callbacks.append(callback)
    instruments = _instruments()
    if instruments is not None and name not in instruments["gauges"]:
        instruments["gauges"].add(name)  # one gauge per name: it reads every callback
        instruments["meter"].create_observable_gauge(name, callbacks=[_observe(name)])

    def unregister() -> None:
        if callback in callbacks:
            callbacks.remove(callback)

    return unregister
