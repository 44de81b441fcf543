"""The web page in a real browser (Debian's Chromium driven by Playwright) against a real
``threadstore serve`` on SQLite with the demo agent."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import pytest

from threadstore.models import PARTS_METADATA_KEY, Chat, Message, ToolCall

pytest.importorskip("playwright", reason="the browser tests need the test extra (playwright)")

from playwright.sync_api import Browser, Page, expect

CHROMIUM = os.environ.get("THREADSTORE_TEST_CHROMIUM", "/usr/bin/chromium")
REQUIRE_BROWSER_ENV = "THREADSTORE_REQUIRE_BROWSER"
# Long enough that a test can act while an answer streams (the demo's clock answer is
# about 50 chunks), short enough that a whole answer takes a few seconds.
DEMO_DELAY = "0.06"
CLOCK_QUESTION = "Hello there"  # no arithmetic: the demo answers with its long clock reply

if not Path(CHROMIUM).exists():
    reason = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get(REQUIRE_BROWSER_ENV) == "1":
        raise RuntimeError(f"{REQUIRE_BROWSER_ENV}=1 but {reason}")
    pytest.skip(reason, allow_module_level=True)

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    token: str | None = None

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def _serve(tmp: Path, *extra: str) -> Server:
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "threadstore.cli",
        "serve",
        "--db",
        f"sqlite:///{tmp / 'web.db'}",
        "--port",
        str(port),
        "--demo-delay",
        DEMO_DELAY,
        "--log-level",
        "warning",
        *extra,
    ]
    process = subprocess.Popen(
        command,
        cwd=tmp,
        env={**os.environ, "THREADSTORE_DB": "", "THREADSTORE_TOKENS": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read().decode() if process.stdout else ""
            raise AssertionError(f"threadstore serve exited early:\n{output}")
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return Server(url, process)
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("threadstore serve did not come up")


def _stop(server: Server) -> None:
    server.process.send_signal(signal.SIGINT)
    try:
        server.process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.communicate()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = _serve(tmp_path_factory.mktemp("web"))
    try:
        yield running
    finally:
        _stop(running)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """pytest-playwright launches Debian's Chromium (Playwright's own download is not used)."""
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1200, "height": 800}}


@pytest.fixture
def page(page: Page) -> Iterator[Page]:
    """pytest-playwright's page; a script error on it fails the test."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    assert not errors, f"the page raised: {errors}"


def _thread(tag: str) -> str:
    return f"{tag}-{time.monotonic_ns()}"


def _stored(server: Server, thread: str) -> list[dict[str, Any]]:
    with server.client() as client:
        info = client.get(f"/api/threads/{thread}").json()
        chat = info["chat"]
        items: list[dict[str, Any]] = client.get(
            f"/api/chats/{chat['chat_uuid']}/messages", params={"limit": 500}
        ).json()["items"]
        return items


def _send(page: Page, text: str) -> None:
    box = page.get_by_label("Message", exact=True)
    box.fill(text)
    box.press("Enter")


def _wait_idle(page: Page) -> None:
    """Wait until no run is streaming (the Send button is back)."""
    expect(page.locator("#send")).to_be_visible(timeout=30_000)


def _answer_text(page: Page, message_id: str) -> str:
    return page.locator(f'article[data-id="{message_id}"] .markdown').inner_text().strip()


def _wait_streaming_answer(page: Page) -> None:
    """Wait until the demo's final answer has started, but not finished, streaming."""
    page.wait_for_function(
        """() => [...document.querySelectorAll('article.assistant')]
              .some(a => a.textContent.includes('UTC on') && a.querySelector('.typing'))""",
        timeout=30_000,
    )


def _final_answer(stored: list[dict[str, Any]]) -> dict[str, Any]:
    return [m for m in stored if m["role"] == "assistant"][-1]


# --- serving ------------------------------------------------------------------------------


