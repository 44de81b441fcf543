"""The AG-UI layer: storage agent, run manager and handles, relay orchestration.

It sits on the fold and the codec below it; ``threadstore`` loads it on first use of
one of its names, so ``import threadstore`` never pulls in the AG-UI SDK.
"""

from threadstore.agui.agent import AGUIAgent, AGUIStorageAgent, StorageAgent
from threadstore.agui.chat_persist import ChatPersistingAgent, ChatPersistOptions
from threadstore.agui.compact import compact_events
from threadstore.agui.distributed import DistributedRunManager
from threadstore.agui.manager import RunHandle, StreamPersistenceManager
from threadstore.agui.repositories import ChatRepository, MessageRepository
from threadstore.agui.window import HistoryWindow
from threadstore.codec import (
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
    parse_event,
    translate_messages,
)

__all__ = [
    "AGUIAgent",
    "AGUIStorageAgent",
    "ChatPersistOptions",
    "ChatPersistingAgent",
    "ChatRepository",
    "DistributedRunManager",
    "HistoryWindow",
    "MessageRepository",
    "RunHandle",
    "StorageAgent",
    "StreamPersistenceManager",
    "ThinkingEndEvent",
    "ThinkingStartEvent",
    "ThinkingTextMessageContentEvent",
    "ThinkingTextMessageEndEvent",
    "ThinkingTextMessageStartEvent",
    "compact_events",
    "parse_event",
    "translate_messages",
]
