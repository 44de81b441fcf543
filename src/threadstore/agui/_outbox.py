"""The outbox: a local journal of run writes the store could not take, drained in order.

When a run's flush fails because the store is away (:class:`StoreUnavailableError`, or
a connection that broke), its writes are appended here instead, fsynced, and count as
durable: ``RUN_FINISHED`` may then go out. From then on every write of that run comes
here too, so the store receives them in the order they were made. A drain task applies
the entries to the store, oldest first, as soon as it answers again; an entry is deleted
in the transaction's wake, so a crash between the two replays it, and replaying is
harmless: a create that already landed is applied as an update (:func:`landed`).

The journal is one SQLite file in WAL mode with ``synchronous=FULL`` (each append is on
disk when it returns) and ``locking_mode=EXCLUSIVE`` (one process per file: a second
one is refused at open, and a killed process's lock goes with it). Its size is bounded
(``max_bytes`` of serialized writes); an append that would pass it raises
:class:`OutboxFullError`. A restarted process opens the same file and drains what its
predecessor left: call :meth:`Outbox.drain` before sweeping runs, so a run whose end is
journaled is not taken for one whose owner died.

A run that starts while the store is away journals its set-up first (``append_set_up``:
the client's input and who runs it); the drain sets it up then, as it would have been
(the chat found or created, the run recorded, the input screened against the stored
history and appended), and the run's later entries, written for a provisional chat, go
to the chat that set-up found (``aliases`` in the file, so a crash in between keeps it).

Healthy stores never touch it: only a run whose write failed journals, which keeps the
common path exactly as fast as without an outbox.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import json
import logging
import sqlite3
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from threadstore.agui._records import as_update, dto_with_fields
from threadstore.agui._setup import RunSetUp
from threadstore.errors import InvalidInputError, RunLiveError, StoreError, StoreUnavailableError
from threadstore.store import RunStorage, Write
from threadstore.store.ops import WRITE_TYPES, CreateMessage, CreateReasoning, CreateToolCall

__all__ = [
    "DEFAULT_OUTBOX_MAX_BYTES",
    "Outbox",
    "OutboxFullError",
    "decode_writes",
    "encode_writes",
    "is_outage",
    "landed",
    "replayed",
]

logger = logging.getLogger(__name__)

DEFAULT_OUTBOX_MAX_BYTES = 256 * 1024 * 1024
"""The outbox's default bound: 256 MiB of serialized writes."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " chat_uuid TEXT NOT NULL, run_id TEXT NOT NULL, owner TEXT,"
    " payload TEXT NOT NULL, user_uuid TEXT)"
)
_INSERT = (
    "INSERT INTO entries (chat_uuid, run_id, owner, payload, user_uuid) VALUES (?, ?, ?, ?, ?)"
)
_ALIASES = "CREATE TABLE IF NOT EXISTS aliases (provisional TEXT PRIMARY KEY, real TEXT)"
_BY_TYPE = {cls.method: cls for cls in WRITE_TYPES}


class OutboxFullError(StoreUnavailableError):
    """The store is away and the outbox holds as much as it may (``max_bytes``)."""


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the store is away (unreachable or not answering in time)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, StoreUnavailableError | OSError | TimeoutError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


# --- the writes' JSON ---------------------------------------------------------------------


def _encode_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return {"$model": value.model_dump(mode="json")}
    if isinstance(value, UUID):
        return {"$uuid": str(value)}
    if isinstance(value, enum.Enum):
        return value.value
    return value


def encode_writes(writes: Sequence[Write]) -> str:
    """The JSON of ``writes`` (what :func:`decode_writes` reads back)."""
    return json.dumps(
        [
            {
                "op": write.method,
                **{
                    field.name: _encode_value(getattr(write, field.name))
                    for field in dataclasses.fields(write)
                },
            }
            for write in writes
        ],
        allow_nan=False,
        separators=(",", ":"),
    )


def _decode_value(hint: Any, value: Any) -> Any:
    if isinstance(value, dict) and "$uuid" in value:
        return UUID(value["$uuid"])
    if isinstance(value, dict) and "$model" in value:
        model: type[BaseModel] = hint
        fields: dict[str, Any] = value["$model"]
        known = {k: v for k, v in fields.items() if k in model.model_fields}
        extra = {k: v for k, v in fields.items() if k not in model.model_fields}
        return dto_with_fields(model.model_validate(known), extra)
    for kind in typing.get_args(hint) or (hint,):
        if isinstance(kind, type) and issubclass(kind, enum.Enum) and value is not None:
            return kind(value)
    return value


