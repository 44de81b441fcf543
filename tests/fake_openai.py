"""A tiny OpenAI-compatible ``/v1/chat/completions`` server that streams scripted chunks.

Tests start it on 127.0.0.1 (see ``server_support.LiveServer``) and point the openai
agent at it. It records every request. Without a script it answers like a small
reasoning model: a few ``reasoning_content`` deltas, then either a streamed tool call
(when the request offers tools) or text that quotes the last user message.

Run it by hand with ``python tests/fake_openai.py --port 8001``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

__all__ = ["FakeOpenAI", "default_deltas"]


def default_deltas(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the deltas a request gets when the server has no script."""
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "reasoning_content": "The user "},
        {"reasoning_content": "wants an answer."},
    ]
    if request.get("tools"):
        name = request["tools"][0]["function"]["name"]
        deltas += [
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_fake_1",
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            },
            {"tool_calls": [{"index": 0, "function": {"arguments": '{"expression": '}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": '"2+2"}'}}]},
        ]
        return deltas
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    said = users[-1]["content"] if users else ""
    for piece in ("You said: ", str(said), f" (turn {len(users)})"):
        deltas.append({"content": piece})
    return deltas


class FakeOpenAI:
    """The fake server: ``app`` to serve, ``requests`` to inspect, ``script`` to steer."""

    def __init__(
        self,
        script: list[dict[str, Any]] | None = None,
        *,
        status: int = 200,
        error_chunk: dict[str, Any] | None = None,
    ) -> None:
        self.script = script
        self.status = status
        self.error_chunk = error_chunk
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self._completions)

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self.status != 200:
            error = {"error": {"message": "invalid api key", "type": "invalid_request_error"}}
            return JSONResponse(error, status_code=self.status)
        deltas = self.script if self.script is not None else default_deltas(body)
        return StreamingResponse(self._chunks(body, deltas), media_type="text/event-stream")

    async def _chunks(
        self, body: dict[str, Any], deltas: list[dict[str, Any]]
    ) -> AsyncIterator[bytes]:
        created = int(time.time())
        for delta in deltas:
            yield _frame(body, created, delta, None)
        if self.error_chunk is not None:
            yield f"data: {json.dumps(self.error_chunk)}\n\n".encode()
            return
        finish = "tool_calls" if any("tool_calls" in d for d in deltas) else "stop"
        yield _frame(body, created, {}, finish)
        yield b"data: [DONE]\n\n"


def _frame(body: dict[str, Any], created: int, delta: dict[str, Any], finish: str | None) -> bytes:
    chunk = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": created,
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


if __name__ == "__main__":  # pragma: no cover - a manual tool
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8001)
    uvicorn.run(FakeOpenAI().app, host="127.0.0.1", port=parser.parse_args().port)
