"""Timing helpers shared by the side-by-side benchmarks.

The machines these run on are small and noisy, so every benchmark interleaves its
contenders (each repetition runs them in a rotated order, finely sliced) and reports
medians; a single lucky or unlucky run then moves no figure.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

__all__ = [
    "Goal",
    "Samples",
    "collect_garbage",
    "machine_line",
    "markdown_table",
    "percentile",
    "rotated",
    "timed",
]

T = TypeVar("T")


async def timed(action: Callable[[], Awaitable[object]]) -> float:
    """Return the wall-clock seconds one awaited call takes."""
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


def rotated(items: Sequence[T], shift: int) -> list[T]:
    """Return ``items`` rotated left by ``shift``, so each repetition starts with another one."""
    if not items:
        return []
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


@dataclass
class Samples:
    """Named lists of measurements (seconds, or anything else) with their medians."""

    values: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, value: float) -> None:
        """Record one measurement under ``name``."""
        self.values[name].append(value)

    def median(self, name: str) -> float:
        """The median of the measurements recorded under ``name``."""
        return statistics.median(self.values[name])

    def spread(self, name: str) -> tuple[float, float]:
        """The smallest and largest measurement recorded under ``name``."""
        recorded = self.values[name]
        return min(recorded), max(recorded)


@dataclass(frozen=True)
class Goal:
    """A ratio the benchmark reports against a target (``at_least`` or at most ``target``)."""

    label: str
    value: float
    target: float
    at_least: bool = True
    unit: str = "x"
    """Printed after the value: ``x`` for a ratio, or a unit such as `` ms``."""

    @property
    def met(self) -> bool:
        """Whether the measured ratio reaches the target."""
        return self.value >= self.target if self.at_least else self.value <= self.target

    def line(self) -> str:
        """One printable line: label, ratio, goal and verdict."""
        sign = ">=" if self.at_least else "<="
        verdict = "met" if self.met else "MISSED"
        return f"{self.label}: {self.value:.2f}{self.unit} (goal {sign} {self.target:g}) {verdict}"


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, interpolated between closest ranks."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Render rows as a Markdown table (the form docs/benchmarks.md keeps)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def machine_line() -> str:
    """Describe where and when the figures were taken."""
    cores = os.cpu_count()
    return (
        f"{datetime.now(UTC):%Y-%m-%d} · Python {platform.python_version()}"
        f" · {platform.system()} {platform.machine()} · {cores} cores"
    )


def collect_garbage() -> None:
    """Run a full collection so one contender's garbage is not charged to the next."""
    gc.collect()
