"""The README's quick start, pasted into a file as it stands, runs and shows the stored chat."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import threadstore

README = Path(__file__).resolve().parent.parent / "README.md"


def _quick_start() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Quick start in code") :]
    found = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert found is not None, "the quick start has a python block"
    return found.group(1)


def test_the_quick_start_run_twice_shows_both_runs_stored(tmp_path: Path) -> None:
    script = tmp_path / "quick_start.py"
    script.write_text(_quick_start(), encoding="utf-8")
    # The package under test, wherever the suite runs from; the script's chat.db in tmp_path.
    source = str(Path(threadstore.__file__).resolve().parents[1])
    paths = [source, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}

    def run() -> list[str]:
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,  # a guard against a hang, not a speed bar
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    first, second = run(), run()

    question = "user: What is 12 * 7 + 3?"
    answer = "assistant: 12 * 7 + 3 = 87. I used the calculator tool to be sure."
    assert first.count(question) == 1 and first.count(answer) == 1, first
    assert '    called calculator({"expression": "12 * 7 + 3"}) -> {"value": 87.0}' in first
    # The second run found the first one's chat: the same user and thread.
    assert second[: len(first)] == first
    assert second.count(question) == 2 and second.count(answer) == 2, second
    assert (tmp_path / "chat.db").exists()


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    readme = README.read_text(encoding="utf-8")
    command = readme.split("# 2. Install and run the whole test suite", 1)[1].splitlines()[1]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8").splitlines()

    assert ci[-1] == command
    # A second run reuses the virtual environment the first one made.
    assert command.startswith("[ -d .venv ] || python3 -m venv .venv && ")
