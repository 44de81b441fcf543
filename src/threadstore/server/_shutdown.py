"""Ending live runs at once when the server is told to stop (Ctrl-C, SIGTERM).

uvicorn stops on a signal by waiting for open connections to close, up to its
graceful-shutdown timeout, and only then runs the app's shutdown. A run's event
stream stays open until the run ends, so without help every live stream would hold
the server until the timeout and then be cut without a terminal event. While the app
runs, :func:`stop_runs_on_exit_signal` puts a handler in front of the server's own:
it cancels every live run with a ``RUN_ERROR`` whose code is ``SHUTDOWN`` (its
records become ``interrupted``), so each stream ends properly, its connection
closes, and the server exits as soon as the runs are finalized.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from threadstore.agui import StreamPersistenceManager

__all__ = ["SHUTDOWN_ERROR_CODE", "stop_runs", "stop_runs_on_exit_signal"]

SHUTDOWN_ERROR_CODE = "SHUTDOWN"
"""The ``RUN_ERROR`` code live streams end with when the server stops."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def stop_runs(manager: StreamPersistenceManager[Any]) -> int:
    """Cancel every live run with a ``SHUTDOWN`` ``RUN_ERROR``; return how many."""
    stopped = 0
    for handle in manager.live_runs():
        stopped += handle.cancel(
            message="The server is shutting down; the run was stopped and what it produced "
            "so far is stored as interrupted.",
            code=SHUTDOWN_ERROR_CODE,
        )
    return stopped


@contextmanager
def stop_runs_on_exit_signal(manager: StreamPersistenceManager[Any]) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM first :func:`stop_runs`, then do what they did.

    Only in the main thread (the only one Python delivers signals to), and only in
    front of a Python-level handler such as uvicorn's; other set-ups are left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous: dict[int, Callable[[int, FrameType | None], Any]] = {}
    for exit_signal in _SIGNALS:
        handler = signal.getsignal(exit_signal)
        if callable(handler):
            previous[exit_signal] = handler

    def on_signal(sig: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(stop_runs, manager)
        previous[sig](sig, frame)

    for number in previous:
        signal.signal(number, on_signal)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
