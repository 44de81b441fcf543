"""The LangChain and Agents SDK examples in docs/frameworks.md run and print what they say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "frameworks.md"


def examples(heading: str) -> list[str]:
    """The Python blocks of the doc's section ``## <heading>``."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def run(example: str, cwd: Path) -> list[str]:
    """Run one example in a fresh interpreter in ``cwd``; return the lines it printed."""
    done = subprocess.run(
        [sys.executable, "-c", example], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_langchain_examples_run(tmp_path: Path) -> None:
    sync_example, async_example = examples("LangChain")

    assert run(sync_example, tmp_path) == [
        "You are Ada.",
        "['Hi, I am Ada.', 'Hello, Ada!', 'Who am I?', 'You are Ada.']",
    ]
    (printed,) = run(async_example, tmp_path)
    assert printed.startswith("[HumanMessage(content='Weather in Oslo?'")
    assert "'args': {'city': 'Oslo'}, 'id': 'c1'" in printed


def test_the_agents_sdk_example_runs(tmp_path: Path) -> None:
    (example,) = examples("OpenAI Agents SDK")

    assert run(example, tmp_path) == ["Still rain, I am afraid.", "6 items"]
