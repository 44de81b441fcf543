"""The relayed run-events log: what a store offers so any process can resume or cancel a run.

A store that shares its database between processes (PostgreSQL) implements
:class:`RunEventLog`; :meth:`Store.run_events` returns it, or ``None`` on the
embedded backends, which need none of it. The run manager's relay only orchestrates
through this Protocol; the SQL behind it lives with the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from uuid import UUID

__all__ = ["EventBatch", "RunEventListener", "RunEventLog", "RunLog", "RunStanding"]

EventBatch = tuple[UUID, str, Sequence[tuple[int, str]]]
"""``(chat_uuid, run_id, [(event_id, event JSON), ...])``: one run's events to append."""


@dataclass(frozen=True, slots=True)
class RunLog:
    """How a recorded run stands and which of its events are stored."""

    status: str
    updated_at: datetime
    first_id: int | None
    last_id: int | None
    last_type: str | None


@dataclass(frozen=True, slots=True)
class RunStanding:
    """A recorded run's status and whether its heartbeat is fresh."""

    status: str
    beating: bool


class RunEventListener(Protocol):
    """A subscription to appended events and cancel requests (one dedicated connection)."""

    @property
    def server_pid(self) -> int | None:
        """The database server's process id of the connection (``None`` once it is gone)."""

    async def close(self, *, lost: bool = False) -> None:
        """Unsubscribe and give the connection back (``lost``: it broke, have it replaced)."""


class RunEventLog(Protocol):
    """The shared log of relayed run events, and the run registry queries the relay needs.

    Runs are addressed by ``(chat_uuid, run_id)``; payloads of notifications are
    ``"<chat_uuid>/<run_id>"``.
    """

    async def listen(
        self,
        on_events: Callable[[str], None],
        on_cancel: Callable[[str], None],
        on_lost: Callable[[RunEventListener], None],
    ) -> RunEventListener:
        """Subscribe; ``on_events``/``on_cancel`` get payloads, ``on_lost`` a dead listener."""

    async def append(self, batches: Sequence[EventBatch]) -> None:
        """Append the events of every run given at once, and wake each run's readers."""

    async def read(self, chat_uuid: UUID, run_id: str, first: int) -> list[tuple[int, str]]:
        """The run's stored events from id ``first`` on, oldest first, as JSON text."""

    async def prune(self, older_than: datetime) -> int:
        """Delete events of runs not running, stored before ``older_than``; return how many."""

    async def run_log(self, chat_uuid: UUID, run_id: str) -> RunLog | None:
        """How the run stands and which events are stored; ``None`` when it is not recorded."""

    async def run_status(self, chat_uuid: UUID, run_id: str) -> str | None:
        """The run's recorded status, or ``None``."""

    async def run_standing(
        self, chat_uuid: UUID, run_id: str, beating_since: datetime
    ) -> RunStanding | None:
        """The run's status and whether it beat since ``beating_since``; ``None`` if unknown."""

    async def live_runs(self, chat_uuid: UUID, beating_since: datetime) -> list[str]:
        """Ids of the chat's runs recorded running and beating since then, newest first."""

    async def live_elsewhere(
        self, user_uuid: UUID, thread_id: str, run_id: str, beating_since: datetime, owner: str
    ) -> str | None:
        """The owner of the user's live run ``(thread_id, run_id)`` when it is not ``owner``."""

    async def notify_cancel(self, chat_uuid: UUID, run_id: str, beating_since: datetime) -> bool:
        """Ask the run's owner to cancel it, if it is recorded running and beating."""