def test_the_page_is_served_at_the_root_with_a_strict_policy(server: Server) -> None:
    with server.client() as client:
        page = client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy
        assert client.get("/static/app.js").status_code == 200
        assert client.get("/static/vendor/purify.min.js").status_code == 200
        assert client.get("/docs").status_code == 200
        assert client.get("/openapi.json").json()["paths"]["/api/threads/{thread_id}"]


# --- chatting -------------------------------------------------------------------------------


def test_a_new_chat_streams_the_answer_and_shows_it_as_stored(server: Server, page: Page) -> None:
    page.goto(server.url)
    page.get_by_role("button", name="New chat").click()
    _send(page, "What is 12 * 7 + 3?")
    expect(page.locator("article.assistant .markdown").last).to_contain_text("= 87", timeout=30_000)
    _wait_idle(page)
    thread = page.evaluate("decodeURIComponent(location.hash.slice(4))")
    stored = _stored(server, thread)
    answer = _final_answer(stored)
    assert _answer_text(page, answer["agui_id"]) == answer["content"]
    # Reasoning is collapsed, the tool call is a card with its arguments and result.
    reasoning = page.locator("details.reasoning").last
    expect(reasoning).not_to_have_attribute("open", "")
    card = page.get_by_role("group", name="Tool call calculator").last
    expect(card).to_contain_text('"expression": "12 * 7 + 3"')
    expect(card).to_contain_text('"value": 87')
    # The new chat is in the list, named from its thread until renamed.
    expect(page.locator("#chat-list")).to_contain_text(answer["content"][:30])


def test_shift_enter_is_a_new_line_and_enter_sends(server: Server, page: Page) -> None:
    page.goto(f"{server.url}/#/t/{_thread('keys')}")
    box = page.get_by_label("Message", exact=True)
    box.fill("What is 1 + 1?")
    box.press("Shift+Enter")
    box.type("and more")
    assert box.input_value() == "What is 1 + 1?\nand more"
    box.press("Enter")
    expect(page.locator("article.user").last).to_contain_text("and more")
    expect(box).to_have_value("")
    _wait_idle(page)


def test_stop_cancels_the_run_and_the_turn_is_stored_interrupted(
    server: Server, page: Page
) -> None:
    thread = _thread("stop")
    page.goto(f"{server.url}/#/t/{thread}")
    _send(page, CLOCK_QUESTION)
    _wait_streaming_answer(page)
    page.get_by_role("button", name="Stop").click()
    expect(page.locator(".run-error")).to_have_text("Stopped.", timeout=30_000)
    _wait_idle(page)
    answer = _final_answer(_stored(server, thread))
    assert answer["status"] == "interrupted"
    badge = page.locator(f'article[data-id="{answer["agui_id"]}"] .badge')
    expect(badge).to_have_text("interrupted")
    # After a reload the stored turn shows the same.
    page.reload()
    expect(page.locator(f'article[data-id="{answer["agui_id"]}"] .badge')).to_have_text(
        "interrupted"
    )
    # A partial answer ends where the run stopped (markdown drops a trailing space).
    assert _answer_text(page, answer["agui_id"]) == answer["content"].rstrip()


def test_a_reload_mid_answer_resumes_with_the_stored_text_exactly(
    server: Server, page: Page
) -> None:
    thread = _thread("reload")
    page.goto(f"{server.url}/#/t/{thread}")
    _send(page, CLOCK_QUESTION)
    _wait_streaming_answer(page)
    page.reload()
    # The page finds the live run and follows it to the end.
    expect(page.locator("#stop")).to_be_visible(timeout=30_000)
    _wait_idle(page)
    stored = _stored(server, thread)
    answer = _final_answer(stored)
    assert answer["status"] == "complete"
    assert _answer_text(page, answer["agui_id"]) == answer["content"]
    # Every stored message is on the page once: nothing duplicated by the replay, and the
    # reasoning followed live sits in the answer that follows it, as the store keeps it.
    shown = page.locator("article[data-id]").evaluate_all("nodes => nodes.map(n => n.dataset.id)")
    assert sorted(shown) == sorted(m["agui_id"] for m in stored)


