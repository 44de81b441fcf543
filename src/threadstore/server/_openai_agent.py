"""An AG-UI agent over any OpenAI-compatible ``/v1/chat/completions`` streaming endpoint.

It sends the run's history (and the client's tools) to the endpoint and turns the
streamed chunks into AG-UI events: ``reasoning_content``/``reasoning`` deltas into
``REASONING_*``, ``content`` into ``TEXT_MESSAGE_*`` and ``tool_calls`` deltas into
``TOOL_CALL_*``. Tool calls are the client's to execute (AG-UI frontend tools): the
run ends after them, and the client sends the results in the next run.

Needs ``httpx`` (``pip install -e ".[openai]"`` in a clone, as the README installs). Configured by
``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``), ``OPENAI_API_KEY`` and
the model name (``--model`` or ``OPENAI_MODEL``).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    DeveloperMessage,
    ReasoningMessageContentEvent,
    RunAgentInput,
    RunErrorEvent,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

from threadstore.codec import now_ms, run_finished, run_started
from threadstore.errors import ConfigurationError
from threadstore.server._events import reasoning_closed, reasoning_opened

if TYPE_CHECKING:
    import httpx

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODEL", "OpenAIAgent", "to_openai_messages"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
UPSTREAM_ERROR_CODE = "UPSTREAM_ERROR"


def _upstream_error(message: str) -> RunErrorEvent:
    """The run's end when the model's endpoint fails: the client shows ``message``."""
    return RunErrorEvent(message=message, code=UPSTREAM_ERROR_CODE, timestamp=now_ms())


def _user_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = getattr(part, "type", None)
        if kind == "text":
            parts.append({"type": "text", "text": part.text})
        elif kind == "image":
            source = part.source
            if source.type == "data":
                url = f"data:{source.mime_type};base64,{source.value}"
            elif source.type == "url":
                url = source.value
            else:
                continue  # a provider file handle means nothing to another endpoint
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def to_openai_messages(run_input: RunAgentInput) -> list[dict[str, Any]]:
    """Translate the run's AG-UI history into chat-completions messages."""
    out: list[dict[str, Any]] = []
    for message in run_input.messages:
        if isinstance(message, SystemMessage | DeveloperMessage):
            out.append({"role": message.role, "content": message.content})
        elif isinstance(message, UserMessage):
            out.append({"role": "user", "content": _user_content(message.content)})
        elif isinstance(message, AssistantMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                    for call in message.tool_calls
                ]
            out.append(entry)
        elif isinstance(message, ToolMessage):
            content = message.content
            if not isinstance(content, str):
                content = json.dumps([part.model_dump(by_alias=True) for part in content])
            out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": content})
        # reasoning and activity messages are not part of the chat-completions history
    return out


def _tools(run_input: RunAgentInput) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters or {"type": "object", "properties": {}},
            },
        }
        for tool in run_input.tools or []
    ]


