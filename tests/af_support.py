"""A scripted Agent Framework chat client and helpers for the Agent Framework face tests.

The client is a real framework chat client (its base class and function-invocation
layer); only the model is replaced by a list of canned replies, so a run makes the
same provider, tool-loop and persistence calls it makes against a service.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    ContextProvider,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
    tool,
)

Reply = Message | Exception
"""What the model answers to one call: a message, or an error the call raises."""


class ScriptedChatClient(
    FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]
):
    """Answers each model call with the next canned reply and records what it was sent."""

    def __init__(self, replies: Sequence[Reply] = (), *, conversation_id: str | None = None):
        super().__init__()
        self.replies = list(replies)
        self.conversation_id = conversation_id
        self.seen: list[list[Message]] = []
        """The messages of each model call, in order."""

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse]:
        self.seen.append(list(messages))
        reply = self.replies.pop(0) if self.replies else say("(no more replies)")

        async def respond() -> ChatResponse:
            if isinstance(reply, Exception):
                raise reply
            return ChatResponse(messages=[reply], conversation_id=self.conversation_id)

        if not stream:
            return respond()

        async def updates() -> AsyncIterator[ChatResponseUpdate]:
            # One update per content, as a service streams them.
            if isinstance(reply, Exception):
                raise reply
            for content in reply.contents:
                yield ChatResponseUpdate(
                    role=reply.role,
                    contents=[content],
                    message_id=reply.message_id,
                    conversation_id=self.conversation_id,
                )

        return ResponseStream(updates(), finalizer=ChatResponse.from_updates)


def say(text: str, *, message_id: str | None = None) -> Message:
    """An assistant reply with text."""
    return Message("assistant", [text], message_id=message_id)


def call(name: str, call_id: str, **arguments: Any) -> Message:
    """An assistant reply that calls a tool."""
    return Message(
        "assistant", [Content.from_function_call(call_id, name, arguments=json.dumps(arguments))]
    )


@tool
def weather(city: str) -> str:
    """Return the weather of a city."""
    return f"sunny in {city}"


def make_agent(
    client: ScriptedChatClient, providers: Sequence[ContextProvider], **options: Any
) -> Agent[Any]:
    """An agent on ``client`` with the weather tool and ``providers``."""
    return Agent(
        client=client,
        name="assistant",
        instructions="You are a helpful assistant.",
        tools=[weather],
        context_providers=list(providers),
        **options,
    )


def texts(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """(role, text-or-content-kinds) of each message, to compare histories readably."""
    out: list[tuple[str, str]] = []
    for message in messages:
        kinds = [c.type for c in message.contents if c.type != "text"]
        out.append((str(message.role), message.text or ",".join(kinds)))
    return out