def test_a_second_tab_shows_the_live_run(server: Server, page: Page) -> None:
    thread = _thread("tabs")
    page.goto(f"{server.url}/#/t/{thread}")
    _send(page, CLOCK_QUESTION)
    _wait_streaming_answer(page)
    other = page.context.new_page()
    other.goto(f"{server.url}/#/t/{thread}")
    expect(other.locator("#stop")).to_be_visible(timeout=30_000)
    _wait_idle(other)
    _wait_idle(page)
    answer = _final_answer(_stored(server, thread))
    assert _answer_text(other, answer["agui_id"]) == answer["content"]
    assert _answer_text(page, answer["agui_id"]) == answer["content"]


def test_losing_the_network_mid_answer_reconnects_without_gaps(server: Server, page: Page) -> None:
    thread = _thread("offline")
    page.goto(f"{server.url}/#/t/{thread}")
    # Drop the stream's connection once, mid-answer, as a flaky network would.
    page.evaluate(
        """() => {
          const real = window.fetch;
          window.__drops = 0;
          window.fetch = async (...args) => {
            const response = await real(...args);
            const url = String(args[0]);
            if (!(url === '/agui' && response.ok) || window.__drops) return response;
            window.__drops = 1;
            const reader = response.body.getReader();
            let seen = 0;
            const body = new ReadableStream({
              async pull(controller) {
                const { value, done } = await reader.read();
                if (done) return controller.close();
                controller.enqueue(value);
                if (++seen === 40) { reader.cancel(); controller.error(new TypeError('network')); }
              },
            });
            return new Response(body, { headers: response.headers, status: response.status });
          };
        }"""
    )
    _send(page, CLOCK_QUESTION)
    _wait_idle(page)
    assert page.evaluate("window.__drops") == 1
    stored = _stored(server, thread)
    answer = _final_answer(stored)
    assert answer["status"] == "complete"
    assert _answer_text(page, answer["agui_id"]) == answer["content"]
    expect(page.locator(".run-error")).to_have_count(0)


# --- the list and the chat's actions --------------------------------------------------------


def _import(server: Server, thread: str, name: str, content: str, **answer: Any) -> dict[str, Any]:
    """Store a two-message chat through the import API (no agent involved)."""
    chat = Chat(chat_uuid=uuid4(), user_uuid=uuid4(), thread_id=thread, name=name, dedup_key="-")
    messages = [
        Message(message_uuid=uuid4(), chat_uuid=chat.chat_uuid, seq=seq, **fields)
        for seq, fields in enumerate(
            [
                {"agui_id": f"{thread}-u", "role": "user", "content": "hi"},
                {"agui_id": f"{thread}-a", "role": "assistant", "content": content, **answer},
            ],
            start=1,
        )
    ]
    document = {
        "format": "threadstore.chat",
        "format_version": 1,
        "chat": chat.model_dump(mode="json"),
        "messages": [m.model_dump(mode="json") for m in messages],
    }
    with server.client() as client:
        response = client.post("/api/chats/import", json=document)
        assert response.status_code in (200, 201), response.text
        created: dict[str, Any] = response.json()
        return created


