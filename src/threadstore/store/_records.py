"""Shared record plumbing for every backend: subclass extras and the writer lock.

A model subclass may declare fields the base schema has no column for. Backends
keep those in one ``extra`` JSON document per row: :func:`split_create` and
:func:`split_update` separate them from the base fields on the way in, and
:class:`ExtrasCodec` turns the document back into typed values on the way out.
Bytes anywhere in them travel as the binary-safe codec's tag
(:mod:`threadstore.binary_json`); documents written before it (typed bytes as
base64 text) read as they did.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from threadstore import binary_json
from threadstore.store._timeouts import bounded, unavailable

__all__ = ["Codecs", "ExtrasCodec", "WriterLock", "merge_extra", "split_create", "split_update"]


def split_create(dto: BaseModel, base_cls: type[BaseModel]) -> tuple[dict[str, Any], str | None]:
    """Return (base fields, extra JSON or None) of a create DTO that may subclass ``base_cls``."""
    base = {name: getattr(dto, name) for name in base_cls.model_fields}
    extra_names = _extra_names(type(dto), base_cls)
    extra = _dump_extra(dto, extra_names) if extra_names else None
    return base, extra


def split_update(update: BaseModel, base_cls: type[BaseModel]) -> tuple[dict[str, Any], str | None]:
    """Return (explicitly-set non-None base fields, extra JSON patch or None) of an update DTO."""
    fields = update.model_dump(exclude_unset=True, exclude_none=True)
    base = {name: getattr(update, name) for name in fields if name in base_cls.model_fields}
    extra_names = [name for name in fields if name not in base_cls.model_fields]
    extra = _dump_extra(update, extra_names) if extra_names else None
    return base, extra


def _dump_extra(dto: BaseModel, names: Any) -> str:
    return binary_json.dumps(dto.model_dump(include=set(names)))


@cache
def _extra_names(cls: type[BaseModel], base_cls: type[BaseModel]) -> tuple[str, ...]:
    return tuple(name for name in cls.model_fields if name not in base_cls.model_fields)


class ExtrasCodec:
    """Validates a row's ``extra`` JSON into the values of a model subclass's own fields."""

    def __init__(self, model: type[BaseModel], base_cls: type[BaseModel]) -> None:
        self.names = _extra_names(model, base_cls)
        self._adapter: type[BaseModel] | None = None
        if self.names:
            fields: dict[str, Any] = {
                name: (model.model_fields[name].annotation, model.model_fields[name])
                for name in self.names
            }
            self._adapter = create_model(
                f"{model.__name__}Extras",
                __config__=ConfigDict(val_json_bytes="base64", extra="ignore"),
                **fields,
            )

    def decode(self, extra_json: str | bytes | None) -> dict[str, Any]:
        """Return the typed extra values stored in ``extra_json`` (missing ones are left out)."""
        if self._adapter is None or not extra_json:
            return {}
        if binary_json.may_hold_tags(extra_json):
            parsed = self._adapter.model_validate(binary_json.loads(extra_json))
        else:
            parsed = self._adapter.model_validate_json(extra_json)
        return {name: getattr(parsed, name) for name in parsed.model_fields_set}


def merge_extra(current: str | None, patch: str) -> str:
    """Return ``current`` (an extra JSON object) with the keys of ``patch`` set."""
    merged = json.loads(current) if current else {}
    merged.update(json.loads(patch))
    return json.dumps(merged)


class Codecs:
    """The extras codecs of one store's four model classes."""

    def __init__(
        self,
        chat: type[BaseModel],
        message: type[BaseModel],
        tool_call: type[BaseModel],
        reasoning: type[BaseModel],
    ) -> None:
        from threadstore.models import Chat, Message, Reasoning, ToolCall

        self.chat = ExtrasCodec(chat, Chat)
        self.message = ExtrasCodec(message, Message)
        self.tool_call = ExtrasCodec(tool_call, ToolCall)
        self.reasoning = ExtrasCodec(reasoning, Reasoning)


