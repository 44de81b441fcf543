"""The seed chat-history layer's names, in one module, for code that switches to threadstore.

``from threadstore.seed import ...`` takes the place of the seed layer's one package
import. Each name is threadstore's own object; where threadstore names it otherwise:

============================  ===============================================================
seed name                     here
============================  ===============================================================
``AGUIStorageAgent``          :class:`threadstore.agui.StorageAgent` (same class)
``StreamPersistenceManager``  :class:`threadstore.agui.StreamPersistenceManager`
``PAYLOAD_VERSION``           :data:`threadstore.models.FORMAT_VERSION`
``wire_non_empty_str``,       :mod:`threadstore.keys`: the empty-text placeholder codec; the
``app_str``                   stores keep ``""`` as it is, so only the seed's format needs it
``emitter_for_role``          :mod:`threadstore.keys` (``Chat.participants`` lists the user)
``MessagePublic``             :class:`threadstore.models.MessagePublic`
``ExtendedBaseMessage``,      :mod:`threadstore.codec`: ``extended_messages`` is
``translate_messages``        ``translate_messages`` with each message's status, error,
                              in-progress flag and record uuid (the seed's replay shape)
``ChatSessionRegistry``       :class:`threadstore.agui.ChatSessionRegistry` (a chat is its
                              own session: its id is the chat uuid)
``ErrorCodes``                :class:`threadstore.errors.ErrorCodes` (``RUN_ERROR`` codes)
``VersionConflictError``      :class:`threadstore.errors.VersionConflictError`; no call
                              raises it (every update is one transaction)
============================  ===============================================================

The seed's ``Message`` fields ``v``, ``timestamp``, ``step`` and ``chat_id`` are
accepted on input and read as properties of :class:`threadstore.models.Message`;
``ToolCall`` and ``Reasoning`` build with no arguments and read a fixed ``role``.
"""

from threadstore.agui import (
    AGUIAgent,
    AGUIStorageAgent,
    ChatRepository,
    ChatSessionRegistry,
    MessageRepository,
    RunHandle,
    StreamPersistenceManager,
    translate_messages,
)
from threadstore.codec import ExtendedBaseMessage, extended_messages
from threadstore.errors import ErrorCodes, VersionConflictError
from threadstore.keys import (
    DEDUPLICATION_KEY_LENGTH,
    app_str,
    chat_deduplication_key,
    emitter_for_role,
    normalize_participant_id,
    participant_id,
    session_deduplication_key,
    wire_non_empty_str,
)
from threadstore.models import FORMAT_VERSION as PAYLOAD_VERSION
from threadstore.models import MessagePublic
from threadstore.store import ChatRepositoryLike, MessageRepositoryLike

__all__ = [
    "DEDUPLICATION_KEY_LENGTH",
    "PAYLOAD_VERSION",
    "AGUIAgent",
    "AGUIStorageAgent",
    "ChatRepository",
    "ChatRepositoryLike",
    "ChatSessionRegistry",
    "ErrorCodes",
    "ExtendedBaseMessage",
    "MessagePublic",
    "MessageRepository",
    "MessageRepositoryLike",
    "RunHandle",
    "StreamPersistenceManager",
    "VersionConflictError",
    "app_str",
    "chat_deduplication_key",
    "emitter_for_role",
    "extended_messages",
    "normalize_participant_id",
    "participant_id",
    "session_deduplication_key",
    "translate_messages",
    "wire_non_empty_str",
]
