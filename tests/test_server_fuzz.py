"""Hostile clients against a real server on SQLite and PostgreSQL: never a 5xx, never half-stored.

Hypothesis builds ``RunAgentInput``-shaped JSON with hostile strings (NUL, lone
surrogates, line separators, path characters, over-long ids), deep nesting, numbers that
are not finite, fields AG-UI does not know, large messages, wrong types and wrong content
types, and follows each run with chat-API requests carrying hostile ids, cursors and names.
Every answer must be below 500 and be JSON or a well-formed AG-UI stream, and a rejected
request must have stored nothing.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from ag_ui.core import Event
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from server_support import served_with_store
from threadstore import Store
from threadstore.server import DemoAgent, Limits

_EVENT: TypeAdapter[Any] = TypeAdapter(Event)
_TERMINAL = ("RUN_FINISHED", "RUN_ERROR")
FUZZ_EXAMPLES = int(os.environ.get("THREADSTORE_FUZZ_EXAMPLES", "60"))
"""Requests per backend: a few dozen in every run; THREADSTORE_FUZZ_EXAMPLES=2000 for a long one."""
LIMITS = Limits(max_body_bytes=256 * 1024, max_message_bytes=32 * 1024, max_messages=20)
_GENERIC_FAILURE = "The run failed with an internal error; the server log has the details."

# --- strategies ------------------------------------------------------------------------------

_hostile_piece = st.sampled_from(
    ["\x00", "\ud800", "\udfff", "\u2028", "\x85", "/", "..", ".", "%", "?", "#", " ", "é", "😀"]
)
# Every code point, surrogates included (st.text() leaves them out).
_any_char = st.characters(codec=None, exclude_categories=())
_hostile_text = st.one_of(
    st.text(_any_char, max_size=12),
    st.lists(_hostile_piece | st.text(max_size=3), min_size=1, max_size=4).map("".join),
    st.integers(min_value=240, max_value=300).map(lambda n: "i" * n),  # around the id limit
)
_plain_id = st.text(min_size=1, max_size=8).filter(str.strip)
_id = st.one_of(_plain_id, _plain_id, _plain_id, _hostile_text)
_scalar = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([math.nan, math.inf, -math.inf])  # sent as NaN, Infinity, -Infinity
    | _hostile_text
)


def _nest(depth: int, leaf: Any) -> Any:
    for level in range(depth):
        leaf = {"k": leaf} if level % 2 else [leaf]
    return leaf


_json = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_hostile_text, inner, max_size=3),
    max_leaves=8,
)
_deep = st.builds(_nest, st.sampled_from([1, 10, 63, 64, 65, 200, 900]), _scalar)
_value = _json | _deep
_content = st.one_of(
    st.text(max_size=30),
    st.text(max_size=30),
    _hostile_text,
    st.sampled_from([0, 100, 40_000]).map(lambda n: "x" * n),  # 40 kB is over the message limit
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _hostile_text}), max_size=2),
    _scalar,
)
_user_message = st.fixed_dictionaries({"id": _id, "role": st.just("user"), "content": _content})
_any_message = st.fixed_dictionaries(
    {"id": _id, "role": st.sampled_from(["user", "assistant", "tool", "system", "bad"])},
    optional={"content": _content, "toolCallId": _id, "name": _hostile_text},
)
_message = st.one_of(_user_message, _user_message, _any_message)
_run_body = st.fixed_dictionaries(
    {"threadId": _id, "runId": _id, "messages": st.lists(_message, min_size=1, max_size=3)},
    optional={
        "state": st.dictionaries(st.text(max_size=3), _value, max_size=2) | _deep,
        "forwardedProps": _value,
        "parentRunId": _id,
        "aNewerClientsField": _value,  # unknown to this AG-UI version: kept, never a 5xx
        "context": st.lists(
            st.fixed_dictionaries({"description": _hostile_text, "value": _hostile_text}),
            max_size=2,
        ),
        "tools": st.lists(
            st.fixed_dictionaries(
                {"name": _hostile_text, "description": _hostile_text, "parameters": _value}
            ),
            max_size=1,
        ),
    },
)
_plain_body = st.fixed_dictionaries(
    {
        "threadId": _plain_id,
        "runId": _plain_id,
        "messages": st.lists(
            st.fixed_dictionaries(
                {"id": _plain_id, "role": st.just("user"), "content": st.text(max_size=30)}
            ),
            min_size=1,
            max_size=2,
            unique_by=lambda m: m["id"],
        ),
    },
    optional={"state": st.dictionaries(st.text(max_size=3), _scalar, max_size=2)},
)
_wild_body = st.one_of(
    _value,
    st.fixed_dictionaries({}, optional={"threadId": _value, "runId": _value, "messages": _value}),
)
_cursor = st.one_of(
    st.integers(min_value=-5, max_value=5),
    st.sampled_from([2**31, 2**63 - 1, 2**63, 2**64, 10**30]),
    _hostile_text,
)


@dataclass(frozen=True)
class Request:
    """One POST /agui, and the chat-API requests that follow it."""

    body: Any
    content_type: str
    raw: bytes | None
    cursor: Any
    name: Any
    path_id: str


_request = st.builds(
    Request,
    body=st.one_of(_plain_body, _plain_body, _run_body, _run_body, _wild_body),
    content_type=st.integers(0, 9).map(
        lambda i: {8: "text/plain", 9: "application/x-www-form-urlencoded"}.get(
            i, "application/json"
        )
    ),
    raw=st.one_of(*[st.none()] * 7, st.binary(max_size=20)),
    cursor=_cursor,
    name=_hostile_text | _scalar,
    path_id=_id,
)

# --- the server ------------------------------------------------------------------------------


@dataclass
class Target:
    client: httpx.AsyncClient
    store: Store


@pytest.fixture
async def target(server_db_url: str) -> AsyncIterator[Target]:
    """A real server (demo agent, small limits) on SQLite or PostgreSQL, and its store."""
    async with served_with_store(server_db_url, DemoAgent(delay=0), limits=LIMITS) as served:
        yield Target(*served)


async def _stored(store: Store) -> list[Any]:
    snapshot: list[Any] = []
    for chat in sorted(await store.get_all_chats(), key=lambda c: str(c.chat_uuid)):
        messages = await store.get_chat_messages(chat.chat_uuid)
        snapshot.append(
            (chat.chat_uuid, chat.name, [(m.message_uuid, m.content, m.status) for m in messages])
        )
    return snapshot


# --- checks ----------------------------------------------------------------------------------


def _check_json_error(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    body = response.json()
    assert isinstance(body["detail"], str) and body["detail"], body
    assert isinstance(body["code"], str) and body["code"], body
    assert "Traceback" not in body["detail"]


def _check_stream(response: httpx.Response, *, whole: bool = True) -> list[dict[str, Any]]:
    """Parse an AG-UI SSE stream; check each frame is an AG-UI event and the run ends.

    A ``whole`` stream also starts with ``RUN_STARTED`` (a resumed one starts mid-run).
    """
    assert response.headers["content-type"].startswith("text/event-stream")
    events: list[dict[str, Any]] = []
    for block in response.text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        data = [line[5:].lstrip() for line in lines if line.startswith("data:")]
        assert len(data) == 1, block
        assert all(line.startswith(("id:", "data:")) for line in lines), block
        payload = json.loads(data[0])
        _EVENT.validate_python(payload)
        events.append(payload)
    types = [e["type"] for e in events]
    assert types, response.text
    assert types[0] == "RUN_STARTED" or not whole, types
    lifecycle = [t for t in types if t in ("RUN_STARTED", *_TERMINAL)]
    assert lifecycle[-1] in _TERMINAL, types
    for e in events:
        if e["type"] == "RUN_ERROR" and e.get("code") == "INTERNAL_ERROR":
            assert e["message"] in (
                _GENERIC_FAILURE,
                "The agent's stream ended without RUN_FINISHED or RUN_ERROR.",
            ), e
    return events


def _seg(value: Any) -> str:
    # A lone surrogate goes out as the bytes it would be, which are not valid UTF-8.
    return quote(str(value).encode("utf-8", "surrogatepass"), safe="")


def _encode(body: Any) -> bytes:
    # ASCII JSON: lone surrogates travel as \ud800 escapes, as a browser would send them.
    return json.dumps(body).encode()


@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(request=_request)
async def test_hostile_requests_never_get_a_5xx_or_store_half(
    target: Target, request: Request
) -> None:
    client, store = target.client, target.store
    before = await _stored(store)
    content = request.raw if request.raw is not None else _encode(request.body)

    response = await client.post(
        "/agui", content=content, headers={"Content-Type": request.content_type}
    )

    event(f"POST /agui {response.status_code}")
    if response.status_code != 200:
        _check_json_error(response)
        assert await _stored(store) == before
    else:
        events = _check_stream(response)
        if events[-1]["type"] == "RUN_ERROR" and events[-1].get("code") == "INVALID_INPUT":
            assert await _stored(store) == before
    body = request.body if isinstance(request.body, dict) else {}
    thread = body.get("threadId") if isinstance(body.get("threadId"), str) else request.path_id
    run = body.get("runId") if isinstance(body.get("runId"), str) else request.path_id
    await _follow(client, store, thread, run, request)


async def _follow(
    client: httpx.AsyncClient, store: Store, thread: str, run: str, request: Request
) -> None:
    """Chat-API and AG-UI follow-ups with hostile ids, cursors and names."""
    chats = await store.get_all_chats()
    chat = str(chats[0].chat_uuid) if chats else "00000000-0000-0000-0000-000000000000"
    base = f"/agui/threads/{_seg(thread)}/runs/{_seg(run)}"
    cursor = _seg(request.cursor)
    before = await _stored(store)

    streams = [
        (False, await client.get(f"{base}/events?after={cursor}")),
        (False, await client.get(f"{base}/events", headers={"Last-Event-ID": _header(cursor)})),
        (True, await client.get(f"/agui/threads/{_seg(request.path_id)}/connect")),
    ]
    for whole, response in streams:
        event(f"stream follow-up {response.status_code}")
        if response.status_code == 200:
            _check_stream(response, whole=whole)
        elif response.status_code == 204:  # a resume after an ended run's last event
            assert not whole and response.content == b""
        else:
            _check_json_error(response)
    for param in ("after", "before"):
        page = await client.get(f"/api/chats/{chat}/messages?{param}={cursor}")
        event(f"messages ?{param} {page.status_code}")
        _check_json_error(page) if page.status_code != 200 else page.json()
    renamed = await client.patch(f"/api/chats/{chat}", content=_encode({"name": request.name}))
    event(f"rename {renamed.status_code}")
    if renamed.status_code != 200:
        _check_json_error(renamed)
        assert await _stored(store) == before
    cancel = await client.post(f"/agui/threads/{_seg(request.path_id)}/runs/{_seg(run)}/cancel")
    event(f"cancel {cancel.status_code}")
    _check_json_error(cancel) if cancel.status_code != 200 else cancel.json()
    before = await _stored(store)
    imported = await client.post(
        f"/api/chats/import?thread_id={_seg(request.path_id)}",
        content=_encode(_import_document(chat, request)),
        headers={"Content-Type": request.content_type},
    )
    event(f"import {imported.status_code}")
    if imported.status_code != 201:
        _check_json_error(imported)
        assert await _stored(store) == before


def _header(value: Any) -> str:
    # The client sends header values as printable ASCII; keep what of the value is.
    kept = "".join(ch for ch in str(value) if ch.isascii() and ch.isprintable()).strip()
    return kept or "x"


def _import_document(chat: str, request: Request) -> Any:
    return {
        "format": "threadstore.chat",
        "chat": {
            "chat_uuid": chat,
            "user_uuid": chat,
            "thread_id": request.path_id,
            "dedup_key": request.path_id,
            "name": request.name,
            "state": request.body if not isinstance(request.body, dict) else None,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        },
        "messages": [],
    }
