"""Run the AG-UI conformance validator (ag-ui-validate) over event streams in tests.

Import from any test: ``from agui_validation import assert_valid_stream``. Events may be
``ag_ui.core`` models, wire dicts, JSON strings, or one JSONL string.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ag_ui.core import BaseEvent
from ag_ui_validate import Report
from ag_ui_validate.pytest_plugin import assert_valid_agui, validate_agui

__all__ = ["assert_valid_stream", "to_wire", "validation_report"]

Received = str | Sequence[BaseEvent | Mapping[str, Any] | str]


def to_wire(events: Sequence[BaseEvent | Mapping[str, Any] | str]) -> list[Any]:
    """Return ``events`` as the validator reads them: models become camelCase JSON dicts."""
    return [
        event.model_dump(mode="json", by_alias=True)
        if isinstance(event, BaseEvent)
        else (dict(event) if isinstance(event, Mapping) else event)
        for event in events
    ]


def _received(events: Received) -> str | list[Any]:
    return events if isinstance(events, str) else to_wire(events)


def validation_report(
    events: Received,
    *,
    features: list[str] | None = None,
    severity_overrides: dict[str, str] | None = None,
) -> Report:
    """Validate ``events`` and return the full report (diagnostics, summary, features)."""
    return validate_agui(
        _received(events), features=features, severity_overrides=severity_overrides
    )


def assert_valid_stream(
    events: Received,
    *,
    features: list[str] | None = None,
    severity_overrides: dict[str, str] | None = None,
    max_warnings: int | None = None,
) -> None:
    """Fail the test unless ``events`` is a conformant AG-UI stream with zero errors.

    ``max_warnings`` also bounds warnings (``0`` forbids them); ``None`` allows any.
    A validator check that crashed counts as a failure, since it left the stream unchecked.
    """
    received = _received(events)
    assert_valid_agui(
        received,
        features=features,
        severity_overrides=severity_overrides,
        max_warnings=max_warnings,
    )
    report = validate_agui(received, features=features, severity_overrides=severity_overrides)
    assert not report.internal_errors, f"ag-ui-validate crashed: {report.internal_errors}"