def decode_writes(text: str) -> list[Write]:
    """The writes :func:`encode_writes` turned into ``text``."""
    writes: list[Write] = []
    for item in json.loads(text):
        cls = _BY_TYPE[item.pop("op")]
        hints = typing.get_type_hints(cls)
        writes.append(cls(**{k: _decode_value(hints[k], v) for k, v in item.items()}))
    return writes


async def landed(storage: RunStorage, write: Write) -> bool:
    """Whether the record the create ``write`` makes is in the store already."""
    if isinstance(write, CreateMessage):
        return await storage.get_message(write.data.message_uuid) is not None
    assert isinstance(write, CreateToolCall | CreateReasoning)
    parent = await storage.get_message(write.data.message_uuid)
    if parent is None:
        return False
    children = parent.tool_calls if isinstance(write, CreateToolCall) else parent.reasonings
    return any(child.uuid == write.data.uuid for child in children)


def _aliased(write: Write, aliases: dict[UUID, UUID | None]) -> Write | None:
    """``write`` for the chat its provisional chat turned out to be (``None``: no chat)."""
    if isinstance(write, CreateMessage):
        if write.data.chat_uuid not in aliases:
            return write
        real = aliases[write.data.chat_uuid]
        return (
            None
            if real is None
            else CreateMessage(write.data.model_copy(update={"chat_uuid": real}))
        )
    chat = getattr(write, "chat_uuid", None)
    if chat is None or chat not in aliases:
        return write
    real = aliases[chat]
    return None if real is None else dataclasses.replace(write, chat_uuid=real)  # type: ignore[arg-type]


async def _set_up(storage: RunStorage, spec: dict[str, Any]) -> UUID | None:
    """Set a run up as it would have been when it started: its chat's uuid (``None``: none)."""
    from ag_ui.core import RunAgentInput

    setup = RunSetUp(
        storage,
        RunAgentInput.model_validate(spec["input"]),
        user_uuid=UUID(spec["user_uuid"]),
        owner=spec["owner"],
        chat_name=spec["chat_name"],
        tenant_id=spec["tenant_id"],
        app_id=spec["app_id"],
        records_run=spec["records_run"],
    )
    prepared = None
    try:
        prepared = await setup.prepare(None)
        return (await setup.write(prepared)).chat.chat_uuid
    except (InvalidInputError, RunLiveError) as exc:
        found = prepared.chat if prepared is not None else None
        logger.error(
            "run %s, started while the store was away, could not be set up (%s): its input "
            "is not stored%s",
            setup.input.run_id,
            exc,
            "" if found is not None else ", nor its answer",
        )
        return None if found is None else found.chat_uuid


async def replayed(storage: RunStorage, write: Write) -> Write:
    """``write``, or the update it amounts to when it is a create that already landed."""
    if not isinstance(write, CreateMessage | CreateToolCall | CreateReasoning):
        return write
    if not await landed(storage, write):
        return write
    return as_update(
        write, write.data.message_uuid if isinstance(write, CreateMessage) else write.data.uuid
    )


# --- the journal ---------------------------------------------------------------------------


