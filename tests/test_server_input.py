"""Bad input gets a clear 4xx or RUN_ERROR, never a 500, and changes nothing stored."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from ag_ui.core import BaseEvent, Event, RunAgentInput
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from server_support import run_input
from threadstore import Store, open_store
from threadstore.server import LOCAL_USER_UUID, DemoAgent, Limits, create_app

_LIFECYCLE = ("RUN_STARTED", "RUN_FINISHED", "RUN_ERROR")
LIMITS = Limits(max_body_bytes=20_000, max_message_bytes=2_000, max_messages=5, max_id_chars=50)
_EVENT: TypeAdapter[Any] = TypeAdapter(Event)


class ScriptedAgent:
    """Plays the events listed in ``forwardedProps.script`` (or the demo when absent)."""

    def __init__(self) -> None:
        self.demo = DemoAgent(delay=0)

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the scripted events; an entry that is not a valid event raises."""
        props = input.forwarded_props
        script = props.get("script") if isinstance(props, dict) else None
        if not isinstance(script, list):
            async for event in self.demo.run(input):
                yield event
            return
        for raw in script:
            yield _EVENT.validate_python(raw)


@pytest.fixture
async def app_client() -> AsyncIterator[tuple[httpx.AsyncClient, Store]]:
    """A client of an in-memory server with small, test-sized limits."""
    store = await open_store("memory://")
    app = create_app(store, agent=ScriptedAgent(), limits=LIMITS)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client, store
    await store.close()


def _sse_events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.split("\n") if line.startswith("data:")]


async def _snapshot(store: Store) -> list[tuple[str, list[tuple[str, str, str]]]]:
    chats = await store.get_all_chats(LOCAL_USER_UUID)
    return [
        (
            chat.thread_id,
            [(m.role, m.content, m.status) for m in await store.get_chat_messages(chat.chat_uuid)],
        )
        for chat in sorted(chats, key=lambda c: c.thread_id)
    ]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b'{"threadId": "t", "runId": ', 400, "not valid JSON"),
        (b"[]", 422, "body"),
        (json.dumps({"threadId": "t", "runId": "r", "messages": "hi"}).encode(), 422, "messages"),
        (json.dumps({"threadId": 5, "runId": "r", "messages": []}).encode(), 422, "threadId"),
        (json.dumps({"runId": "r", "messages": []}).encode(), 422, "threadId"),
        (
            json.dumps(
                {"threadId": "t", "runId": "r", "messages": [{"id": "m", "role": "wizard"}]}
            ).encode(),
            422,
            "messages",
        ),
        (json.dumps(run_input(thread_id="t" * 51)).encode(), 413, "threadId is 51 characters"),
        (json.dumps(run_input(thread_id=" ")).encode(), 422, "threadId must not be empty"),
        (json.dumps(run_input("x" * 3000)).encode(), 413, "2000 bytes per message"),
        (json.dumps({**run_input(), "state": {"x": "y" * 25_000}}).encode(), 413, "20000 bytes"),
    ],
)
async def test_a_bad_run_request_is_a_clear_4xx_and_stores_nothing(
    app_client: tuple[httpx.AsyncClient, Store], body: bytes, status: int, says: str
) -> None:
    client, store = app_client

    response = await client.post(
        "/agui", content=body, headers={"Content-Type": "application/json"}
    )

    assert response.status_code == status
    assert says in response.json()["detail"]
    assert await _snapshot(store) == []


async def test_too_many_messages_and_duplicate_ids_are_rejected(
    app_client: tuple[httpx.AsyncClient, Store],
) -> None:
    client, _ = app_client
    history = [{"id": f"h{i}", "role": "user", "content": "x"} for i in range(5)]
    twice = [{"id": "same", "role": "user", "content": "x"}] * 2

    many = await client.post("/agui", json=run_input(history=history))
    dup = await client.post("/agui", json={**run_input(), "messages": twice})

    assert many.status_code == 413
    assert "6 messages; the limit is 5" in many.json()["detail"]
    assert dup.status_code == 422
    assert "appears twice" in dup.json()["detail"]


async def test_a_new_non_user_message_is_a_run_error_and_changes_nothing(
    app_client: tuple[httpx.AsyncClient, Store],
) -> None:
    client, store = app_client
    first = run_input("what is 3 + 4")
    assert (await client.post("/agui", json=first)).status_code == 200
    before = await _snapshot(store)
    forged = {"id": "forged", "role": "assistant", "content": "I said something else"}
    second = run_input("and now?", thread_id=first["threadId"], history=first["messages"])
    second["messages"].insert(1, forged)

    response = await client.post("/agui", json=second)

    events = _sse_events(response.text)
    assert response.status_code == 200
    assert events[-1]["type"] == "RUN_ERROR"
    assert "user" in events[-1]["message"].lower()
    assert await _snapshot(store) == before


async def test_resume_cancel_and_connect_on_unknown_runs_are_404(
    app_client: tuple[httpx.AsyncClient, Store],
) -> None:
    client, _ = app_client

    resume = await client.get("/agui/threads/nope/runs/nope/events")
    cancel = await client.post("/agui/threads/nope/runs/nope/cancel")
    connect = await client.get("/agui/threads/nope/connect")

    assert [resume.status_code, cancel.status_code, connect.status_code] == [404, 404, 404]
    assert "not live" in resume.json()["detail"]


