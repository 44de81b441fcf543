"""Agent Framework face: a history provider and a session store on any threadstore store.

Install with ``pip install "threadstore[agent-framework]"``. ``import threadstore``
does not import this package or the framework.
"""

from threadstore.faces.agent_framework._compaction import strategy_summarizer
from threadstore.faces.agent_framework._convert import message_to_records, records_to_messages
from threadstore.faces.agent_framework._filters import keep_last_messages
from threadstore.faces.agent_framework._history import MessageFilter, ThreadstoreHistoryProvider
from threadstore.faces.agent_framework._sessions import ThreadstoreSessionStore
from threadstore.faces.agent_framework._state import ProviderSessionState, ThreadstoreSessionState

__all__ = [
    "MessageFilter",
    "ProviderSessionState",
    "ThreadstoreHistoryProvider",
    "ThreadstoreSessionState",
    "ThreadstoreSessionStore",
    "keep_last_messages",
    "message_to_records",
    "records_to_messages",
    "strategy_summarizer",
]
