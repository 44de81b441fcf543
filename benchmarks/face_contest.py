"""The frame of the framework-face benchmarks: append a history, load it, side by side.

Each repetition opens every contender on fresh files, appends the history in slices
(one item per call; the contenders take turns in an order that rotates every slice),
checks that each loads back what was appended, then times loads, again in turns.
Figures are medians: of the repetitions' append totals, and of all single loads.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from common import Samples, collect_garbage, markdown_table, rotated, timed

__all__ = ["Contender", "Contest"]

Item = TypeVar("Item")


class Contender(Protocol[Item]):
    """One history implementation under test."""

    name: str

    async def open(self, directory: Path) -> None: ...
    async def append(self, items: list[Item]) -> None: ...
    async def load(self) -> list[Item]: ...
    async def close(self) -> None: ...


class Contest(Generic[Item]):
    """Contenders appending and loading the same ``items``; ``peer`` is the reference."""

    def __init__(
        self,
        contenders: Sequence[Contender[Item]],
        peer: Contender[Item],
        items: list[Item],
        *,
        same: Callable[[Item], Any] = lambda item: item,
        slices: int = 20,
    ) -> None:
        self.contenders = [*contenders, peer]
        self.peer = peer
        self.items = items[: len(items) // slices * slices]
        self.same = same
        """What must be equal between an appended item and the one loaded back."""
        self.slices = slices
        self.samples = Samples()

    async def repetition(self, rep: int, loads: int) -> None:
        """One repetition: fresh files, interleaved appends, a correctness check, loads."""
        with tempfile.TemporaryDirectory(prefix="bench-faces-") as directory:
            for index, contender in enumerate(self.contenders):
                path = Path(directory) / str(index)
                path.mkdir()
                await contender.open(path)
            try:
                await self._append(rep)
                expected = [self.same(item) for item in self.items]
                for contender in self.contenders:
                    loaded = [self.same(item) for item in await contender.load()]
                    assert loaded == expected, f"{contender.name} loaded another history"
                for turn in range(loads):
                    for contender in rotated(self.contenders, turn):
                        self.samples.add(f"load {contender.name}", await timed(contender.load))
            finally:
                for contender in self.contenders:
                    await contender.close()

    async def _append(self, rep: int) -> None:
        size = len(self.items) // self.slices
        totals = dict.fromkeys((c.name for c in self.contenders), 0.0)
        for part in range(self.slices):
            chunk = self.items[part * size : (part + 1) * size]
            for contender in rotated(self.contenders, rep + part):
                collect_garbage()
                totals[contender.name] += await timed(_appending(contender, chunk))
        for name, total in totals.items():
            self.samples.add(f"append {name}", total)

    def ratio(self, what: str, contender: Contender[Item]) -> float:
        """``contender``'s median time for ``what`` (append, load) over the peer's."""
        return self.samples.median(f"{what} {contender.name}") / self.samples.median(
            f"{what} {self.peer.name}"
        )

    def table(self) -> str:
        """The results as Markdown: times, per item, and each ratio to the peer."""
        rows = []
        for contender in self.contenders:
            append = self.samples.median(f"append {contender.name}")
            load = self.samples.median(f"load {contender.name}")
            rows.append(
                [
                    contender.name,
                    f"{append * 1000:.0f} ms",
                    f"{append / len(self.items) * 1e6:.0f} µs",
                    f"{self.ratio('append', contender):.2f}x",
                    f"{load * 1000:.1f} ms",
                    f"{self.ratio('load', contender):.2f}x",
                ]
            )
        peer = self.peer.name
        headers = [
            "contender",
            "append all",
            "per item",
            f"append time / {peer}",
            "load all (median)",
            f"load time / {peer}",
        ]
        return markdown_table(headers, rows)


def _appending(contender: Contender[Any], chunk: list[Any]) -> Callable[[], Any]:
    return lambda: contender.append(chunk)