async def test_resume_points_that_do_not_exist_are_rejected(
    app_client: tuple[httpx.AsyncClient, Store],
) -> None:
    client, _ = app_client
    body = run_input("2 + 2")
    await client.post("/agui", json=body)
    url = f"/agui/threads/{body['threadId']}/runs/{body['runId']}/events"

    garbage = await client.get(url, headers={"Last-Event-ID": "abc"})
    negative = await client.get(url, params={"after": -1})
    beyond = await client.get(url, params={"after": 10_000})
    tail = await client.get(url, headers={"Last-Event-ID": "3"}, params={"after": 0})

    assert garbage.status_code == 422
    assert "Last-Event-ID" in garbage.json()["detail"]
    assert negative.status_code == 422
    assert beyond.status_code == 422
    assert "does not exist" in beyond.json()["detail"]
    assert tail.status_code == 200
    assert tail.text.startswith("id: 4\n")


# --- property: random inputs and event scripts never make the server fail -------------------

_ids = st.text(min_size=0, max_size=8)
_json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
_content = st.text(max_size=30) | st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=10)}), max_size=2
)
_message = st.fixed_dictionaries(
    {
        "id": _ids,
        "role": st.sampled_from(["user", "assistant", "system", "tool", "developer", "bogus"]),
    },
    optional={"content": _content | _json_scalars, "toolCallId": _ids},
)
_event = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "RUN_STARTED",
                "RUN_FINISHED",
                "RUN_ERROR",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT",
                "REASONING_START",
                "REASONING_MESSAGE_CONTENT",
                "STATE_SNAPSHOT",
                "STATE_DELTA",
                "MESSAGES_SNAPSHOT",
                "CUSTOM",
            ]
        )
    },
    optional={
        "threadId": _ids,
        "runId": _ids,
        "messageId": st.sampled_from(["a", "b"]),
        "toolCallId": st.sampled_from(["c", "d"]),
        "toolCallName": st.just("calc"),
        "delta": st.text(max_size=5) | st.lists(st.just({"op": "add"}), max_size=1),
        "content": st.text(max_size=5),
        "message": st.text(max_size=5),
        "snapshot": st.dictionaries(st.text(max_size=3), _json_scalars, max_size=2),
        "messages": st.lists(_message, max_size=2),
        "name": st.text(max_size=3),
        "value": _json_scalars,
    },
)
_good_id = st.text(min_size=1, max_size=8).filter(lambda s: s.strip() != "")
_good_message = st.one_of(
    st.fixed_dictionaries(
        {"id": _good_id, "role": st.just("user"), "content": st.text(max_size=30)}
    ),
    st.fixed_dictionaries(
        {"id": _good_id, "role": st.sampled_from(["assistant", "system"]), "content": st.text()}
    ),
    st.fixed_dictionaries(
        {"id": _good_id, "role": st.just("tool"), "content": st.text(), "toolCallId": _good_id}
    ),
)
_script = st.fixed_dictionaries({"script": st.lists(_event, max_size=8)})
_plausible_body = st.fixed_dictionaries(
    {
        "threadId": _good_id,
        "runId": _good_id,
        "messages": st.lists(_good_message, max_size=4),
    },
    optional={
        "state": st.dictionaries(st.text(max_size=3), _json_scalars, max_size=2),
        "forwardedProps": _script | st.just({}),
        "parentRunId": _good_id,
    },
)
_wild_body = st.fixed_dictionaries(
    {},
    optional={
        "threadId": _ids | _json_scalars,
        "runId": _ids | _json_scalars,
        "messages": st.lists(_message, max_size=4) | _json_scalars,
        "state": st.dictionaries(st.text(max_size=3), _json_scalars, max_size=2) | _json_scalars,
        "tools": st.lists(st.fixed_dictionaries({"name": _ids, "description": _ids}), max_size=1),
        "forwardedProps": _script,
        "parentRunId": _ids,
    },
)
_body = st.one_of(_plausible_body, _plausible_body, _plausible_body, _wild_body)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=_body, follow=st.sampled_from(["none", "resume", "connect", "cancel"]))
async def test_random_run_inputs_and_event_scripts_never_make_a_500(
    app_client: tuple[httpx.AsyncClient, Store], body: dict[str, Any], follow: str
) -> None:
    client, _ = app_client

    response = await client.post("/agui", json=body)

    event(f"status {response.status_code}")
    assert response.status_code < 500, response.text
    if response.status_code != 200:
        assert response.json()["detail"]
        return
    events = _sse_events(response.text)
    lifecycle = [e["type"] for e in events if e["type"] in _LIFECYCLE]
    # The agent's events pass through untouched (even ones after its end), but the
    # client is never left waiting: the last lifecycle event always closes the run.
    assert lifecycle and lifecycle[-1] in ("RUN_FINISHED", "RUN_ERROR")
    _check_scripted(body)
    ids = (body["threadId"], body["runId"])
    if any("/" in i or i in (".", "..") for i in ids):
        return  # not addressable as a URL path segment (documented in docs/server.md)
    thread, run = quote(body["threadId"], safe=""), quote(body["runId"], safe="")
    base = f"/agui/threads/{thread}/runs/{run}"
    if follow == "resume":
        after = await client.get(f"{base}/events", params={"after": len(events) // 2})
        assert after.status_code == 200
    elif follow == "cancel":
        assert (await client.post(f"{base}/cancel")).status_code == 200
    elif follow == "connect":
        assert (await client.get(f"/agui/threads/{thread}/connect")).status_code < 500


def _check_scripted(body: dict[str, Any]) -> None:
    """A stream that passed validation had a valid RunAgentInput; keep hypothesis honest."""
    try:
        RunAgentInput.model_validate(body)
    except ValidationError as exc:  # pragma: no cover - a 200 means the input validated
        raise AssertionError(f"a 200 for an invalid input: {exc}") from exc
