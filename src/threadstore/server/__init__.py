"""The threadstore HTTP server: AG-UI endpoints and the chat-history API (FastAPI).

``create_app(store_url_or_store, agent=..., auth=...)`` builds the app;
``threadstore serve`` runs it with uvicorn. See ``docs/server.md``.
"""

from __future__ import annotations

from threadstore.server._app import DEFAULT_DB_URL, create_app
from threadstore.server._auth import (
    LOCAL_USER_UUID,
    TOKENS_ENV_VAR,
    USER_NAMESPACE,
    Authenticator,
    HeaderAuth,
    LocalUserAuth,
    TokenAuth,
    user_uuid_for,
)
from threadstore.server._demo_agent import DemoAgent
from threadstore.server._limits import DEFAULT_LIMITS, Limits, check_id, check_json, check_name
from threadstore.server._shutdown import SHUTDOWN_ERROR_CODE
from threadstore.transfer import ChatExport, export_chat, import_chat

__all__ = [
    "DEFAULT_DB_URL",
    "DEFAULT_LIMITS",
    "LOCAL_USER_UUID",
    "SHUTDOWN_ERROR_CODE",
    "TOKENS_ENV_VAR",
    "USER_NAMESPACE",
    "Authenticator",
    "ChatExport",
    "DemoAgent",
    "HeaderAuth",
    "Limits",
    "LocalUserAuth",
    "TokenAuth",
    "check_id",
    "check_json",
    "check_name",
    "create_app",
    "export_chat",
    "import_chat",
    "user_uuid_for",
]
