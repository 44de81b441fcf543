"""A threadstore server in its own process, as one of several replicas on one database.

Usage: ``python server_process.py STORE_URL [HEARTBEAT_INTERVAL [OUTBOX_PATH]]``. Serves
``create_app(STORE_URL)`` with token auth (``token-alice-N`` -> alice-N, ``token-bob-N``
-> bob-N, N < 100, so that each test of a module sharing the processes has users of its
own) on a free port of 127.0.0.1 and prints ``port <n>`` before it starts; ``/healthz``
answers once it is ready. SIGTERM shuts it down gracefully.

The agent streams half an answer, then waits until ``POST /test/gates/{run_id}``
(on the process running it) opens its gate, so tests act on a run that is surely
live, through another process.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator

import uvicorn
from ag_ui.core import BaseEvent, RunAgentInput

from server_support import answer_in_halves
from threadstore.server import TokenAuth, create_app

TOKENS = {f"token-{name}-{n}": f"{name}-{n}" for name in ("alice", "bob") for n in range(100)}


class ProcessGatedAgent:
    """Streams an answer in two halves; the second waits for the run's gate."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, run_id: str) -> asyncio.Event:
        """The gate of ``run_id`` (created closed on first use)."""
        return self.gates.setdefault(run_id, asyncio.Event())

    def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the first half, wait for the gate, yield the second half."""
        return answer_in_halves(input, {"run": input.run_id}, self.gate(input.run_id).wait)


def main(url: str, heartbeat_interval: float = 5.0, outbox: str | None = None) -> None:
    agent = ProcessGatedAgent()
    app = create_app(
        url,
        agent=agent,
        auth=TokenAuth(TOKENS),
        sweep_interval=None,
        heartbeat_interval=heartbeat_interval,
        outbox=outbox,
        store_timeout=1.0 if outbox else None,
    )

    @app.post("/test/gates/{run_id}", include_in_schema=False)
    async def open_gate(run_id: str) -> dict[str, str]:
        agent.gate(run_id).set()
        return {"opened": run_id}

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print("port", sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main(
        sys.argv[1],
        *(float(arg) for arg in sys.argv[2:3]),
        *sys.argv[3:4],  # type: ignore[arg-type]
    )
