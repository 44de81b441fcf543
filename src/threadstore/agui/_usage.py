"""A run's usage, as the storage agent records it, and the budget check before a run.

What a run used is read once, when it ends, from what the fold kept (``RunInfo``): the
values of its ``CUSTOM`` usage events and its terminal event's ``usage``; the rules are
in :mod:`threadstore.usage`. Nothing here runs per event.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Protocol
from uuid import UUID

from ag_ui.core import BaseEvent
from pydantic import ValidationError

from threadstore import _telemetry
from threadstore.fold import RunInfo
from threadstore.models import Chat
from threadstore.usage import RunUsage, UsageReport, total_of

__all__ = ["RunWatch", "record_usage", "usage_of"]

logger = logging.getLogger(__name__)


class Ledger(Protocol):
    """Where a run's usage is recorded (``store.usage``, through the run's storage port)."""

    async def record(self, usage: RunUsage) -> bool: ...


_COUNTS = ("input_tokens", "output_tokens", "reasoning_tokens", "cached_input_tokens")


def usage_of(run: RunInfo) -> UsageReport | None:
    """What the run reported it used, or ``None`` when it reported nothing."""
    if not run.usage_reports and not run.usage:
        return None
    reports = []
    for value in run.usage_reports:
        try:
            reports.append(UsageReport.model_validate(value))
        except ValidationError as exc:
            logger.warning("run %s: a usage event was not counted: %s", run.run_id, exc)
    total = total_of(reports)
    if run.usage:
        # The run's own totals: they count the same calls the CUSTOM reports did.
        # Its ``TokenUsage`` entries were validated by the protocol's model already.
        terminal = total_of(
            UsageReport(**{key: entry.get(key) or 0 for key in _COUNTS}) for entry in run.usage
        )
        models = {entry.get("model") for entry in run.usage} - {None}
        counts = {key: getattr(terminal, key) for key in _COUNTS}
        model = models.pop() if len(models) == 1 else total.model
        total = total.model_copy(update={**counts, "model": model})
    return total


async def record_usage(
    ledger: Ledger, chat_uuid: UUID, user_uuid: UUID, run: RunInfo
) -> RunUsage | None:
    """Record what the run used in the store's ledger; what was recorded.

    A failure is logged, never raised: the run's records are final already, and its
    client has its answer.
    """
    report = usage_of(run)
    if report is None:
        return None
    usage = RunUsage.of(chat_uuid, run.run_id, user_uuid, report)
    try:
        if await ledger.record(usage):
            return usage
    except Exception:
        logger.exception("run %s: its usage was not recorded", run.run_id)
    return None


class RunWatch:
    """What a run reports beyond its records: its span, the active-runs count, its usage.

    Made when the run starts and ended once (:meth:`end`) however it ends. Without an
    OpenTelemetry SDK it holds no span and its calls return at their first check.
    """

    __slots__ = ("span",)

    def __init__(self, agent_name: str, thread_id: str, run_id: str) -> None:
        self.span = _telemetry.run_span(agent_name, thread_id, run_id)
        _telemetry.add_active_runs(1)

    def events(self, stream: AsyncIterator[BaseEvent]) -> AsyncIterator[BaseEvent]:
        """The run's stream, its first event marked on the span (only when there is one)."""
        return stream if self.span is None else _marked(stream, self.span)

    def first_event(self, event: BaseEvent) -> None:
        """Mark ``event`` as the run's first on its span."""
        if self.span is not None:
            self.span.first_event(event.type.value)

    async def end(
        self,
        ledger: Ledger | None,
        chat: Chat | None,
        run: RunInfo | None,
        status: str,
        error: str | None,
    ) -> None:
        """Record the run's usage (``ledger``, ``chat`` and ``run`` known), end its span."""
        usage = None
        if ledger is not None and chat is not None and run is not None:
            usage = await record_usage(ledger, chat.chat_uuid, chat.user_uuid, run)
        _telemetry.add_active_runs(-1)
        span = self.span
        if span is None:
            return
        if chat is not None:
            span.set(**{_telemetry.CONVERSATION_ID: str(chat.chat_uuid)})
        if usage is not None:
            span.set(
                **{
                    "gen_ai.usage.input_tokens": usage.input_tokens,
                    "gen_ai.usage.output_tokens": usage.output_tokens,
                    "threadstore.usage.cost_usd": usage.cost_usd,
                }
            )
        span.end(status, error)


async def _marked(
    stream: AsyncIterator[BaseEvent], span: _telemetry.RunSpan
) -> AsyncIterator[BaseEvent]:
    async for event in stream:
        span.first_event(event.type.value)  # a no-op after the first
        yield event
