"""The Agent Framework example in docs/frameworks.md runs as written, and continues a session."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).parent.parent / "docs" / "frameworks.md"


def _example() -> str:
    section = DOC.read_text().split("## Microsoft Agent Framework", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the Agent Framework section has no Python example"
    return match.group(1)


def test_the_documented_example_runs_and_a_second_run_continues(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_example())

    def run() -> str:
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    first, second = run(), run()

    food, ask = "Remember that I like Italian food.", "What kind of food do I like?"
    assert first == f"I have seen: {food} / {ask}"
    assert second == f"I have seen: {food} / {ask} / {food} / {ask}"
