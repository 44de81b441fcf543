"""The FastAPI app factory: AG-UI endpoints plus the chat-history API over one store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.types import Scope

import threadstore
from threadstore import _telemetry
from threadstore.agui import (
    DEFAULT_OUTBOX_MAX_BYTES,
    BackgroundCompactor,
    DistributedRunManager,
    HistoryWindow,
    Outbox,
    StorageAgent,
)
from threadstore.lifecycle import CompactionPolicy
from threadstore.models import Chat
from threadstore.server._agents import InnerAgent, load_agent
from threadstore.server._auth import Authenticator, LocalUserAuth, user_uuid_for
from threadstore.server._demo_agent import DEFAULT_DEMO_DELAY
from threadstore.server._deps import ServerState
from threadstore.server._errors import install_error_handlers
from threadstore.server._limits import DEFAULT_LIMITS, BodyLimitMiddleware, Limits
from threadstore.server._readiness import router as readiness_router
from threadstore.server._routes_agui import router as agui_router
from threadstore.server._routes_branches import router as branches_router
from threadstore.server._routes_chats import admin_router
from threadstore.server._routes_chats import router as chats_router
from threadstore.server._routes_lifecycle import router as lifecycle_router
from threadstore.server._routes_search import router as search_router
from threadstore.server._routes_usage import router as usage_router
from threadstore.server._routes_web import install_web
from threadstore.server._run_gate import RunGate
from threadstore.server._shutdown import stop_runs_on_exit_signal
from threadstore.server._sse import DEFAULT_KEEPALIVE_INTERVAL
from threadstore.store import SWEEP_BATCH, Store, open_store, run_storage

__all__ = ["DEFAULT_DB_URL", "create_app"]

logger = logging.getLogger(__name__)

DEFAULT_DB_URL = "sqlite:///./threadstore.db"
"""Where ``threadstore serve`` keeps its data unless told otherwise."""


def create_app(
    store: str | Store = DEFAULT_DB_URL,
    *,
    agent: InnerAgent | str = "demo",
    model: str | None = None,
    demo_delay: float = DEFAULT_DEMO_DELAY,
    auth: Authenticator | None = None,
    limits: Limits = DEFAULT_LIMITS,
    migrate: bool = True,
    agent_name: str = "assistant",
    storage_agent: Callable[..., Any] | None = None,
    keepalive_interval: float = DEFAULT_KEEPALIVE_INTERVAL,
    retention: float = 60.0,
    heartbeat_interval: float = 5.0,
    stale_after: float = 30.0,
    sweep_interval: float | None = 60.0,
    cors_origins: Sequence[str] = (),
    history_window: HistoryWindow | None = None,
    admins: Collection[str | UUID] = (),
    store_timeout: float | None = None,
    compaction: CompactionPolicy | None = None,
    retention_interval: float | None = None,
    retention_batch: int = SWEEP_BATCH,
    retention_pause: float = 0.05,
    outbox: str | Path | None = None,
    outbox_max_bytes: int = DEFAULT_OUTBOX_MAX_BYTES,
) -> FastAPI:
    """Build the threadstore server app (docs/server.md).

    ``store``: a URL (opened, migrated when ``migrate``, closed with the app) or an open
    :class:`~threadstore.store._base.Store` the caller keeps owning. ``agent``: an AG-UI
    agent or an ``--agent`` spec (``demo``, ``openai``, ``module:attribute``; ``model`` and
    ``demo_delay`` apply to a spec, and the app closes an agent it built). Each run wraps it
    in ``storage_agent(agent_name, user_uuid, store, store, agent, run_repo=store)``
    (default :class:`~threadstore.agui._agent.StorageAgent`; a subclass customizes how runs
    are stored). ``auth`` defaults to the single local user. Runs whose process stopped
    heartbeating for ``stale_after`` seconds are finalized at start-up and every
    ``sweep_interval`` seconds (``None``: only at start-up). ``cors_origins``: browser
    origins allowed to call the server (``"*"``: any); none by default.
    ``history_window`` (a :class:`~threadstore.agui._window.HistoryWindow`, passed to
    ``storage_agent`` as ``history_window=``) gives the agent only a chat's last turns; by
    default it gets the whole stored history. ``admins`` (user ids or UUIDs, as the
    authenticator resolves them) may page every user's chats at ``GET /api/admin/chats``.
    ``store_timeout``: seconds a store call waits on a store opened from a URL (default:
    the URL's ``?timeout=``, else 5); past it the API answers ``503``.
    ``compaction``: chats whose agent input is over its budget are summarized after their
    runs, in the background; its summarizer also serves ``POST /api/chats/{id}/compact``
    (default: the deterministic one). ``retention_interval``: every so many seconds the
    retention policies are applied in the background (off by default), ``retention_batch``
    chats per transaction, at least ``retention_pause`` seconds between batches, keeping the
    database busy a quarter of the time at most. ``outbox``: a local journal file (one per
    server process) where runs' writes wait while the store is away (``RUN_FINISHED`` then
    goes out once they are journaled), drained in order when the store answers again, also
    at the next start; past ``outbox_max_bytes`` (256 MiB) of waiting writes, new runs get
    ``503``. Without one, a run whose store stays away for ``final_flush_deadline`` ends
    with ``RUN_ERROR`` ``STORE_UNAVAILABLE``.

    On PostgreSQL the runs go through a
    :class:`~threadstore.agui._distributed.DistributedRunManager`, so several server
    processes on one database resume, cancel and connect to each other's runs.
    """
    inner = (
        load_agent(agent, model=model, demo_delay=demo_delay) if isinstance(agent, str) else agent
    )
    owns_agent = isinstance(agent, str)
    authenticator: Authenticator = auth or LocalUserAuth()
    wrap: Callable[..., Any] = storage_agent or StorageAgent

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if isinstance(store, str):
            timeout = {} if store_timeout is None else {"timeout": store_timeout}
            opened = await open_store(store, setup=migrate, **timeout)
        else:
            opened = store

        # Only a window that is set is passed: a custom factory need not take one.
        window = {} if history_window is None else {"history_window": history_window}

        compactor = None if compaction is None else BackgroundCompactor(opened, compaction)

        def per_run(user_uuid: UUID, chat: Chat | None, branch_from: UUID | None = None) -> Any:
            """A run's agent; ``chat``: its thread's chat as the route just looked it up."""
            agent = wrap(agent_name, user_uuid, opened, opened, inner, run_repo=opened, **window)
            if isinstance(agent, StorageAgent):
                agent.use_chat(chat)  # not read again
                agent.compactor = compactor
            if branch_from is not None:
                agent.branch_from = branch_from  # regenerate and edit: see routes_branches
            return agent

        # Outside PostgreSQL it is the in-process manager. Streams of this process's runs
        # come from memory, never waiting for the relay: the client goes first.
        journal = None if outbox is None else Outbox(outbox, max_bytes=outbox_max_bytes)
        manager: DistributedRunManager[Any] = DistributedRunManager(
            per_run,
            outbox=journal,
            store=opened,
            retention=retention,
            heartbeat_interval=heartbeat_interval,
            durable_delivery=False,
            expose_exceptions=False,  # clients get no Python text; the log has it
            # The run gate reads the run's record before every POST /agui; the branch
            # routes' runs have new ids.
            refuse_live_elsewhere=False,
        )
        sweeper: asyncio.Task[None] | None = None
        retainer: asyncio.Task[None] | None = None
        # An erasure also ends the user's runs here and drops the events kept for resumes.
        opened.chats.add_erasure_hook("live_runs", manager.forget_user)
        if journal is not None:  # and the user's writes waiting in the outbox
            opened.chats.add_erasure_hook("outbox", journal.forget)
        # What /readyz says, as the gauge threadstore.outbox.depth (when an SDK collects).
        unobserve = _telemetry.observe_gauge("threadstore.outbox.depth", manager.outbox_depth)
        try:
            await manager.start()
            if journal is not None:
                await journal.open(run_storage(opened, opened, opened))
                await _drain_at_start(journal)  # before any sweep looks at its runs
                journal.start()
            swept = await manager.sweep(stale_after)
            if swept:
                logger.info("finalized %d run(s) left over by a stopped server", swept)
            if sweep_interval is not None:
                sweeper = asyncio.create_task(_sweep_forever(manager, stale_after, sweep_interval))
            if retention_interval is not None:
                retainer = asyncio.create_task(
                    _retain_forever(opened, retention_interval, retention_batch, retention_pause)
                )
            app.state.threadstore = ServerState(
                store=opened,
                manager=manager,
                auth=authenticator,
                limits=limits,
                keepalive_interval=keepalive_interval,
                runs=RunGate(),
                stale_after=stale_after,
                sweep_interval=sweep_interval,
                admins=frozenset(a if isinstance(a, UUID) else user_uuid_for(a) for a in admins),
                compaction=compaction,
                compactor=compactor,
            )
            with stop_runs_on_exit_signal(manager):
                yield
        finally:
            app.state.threadstore = None
            unobserve()
            opened.chats.remove_erasure_hook("live_runs")
            for task in (sweeper, retainer):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await manager.close()
            if journal is not None:
                await journal.close()
            if compactor is not None:
                await compactor.close()
            if owns_agent and (close := getattr(inner, "aclose", None)) is not None:
                await close()
            if isinstance(store, str):
                await opened.close()

    app = FastAPI(
        title="threadstore",
        version=threadstore.__version__,
        summary="An AG-UI agent server with durable, typed chat history.",
        lifespan=lifespan,
    )
    install_error_handlers(app, max_json_depth=limits.max_json_depth)
    app.include_router(agui_router)
    app.include_router(chats_router)
    app.include_router(admin_router)
    app.include_router(branches_router)
    app.include_router(readiness_router)
    app.include_router(lifecycle_router)
    app.include_router(search_router)
    app.include_router(usage_router)
    install_web(app)

    @app.get("/healthz", tags=["server"], summary="Liveness")
    async def healthz() -> dict[str, str]:
        """Return ``{"status": "ok"}`` while the server is up (the store is ``/readyz``'s)."""
        return {"status": "ok"}

    def body_limit(scope: Scope) -> int:
        if scope.get("path", "").rstrip("/") == "/api/chats/import":
            return limits.max_import_bytes
        return limits.max_body_bytes

    app.add_middleware(BodyLimitMiddleware, limit_for=body_limit)
    if cors_origins:
        # Added last, so it is outermost: preflights never reach auth, and error
        # answers (a 413 included) carry the headers a browser needs to read them.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=["Content-Type"],
        )
    return app


