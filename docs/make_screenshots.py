"""Take the web page's screenshots in docs/images/ from a fresh server with the demo agent.

    python docs/make_screenshots.py

Needs the test extra (Playwright) and Debian's Chromium at /usr/bin/chromium (or
THREADSTORE_TEST_CHROMIUM).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, sync_playwright

CHROMIUM = os.environ.get("THREADSTORE_TEST_CHROMIUM", "/usr/bin/chromium")
IMAGES = Path(__file__).parent / "images"
QUESTIONS = [
    ("maths", "What is 12 * 7 + 3?"),
    ("maths", "And (12 * 7 + 3) / 3?"),
    ("hello", "Hello! What time is it?"),
    ("budget", "What is 1200 * 12?"),
]


def serve(db: str) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "threadstore.cli", "serve", "--db", db, "--port", str(port)]
    process = subprocess.Popen([*command, "--demo-delay", "0", "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("the server did not start")


def seed(url: str) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        for number, (thread, question) in enumerate(QUESTIONS):
            message = {"id": f"m{number}", "role": "user", "content": question}
            body = {"threadId": thread, "runId": f"r{number}", "messages": [message]}
            with client.stream("POST", "/agui", json=body) as response:
                response.read()
        chats = {chat["thread_id"]: chat for chat in client.get("/api/chats").json()["items"]}
        client.patch(f"/api/chats/{chats['maths']['chat_uuid']}", json={"name": "Arithmetic"})
        client.patch(f"/api/chats/{chats['budget']['chat_uuid']}", json={"name": "Yearly budget"})


def settle(page: Page) -> None:
    page.wait_for_selector("article[data-id]")
    page.wait_for_function("() => !document.querySelector('.typing')")


def main() -> None:
    IMAGES.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        process, url = serve(f"sqlite:///{Path(tmp) / 'shots.db'}")
        try:
            seed(url)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM,
                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
                )
                desktop = browser.new_page(viewport={"width": 1200, "height": 760})
                desktop.goto(f"{url}/#/t/maths")
                settle(desktop)
                desktop.locator("details.reasoning").first.click()
                desktop.screenshot(path=IMAGES / "web-chat.png")
                phone = browser.new_page(viewport={"width": 390, "height": 760})
                phone.goto(url)
                phone.wait_for_selector("#chat-list li")
                phone.screenshot(path=IMAGES / "web-list-phone.png")
                phone.goto(f"{url}/#/t/hello")
                settle(phone)
                phone.screenshot(path=IMAGES / "web-chat-phone.png")
                browser.close()
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
    print(f"wrote {', '.join(sorted(p.name for p in IMAGES.glob('web-*.png')))}")


if __name__ == "__main__":
    main()
