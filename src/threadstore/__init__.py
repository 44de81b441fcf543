"""threadstore: durable, typed chat history for AI agents.

The names most programs need; the rest is in the subpackages (``threadstore.models``,
``threadstore.errors``, ``threadstore.keys``, ``threadstore.store``, ``threadstore.agui``,
``threadstore.chat``...). The models, keys and store are imported eagerly. The AG-UI
layer's names resolve on first use (module ``__getattr__``), only because it loads the
AG-UI SDK: this keeps ``import threadstore`` fast, not a cycle apart (nothing below
``agui`` imports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadstore.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    StoreError,
    ThreadstoreError,
)
from threadstore.keys import participant_id
from threadstore.models import (
    Chat,
    ChatCreate,
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
        AGUIStorageAgent,
        ChatRepository,
        MessageRepository,
        RunHandle,
        StorageAgent,
        StreamPersistenceManager,
    )

__version__ = "0.1.0"

# The AG-UI layer pulls in the AG-UI SDK; load it on first use to keep imports fast.
_LAZY: dict[str, str] = {
    name: "threadstore.agui"
    for name in (
        "AGUIStorageAgent",
        "ChatRepository",
        "MessageRepository",
        "RunHandle",
        "StorageAgent",
        "StreamPersistenceManager",
    )
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'threadstore' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "AGUIStorageAgent",
    "Chat",
    "ChatCreate",
    "ChatRepository",
    "ChatRepositoryLike",
    "ConflictError",
    "InvalidInputError",
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
    "ThreadstoreError",
    "ToolCall",
    "__version__",
    "create_store",
    "open_store",
    "participant_id",
]
