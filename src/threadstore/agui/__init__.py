"""The AG-UI layer: storage agent, run manager and handles, relay orchestration.

It sits on the fold and the codec below it; ``threadstore`` loads it on first use of
one of its names, so ``import threadstore`` never pulls in the AG-UI SDK. Its public
modules: :mod:`~threadstore.agui.connect` (what a client connecting to a thread is sent),
and the seed layer's import paths :mod:`~threadstore.agui.translate` and
:mod:`~threadstore.agui.legacy`.
"""

from threadstore.agui._agent import AGUIAgent, AGUIStorageAgent, StorageAgent
from threadstore.agui._chat_persist import ChatPersistingAgent, ChatPersistOptions
from threadstore.agui._compactor import BackgroundCompactor
from threadstore.agui._distributed import DistributedRunManager
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

# The retired THINKING_* names the seed layer's users import from here stay importable
# (their home is ``threadstore.codec.thinking``, also ``threadstore.agui.legacy``); they
# are not part of this package's own surface.
from threadstore.codec.thinking import ThinkingEndEvent as ThinkingEndEvent
from threadstore.codec.thinking import ThinkingStartEvent as ThinkingStartEvent
from threadstore.codec.thinking import (
    ThinkingTextMessageContentEvent as ThinkingTextMessageContentEvent,
)
from threadstore.codec.thinking import ThinkingTextMessageEndEvent as ThinkingTextMessageEndEvent
from threadstore.codec.thinking import (
    ThinkingTextMessageStartEvent as ThinkingTextMessageStartEvent,
)
from threadstore.codec.thinking import parse_event as parse_event

__all__ = [
    "DEFAULT_OUTBOX_MAX_BYTES",
    "AGUIAgent",
    "AGUIStorageAgent",
    "BackgroundCompactor",
    "ChatPersistOptions",
    "ChatPersistingAgent",
    "ChatRepository",
    "ChatSessionRegistry",
    "DistributedRunManager",
    "EventsDroppedError",
    "HistoryWindow",
    "MessageRepository",
    "Outbox",
    "OutboxFullError",
    "RunHandle",
    "StorageAgent",
    "StreamPersistenceManager",
    "event_json",
    "translate_messages",
    "wire_json",
]
