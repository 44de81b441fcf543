"""The events a run opens and closes with when threadstore makes them, stamped when made."""

from __future__ import annotations

import time

from ag_ui.core import PROTOCOL_VERSION, RunFinishedEvent, RunStartedEvent

__all__ = ["now_ms", "run_finished", "run_started"]


def now_ms() -> int:
    """An event's timestamp: milliseconds since the epoch."""
    return int(time.time() * 1000)


def run_started(thread_id: str, run_id: str) -> RunStartedEvent:
    """RUN_STARTED, naming the protocol version the run speaks."""
    return RunStartedEvent(
        thread_id=thread_id, run_id=run_id, protocol_version=PROTOCOL_VERSION, timestamp=now_ms()
    )


def run_finished(thread_id: str, run_id: str) -> RunFinishedEvent:
    """RUN_FINISHED: the run ended well."""
    return RunFinishedEvent(thread_id=thread_id, run_id=run_id, timestamp=now_ms())
