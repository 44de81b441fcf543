"""How fast the web page shows a long chat and a long chat list, in Debian's Chromium.

Seeds a SQLite store with one chat of 1,000 messages (every tenth an assistant turn with
a tool call) and 10,000 other chats, starts ``threadstore serve`` on it, and measures in
the browser:

- the first view of the long chat: from navigation start until its newest message is on
  the page (the page asks for the newest page of 50 messages, not the whole history);
- the chat list: until the first page shows, then each further page loaded by scrolling,
  and the longest main-thread task (``longtask`` entries) while scrolling through 2,000.

    python benchmarks/bench_web_page.py [--messages 1000] [--chats 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from uuid import UUID

import httpx
from playwright.sync_api import sync_playwright

from threadstore import ChatCreate, MessageCreate, MessageToolCallCreate, open_store

LOCAL_USER = UUID("49fe68b9-29b7-5527-9ec2-b4b47144a998")  # the server's one local user
CHROMIUM = os.environ.get("THREADSTORE_TEST_CHROMIUM", "/usr/bin/chromium")


async def seed(url: str, messages: int, chats: int) -> None:
    store = await open_store(url)
    try:
        chat = await store.create_chat(
            ChatCreate(user_uuid=LOCAL_USER, thread_id="long", name="A long chat")
        )
        async with store.transaction():
            for number in range(messages):
                role = "user" if number % 2 == 0 else "assistant"
                text = f"Message {number}: " + "some **markdown** text, " * 8
                created = await store.create_message(
                    MessageCreate(
                        chat_uuid=chat.chat_uuid, role=role, content=text, status="complete"
                    )
                )
                if role == "assistant" and number % 10 == 1:
                    await store.create_message_tool_call(
                        MessageToolCallCreate(
                            message_uuid=created.message_uuid,
                            tool_call_id=f"call-{number}",
                            name="calculator",
                            arguments='{"expression": "1 + 1"}',
                            content='{"value": 2}',
                        )
                    )
        async with store.transaction():
            for number in range(chats):
                other = await store.create_chat(
                    ChatCreate(user_uuid=LOCAL_USER, thread_id=f"t{number}", name=f"Chat {number}")
                )
                await store.create_message(
                    MessageCreate(chat_uuid=other.chat_uuid, role="user", content="hello")
                )
    finally:
        await store.close()


def serve(db: str) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "threadstore.cli", "serve", "--db", db, "--port", str(port)]
    process = subprocess.Popen([*command, "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("the server did not start")


def measure(url: str, runs: int, messages: int, chats: int) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            chat_views = []
            for _ in range(runs):
                page = browser.new_page(viewport={"width": 1200, "height": 800})
                page.goto(f"{url}/#/t/long")
                page.wait_for_function(
                    "() => document.querySelectorAll('article[data-id]').length >= 50"
                )
                chat_views.append(page.evaluate("performance.now()"))
                page.close()
            print(
                f"first view of the {messages:,}-message chat: median "
                f"{statistics.median(chat_views):.0f} ms "
                f"(runs: {', '.join(f'{v:.0f}' for v in chat_views)})"
            )

            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.add_init_script(
                """window.__longest = 0;
                new PerformanceObserver(list => list.getEntries().forEach(
                  e => window.__longest = Math.max(window.__longest, e.duration)
                )).observe({type: 'longtask', buffered: true});"""
            )
            page.goto(url)
            page.wait_for_function("() => document.querySelectorAll('#chat-list li').length >= 50")
            first = page.evaluate("performance.now()")
            page.evaluate("window.__longest = 0")
            pages = []
            while page.locator("#chat-list li").count() < min(2000, chats):
                count = page.locator("#chat-list li").count()
                started = time.perf_counter()
                page.locator("#list-sentinel").scroll_into_view_if_needed()
                page.wait_for_function(
                    f"() => document.querySelectorAll('#chat-list li').length > {count}"
                )
                pages.append((time.perf_counter() - started) * 1000)
            longest = page.evaluate("window.__longest")
            print(f"chat list ({chats:,} chats): first page after {first:.0f} ms")
            print(
                f"  next page while scrolling: median {statistics.median(pages):.0f} ms, "
                f"max {max(pages):.0f} ms over {len(pages)} pages"
            )
            print(f"  longest main-thread task while scrolling to 2,000: {longest:.0f} ms")
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--chats", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{Path(tmp) / 'bench.db'}"
        started = time.perf_counter()
        asyncio.run(seed(db, args.messages, args.chats))
        print(f"seeded in {time.perf_counter() - started:.1f} s")
        process, url = serve(db)
        try:
            measure(url, args.runs, args.messages, args.chats)
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
