"""Underscored modules are internal: other packages import the package, never them.

Read from the source with ``ast`` (nothing is imported), so a new cross-package import of
an internal module, or of another module's ``_name``, fails here with its line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import threadstore

SOURCE = Path(threadstore.__file__).parent

PUBLIC_MODULES = {
    "threadstore.binary_json",
    "threadstore.codec.thinking",
    "threadstore.errors",
    "threadstore.keys",
    "threadstore.models",
    "threadstore.seed",
    "threadstore.transfer",
    "threadstore.usage",
    "threadstore.agui.connect",
    "threadstore.agui.legacy",
    "threadstore.agui.translate",
    "threadstore.faces.langchain",
    "threadstore.faces.openai_agents",
    "threadstore.store.memory",
    "threadstore.store.ops",
    "threadstore.store.postgres",
    "threadstore.store.sqlite",
}
"""Modules, other than packages, that users may import by name (docs/architecture.md)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> Iterator[tuple[str, Path, bool]]:
    """Each module's dotted name, its file, and whether it is a package's ``__init__``."""
    for path in sorted(SOURCE.rglob("*.py")):
        yield module_name(path), path, path.name == "__init__.py"


def internal_part(module: str) -> str | None:
    """The package whose internal module ``module`` is, or None for a public one."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_"):
            return ".".join(parts[:i])
    return None


def test_the_public_modules_are_the_documented_ones() -> None:
    public = {
        name for name, _, is_package in modules() if not is_package and internal_part(name) is None
    }

    assert public == PUBLIC_MODULES


def test_no_package_imports_another_packages_internal_module() -> None:
    crossings = []
    for name, path, _ in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in (t for t in targets if t.startswith("threadstore.")):
                owner = internal_part(target)
                # An internal module is open to the modules of its own package only.
                if owner is not None and not f"{name}.".startswith(f"{owner}."):
                    crossings.append(f"{path.relative_to(SOURCE)}:{node.lineno} imports {target}")

    assert crossings == []


def test_no_module_imports_another_modules_private_name() -> None:
    found = []
    for _, path, _ in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("threadstore"):
                package_dir = SOURCE.parent.joinpath(*(node.module or "").split("."))
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    # `from package import _module` is a module import, checked above.
                    if private and not (package_dir / f"{alias.name}.py").exists():
                        found.append(f"{path.relative_to(SOURCE)}:{node.lineno} {alias.name}")

    assert found == []


def test_every_name_a_package_exports_is_there() -> None:
    import importlib

    for name, _, is_package in modules():
        if is_package and not name.startswith(("threadstore.faces", "threadstore.testing")):
            package = importlib.import_module(name)
            missing = [n for n in getattr(package, "__all__", ()) if not hasattr(package, n)]
            assert missing == [], name


def test_each_package_exports_at_most_25_names_and_the_top_level_35() -> None:
    # Read from the source, as above: the faces' packages need their frameworks to import.
    sizes = {}
    for name, path, is_package in modules():
        if is_package:
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
                ):
                    assert isinstance(node.value, ast.List | ast.Tuple), name
                    sizes[name] = len(node.value.elts)
    assert sizes.pop("threadstore") <= 35
    assert {name: size for name, size in sizes.items() if size > 25} == {}
