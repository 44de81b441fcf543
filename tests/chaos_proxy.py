"""A TCP proxy for outage tests: forwards to a server until told to cut or stall.

``ChaosProxy(host, port)`` listens on a free port of 127.0.0.1 and forwards every
connection to ``host:port``. :meth:`~ChaosProxy.cut` closes every connection and refuses
new ones (the server is gone); :meth:`~ChaosProxy.stall` keeps every connection open and
accepts new ones but forwards nothing (the network dropped every packet);
:meth:`~ChaosProxy.restore` forwards again on the same port, and what a stall held back
goes through, as TCP would deliver it once the network came back. Pure asyncio: it runs
on the test's event loop, so the code under test must run on another one (a server in
its thread or process).

Usage: ``async with ChaosProxy("127.0.0.1", 5432) as proxy: ... proxy.port ...``.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

__all__ = ["ChaosProxy"]

_CHUNK = 64 * 1024


class ChaosProxy:
    """Forwards TCP connections to ``host:port``, except while cut or stalled."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        """The port the proxy listens on (set by :meth:`start`; kept across a cut)."""
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        """Listen (on a free port the first time, on the same port after a cut)."""
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Close every connection and stop listening: new connections are refused."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        await self._drop_connections()
        if server is not None:
            await server.wait_closed()

    def stall(self) -> None:
        """Forward nothing, either way, on open and new connections alike."""
        self._flowing.clear()

    async def restore(self) -> None:
        """Forward again (listening again after a cut, on the same port)."""
        if self._server is None:
            await self.start()
        self._flowing.set()

    async def close(self) -> None:
        """Stop listening and close every connection."""
        self._flowing.set()
        await self.cut()

    async def __aenter__(self) -> ChaosProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _drop_connections(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()  # a reset, as a server that went away gives
        self._writers.clear()
        pipes = list(self._pipes)
        for pipe in pipes:
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            self._writers.discard(writer)
            return
        self._writers.add(up_writer)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pipe = asyncio.create_task(self._pipe(source, sink))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(_CHUNK):
                await self._flowing.wait()  # a stall holds the bytes back, and reads no more
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                sink.close()
            self._writers.discard(sink)
