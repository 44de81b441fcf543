"""The page's search box searches messages too, in a real browser against a real server:
hits with their words marked, a click opens the chat, and never another user's message."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from test_web_page import (  # the page's fixtures and helpers: one way to serve and drive it
    Server,
    _import,
    _serve,
    _stop,
    _thread,
    browser_context_args,
    browser_type_launch_args,
    page,
    server,
)

__all__ = ["browser_context_args", "browser_type_launch_args", "page", "server"]

pytestmark = pytest.mark.browser


def test_the_search_box_finds_words_in_messages_and_a_hit_opens_its_chat(
    server: Server, page: Page
) -> None:
    tag = _thread("zephyr").replace("-", "")  # one word
    found = _import(server, _thread("hit"), "Weather chat", f"a {tag} wind from the west")
    _import(server, _thread("miss"), "Other chat", "calm and still")
    page.goto(server.url)
    page.get_by_label("Search chats and messages").fill(f"{tag} west")

    hits = page.locator("#search-hits li")
    expect(hits).to_have_count(1)
    expect(hits.first).to_contain_text("Weather chat")
    expect(hits.first.locator("mark")).to_have_text([tag, "west"])
    hits.first.locator("a").click()
    expect(page).to_have_url(re.compile(re.escape(found["thread_id"]) + "$"))
    expect(page.locator("#chat-title")).to_have_text("Weather chat")
    expect(page.locator("article.assistant .markdown")).to_contain_text("wind from the west")

    page.get_by_label("Search chats and messages").fill(f"nothing-{tag}")
    expect(page.locator("#hits-status")).to_have_text("No message has those words.")
    page.get_by_label("Search chats and messages").fill("!!!")
    expect(page.locator("#hits-status")).to_contain_text("word")
    page.get_by_label("Search chats and messages").fill("")
    expect(page.locator("#search-results")).to_be_hidden()


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[Server]:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("token-alice=alice\ntoken-bob=bob\n")
    running = _serve(tmp_path, "--auth", "tokens", "--tokens-file", str(tokens))
    try:
        yield running
    finally:
        _stop(running)


def test_the_page_never_shows_another_users_message(token_server: Server, page: Page) -> None:
    token_server.token = "token-bob"
    _import(token_server, "bobs-thread", "Bob's plans", "secret marmalade recipe")
    token_server.token = "token-alice"
    _import(token_server, "alices-thread", "Alice's plans", "public marmalade review")

    page.goto(token_server.url)
    page.get_by_label("Access token").fill("token-alice")
    page.get_by_role("button", name="Sign in").click()
    search = page.get_by_label("Search chats and messages")
    for query in ("marmalade", "secret", "secret marmalade", "recipe", "bob"):
        search.fill(query)
        expect(page.locator("#search-results")).to_be_visible()
        expect(page.locator("#hits-status, #search-hits li").first).to_be_visible()
        for hit in page.locator("#search-hits li").all():
            expect(hit).to_contain_text("Alice's plans")
        assert "secret" not in page.locator("#search-hits").inner_text()
    search.fill("marmalade")
    expect(page.locator("#search-hits li")).to_have_count(1)
    search.fill("secret")
    expect(page.locator("#hits-status")).to_have_text("No message has those words.")
    assert "Bob" not in page.content()