def test_a_stored_answer_shows_its_parts_in_the_order_they_streamed(
    server: Server, page: Page
) -> None:
    # One message streamed text, then a tool call, then more text: the store records that
    # order (metadata.parts, as the storage fold writes it) and the page keeps the card
    # between the two sentences it belongs between.
    thread = _thread("parts")
    call = ToolCall(
        uuid=uuid4(),
        message_uuid=uuid4(),
        tool_call_id="call-1",
        name="calculator",
        arguments='{"expression": "2 + 2"}',
        content='{"value": 4}',
        status="complete",
        metadata={PARTS_METADATA_KEY: [{"n": 2, "type": "tool"}]},
    )
    _import(
        server,
        thread,
        "Interleaved",
        "Let me check. It is 4.",
        tool_calls=[call],
        metadata={
            PARTS_METADATA_KEY: [
                {"n": 1, "type": "text", "start": 0},
                {"n": 3, "type": "text", "start": 14},
            ]
        },
    )
    page.goto(f"{server.url}/#/t/{thread}")
    body = page.locator(f'article[data-id="{thread}-a"] .message-body > *')
    expect(body).to_have_count(3)
    kinds = body.evaluate_all("nodes => nodes.map(n => n.className)")
    assert kinds == ["markdown", "tool-card complete", "markdown"]
    expect(body.nth(0)).to_have_text("Let me check.")
    expect(body.nth(2)).to_have_text("It is 4.")


def test_custom_data_and_citations_show_where_they_streamed(server: Server, page: Page) -> None:
    # CUSTOM events are stored as data and citation entries of the parts order, with their
    # payload (as the storage fold writes them); the page shows each where it came.
    thread = _thread("custom")
    _import(
        server,
        thread,
        "Custom parts",
        "Searching. Found it.",
        metadata={
            PARTS_METADATA_KEY: [
                {"n": 0, "type": "text", "start": 0},
                {"n": 1, "type": "data", "name": "status", "id": "job", "payload": {"pct": 90}},
                {"n": 2, "type": "text", "start": 11},
                {
                    "n": 3,
                    "type": "citation",
                    "citation": {"url": "https://example.org/a", "title": "A"},
                },
                {"n": 4, "type": "citation", "citation": {"url": "javascript:alert(1)"}},
            ]
        },
    )
    page.goto(f"{server.url}/#/t/{thread}")
    body = page.locator(f'article[data-id="{thread}-a"] .message-body > *')
    expect(body).to_have_count(5)
    kinds = body.evaluate_all("nodes => nodes.map(n => n.className)")
    assert kinds == ["markdown", "data-card", "markdown", "citation", "citation"]
    expect(page.get_by_role("group", name="Data status")).to_contain_text('"pct": 90')
    link = body.nth(3).get_by_role("link", name="A")
    expect(link).to_have_attribute("href", "https://example.org/a")
    expect(body.nth(4).locator("a")).to_have_count(0)  # not a link: shown as text
    expect(body.nth(4)).to_contain_text("javascript:alert(1)")


def test_the_list_pages_as_it_scrolls(server: Server, page: Page) -> None:
    for number in range(70):
        _import(server, _thread(f"page{number:02}"), f"Paged chat {number:02}", "ok")
    page.goto(server.url)
    items = page.locator("#chat-list li")
    expect(items.first).to_be_visible()
    first_page = items.count()
    assert first_page == 50
    page.locator("#list-sentinel").scroll_into_view_if_needed()
    expect(items).not_to_have_count(50)
    assert items.count() > 50


def test_search_finds_chats_by_name(server: Server, page: Page) -> None:
    tag = _thread("needle")
    _import(server, _thread("s1"), f"Budget {tag}", "one")
    _import(server, _thread("s2"), f"budget review {tag}", "two")
    _import(server, _thread("s3"), "Holiday plans", "three")
    page.goto(server.url)
    page.get_by_label("Search chats and messages").fill(tag)
    items = page.locator("#chat-list li")
    expect(items).to_have_count(2)
    expect(items.first).to_contain_text(tag)
    page.get_by_label("Search chats and messages").fill(f"nothing-{tag}")
    expect(page.locator("#list-status")).to_have_text("No chat has that name.")