class Outbox:
    """A journal file of run writes waiting for the store; see the module docstring."""

    retry_max_delay: float = 2.0
    """Longest wait between two drain attempts while the store stays away."""

    def __init__(self, path: str | Path, *, max_bytes: int = DEFAULT_OUTBOX_MAX_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError(f"the outbox's max_bytes must be >= 1, got {max_bytes}")
        self.path = Path(path)
        self.max_bytes = max_bytes
        # One thread owns the connection: every call is a short blocking file operation.
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "threadstore-outbox")
        self._db: sqlite3.Connection | None = None
        self._bytes = 0
        self._depth = 0
        self._refused = False  # an append did not fit: full until a drain makes room
        self._pending: dict[tuple[UUID, str], str | None] = {}
        self._aliases: dict[UUID, UUID | None] = {}
        self._appended = asyncio.Event()
        self._drainer: asyncio.Task[None] | None = None
        self._storage: RunStorage | None = None
        self._drain_lock = asyncio.Lock()

    # --- state -----------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Entries (flushes of runs) waiting for the store."""
        return self._depth

    @property
    def size(self) -> int:
        """Bytes of serialized writes waiting for the store."""
        return self._bytes

    @property
    def full(self) -> bool:
        """Whether the outbox holds as much as it may: new runs are refused meanwhile."""
        return self._refused or self._bytes >= self.max_bytes

    def pending_runs(self) -> dict[tuple[UUID, str], str | None]:
        """``(chat_uuid, run_id)`` of every run with writes waiting, to its owner."""
        return dict(self._pending)

    # --- life ------------------------------------------------------------------------------

    async def open(self, storage: RunStorage) -> None:
        """Open (or create) the journal file; entries are drained into ``storage``."""
        self._storage = storage
        await self._call(self._open_file)

    def _open_file(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute(_SCHEMA)
            db.execute(_ALIASES)
            # Takes the exclusive lock now: a second process on this file fails here.
            db.execute("BEGIN IMMEDIATE")
            db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            db.close()
            raise StoreError(
                f"the outbox {self.path} cannot be opened ({exc}); is another server using it?"
            ) from exc
        rows = db.execute(
            "SELECT chat_uuid, run_id, owner, length(payload) FROM entries ORDER BY seq"
        ).fetchall()
        self._aliases = {
            UUID(provisional): None if real is None else UUID(real)
            for provisional, real in db.execute("SELECT provisional, real FROM aliases")
        }
        self._db = db
        self._depth = len(rows)
        self._bytes = sum(row[3] for row in rows)
        self._pending = {(UUID(row[0]), row[1]): row[2] for row in rows}

    def start(self) -> None:
        """Start the task that drains entries whenever there are some."""
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain_forever(), name="threadstore-outbox")

    async def close(self) -> None:
        """Stop draining and close the file (what is left stays for the next start)."""
        if self._drainer is not None:
            self._drainer.cancel()
            await asyncio.gather(self._drainer, return_exceptions=True)
            self._drainer = None
        if self._db is not None:
            await self._call(self._db.close)
            self._db = None
        self._thread.shutdown(wait=True)

    async def __aenter__(self) -> Outbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    # --- appending -------------------------------------------------------------------------

    async def append(
        self,
        chat_uuid: UUID,
        run_id: str,
        owner: str | None,
        writes: Sequence[Write],
        user_uuid: UUID | None = None,
    ) -> None:
        """Journal one flush of a run; on disk when this returns (:class:`OutboxFullError`).

        ``user_uuid``: whose chat it is, so that erasing the user (:meth:`forget`) takes
        the entry too.
        """
        await self._append(chat_uuid, run_id, owner, encode_writes(writes), user_uuid)

    async def append_set_up(
        self, chat_uuid: UUID, run_id: str, owner: str | None, spec: dict[str, Any]
    ) -> None:
        """Journal the set-up of a run started while the store is away (``chat_uuid``: the
        provisional chat its later writes name); see the module docstring."""
        user = UUID(spec["user_uuid"]) if spec.get("user_uuid") else None
        await self._append(chat_uuid, run_id, owner, json.dumps({"set_up": spec}), user)

    async def _append(
        self,
        chat_uuid: UUID,
        run_id: str,
        owner: str | None,
        payload: str,
        user_uuid: UUID | None = None,
    ) -> None:
        if self._bytes + len(payload) > self.max_bytes:
            self._refused = True
            raise OutboxFullError(
                f"the store is unavailable and the outbox is full ({self._bytes} of "
                f"{self.max_bytes} bytes waiting)"
            )
        user = None if user_uuid is None else str(user_uuid)
        await self._sql(_INSERT, str(chat_uuid), run_id, owner, payload, user)
        self._bytes += len(payload)
        self._depth += 1
        self._pending[(chat_uuid, run_id)] = owner
        self._appended.set()

    async def _sql(self, sql: str, *args: Any) -> list[Any]:
        """Run one statement on the journal's thread; its rows."""
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self._execute, sql, args
        )

    def _execute(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        assert self._db is not None, "the outbox is not open"
        return self._db.execute(sql, args).fetchall()

    async def _run_settled(self, chat_uuid: str, run_id: str) -> None:
        """Forget the run's pending writes once the journal holds none of it."""
        sql = "SELECT 1 FROM entries WHERE chat_uuid = ? AND run_id = ? LIMIT 1"
        if not await self._sql(sql, chat_uuid, run_id):
            self._pending.pop((UUID(chat_uuid), run_id), None)

    # --- erasure and aliases ---------------------------------------------------------------

    async def forget(self, user_uuid: UUID) -> int:
        """Delete every entry of the user's chats; how many went (an erasure's hook).

        Their writes would only be refused by the store after the erasure; their content
        must not wait on disk for the store to come back either.
        """
        async with self._drain_lock:  # never under an entry being drained
            gone = await self._sql(
                "DELETE FROM entries WHERE user_uuid = ?"
                " RETURNING chat_uuid, run_id, length(payload)",
                str(user_uuid),
            )
        for chat_uuid, run_id, size in gone:
            self._depth -= 1
            self._bytes -= size
            await self._run_settled(chat_uuid, run_id)
        return len(gone)

    def real_chat(self, chat_uuid: UUID) -> UUID:
        """The chat a run started while the store was away now writes to, once its set-up
        is drained (its provisional one until then)."""
        return self._aliases.get(chat_uuid) or chat_uuid

    # --- draining --------------------------------------------------------------------------

    async def drain(self) -> int:
        """Apply every entry to the store, oldest first; return how many were applied.

        Stops at the first entry the store cannot take because it is away (it is tried
        again later). An entry the store refuses for another reason is applied write by
        write, and a write refused on its own is dropped with an error in the log: it
        could only fail again, and it must not hold back every later run.
        """
        storage = self._storage
        assert storage is not None, "the outbox is not open"
        applied = 0
        async with self._drain_lock:
            if self._depth:
                await self._heartbeat(storage)
            while self._depth:
                [(seq, chat, run_id, payload)] = await self._sql(
                    "SELECT seq, chat_uuid, run_id, payload FROM entries ORDER BY seq LIMIT 1"
                )
                if payload.startswith("{"):  # a run's set-up
                    real = await _set_up(storage, json.loads(payload)["set_up"])
                    await self._call(self._settle_set_up, seq, chat, real)
                    self._aliases[UUID(chat)] = real
                else:
                    await self._apply(storage, decode_writes(payload))
                    await self._sql("DELETE FROM entries WHERE seq = ?", seq)
                self._depth -= 1
                self._bytes -= len(payload)
                self._refused = False
                applied += 1
                await self._run_settled(chat, run_id)
        return applied

    async def _heartbeat(self, storage: RunStorage) -> None:
        """Refresh the heartbeat of every run with writes waiting, as their owner.

        Their end is on its way: no sweep of any process may take them for dead while
        the drain stores it.
        """
        if storage.run_repo is None:
            return
        by_owner: dict[str, list[tuple[UUID, str]]] = {}
        for key, owner in self._pending.items():
            if owner is not None:
                by_owner.setdefault(owner, []).append(key)
        for owner, keys in by_owner.items():
            await storage.run_repo.heartbeat_runs(owner, keys)

    async def _apply(self, storage: RunStorage, journaled: list[Write]) -> None:
        aliases = self._aliases
        writes = [w for w in (_aliased(w, aliases) for w in journaled) if w is not None]
        if not writes:
            return
        try:
            await storage.write([await replayed(storage, write) for write in writes])
        except Exception as exc:
            if is_outage(exc):
                raise
            logger.warning(
                "an outbox entry failed as a whole (%s); applying it write by write", exc
            )
            for write in writes:
                try:
                    await storage.write([await replayed(storage, write)])
                except Exception as one:
                    if is_outage(one):
                        raise
                    logger.error("dropping an outbox write the store refuses: %s: %s", write, one)

    def _settle_set_up(self, seq: int, provisional: str, real: UUID | None) -> None:
        assert self._db is not None
        with self._db:  # one transaction: the alias is kept exactly when the entry is gone
            self._db.execute("BEGIN")
            self._db.execute(
                "INSERT OR REPLACE INTO aliases VALUES (?, ?)",
                (provisional, None if real is None else str(real)),
            )
            self._db.execute("DELETE FROM entries WHERE seq = ?", (seq,))

    async def _drain_forever(self) -> None:
        failures = 0
        while True:
            if not self._depth:
                self._appended.clear()
                await self._appended.wait()
            try:
                await self.drain()
                failures = 0
            except Exception as exc:
                failures += 1
                # Capped before it is computed: an outage of any length never overflows it.
                delay = min(self.retry_max_delay, 0.05 * 2.0 ** min(failures, 16))
                logger.info("outbox drain waits for the store (%s); next try in %.2f s", exc, delay)
                await asyncio.sleep(delay)
