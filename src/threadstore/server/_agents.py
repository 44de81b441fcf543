"""Resolve ``--agent``: ``demo``, ``openai`` or ``module:attribute``."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import AsyncIterator
from typing import Any, Protocol

from ag_ui.core import BaseEvent, RunAgentInput

from threadstore.errors import ConfigurationError
from threadstore.server._demo_agent import DEFAULT_DEMO_DELAY, DemoAgent

__all__ = ["InnerAgent", "load_agent"]


class InnerAgent(Protocol):
    """Any AG-UI agent: ``run(input)`` yields the run's events."""

    def run(self, input: RunAgentInput, /) -> AsyncIterator[BaseEvent]:
        """Yield the run's AG-UI events."""
        ...


def load_agent(
    spec: str, *, model: str | None = None, demo_delay: float = DEFAULT_DEMO_DELAY
) -> InnerAgent:
    """Return the agent named by ``spec``.

    ``module:attribute`` names an object with ``run(input)``, or a class or
    zero-argument factory that returns one.
    """
    if spec == "demo":
        return DemoAgent(delay=demo_delay)
    if spec == "openai":
        from threadstore.server._openai_agent import OpenAIAgent

        return OpenAIAgent.from_env(model=model)
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"--agent {spec!r}: use 'demo', 'openai' or 'module:attribute' (e.g. myapp.agents:bot)"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"--agent {spec!r}: cannot import {module_name!r}: {exc}") from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise ConfigurationError(
                f"--agent {spec!r}: {module_name!r} has no attribute {attribute!r}"
            ) from exc
    if inspect.isclass(target) or (callable(target) and not hasattr(target, "run")):
        try:
            target = target()
        except Exception as exc:
            raise ConfigurationError(
                f"--agent {spec!r}: calling {attribute} without arguments failed: {exc}"
            ) from exc
    if not callable(getattr(target, "run", None)):
        raise ConfigurationError(
            f"--agent {spec!r}: {type(target).__name__} has no run(input) method"
        )
    agent: InnerAgent = target
    return agent
