"""``import threadstore`` stays light: the server, CLI, drivers and AG-UI SDK load on first use.

Each check runs in a fresh interpreter, since this test process has long imported
everything. No timing is asserted; docs/benchmarks.md reports the import time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    *("fastapi", "uvicorn", "aiosqlite", "asyncpg", "ag_ui", "jsonpatch", "typer", "rich"),
    *("langchain_core", "agents", "openai"),  # the framework faces' extras
    *("pytest", "_pytest", "pytest_asyncio"),  # only the contract suite
)
"""Dependencies that only some uses of threadstore need."""

LAZY_SUBPACKAGES = (
    "threadstore.agui",
    "threadstore.chat",
    "threadstore.server",
    "threadstore.cli",
    "threadstore.faces",
    "threadstore.testing",
)


def loaded_after(code: str, cwd: Path) -> set[str]:
    """The names in ``sys.modules`` of a fresh interpreter after it runs ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def heavy_in(modules: set[str]) -> set[str]:
    """The heavy dependencies that ``modules`` holds (a package or any of its submodules)."""
    return {name for name in modules if name.split(".", 1)[0] in HEAVY}


def lazy_in(modules: set[str]) -> set[str]:
    """The optional threadstore subpackages that ``modules`` holds."""
    return {m for m in modules if any(m == p or m.startswith(f"{p}.") for p in LAZY_SUBPACKAGES)}


def test_import_threadstore_loads_no_optional_dependency(tmp_path: Path) -> None:
    modules = loaded_after("import threadstore", tmp_path)

    assert "threadstore" in modules
    assert heavy_in(modules) == set()
    assert lazy_in(modules) == set()


def test_public_names_of_the_core_need_no_optional_dependency(tmp_path: Path) -> None:
    code = (
        "from threadstore import ChatCreate, MessageCreate, Store, create_store, open_store\n"
        "create_store('memory://')"
    )

    assert heavy_in(loaded_after(code, tmp_path)) == set()


def test_storage_agent_resolves_on_first_access_and_only_then_loads_the_agui_sdk(
    tmp_path: Path,
) -> None:
    code = (
        "import sys, threadstore\n"
        "before = 'ag_ui' in sys.modules or 'threadstore.agui._agent' in sys.modules\n"
        "from threadstore.agui._agent import StorageAgent as Direct\n"
        "assert threadstore.StorageAgent is Direct, 'lazy name differs'\n"
        "assert threadstore.AGUIStorageAgent is Direct, 'seed alias differs'\n"
        "assert not before, 'the AG-UI layer was loaded by import threadstore'"
    )

    modules = loaded_after(code, tmp_path)

    assert "ag_ui" in modules  # the check above is able to see the SDK once it is loaded
    assert "threadstore.agui._agent" in modules


def test_building_a_sqlite_store_loads_its_driver_and_nothing_else_heavy(tmp_path: Path) -> None:
    modules = loaded_after(
        "import threadstore\nthreadstore.create_store('sqlite:///x.db')", tmp_path
    )

    assert heavy_in(modules) == set()


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    import threadstore

    with pytest.raises(AttributeError, match="NoSuchName"):
        _ = threadstore.NoSuchName


def test_the_demo_agent_imports_without_the_web_framework(tmp_path: Path) -> None:
    modules = loaded_after("from threadstore.server import DemoAgent", tmp_path)

    assert "threadstore.server._demo_agent" in modules
    loaded = {name.split(".", 1)[0] for name in modules}
    assert loaded & {"fastapi", "starlette", "uvicorn", "typer", "rich"} == set()
