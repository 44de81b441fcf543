"""The official AG-UI TypeScript client (``@ag-ui/client``) against ``threadstore serve``.

``tests/agui_client`` is a small Node project pinned by its ``package-lock.json``; ``npm
ci`` installs it here when its ``node_modules`` is missing or differs from the lock. Its
``conversation.mjs`` holds one two-turn conversation with a client that never drops and
another with a client that drops its stream mid-run twice: it reconnects through
``/connect`` after the first drop and resumes the run with ``?snapshots=true`` after the
second. Every stream goes through the client's own schema and event-order checks. This
test runs it against a real server process (demo agent, SQLite) and checks that both
clients, a client opening the thread afresh and the stored history all agree.

Needs ``node`` and ``npm``. Without them the test is skipped, except where
``THREADSTORE_REQUIRE_NODE=1`` (CI sets it): there that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import PROTOCOL_VERSION
from ag_ui.core import Message as AGUIMessage
from pydantic import TypeAdapter

from threadstore import Message
from threadstore.agui import translate_messages

PROJECT = Path(__file__).with_name("agui_client")
DOCS = Path(__file__).parents[1] / "docs" / "server.md"
REQUIRE_NODE_ENV = "THREADSTORE_REQUIRE_NODE"
# Slow enough that a run is still going when the client reconnects right after dropping
# it (a demo turn has about fifty pauses), fast enough to keep the test short.
DEMO_DELAY = "0.05"
_AGUI_MESSAGES: TypeAdapter[list[AGUIMessage]] = TypeAdapter(list[AGUIMessage])


@pytest.fixture(scope="module")
def node_project() -> Path:
    """The Node project, installed from its lockfile; skips (or fails in CI) without Node."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not found; the official AG-UI client test needs them"
        if os.environ.get(REQUIRE_NODE_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_NODE_ENV}=1)")
        pytest.skip(reason)
    if not _installed_as_locked(PROJECT):
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=PROJECT,
            check=True,
            capture_output=True,
            timeout=600,
        )
    return PROJECT


def _installed_as_locked(project: Path) -> bool:
    installed = project / "node_modules" / ".package-lock.json"
    if not installed.exists():
        return False
    locked = json.loads((project / "package-lock.json").read_text())["packages"]
    locked.pop("", None)  # the project itself
    return bool(json.loads(installed.read_text())["packages"] == locked)


@contextmanager
def threadstore_serve(db: str) -> Iterator[str]:
    """Run ``threadstore serve`` (demo agent) on ``db``; yield its URL; stop it with Ctrl-C."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "threadstore.cli", "serve", "--db", db, "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--demo-delay", DEMO_DELAY, "--log-level", "warning"],
        env={**os.environ, "THREADSTORE_DB": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read().decode() if process.stdout else ""
                raise AssertionError(f"threadstore serve did not come up:\n{output}")
            time.sleep(0.05)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz").status_code == 200
    except httpx.TransportError:
        return False


def _stored(url: str, thread_id: str) -> tuple[list[dict[str, Any]], Any]:
    """The thread's stored history as AG-UI messages (wire JSON), and its stored state."""
    chats = httpx.get(f"{url}/api/chats", params={"limit": 1000}).json()["items"]
    (chat,) = [chat for chat in chats if chat["thread_id"] == thread_id]
    page = httpx.get(f"{url}/api/chats/{chat['chat_uuid']}/messages", params={"limit": 1000})
    history = [Message.model_validate(item) for item in page.json()["items"]]
    messages = _AGUI_MESSAGES.dump_python(
        translate_messages(history), mode="json", by_alias=True, exclude_none=True
    )
    return messages, chat["state"]


def _without_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every id replaced by its order of first appearance."""
    names: dict[str, str] = {}

    def rename(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: rename(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [rename(v) for v in value]
        if key in ("id", "toolCallId"):
            return names.setdefault(value, f"id{len(names)}")
        return value

    renamed: list[dict[str, Any]] = rename(messages)
    return renamed


def _answers(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant" and "=" in m["content"]]


@pytest.mark.slow
def test_the_official_client_survives_drops_and_agrees_with_the_stored_history(
    node_project: Path, tmp_path: Path
) -> None:
    with threadstore_serve(f"sqlite:///{tmp_path / 'threadstore.db'}") as url:
        script = subprocess.run(
            ["node", "conversation.mjs", url],
            cwd=node_project,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert script.returncode == 0, script.stderr
        report = json.loads(script.stdout)
        steady, dropped, fresh = report["steady"], report["dropped"], report["fresh"]
        stored_steady = _stored(url, steady["threadId"])
        stored_dropped = _stored(url, dropped["threadId"])

    # The client warns about anything it strips or cannot interpret: nothing here.
    assert script.stderr == ""
    # Every stream opened with a RUN_STARTED that declares the version the client speaks.
    assert report["protocolVersion"] == PROTOCOL_VERSION
    starts = [
        *steady["starts"],
        *dropped["starts"],
        *dropped["connectStarts"],
        *dropped["resumeStarts"],
        *fresh["starts"],
    ]
    assert len(starts) == 7
    assert {start["protocolVersion"] for start in starts} == {PROTOCOL_VERSION}
    # Both drops came before the turn's answer...
    assert _answers(dropped["afterFirstDrop"]["messages"]) == []
    assert len(_answers(dropped["afterSecondDrop"]["messages"])) == 1
    # ...the reconnect joined the first run while it was still going, the resume named the
    # second, and the plain resume stream is one the client's own checks refuse.
    first_run, second_run = dropped["runIds"]
    assert [start["runId"] for start in dropped["connectStarts"]] == [first_run]
    assert [start["runId"] for start in dropped["resumeStarts"]] == [second_run]
    assert dropped["plainResume"] == "First event must be 'RUN_STARTED'"
    # After each turn the dropping client holds exactly what the steady one does (ids
    # apart: they are two threads).
    assert _answers(steady["messages"]) == [
        "12 * 7 + 3 = 87. I used the calculator tool to be sure.",
        "6 * 6 = 36. I used the calculator tool to be sure.",
    ]
    roles = ["user", "reasoning", "assistant", "tool", "assistant"]
    assert [m["role"] for m in steady["messages"]] == roles * 2
    turns = [(steady["afterFirstTurn"], dropped["afterFirstTurn"]), (steady, dropped)]
    for steady_now, dropped_now in turns:
        assert _without_ids(dropped_now["messages"]) == _without_ids(steady_now["messages"])
        assert dropped_now["state"] == steady_now["state"]
    assert steady["state"] == {"turns": 2, "lastTool": "calculator"}
    # A client opening the thread afresh, and the store itself, hold the same.
    assert (fresh["messages"], fresh["state"]) == (dropped["messages"], dropped["state"])
    assert stored_dropped == (dropped["messages"], dropped["state"])
    assert stored_steady == (steady["messages"], steady["state"])


def test_the_documented_connecting_agent_is_the_one_the_client_test_uses() -> None:
    documented = re.findall(r"```js\n(.*?)```", DOCS.read_text(), flags=re.DOTALL)

    assert (PROJECT / "threadstore-agent.mjs").read_text() in documented