class _Turn:
    """What is open while one completion streams: reasoning, text and tool calls."""

    def __init__(self) -> None:
        self.reasoning_id: str | None = None
        self.text_id: str | None = None
        self.message_id = f"msg-{uuid4().hex[:12]}"
        self.tool_ids: dict[int, str] = {}
        self.open_tool: int | None = None

    def close_reasoning(self) -> list[BaseEvent]:
        if self.reasoning_id is None:
            return []
        rid, self.reasoning_id = self.reasoning_id, None
        return reasoning_closed(rid)

    def close_text(self) -> list[BaseEvent]:
        if self.text_id is None:
            return []
        tid, self.text_id = self.text_id, None
        return [TextMessageEndEvent(message_id=tid, timestamp=now_ms())]

    def close_tool(self) -> list[BaseEvent]:
        if self.open_tool is None:
            return []
        index, self.open_tool = self.open_tool, None
        return [ToolCallEndEvent(tool_call_id=self.tool_ids[index], timestamp=now_ms())]

    def close_all(self) -> list[BaseEvent]:
        return [*self.close_reasoning(), *self.close_text(), *self.close_tool()]

    def on_delta(self, delta: dict[str, Any]) -> list[BaseEvent]:
        """Return the AG-UI events for one streamed ``choices[0].delta``."""
        events: list[BaseEvent] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events += self.close_text() + self.close_tool()
            if self.reasoning_id is None:
                self.reasoning_id = f"reasoning-{uuid4().hex[:12]}"
                events += reasoning_opened(self.reasoning_id)
            events.append(
                ReasoningMessageContentEvent(
                    message_id=self.reasoning_id, delta=reasoning, timestamp=now_ms()
                )
            )
        content = delta.get("content")
        if isinstance(content, str) and content:
            events += self.close_reasoning() + self.close_tool()
            if self.text_id is None:
                self.text_id = self.message_id
                events.append(
                    TextMessageStartEvent(
                        message_id=self.text_id, role="assistant", timestamp=now_ms()
                    )
                )
            events.append(
                TextMessageContentEvent(message_id=self.text_id, delta=content, timestamp=now_ms())
            )
        for call in delta.get("tool_calls") or []:
            events += self._on_tool_delta(call)
        return events

    def _on_tool_delta(self, call: dict[str, Any]) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        index = call.get("index", 0)
        function = call.get("function") or {}
        if index not in self.tool_ids:
            events += self.close_reasoning() + self.close_text() + self.close_tool()
            call_id = call.get("id") or f"call-{uuid4().hex[:12]}"
            self.tool_ids[index] = call_id
            self.open_tool = index
            events.append(
                ToolCallStartEvent(
                    tool_call_id=call_id,
                    tool_call_name=function.get("name") or "unknown",
                    parent_message_id=self.message_id,
                    timestamp=now_ms(),
                )
            )
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments and self.open_tool == index:
            events.append(
                ToolCallArgsEvent(
                    tool_call_id=self.tool_ids[index], delta=arguments, timestamp=now_ms()
                )
            )
        return events


class OpenAIAgent:
    """Streams a chat completion from an OpenAI-compatible endpoint as AG-UI events."""

    name = "openai"

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        timeout: float = 120.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise ConfigurationError(
                'the openai agent needs httpx: pip install -e ".[openai]" (from the repository)'
            ) from exc
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self._client = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0))

    @classmethod
    def from_env(cls, model: str | None = None) -> OpenAIAgent:
        """Build from ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``OPENAI_MODEL``."""
        return cls(
            model=model or os.environ.get("OPENAI_MODEL") or DEFAULT_MODEL,
            base_url=os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
            api_key=os.environ.get("OPENAI_API_KEY"),
        )

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    def request_body(self, run_input: RunAgentInput) -> dict[str, Any]:
        """Return the chat-completions request for ``run_input``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(run_input),
            "stream": True,
        }
        tools = _tools(run_input)
        if tools:
            body["tools"] = tools
        return body

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the run: RUN_STARTED, the streamed completion, then RUN_FINISHED or RUN_ERROR."""
        import httpx

        yield run_started(input.thread_id, input.run_id)
        turn = _Turn()
        headers = {"Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url}/chat/completions"
        failure: str | None = None  # why the run ends with RUN_ERROR, once what is open closes
        try:
            async with self._client.stream(
                "POST", url, json=self.request_body(input), headers=headers
            ) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", "replace")[:500]
                    yield _upstream_error(f"{url} answered HTTP {response.status_code}: {text}")
                    return
                async for chunk in _sse_json(response.aiter_lines()):
                    if "error" in chunk:
                        failure = f"upstream error: {json.dumps(chunk['error'])[:500]}"
                        break
                    for choice in chunk.get("choices") or []:
                        if choice.get("index", 0) != 0:
                            continue
                        for event in turn.on_delta(choice.get("delta") or {}):
                            yield event
        except httpx.HTTPError as exc:
            failure = f"could not reach {url}: {type(exc).__name__}: {exc}"
        for event in turn.close_all():
            yield event
        if failure is not None:
            yield _upstream_error(failure)
        else:
            yield run_finished(input.thread_id, input.run_id)


async def _sse_json(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """Yield the JSON objects of an SSE stream's ``data:`` lines until ``[DONE]``."""
    async for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        if not data:
            continue
        try:
            parsed = json.loads(data)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            yield parsed
