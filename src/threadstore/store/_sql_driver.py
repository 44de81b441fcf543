"""How a SQL backend's driver takes values and runs one statement.

The primitives written once for both SQL backends (``store/_sql_usage.py``,
``store/_sql_lifecycle.py``) run on this: each backend gives it once
(``PostgresDriver``, ``SQLiteDriver``), and its ledger and lifecycle share it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from datetime import date, datetime
from typing import Any
from uuid import UUID

__all__ = ["SQLDriver"]


def _same(value: Any) -> Any:
    return value


class SQLDriver(abc.ABC):
    """Values as the driver takes and gives them (by default as they are), and a statement run."""

    uuid_param: Callable[[UUID], Any] = staticmethod(_same)
    time_param: Callable[[datetime], Any] = staticmethod(_same)
    flag_param: Callable[[bool], Any] = staticmethod(_same)
    uuid_value: Callable[[Any], UUID] = staticmethod(_same)
    time_value: Callable[[Any], datetime] = staticmethod(_same)
    day_value: Callable[[Any], date] = staticmethod(_same)

    @abc.abstractmethod
    async def _write(
        self, sql: str, params: Sequence[Any], *, missing: str | None = None
    ) -> list[Any]:
        """Run one write; the rows it returns (``missing``: it must return one, else
        ``NotFoundError(missing)``)."""

    @abc.abstractmethod
    async def _read(self, sql: str, params: Sequence[Any], small: bool = False) -> list[Any]:
        """Run one query (``small``: of a few rows); its rows."""
