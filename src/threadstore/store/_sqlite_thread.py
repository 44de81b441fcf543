"""One SQLite connection that lives on one worker thread: the SQLite backend's I/O thread.

sqlite3 blocks, so the store hands its work to a thread. Work goes as a whole
function (``call(fn, ...)``: ``fn`` gets the connection), so a transaction of many
statements costs one hop to the thread and one back, not one per statement. This
is a single-worker :class:`~concurrent.futures.ThreadPoolExecutor` and
``loop.run_in_executor``: public standard-library calls, usable from any event loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from threadstore.errors import ConfigurationError
from threadstore.store._timeouts import unavailable

__all__ = ["DatabaseThread"]

_T = TypeVar("_T")


class DatabaseThread:
    """A sqlite3 connection used only from its own worker thread."""

    def __init__(self, name: str = "threadstore-sqlite", *, timeout: float) -> None:
        self._name = name
        self.timeout = timeout
        """Seconds a call waits for the thread to take it up.

        A call the thread has not begun by then never runs and raises
        :class:`~threadstore.errors.StoreUnavailableError`; one it has begun is waited
        for, so what it did is what the caller learns (a busy database bounds it by
        the connection's ``busy_timeout``).
        """
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self.calls = 0
        """Hops to the thread so far (each runs one function, however many statements)."""

    @property
    def is_open(self) -> bool:
        """Whether the connection is open."""
        return self._conn is not None

    async def open(self, path: str, setup: Callable[[sqlite3.Connection], object]) -> None:
        """Open ``path`` on the thread (autocommit mode) and run ``setup`` on the connection."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            try:
                setup(conn)
            except BaseException:
                conn.close()
                raise
            return conn

        try:
            self._conn = await asyncio.get_running_loop().run_in_executor(executor, connect)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        self._executor = executor

    async def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(connection, *args)`` on the thread and return what it returns."""
        conn, executor = self._conn, self._executor
        if conn is None or executor is None:
            raise ConfigurationError("the store is not connected: use open_store() or connect()")
        self.calls += 1
        loop = asyncio.get_running_loop()
        job = executor.submit(fn, conn, *args)
        try:
            async with asyncio.timeout(self.timeout):
                return await asyncio.wrap_future(job, loop=loop)
        except TimeoutError as exc:
            if job.cancel():  # it never began, and now never will: nothing was done
                raise unavailable(self.timeout) from exc
        return await asyncio.wrap_future(job, loop=loop)

    async def close(self) -> None:
        """Close the connection on its thread and let the thread end."""
        conn, self._conn = self._conn, None
        executor, self._executor = self._executor, None
        if conn is None or executor is None:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        finally:
            executor.shutdown(wait=False)
