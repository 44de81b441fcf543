"""The ``threadstore`` command's entry point (also ``python -m threadstore``).

The command and the server it starts need the ``server`` extra (typer, rich, FastAPI,
uvicorn), which a bare ``pip install threadstore`` leaves out. This module imports
nothing of them, so without the extra the command says what to install instead of
failing with a traceback.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

__all__ = ["main"]

SERVER_EXTRA = ("typer", "rich", "fastapi", "uvicorn")
"""What ``pip install "threadstore[server]"`` adds for the command."""


def main() -> None:
    """Run the ``threadstore`` command, or say which extra it needs and exit with 1."""
    missing = [name for name in SERVER_EXTRA if find_spec(name) is None]
    if missing:
        print(
            f"error: the threadstore command needs {', '.join(missing)}:"
            ' pip install "threadstore[server]"',
            file=sys.stderr,
        )
        raise SystemExit(1)
    from threadstore.cli import main as run

    run()


if __name__ == "__main__":  # pragma: no cover
    main()
