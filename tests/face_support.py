"""Hypothesis strategies and settings shared by the framework-face tests."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=8)
"""Text as every backend stores it: PostgreSQL refuses NUL, and nothing encodes surrogates."""

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
"""Any JSON value (floats such as 1e16 included, which PostgreSQL's jsonb would turn to ints)."""

on_the_store_fixture = settings(
    max_examples=30,
    deadline=None,
    # The ``store`` fixture is one store per test; each example uses a session of its own.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
"""Settings for a property test that takes the (per-test) ``store`` fixture."""


def scramble(value: Any, into: tuple[type, ...] = ()) -> None:
    """Empty every dict and list reachable from ``value`` (through objects of ``into`` too).

    A face's load must share nothing mutable with the store: after scrambling what one
    load returned, the next load must still read the history as stored.
    """
    seen: set[int] = set()

    def walk(node: Any) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, dict):
            for child in list(node.values()):
                walk(child)
            node.clear()
            node["scrambled"] = True
        elif isinstance(node, list):
            for child in list(node):
                walk(child)
            node.clear()
        elif isinstance(node, into):
            for child in list(vars(node).values()):
                walk(child)

    walk(value)
