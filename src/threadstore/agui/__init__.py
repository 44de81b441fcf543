"""The AG-UI layer: storage agent, run manager and handles, relay orchestration.

It sits on the fold and the codec below it; ``threadstore`` loads it on first use of
one of its names, so ``import threadstore`` never pulls in the AG-UI SDK.
"""

from threadstore.agui._agent import AGUIAgent, AGUIStorageAgent, StorageAgent
from threadstore.agui._chat_persist import ChatPersistingAgent, ChatPersistOptions
from threadstore.agui._compact import compact_events
from threadstore.agui._compactor import BackgroundCompactor
from threadstore.agui._connect import (
    Connection,
    Hydration,
    RunEvents,
    ThreadConnector,
    opened_messages,
    run_hydration,
)
from threadstore.agui._distributed import DistributedRunManager
from threadstore.agui._given import kept_translation
from threadstore.agui._manager import StreamPersistenceManager
from threadstore.agui._outbox import DEFAULT_OUTBOX_MAX_BYTES, Outbox, OutboxFullError
from threadstore.agui._repositories import (
    ChatRepository,
    ChatSessionRegistry,
    MessageRepository,
)
from threadstore.agui._run_handle import EventsDroppedError, RunHandle, event_json, wire_json
from threadstore.agui._window import HistoryWindow
from threadstore.codec import translate_messages
from threadstore.codec.thinking import (
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
    parse_event,
)

__all__ = [
    "DEFAULT_OUTBOX_MAX_BYTES",
    "AGUIAgent",
    "AGUIStorageAgent",
    "BackgroundCompactor",
    "ChatPersistOptions",
    "ChatPersistingAgent",
    "ChatRepository",
    "ChatSessionRegistry",
    "Connection",
    "DistributedRunManager",
    "EventsDroppedError",
    "HistoryWindow",
    "Hydration",
    "MessageRepository",
    "Outbox",
    "OutboxFullError",
    "RunEvents",
    "RunHandle",
    "StorageAgent",
    "StreamPersistenceManager",
    "ThinkingEndEvent",
    "ThinkingStartEvent",
    "ThinkingTextMessageContentEvent",
    "ThinkingTextMessageEndEvent",
    "ThinkingTextMessageStartEvent",
    "ThreadConnector",
    "compact_events",
    "event_json",
    "kept_translation",
    "opened_messages",
    "parse_event",
    "run_hydration",
    "translate_messages",
    "wire_json",
]
