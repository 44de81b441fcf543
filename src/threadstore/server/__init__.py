"""The threadstore HTTP server: AG-UI endpoints and the chat-history API (FastAPI).

``create_app(store_url_or_store, agent=..., auth=...)`` builds the app;
``threadstore serve`` runs it with uvicorn. See ``docs/server.md``.

The server needs the ``server`` extra (``pip install "threadstore[server]"``). Its names
resolve on first use (module ``__getattr__``), so :class:`DemoAgent` and the transfer
functions, which need no web framework, import on a bare install too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadstore.keys import USER_NAMESPACE, user_uuid_for
from threadstore.server._demo_agent import DemoAgent
from threadstore.transfer import ChatExport, export_chat, import_chat

if TYPE_CHECKING:
    from threadstore.server._app import DEFAULT_DB_URL, create_app
    from threadstore.server._auth import (
        LOCAL_USER_UUID,
        TOKENS_ENV_VAR,
        Authenticator,
        HeaderAuth,
        LocalUserAuth,
        TokenAuth,
    )
    from threadstore.server._limits import (
        DEFAULT_LIMITS,
        Limits,
        check_id,
        check_json,
        check_name,
    )
    from threadstore.server._shutdown import SHUTDOWN_ERROR_CODE

# These modules import FastAPI or Starlette (the shutdown one the AG-UI layer): load on use.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("DEFAULT_DB_URL", "create_app"), "threadstore.server._app"),
    **dict.fromkeys(
        (
            "LOCAL_USER_UUID",
            "TOKENS_ENV_VAR",
            "Authenticator",
            "HeaderAuth",
            "LocalUserAuth",
            "TokenAuth",
        ),
        "threadstore.server._auth",
    ),
    **dict.fromkeys(
        ("DEFAULT_LIMITS", "Limits", "check_id", "check_json", "check_name"),
        "threadstore.server._limits",
    ),
    "SHUTDOWN_ERROR_CODE": "threadstore.server._shutdown",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'threadstore.server' has no attribute {name!r}")
    import importlib

    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name not in ("fastapi", "starlette"):
            raise
        raise ModuleNotFoundError(
            f'threadstore.server.{name} needs FastAPI: pip install "threadstore[server]"',
            name=error.name,
        ) from error
    return getattr(loaded, name)


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
