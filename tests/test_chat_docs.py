"""The examples in docs/chat-engine.md run as written, so the page stays true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "chat-engine.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_recorded_stream_example_runs_and_its_assertions_hold(
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocks = python_blocks()
    assert len(blocks) == 2
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)

    assert capsys.readouterr().out.splitlines() == [
        "Let me check the weather.",
        "[weather: 4 °C, rain]",
        "Take an umbrella.",
    ]