def test_rename_export_and_delete_with_confirmation(
    server: Server, page: Page, tmp_path: Path
) -> None:
    thread = _thread("actions")
    _import(server, thread, "Before", "Some **bold** answer")
    page.goto(f"{server.url}/#/t/{thread}")
    expect(page.locator("#chat-title")).to_have_text("Before")
    expect(page.locator("article.assistant .markdown strong")).to_have_text("bold")

    page.get_by_role("button", name="Rename").click()
    page.get_by_label("Name", exact=True).fill("After")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#chat-title")).to_have_text("After")
    expect(page.locator("#chat-list")).to_contain_text("After")

    with page.expect_download() as download:
        page.get_by_role("button", name="Export").click()
    saved = tmp_path / "export.json"
    download.value.save_as(saved)
    exported = json.loads(saved.read_text())
    assert exported["chat"]["name"] == "After"
    assert [m["content"] for m in exported["messages"]] == ["hi", "Some **bold** answer"]

    page.get_by_role("button", name="Delete").click()
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#chat-title")).to_have_text("After")
    page.get_by_role("button", name="Delete").click()
    page.locator("#confirm-ok").click()
    expect(page.locator(f'#chat-list li[data-thread="{thread}"]')).to_have_count(0)
    with server.client() as client:
        assert client.get(f"/api/threads/{thread}").status_code == 404

    # Import the export again: the thread id is free now, so it comes back as it was.
    page.locator("#import-file").set_input_files(str(saved))
    expect(page.locator("#chat-title")).to_have_text("After")
    expect(page.locator("article.assistant .markdown strong")).to_have_text("bold")


def test_an_api_error_is_a_readable_message(server: Server, page: Page, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    page.goto(server.url)
    page.locator("#import-file").set_input_files(str(bad))
    toast = page.get_by_role("alert")
    expect(toast).to_be_visible()
    expect(toast).not_to_contain_text("Traceback")
    assert toast.inner_text().strip()


# --- safety ---------------------------------------------------------------------------------

HOSTILE = (
    "<img src=x onerror=\"window.__xss='img'\"> <script>window.__xss='script'</script> "
    "[click](javascript:window.__xss='link') <b onmouseover=\"window.__xss='b'\">bold</b>"
)


def test_message_content_is_never_run_as_html(server: Server, page: Page) -> None:
    thread = _thread("xss")
    _import(server, thread, HOSTILE, HOSTILE)
    page.goto(f"{server.url}/#/t/{thread}")
    answer = page.locator("article.assistant .markdown")
    expect(answer).to_contain_text("<img src=x onerror=")
    expect(answer).to_contain_text("<script>")
    assert page.locator("article img, article script, article b").count() == 0
    href = page.locator("article.assistant a").get_attribute("href")
    assert href is None or not href.startswith("javascript:")
    page.locator("article.assistant").hover()
    if page.locator("article.assistant a").count():
        page.locator("article.assistant a").click()
    # A user message with the same content is shown as text too.
    _send(page, HOSTILE)
    expect(page.locator("article.user").last).to_contain_text("<script>")
    _wait_idle(page)
    assert page.evaluate("window.__xss") is None
    expect(page.locator("#chat-title")).to_contain_text("<img src=x")


# --- layout ---------------------------------------------------------------------------------


def test_phone_width_shows_one_pane_at_a_time(server: Server, browser: Browser) -> None:
    thread = _thread("phone")
    _import(server, thread, "On a phone", "Small screens work.")
    context = browser.new_context(viewport={"width": 375, "height": 740})
    try:
        phone = context.new_page()
        phone.goto(server.url)
        expect(phone.locator("#chat-list")).to_be_visible()
        expect(phone.locator("#composer")).to_be_hidden()
        phone.locator(f'#chat-list li[data-thread="{thread}"] a').click()
        expect(phone.locator("article.assistant")).to_contain_text("Small screens work.")
        expect(phone.locator("#chat-list")).to_be_hidden()
        phone.get_by_role("button", name="Back to the chat list").click()
        expect(phone.locator("#chat-list")).to_be_visible()
    finally:
        context.close()


def test_keyboard_focus_reaches_the_message_box_and_the_controls_are_labelled(
    server: Server, page: Page
) -> None:
    page.goto(server.url)
    labelled = page.evaluate(
        """() => [...document.querySelectorAll('button, input, textarea')]
              .filter(el => !el.hidden && el.type !== 'file')
              .every(el => (el.labels && el.labels.length) || el.getAttribute('aria-label')
                           || el.textContent.trim())"""
    )
    assert labelled
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to the message box"
    page.keyboard.press("Enter")
    expect(page.get_by_label("Message", exact=True)).to_be_focused()


# --- tokens ---------------------------------------------------------------------------------


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[Server]:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("token-alice=alice\ntoken-bob=bob\n")
    running = _serve(tmp_path, "--auth", "tokens", "--tokens-file", str(tokens))
    running.token = "token-bob"
    try:
        yield running
    finally:
        _stop(running)


def test_a_token_is_asked_for_kept_for_the_tab_and_a_wrong_one_shows_nothing(
    token_server: Server, page: Page
) -> None:
    _import(token_server, "bobs-thread", "Bob's secret plans", "secret")
    page.goto(token_server.url)
    dialog = page.get_by_role("dialog", name="Sign in")
    expect(dialog).to_be_visible()
    page.get_by_label("Access token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#token-error")).to_have_text(re.compile("not accepted"))
    expect(page.locator("#chat-list li")).to_have_count(0)
    page.get_by_label("Access token").fill("token-alice")
    page.get_by_role("button", name="Sign in").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("#list-status")).to_have_text("No chats yet.")
    assert "Bob" not in page.content()
    # The token is kept for the tab: a reload does not ask again.
    page.reload()
    expect(page.locator("#list-status")).to_have_text("No chats yet.")
    expect(dialog).to_be_hidden()
    _send(page, "What is 2 + 2?")
    expect(page.locator("article.assistant .markdown").last).to_contain_text("= 4", timeout=30_000)
    _wait_idle(page)


