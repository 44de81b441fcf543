"""The threadstore HTTP server: AG-UI endpoints and the chat-history API (FastAPI).

``create_app(store_url_or_store, agent=..., auth=...)`` builds the app;
``threadstore serve`` runs it with uvicorn. See ``docs/server.md``.
"""

from __future__ import annotations

from threadstore.server.app import DEFAULT_DB_URL, create_app
from threadstore.server.auth import (
    LOCAL_USER_UUID,
    USER_NAMESPACE,
    Authenticator,
    HeaderAuth,
    LocalUserAuth,
    TokenAuth,
    user_uuid_for,
)
from threadstore.server.demo_agent import DemoAgent
from threadstore.server.limits import DEFAULT_LIMITS, Limits
from threadstore.transfer import ChatExport, export_chat, import_chat

__all__ = [
    "DEFAULT_DB_URL",
    "DEFAULT_LIMITS",
    "LOCAL_USER_UUID",
    "USER_NAMESPACE",
    "Authenticator",
    "ChatExport",
    "DemoAgent",
    "HeaderAuth",
    "Limits",
    "LocalUserAuth",
    "TokenAuth",
    "create_app",
    "export_chat",
    "import_chat",
    "user_uuid_for",
]
