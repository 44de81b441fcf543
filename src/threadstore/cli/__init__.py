"""The ``threadstore`` command: run the server, migrate, inspect and move chats.

Every command takes ``--db`` (or the ``THREADSTORE_DB`` variable); the default is
the SQLite file ``./threadstore.db``. ``serve`` migrates the database itself; the
other commands never change the schema and ask for ``threadstore migrate`` when
it is missing.

One module per group of commands; importing it registers its commands on ``app``
(the order of the imports is the order of ``threadstore --help``).
"""

from __future__ import annotations

from threadstore.cli import (  # noqa: F401  (registration)
    _chats,
    _lifecycle,
    _search,
    _serve,
    _transfer,
    _usage,
)
from threadstore.cli._common import app
from threadstore.cli._serve import worker_app

__all__ = ["app", "main", "worker_app"]


def main() -> None:
    """Entry point of the ``threadstore`` command."""
    app()