# --- branches -------------------------------------------------------------------------------


def test_regenerate_switch_edit_the_first_message_and_fork(server: Server, page: Page) -> None:
    thread = _thread("branches")
    page.goto(f"{server.url}/#/t/{thread}")
    _send(page, "What is 1 + 1?")
    _wait_idle(page)
    page.reload()  # the chat as stored: every message carries its branch controls
    versions = page.locator(".message-actions .version")

    page.locator("article.assistant button.regenerate").last.click()
    expect(versions).to_have_text(["2/2"], timeout=30_000)
    page.locator("article.assistant button.regenerate").last.click()
    expect(versions).to_have_text(["3/3"], timeout=30_000)
    _wait_idle(page)
    page.get_by_role("button", name="Previous version").click()
    expect(versions).to_have_text(["2/3"], timeout=30_000)
    stored = _stored(server, thread)
    assert [m["content"] for m in stored if m["role"] == "user"] == ["What is 1 + 1?"]

    page.locator("article.user button.edit").first.click()
    page.get_by_label("New text").fill("What is 2 + 3?")
    page.locator("#edit-dialog").get_by_role("button", name="Send").click()
    expect(page.locator("article.user").first).to_contain_text("2 + 3", timeout=30_000)
    expect(page.locator("article.user .version")).to_have_text("2/2", timeout=30_000)
    _wait_idle(page)
    expect(page.locator("article.assistant .markdown").last).to_contain_text("= 5", timeout=30_000)
    stored = _stored(server, thread)
    assert stored[0]["content"] == "What is 2 + 3?" and stored[0]["parent_uuid"] is None

    page.locator("article.assistant button.fork").last.click()
    expect(page.locator("#lineage")).to_contain_text("Forked from chat", timeout=30_000)
    forked = page.evaluate("decodeURIComponent(location.hash.slice(4))")
    assert forked != thread
    assert [m["content"] for m in _stored(server, forked)] == [m["content"] for m in stored]


