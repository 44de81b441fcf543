"""threadstore: durable, typed chat history for AI agents.

The models, keys and store are imported eagerly. The AG-UI layer's names resolve on
first use (module ``__getattr__``), only because it loads the AG-UI SDK: this keeps
``import threadstore`` fast, not a cycle apart (nothing below ``agui`` imports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadstore.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    LimitExceededError,
    MigrationError,
    NotFoundError,
    StoreError,
    ThreadstoreError,
)
from threadstore.keys import (
    DEDUPLICATION_KEY_LENGTH,
    chat_deduplication_key,
    normalize_participant_id,
    participant_id,
    session_deduplication_key,
)
from threadstore.models import (
    FORMAT_VERSION,
    Chat,
    ChatCreate,
    ChatPage,
    ContentPart,
    MediaPart,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    Reasoning,
    Role,
    Run,
    RunStatus,
    TextPart,
    ToolCall,
)
from threadstore.store import (
    ChatRepositoryLike,
    MessageRepositoryLike,
    RunRepositoryLike,
    Store,
    create_store,
    open_store,
)

if TYPE_CHECKING:
    from threadstore.agui import (
        AGUIAgent,
        AGUIStorageAgent,
        ChatRepository,
        MessageRepository,
        RunHandle,
        StorageAgent,
        StreamPersistenceManager,
        compact_events,
        translate_messages,
    )

__version__ = "0.1.0"

# The AG-UI layer pulls in the AG-UI SDK; load it on first use to keep imports fast.
_LAZY: dict[str, str] = {
    name: "threadstore.agui"
    for name in (
        "AGUIAgent",
        "AGUIStorageAgent",
        "ChatRepository",
        "MessageRepository",
        "RunHandle",
        "StorageAgent",
        "StreamPersistenceManager",
        "compact_events",
        "translate_messages",
    )
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'threadstore' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "DEDUPLICATION_KEY_LENGTH",
    "FORMAT_VERSION",
    "AGUIAgent",
    "AGUIStorageAgent",
    "Chat",
    "ChatCreate",
    "ChatPage",
    "ChatRepository",
    "ChatRepositoryLike",
    "ConfigurationError",
    "ConflictError",
    "ContentPart",
    "InvalidInputError",
    "LimitExceededError",
    "MediaPart",
    "Message",
    "MessageCreate",
    "MessageReasoningCreate",
    "MessageReasoningUpdate",
    "MessageRepository",
    "MessageRepositoryLike",
    "MessageStatus",
    "MessageToolCallCreate",
    "MessageToolCallUpdate",
    "MessageUpdate",
    "MigrationError",
    "NotFoundError",
    "Reasoning",
    "Role",
    "Run",
    "RunHandle",
    "RunRepositoryLike",
    "RunStatus",
    "StorageAgent",
    "Store",
    "StoreError",
    "StreamPersistenceManager",
    "TextPart",
    "ThreadstoreError",
    "ToolCall",
    "__version__",
    "chat_deduplication_key",
    "compact_events",
    "create_store",
    "normalize_participant_id",
    "open_store",
    "participant_id",
    "session_deduplication_key",
    "translate_messages",
]