class WriterLock:
    """Serializes writers on one connection; re-entrant within the task that holds it.

    A transaction holds the lock for its whole body, so another task's statements can
    neither interleave with it nor read its uncommitted writes. The lock also counts
    the tasks holding or waiting for it: a statement may skip the queue only when
    nobody is in it (:attr:`idle`), which keeps statements in the order they asked.
    Waiters are served in order, except that a ``background`` turn (a flush nobody
    waits for) lets every waiting foreground one go first. With ``timeout``, a task
    that waited that many seconds gives up with
    :class:`~threadstore.errors.StoreUnavailableError` (the holder is stuck on its
    database); so does every task that was waiting when a holder gave up on its
    database (:meth:`give_up_waiting`), instead of waiting as long again.
    """

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout
        self._gave_up_at = -math.inf
        self._locked = False
        self._background_holds = False  # the holder took a background turn
        self._foreground: deque[asyncio.Future[None]] = deque()
        self._background: deque[asyncio.Future[None]] = deque()
        self._holder: contextvars.ContextVar[bool] = contextvars.ContextVar(
            f"writer_lock_{id(self)}", default=False
        )
        self._users = 0

    @property
    def held(self) -> bool:
        """True when the current task already holds the lock."""
        return self._holder.get()

    @property
    def idle(self) -> bool:
        """True when no task holds the lock or waits for it."""
        return self._users == 0

    @property
    def background_only(self) -> bool:
        """True when the lock is free or held by a background turn, and no foreground waits."""
        return (not self._locked or self._background_holds) and not self._foreground

    @property
    def waiting(self) -> int:
        """How many tasks wait for the lock."""
        return len(self._foreground) + len(self._background)

    def give_up_waiting(self) -> None:
        """The holder's database did not answer in time: every task waiting now gives up.

        Each would otherwise wait the whole timeout again behind the same outage.
        """
        self._gave_up_at = time.monotonic()

    def gave_up_since(self, moment: float) -> bool:
        """Whether a holder gave up on its database after ``moment`` (``time.monotonic()``)."""
        return self._gave_up_at >= moment

    def turn(self, *, background: bool = False) -> _Turn:
        """``async with`` the lock for one statement that takes no other lock while it runs."""
        return _Turn(self, background)

    async def _acquire(self, background: bool) -> None:
        if not self._locked:
            self._locked = True
            self._background_holds = background
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._background if background else self._foreground
        queue.append(waiter)
        asked = time.monotonic()
        try:
            if self.timeout is None:
                await waiter
            else:
                async with bounded(self.timeout):
                    await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed the lock as it was cancelled: pass it on
            elif waiter in queue:  # a release since its cancel has dropped it already
                queue.remove(waiter)
            raise
        if self.gave_up_since(asked):
            self._release()  # the next waiter decides for itself
            raise unavailable(self.timeout)
        self._background_holds = background

    def _release(self) -> None:
        # The lock passes straight to the next waiter, so nobody can slip in between.
        for queue in (self._foreground, self._background):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._locked = False

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[bool]:
        """Hold the lock for the block; yields True when this call acquired it (outermost)."""
        if self._holder.get():
            yield False
            return
        async with self.turn():
            token = self._holder.set(True)
            try:
                yield True
            finally:
                self._holder.reset(token)

    @asynccontextmanager
    async def transaction(
        self,
        begin: Callable[[], Awaitable[object]],
        commit: Callable[[], Awaitable[object]],
        rollback: Callable[[], Awaitable[object]],
    ) -> AsyncIterator[None]:
        """Hold the lock for a transaction; a nested block joins the outermost one.

        The outermost block awaits ``begin`` first, then ``commit`` when its body ends,
        or ``rollback`` when it raises.
        """
        async with self.hold() as outermost:
            if not outermost:
                yield
                return
            await begin()
            try:
                yield
            except BaseException:
                await rollback()
                raise
            await commit()


class _Turn:
    """One acquisition of a :class:`WriterLock` (a class: every statement enters one)."""

    __slots__ = ("_background", "_owner")

    def __init__(self, owner: WriterLock, background: bool) -> None:
        self._owner = owner
        self._background = background

    async def __aenter__(self) -> None:
        owner = self._owner
        owner._users += 1
        try:
            await owner._acquire(self._background)
        except BaseException:
            owner._users -= 1
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        owner = self._owner
        owner._release()
        owner._users -= 1