async def _drain_at_start(outbox: Outbox) -> None:
    """Drain what a previous process left in the outbox, before any sweep looks at its runs."""
    if not outbox.depth:
        return
    try:
        applied = await outbox.drain()
        logger.info("drained %d outbox entries left by a previous run of the server", applied)
    except Exception:
        logger.warning("the outbox could not be drained at start-up; retrying", exc_info=True)


async def _sweep_forever(
    manager: DistributedRunManager[Any], stale_after: float, interval: float
) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await manager.sweep(stale_after)
        except Exception:
            logger.warning("periodic run sweep failed; retrying next interval", exc_info=True)


RETENTION_SHARE = 0.25
"""The most of the time the background retention sweep keeps the database busy: the runs
beside it keep the rest of the machine."""


async def _retain_forever(store: Store, interval: float, batch: int, pause: float) -> None:
    while True:
        try:
            report = await store.chats.sweep_expired(
                batch=batch, pause=pause, share=RETENTION_SHARE
            )
            if report.chats or report.run_events:
                logger.info(
                    "retention: deleted %d chat(s), %d message(s), %d run event(s)",
                    report.chats,
                    report.messages,
                    report.run_events,
                )
        except Exception:
            logger.warning("retention sweep failed; retrying next interval", exc_info=True)
        await asyncio.sleep(interval)
