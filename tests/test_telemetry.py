"""OpenTelemetry: with an SDK, a run yields its span (start, first event, end status,
GenAI attributes), its flushes and store operations theirs, and the metrics count;
without one, every call site hands out the shared no-op."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import pytest
from ag_ui.core import CustomEvent
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agui_scripts import (
    ScriptedAgent,
    collect,
    run_finished,
    run_input,
    run_started,
    text_message,
    user,
)
from threadstore import Store, _telemetry
from threadstore.agui import StorageAgent


class Collected:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.metrics = InMemoryMetricReader()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        if data is None:  # nothing was recorded or observed since the last collection
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


@pytest.fixture
def collected(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collected]:
    """An SDK with in-memory exporters, as the global providers for this test only."""
    sdk = Collected()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: sdk.tracer_provider)
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: sdk.meter_provider)
    yield sdk
    sdk.tracer_provider.shutdown()
    sdk.meter_provider.shutdown()


def script(thread: str, run: str) -> list[Any]:
    usage = CustomEvent(name="usage", value={"input_tokens": 12, "output_tokens": 5})
    return [run_started(thread, run), *text_message("m", "hello"), usage, run_finished(thread, run)]


async def test_a_run_yields_its_spans_and_metrics(store: Store, collected: Collected) -> None:
    user_uuid = uuid4()
    agent = StorageAgent(
        "helper", user_uuid, store, store, ScriptedAgent(script("t", "r")), run_repo=store
    )
    events = await collect(agent.run(run_input("t", "r", [user("u")])))
    assert events[-1].type == "RUN_FINISHED"
    chat = await store.get_chat_by_thread_id(user_uuid, "t")
    assert chat is not None
    (run,) = collected.named("invoke_agent helper")
    attributes = dict(run.attributes or {})
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.name"] == "helper"
    assert attributes["gen_ai.conversation.id"] == str(chat.chat_uuid)
    assert attributes["threadstore.run.status"] == "complete"
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (
        12,
        5,
    )
    assert [e.name for e in run.events] == ["threadstore.run.first_event"]
    assert run.events[0].attributes == {"ag_ui.event.type": "RUN_STARTED"}
    assert run.status.status_code is StatusCode.UNSET
    flushes = collected.named("threadstore.flush")
    assert flushes and all(
        (f.attributes or {})["gen_ai.conversation.id"] == str(chat.chat_uuid) for f in flushes
    )
    assert [(f.attributes or {})["threadstore.flush.final"] for f in flushes][-1] is True
    assert collected.named("threadstore.usage.record")
    (active,) = collected.points("threadstore.runs.active")
    assert active.value == 0  # one run started, one ended
    latencies = collected.points("threadstore.flush.duration")  # one point per final/not
    assert sum(point.count for point in latencies) == len(flushes)


async def test_a_failed_run_ends_its_span_with_an_error(store: Store, collected: Collected) -> None:
    inner = ScriptedAgent(script("t", "r"), fail_after=2)
    agent = StorageAgent("helper", uuid4(), store, store, inner, run_repo=store)
    with pytest.raises(RuntimeError):
        await collect(agent.run(run_input("t", "r", [user("u")])))
    (run,) = collected.named("invoke_agent helper")
    assert (run.attributes or {})["threadstore.run.status"] == "errored"
    assert (run.attributes or {})["error.type"] == "RuntimeError"
    assert run.status.status_code is StatusCode.ERROR


async def test_store_operations_sweeps_and_compaction_are_spans(
    store: Store, collected: Collected
) -> None:
    agent = StorageAgent(
        "a", uuid4(), store, store, ScriptedAgent(script("t", "r")), run_repo=store
    )
    await collect(agent.run(run_input("t", "r", [user("u")])))
    assert agent.chat is not None
    await store.messages.read_history(agent.chat.chat_uuid)
    await store.chats.sweep_expired()
    await store.branches.compact(agent.chat.chat_uuid, keep_messages=0)
    reads = collected.named("threadstore.store.read_history")  # the run's set-up read too
    assert {(r.attributes or {})["gen_ai.conversation.id"] for r in reads} == {
        str(agent.chat.chat_uuid)
    }
    assert collected.named("threadstore.sweep") and collected.named("threadstore.compact")
    await store.messages.search(agent.chat.user_uuid, "hello")
    (search,) = collected.named("threadstore.search")
    assert (search.attributes or {})["gen_ai.operation.name"] == "retrieval"


def test_a_gauge_registered_elsewhere_is_observed(collected: Collected) -> None:
    depth = [3]
    unregister = _telemetry.observe_gauge("threadstore.outbox.depth", lambda: depth[0])
    try:
        (point,) = collected.points("threadstore.outbox.depth")
        assert point.value == 3
        depth[0] = 7
        (point,) = collected.points("threadstore.outbox.depth")
        assert point.value == 7
    finally:
        unregister()


async def test_without_an_sdk_every_call_site_is_the_shared_no_op(store: Store) -> None:
    assert _telemetry.span("threadstore.flush", uuid4()) is _telemetry.span("threadstore.sweep")
    assert _telemetry.run_span("a", "t", "r") is None
    agent = StorageAgent(
        "a", uuid4(), store, store, ScriptedAgent(script("t", "r")), run_repo=store
    )
    events = await collect(agent.run(run_input("t", "r", [user("u")])))
    assert events[-1].type == "RUN_FINISHED"


async def test_without_the_package_runs_still_work(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("opentelemetry.trace", "opentelemetry.metrics"):
        monkeypatch.delitem(sys.modules, name)
    assert _telemetry.run_span("a", "t", "r") is None
    agent = StorageAgent(
        "a", uuid4(), store, store, ScriptedAgent(script("t", "r")), run_repo=store
    )
    events = await collect(agent.run(run_input("t", "r", [user("u")])))
    assert events[-1].type == "RUN_FINISHED"


async def test_the_server_reports_its_outbox_depth_as_a_gauge(
    store: Store, collected: Collected
) -> None:
    from threadstore.server import LocalUserAuth, create_app

    app = create_app(store, agent="demo", auth=LocalUserAuth(uuid4()))
    async with app.router.lifespan_context(app):
        (depth,) = collected.points("threadstore.outbox.depth")
        assert depth.value == 0  # what /readyz says
    assert collected.points("threadstore.outbox.depth") == []  # unregistered at shutdown
