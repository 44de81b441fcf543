"""The AG-UI layer: storage agent, run manager, history translation, event helpers.

Names are imported on first use, so importing one module of this package (the
pure fold imports the legacy-event and translation helpers) never drags in the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from threadstore.agui.agent import AGUIAgent, AGUIStorageAgent, StorageAgent
    from threadstore.agui.chat_persist import ChatPersistingAgent, ChatPersistOptions
    from threadstore.agui.compact import compact_events
    from threadstore.agui.distributed import DistributedRunManager
    from threadstore.agui.legacy import (
        ThinkingEndEvent,
        ThinkingStartEvent,
        ThinkingTextMessageContentEvent,
        ThinkingTextMessageEndEvent,
        ThinkingTextMessageStartEvent,
        parse_event,
    )
    from threadstore.agui.manager import RunHandle, StreamPersistenceManager
    from threadstore.agui.translate import translate_messages

_EXPORTS: dict[str, str] = {
    "AGUIAgent": "threadstore.agui.agent",
    "AGUIStorageAgent": "threadstore.agui.agent",
    "StorageAgent": "threadstore.agui.agent",
    "ChatPersistOptions": "threadstore.agui.chat_persist",
    "ChatPersistingAgent": "threadstore.agui.chat_persist",
    "RunHandle": "threadstore.agui.manager",
    "DistributedRunManager": "threadstore.agui.distributed",
    "StreamPersistenceManager": "threadstore.agui.manager",
    "translate_messages": "threadstore.agui.translate",
    "compact_events": "threadstore.agui.compact",
    "parse_event": "threadstore.agui.legacy",
    "ThinkingStartEvent": "threadstore.agui.legacy",
    "ThinkingEndEvent": "threadstore.agui.legacy",
    "ThinkingTextMessageStartEvent": "threadstore.agui.legacy",
    "ThinkingTextMessageContentEvent": "threadstore.agui.legacy",
    "ThinkingTextMessageEndEvent": "threadstore.agui.legacy",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'threadstore.agui' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "AGUIAgent",
    "AGUIStorageAgent",
    "ChatPersistOptions",
    "ChatPersistingAgent",
    "DistributedRunManager",
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
