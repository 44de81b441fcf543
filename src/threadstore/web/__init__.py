"""The web page served at ``/`` by ``threadstore serve``: static files, no build step.

``static/`` holds the page (``index.html``, ``app.js``, ``app.css``) and the vendored
libraries it uses for markdown rendering and HTML sanitizing, with their licences
(``static/vendor/VENDORED.md`` says which versions and where they come from).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONTENT_SECURITY_POLICY", "STATIC_DIR"]

STATIC_DIR = Path(__file__).parent / "static"
"""The directory served under ``/static``."""

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data: blob:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
"""The page's policy: only its own scripts and styles run, whatever a message contains."""
