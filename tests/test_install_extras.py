"""``pip install threadstore`` without extras: the library works, the rest names its extra.

Builds a fresh virtual environment, installs this checkout into it as a user would (no
extras, the machine's pip configuration), and runs ``bare_install_child.py`` and the
``threadstore`` command there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).with_name("bare_install_child.py")
HINT = 'pip install "threadstore[server]"'
POSTGRES_HINT = 'pip install "threadstore[postgres]"'


def bare_environment(where: Path) -> tuple[Path, dict[str, str]]:
    """A new virtual environment holding this checkout without extras, and its variables."""
    # Without the suite's own path settings, the environment sees only what it installed.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, env=env, timeout=300)
    python = where / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--quiet", str(ROOT)]
    subprocess.run(install, check=True, env=env, timeout=600, capture_output=True)
    return python, env


@pytest.mark.slow
def test_a_bare_install_runs_the_library_on_sqlite_and_names_the_missing_extras(
    tmp_path: Path,
) -> None:
    python, env = bare_environment(tmp_path / "venv")

    child = subprocess.run(
        [str(python), "-I", str(CHILD), str(tmp_path / "chats.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)

    assert Path(report["threadstore"]).is_relative_to(tmp_path / "venv")
    assert report["importable"] == []  # no web framework, CLI or PostgreSQL driver
    assert report["store"]["messages"] == [["user", "Hi"]]
    assert report["agent"]["streamed"] == [
        "RUN_STARTED",
        *["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT"],
        *["TEXT_MESSAGE_END", "RUN_FINISHED"],
    ]
    assert report["agent"]["messages"] == [
        ["user", "Hi", "complete"],
        ["assistant", "Hello there", "complete"],
    ]
    assert report["chat"] == "Hello there"
    assert report["postgres"] == (
        f"ConfigurationError: the PostgreSQL store needs asyncpg: {POSTGRES_HINT}"
    )
    assert report["server"]["demo_agent"] == "DemoAgent"
    assert report["server"]["create_app"].startswith("ModuleNotFoundError: ")
    assert HINT in report["server"]["create_app"]

    command = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "threadstore"), "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert command.returncode == 1
    assert command.stdout == ""
    assert command.stderr.splitlines() == [
        f"error: the threadstore command needs typer, rich, fastapi, uvicorn: {HINT}"
    ]