def test_compact_summarizes_older_messages_for_the_agent_and_undo_removes_it(
    server: Server, page: Page
) -> None:
    thread = _thread("compact")
    chat = Chat(chat_uuid=uuid4(), user_uuid=uuid4(), thread_id=thread, name="Long", dedup_key="-")
    turns = [
        ("user", f"question {n}") if i == 0 else ("assistant", f"answer {n}")
        for n in range(13)
        for i in range(2)
    ]
    document = {
        "format": "threadstore.chat",
        "format_version": 1,
        "chat": chat.model_dump(mode="json"),
        "messages": [
            Message(
                message_uuid=uuid4(), chat_uuid=chat.chat_uuid, seq=seq, role=role, content=text
            ).model_dump(mode="json")
            for seq, (role, text) in enumerate(turns, start=1)
        ],
    }
    with server.client() as client:
        assert client.post("/api/chats/import", json=document).status_code == 201
    page.goto(f"{server.url}/#/t/{thread}")
    expect(page.locator("article.message")).to_have_count(26)

    page.get_by_role("button", name="Compact").click()

    # The server keeps the newest 20 messages out of the summary; the six before them are
    # summarized, and every message is still on the page.
    expect(page.locator("#toast")).to_contain_text("Summarized 6 message(s)")
    summary = page.get_by_role("complementary", name="Summary")
    expect(summary).to_have_count(1)
    expect(summary).to_contain_text("Summary of the 6 message(s) above")
    expect(page.locator("article.message")).to_have_count(26)
    placed = page.evaluate(
        "() => document.querySelector('aside.summary').previousElementSibling.textContent"
    )
    assert "answer 2" in placed
    with server.client() as client:
        info = client.get(f"/api/threads/{thread}").json()
        (stored,) = client.get(f"/api/chats/{info['chat']['chat_uuid']}/summaries").json()
    assert stored["message_count"] == 6

    summary.get_by_role("button", name="Undo").click()
    expect(page.locator("aside.summary")).to_have_count(0)
    with server.client() as client:
        assert client.get(f"/api/chats/{info['chat']['chat_uuid']}/summaries").json() == []


# --- usage -------------------------------------------------------------------------------


def test_the_page_shows_the_open_chats_usage_and_the_total(tmp_path: Path, page: Page) -> None:
    from threadstore import open_store
    from threadstore.usage import RunUsage

    served = _serve(tmp_path)
    try:
        thread = _thread("usage")
        with served.client() as client:
            body = {
                "threadId": thread,
                "runId": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "hi"}],
                "state": {},
                "tools": [],
                "context": [],
                "forwardedProps": {},
            }
            with client.stream("POST", "/agui", json=body) as response:
                assert response.status_code == 200
                response.read()
            chat = client.get(f"/api/threads/{thread}").json()["chat"]

        async def record() -> None:
            async with await open_store(f"sqlite:///{tmp_path / 'web.db'}") as store:
                usage = RunUsage(
                    chat_uuid=chat["chat_uuid"],
                    run_id="r1",
                    user_uuid=chat["user_uuid"],
                    input_tokens=1000,
                    output_tokens=200,
                    cost_usd=0.75,
                    cache_savings_usd=0.05,
                )
                await store.usage.record(usage)

        # On a thread of its own: the page's driver keeps an event loop in this one.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, record()).result()
        page.goto(f"{served.url}/#/t/{thread}")
        line = page.locator("#chat-usage")
        expect(line).to_have_text(
            "This chat: 1,200 tokens · $0.7500 (caches saved $0.0500) in 1 run(s)"
        )
        expect(page.locator("#usage-total")).to_contain_text("All chats: 1,200 tokens · $0.7500")
        # A spent budget: the next message is refused with the server's words, no run starts.
        with served.client() as client:
            assert client.put("/api/usage/budget", json={"max_cost_usd": 0.5}).status_code == 200
        _send(page, "one more")
        expect(page.locator("#toast")).to_contain_text("the budget of this user is spent")
        _wait_idle(page)
    finally:
        _stop(served)
