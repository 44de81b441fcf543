"""How long a store call may wait for its database, shared by the SQL backends.

Every call of a SQL store is bounded by the store's ``timeout`` (seconds): a database
that does not answer in time, or cannot be reached, raises
:class:`~threadstore.errors.StoreUnavailableError` instead of holding the caller. The
timeout is set with ``open_store(url, timeout=...)`` or ``?timeout=`` in the URL (the
keyword wins); :data:`DEFAULT_TIMEOUT` otherwise.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from urllib.parse import parse_qsl, urlencode

from threadstore.errors import ConfigurationError, StoreUnavailableError

__all__ = ["DEFAULT_TIMEOUT", "bounded", "caused_by", "split_timeout", "unavailable"]

DEFAULT_TIMEOUT = 5.0
"""Seconds a store call waits for its database before it gives up."""

_OPTION = "timeout"


def split_timeout(url: str, timeout: float | None) -> tuple[str, float]:
    """The URL without its ``timeout`` option, and the timeout in force (checked).

    ``timeout`` (the caller's keyword) wins over the URL's option; neither gives
    :data:`DEFAULT_TIMEOUT`.
    """
    base, _, query = url.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    from_url = dict(pairs).get(_OPTION)
    if from_url is not None:  # a URL without the option is passed on untouched
        kept = [(name, value) for name, value in pairs if name != _OPTION]
        url = base + ("?" + urlencode(kept) if kept else "")
    if timeout is None and from_url is not None:
        try:
            timeout = float(from_url)
        except ValueError:
            raise ConfigurationError(
                f"timeout={from_url!r} in the store URL: give seconds, e.g. timeout=5"
            ) from None
    if timeout is None:
        return url, DEFAULT_TIMEOUT
    if not (math.isfinite(timeout) and timeout > 0):
        raise ConfigurationError(
            f"the store timeout must be a positive number of seconds, got {timeout}"
        )
    return url, float(timeout)


def caused_by(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc``, or an exception it was raised from or while handling, is of ``kinds``.

    A driver that fails to roll back on a lost connection raises its own error while
    handling the loss; the loss is still what happened.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def unavailable(timeout: float | None, cause: BaseException | None = None) -> StoreUnavailableError:
    """The error for a database that did not answer in ``timeout`` s (or failed with ``cause``)."""
    if cause is None or isinstance(cause, TimeoutError):
        within = "in time" if timeout is None else f"within {timeout:g} s"
        reason = f"the database did not answer {within}"
    else:
        # The class only: a driver's text may name hosts or users.
        reason = f"the database cannot be reached ({type(cause).__name__})"
    return StoreUnavailableError(f"the store is unavailable: {reason}", timeout=timeout)


class bounded:  # lower case: it reads as a function, ``async with bounded(t):``
    """``async with`` a block that must end within ``timeout`` s, else
    :class:`StoreUnavailableError` (a class: every call of a thread trip enters one)."""

    __slots__ = ("_deadline", "_timeout")

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._deadline = asyncio.timeout(timeout)

    async def __aenter__(self) -> None:
        await self._deadline.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._deadline.__aexit__(exc_type, exc, tb)
        except TimeoutError as expired:
            raise unavailable(self._timeout) from expired
