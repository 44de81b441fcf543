"""The storage agent: wrap an AG-UI agent and persist its stream as chat history.

:class:`StorageAgent` (also ``AGUIStorageAgent``, the seed's name) yields the inner
agent's events unchanged and in real time and never waits on the store; its run's
:class:`~threadstore.agui._writer.RunPersister` folds and writes them in the background.
Before the run it finds or creates the chat, screens the input messages against the
stored history and replays that history to the inner agent; when what its set-up
writes will store is known from what it read, the inner agent starts while they go on
(its ``RUN_STARTED`` waits for no write, its later events wait for them). How the run
ends decides the status of its records. The whole write path is in docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, runtime_checkable
from uuid import UUID

from ag_ui.core import (
    PROTOCOL_VERSION,
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    BaseEvent,
    EventType,
    MessagesSnapshotEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

from threadstore.agui._given import (
    TRANSLATION,
    Appended,
    as_stored,
    kept_translation,
    translation_after,
)
from threadstore.agui._window import HistoryWindow
from threadstore.agui._writer import EventHandler, HandlerKind, PersisterConfig, RunPersister
from threadstore.codec import (
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
    chat_name_from_messages,
    message_create_from_agui,
    tool_result_text,
    translate_messages,
)
from threadstore.errors import ConflictError, InvalidInputError, RunLiveError, StoreError
from threadstore.fold import (
    HISTORY_INDEX,
    ConversationFold,
    HistoryIndex,
    IdsAdded,
    StoredFacts,
)
from threadstore.models import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    Role,
    Run,
    RunStatus,
    utcnow,
)
from threadstore.store import (
    ChatRepositoryLike,
    HistoryView,
    MessageRepositoryLike,
    RunRepositoryLike,
    Store,
    TreeNode,
    in_steps,
    off_loop,
)

if TYPE_CHECKING:
    import ag_ui.core
    from pydantic import BaseModel

__all__ = [
    "CHAT_DELETED_ERROR_CODE",
    "INVALID_INPUT_ERROR_CODE",
    "RUN_LIVE_ERROR_CODE",
    "AGUIAgent",
    "AGUIStorageAgent",
    "StorageAgent",
    "kept_translation",
]

logger = logging.getLogger(__name__)

INVALID_INPUT_ERROR_CODE = "INVALID_INPUT"
"""``RunErrorEvent.code`` of a run refused because of its input messages."""

RUN_LIVE_ERROR_CODE = "RUN_LIVE"
"""``RunErrorEvent.code`` of a run refused because its chat already has a running run (one
at a time per chat; the store's ``start_run`` raises :class:`~threadstore.errors.RunLiveError`)."""

_RUN_FINISHED = EventType.RUN_FINISHED  # bound once: compared for every event
_RUN_STARTED = EventType.RUN_STARTED

CHAT_DELETED_ERROR_CODE = "CHAT_DELETED"
"""``RunErrorEvent.code`` sent instead of the inner agent's ``RUN_FINISHED`` when the run's
chat was deleted during the run (from another process, say): its answer is not stored."""


_HandlerT = TypeVar("_HandlerT", bound=Callable[..., Any])
_KIND_ATTRIBUTE = "threadstore_handler_kind"


def _declared(kind: HandlerKind) -> Callable[[_HandlerT], _HandlerT]:
    """Declare what a default handler does, so the persister can fold its events inline.

    An override (on a subclass or an instance) does not carry the declaration, so it
    is awaited: the declaration travels with the function, not with its name.
    """

    def declare(handler: _HandlerT) -> _HandlerT:
        handler.__dict__[_KIND_ATTRIBUTE] = kind
        return handler

    return declare


_applies = _declared(HandlerKind.APPLY)


@runtime_checkable
class AGUIAgent(Protocol):
    """Minimal AG-UI agent contract: a named object exposing an event stream."""

    name: str

    def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the agent's AG-UI events for one run."""
        ...


# --- the agent ---------------------------------------------------------------------------


class StorageAgent:
    """Wrap an inner AG-UI agent, persisting its event stream as chat history.

    ``run()`` yields the inner agent's events unchanged and in real time; a background
    fold task and writer task persist them (see the module docstring). Build a fresh
    instance per run (the run manager's factory does).
    """

    retry_base_delay: float = 0.05
    """First delay before retrying a failed flush; doubles per failure."""
    retry_max_delay: float = 2.0
    """Longest delay between flush retries."""
    final_flush_deadline: float = 30.0
    """Seconds the final flush retries a write that keeps failing before it gives up.

    A failed transaction is first split down to single writes; only a single write
    that fails for this long stops the flush. The run is then marked ``errored`` with
    the reason, the loss is logged with its size, and :meth:`persisted` raises.
    """
    min_flush_interval: float = 0.25
    """Shortest time between the starts of two flushes that boundaries asked for.

    A fast stream crosses boundaries faster than a store commits; its boundaries then
    share one transaction instead of each paying its own. The end of the run,
    :meth:`persisted` and the ``flush_*_buffer`` methods do not wait for it.
    """

    def __init__(
        self,
        name: str,
        user_uuid: UUID,
        chat_repo: ChatRepositoryLike,
        message_repo: MessageRepositoryLike,
        inner_agent: AGUIAgent,
        *,
        run_repo: RunRepositoryLike | None = None,
        owner: str | None = None,
        translate: Callable[[Sequence[Message]], list[ag_ui.core.Message]] | None = None,
        checkpoint_interval: float = 1.0,
        tenant_id: str | None = None,
        app_id: str | None = None,
        chat_name: str | None = None,
        history_window: HistoryWindow | None = None,
    ) -> None:
        if not checkpoint_interval > 0:
            raise InvalidInputError(f"checkpoint_interval must be > 0, got {checkpoint_interval}")
        if isinstance(inner_agent, StorageAgent):
            raise InvalidInputError(
                "cannot wrap a StorageAgent in another StorageAgent: the run would be stored "
                "twice; pass the agent it wraps (its .inner_agent) instead"
            )
        self.name = name
        self.user_uuid = user_uuid
        self.chat_repo = chat_repo
        self.message_repo = message_repo
        self.inner_agent = inner_agent
        self.run_repo = run_repo
        self.owner = owner
        self.checkpoint_interval = checkpoint_interval
        self.tenant_id = tenant_id
        self.app_id = app_id
        self.chat_name = chat_name
        self.history_window = history_window
        """Which stored turns the inner agent is given; ``None``: the whole history."""
        """The name a chat this agent creates gets; by default its first user message's text."""
        self.chat: Chat | None = None
        """The chat of the run, once resolved or created."""
        self._translate = translate
        self.branch_from: UUID | None = None
        """The stored message this run continues, whatever the chat's leaf is meanwhile.

        Set by the server's regenerate and edit routes before the run starts; the run's
        messages then hang under it (as with ``parent_run_id``).
        """
        self._branched = False
        """Whether the run branches off the chat's leaf (see ``_branch_point``)."""
        self.set_up = asyncio.Event()
        """Set once the run is set up or refused, or by the run manager's handle when the
        run ended before that. Set up: its run record written and input stored, or, for a
        run that starts early, everything read and its writes under way (a refusal found
        by them then comes in the stream)."""
        self.refused_by: RunLiveError | None = None
        """Why the run was refused, when its chat already had a running run; its run id
        is still free."""
        self._looked_up: tuple[Chat | None] | None = None
        self._persister: RunPersister | None = None
        self._dispatch: dict[type[BaseEvent], Callable[..., Awaitable[None]]] = {}
        self._table: dict[type[BaseEvent], str] | None = None

    def use_chat(self, chat: Chat | None) -> None:
        """Take ``chat`` as the run's thread's chat (``None``: it has none) without reading it.

        For a caller that has just looked it up (the server's run gate does, for its
        checks): the run's set-up then reads it once. Call it before the run starts. A
        chat created meanwhile by another process is found by the set-up's write, as
        when two runs start on one new thread.
        """
        if chat is not None and chat.user_uuid != self.user_uuid:
            raise InvalidInputError(f"chat {chat.chat_uuid} is not user {self.user_uuid}'s")
        self._looked_up = (chat,)

    # --- the run -------------------------------------------------------------------------

    def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        """Persist inbound user messages, replay history, then stream the inner agent.

        ``input.messages`` is replaced in place with the translated stored history
        before the inner agent runs: the whole history by default, the turns
        ``history_window`` keeps when it is set (:class:`HistoryWindow`). The list is
        the run's own; the AG-UI messages in it are shared with later runs (the
        translation is kept with the store's history), so the inner agent must not
        change them. Yields the inner agent's events verbatim, or ``RUN_STARTED`` +
        ``RUN_ERROR`` (``INVALID_INPUT``, ``RUN_LIVE``) when the run is refused.

        A run whose input only adds messages (no tool results, no branch), on a
        ``Store`` with the default translation, starts the inner agent before its
        set-up writes are done, on the history they will make: the inner agent's
        ``RUN_STARTED`` is yielded as it comes, every later event once the writes are.
        A refusal found by a write then follows that ``RUN_STARTED``.
        """
        return self._events(input)

    async def run_into(self, input: RunAgentInput, emit: Callable[[BaseEvent], None]) -> None:
        """:meth:`run`, handing each event to ``emit`` instead of yielding it.

        The run manager's path: the same events, persistence and outcomes as iterating
        :meth:`run` (a subclass's override of it included). Returns when the run's
        records are final; raises what the inner agent raised.
        """
        async for event in self.run(input):
            emit(event)

    async def _events(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        """The run's one loop: set up, then fold every event as it passes to the caller."""
        started = await self._start(input)
        if isinstance(started, list):
            for event in started:
                yield event
            return
        async with _Streaming(self, started) as streaming:
            stream = streaming.open(input)
            if isinstance(started, RunPersister):
                persister = started
            else:
                # Started early: the inner agent's RUN_STARTED goes out as it comes, and
                # every later event waits for the set-up's writes (the run's records and
                # a refusal found by them must come first).
                first = await anext(stream, None)
                early = first is not None and first.type is _RUN_STARTED
                if first is not None and early:
                    yield first
                try:
                    persister = await asyncio.shield(started)
                except (InvalidInputError, RunLiveError) as exc:
                    refusal = self._refusal(input, exc)
                    for event in refusal[1:] if early else refusal:  # one RUN_STARTED
                        yield event
                    return
                if first is not None:
                    persister.take(first)
                    if first.type is _RUN_FINISHED:
                        first = await _finished_or_deleted(persister, first)
                    if not early:
                        yield first
            take = persister.take
            async for event in stream:
                take(event)
                if event.type is _RUN_FINISHED:
                    event = await _finished_or_deleted(persister, event)
                yield event

    async def _start(self, input: RunAgentInput) -> _Started:
        """Set the run up: its persister, the task that makes it (an early start), or a refusal."""
        if self._persister is not None or self.set_up.is_set():
            raise RuntimeError("a StorageAgent runs once; build a new one per run")
        try:
            return await self._set_up(input)
        finally:
            self.set_up.set()

    async def _set_up(self, input: RunAgentInput) -> _Started:
        try:
            reads = await self._read(input)
            given = await self._foreseen(reads)
            if given is None:
                chat, history, facts = await self._write(input, reads)
        except (InvalidInputError, RunLiveError) as exc:
            return self._refusal(input, exc)
        if given is not None:
            # What the writes will store is known: the inner agent need not wait for them.
            input.messages = given
            self._give_state(input, reads.chat)
            return asyncio.ensure_future(self._written(input, reads))
        self.chat = chat
        try:
            input.messages = await self._given(history)
            self._give_state(input, chat)
            return self._persister_for(input, chat, history, facts)
        except BaseException:
            await self._abandon_run(chat, input.run_id, "the run could not be set up")
            raise

    async def _written(self, input: RunAgentInput, reads: _Reads) -> RunPersister:
        """An early start's set-up writes, then the run's persister."""
        chat, history, facts = await self._write(input, reads)
        self.chat = chat
        try:
            return self._persister_for(input, chat, history, facts)
        except BaseException:
            await self._abandon_run(chat, input.run_id, "the run could not be set up")
            raise

    def _refusal(
        self, input: RunAgentInput, exc: InvalidInputError | RunLiveError
    ) -> list[BaseEvent]:
        """The events of a run refused before it wrote anything: RUN_STARTED, RUN_ERROR."""
        code = INVALID_INPUT_ERROR_CODE
        if isinstance(exc, RunLiveError):
            self.refused_by, code = exc, RUN_LIVE_ERROR_CODE
        return [
            RunStartedEvent(
                thread_id=input.thread_id, run_id=input.run_id, protocol_version=PROTOCOL_VERSION
            ),
            RunErrorEvent(message=str(exc), code=code),
        ]

    @staticmethod
    def _give_state(input: RunAgentInput, chat: Chat | None) -> None:
        """Give the inner agent the chat's stored state when the client sent none."""
        if input.state in (None, {}) and chat is not None and chat.state is not None:
            input.state = copy.deepcopy(chat.state)

    def _persister_for(
        self,
        input: RunAgentInput,
        chat: Chat,
        history: Sequence[Message],
        facts: StoredFacts,
    ) -> RunPersister:
        """The run's persister: its fold starts from the history as stored."""
        fold = ConversationFold(
            input.run_id,
            thread_id=input.thread_id,
            parent_run_id=input.parent_run_id,
            state=input.state,
            facts=facts,
        )
        config = PersisterConfig(
            checkpoint_interval=self.checkpoint_interval,
            min_flush_interval=self.min_flush_interval,
            retry_base_delay=self.retry_base_delay,
            retry_max_delay=self.retry_max_delay,
            final_flush_deadline=self.final_flush_deadline,
        )
        persister = self._persister = RunPersister(_Hooks(self), config, chat, fold)
        if self._branched and history:
            persister.chain = history[-1].message_uuid
        return persister

    async def _finish(
        self,
        stream: AsyncIterator[BaseEvent] | None,
        started: RunPersister | asyncio.Task[RunPersister],
        status: MessageStatus,
        error: str | None,
    ) -> None:
        """Close the inner stream and wait for the final flush, even through cancellation."""
        closing = asyncio.ensure_future(self._close(stream, started, status, error))
        cancelled = False
        while not closing.done():
            try:
                await asyncio.shield(closing)
            except asyncio.CancelledError:
                cancelled = True
        closing.result()
        if cancelled and status is MessageStatus.COMPLETE:
            raise asyncio.CancelledError

    @staticmethod
    async def _close(
        stream: AsyncIterator[BaseEvent] | None,
        started: RunPersister | asyncio.Task[RunPersister],
        status: MessageStatus,
        error: str | None,
    ) -> None:
        aclose = getattr(stream, "aclose", None)  # runs the inner agent's own cleanup
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                logger.exception("closing the inner agent's stream failed")
        if isinstance(started, RunPersister):
            persister = started
        else:
            # An early start ends only once its set-up writes have: what they began
            # is finalized like any run's. Writes that failed or were refused left
            # nothing running (and the stream said why, or the run raised).
            try:
                persister = await started
            except Exception:
                return
        await persister.close(status, error)

    async def persisted(self) -> None:
        """Return when every event seen so far is durable in the store.

        Raises :class:`~threadstore.errors.StoreError` when the store could not take
        them (the final flush gave up).
        """
        persister = self._persister
        if persister is None:
            return
        await persister.durable()
        if persister.failed is not None:
            raise StoreError("the run's records could not be persisted") from persister.failed

    @property
    def chat_deleted(self) -> bool:
        """True when the run's chat was deleted while it streamed.

        The run goes on streaming to its client, but its remaining records are dropped
        instead of retried: a deleted chat stays deleted.
        """
        return self._persister is not None and self._persister.chat_deleted

    @property
    def flush_retries(self) -> int:
        """Writes of this run that failed and were tried again (0 on a healthy store)."""
        return 0 if self._persister is None else self._persister.retries

    @property
    def backlog(self) -> int:
        """Events handed to persistence and not folded yet: queued, or deltas held back."""
        persister = self._persister
        if persister is None:
            return 0
        return persister.enqueued - persister.folded + len(persister.deltas)

    # --- input ---------------------------------------------------------------------------

    async def _read(self, input: RunAgentInput) -> _Reads:
        """Find the chat and its history, screen the input: everything before a write.

        Refuses (``InvalidInputError``) before anything is written.
        """
        looked_up = self._looked_up
        if (
            looked_up is None
            or getattr(looked_up[0], "thread_id", input.thread_id) != input.thread_id
        ):
            chat = await self.chat_repo.get_chat_by_thread_id(self.user_uuid, input.thread_id)
        else:
            chat = looked_up[0]
        history = await self._history(chat)
        facts = await _facts(history)
        branch = await self._branch_point(input, chat, history, facts)
        if branch is not None:
            history = branch.history
            facts = await _facts(history)
            self._branched = True
        inbound = list(input.messages)
        creates, results = self._screen(inbound, input.run_id, facts)
        chat_create = None
        if chat is None:
            chat_create = ChatCreate(
                user_uuid=self.user_uuid,
                thread_id=input.thread_id,
                name=self.chat_name or chat_name_from_messages(inbound),
                tenant_id=self.tenant_id,
                app_id=self.app_id,
            )
        return _Reads(chat, chat_create, history, facts, branch, inbound, creates, results)

    async def _foreseen(self, reads: _Reads) -> list[ag_ui.core.Message] | None:
        """What the inner agent is given once the run's input is stored, told before it is.

        The run then starts while its set-up writes go on. ``None`` when only the
        stored history can tell (the run must wait for its writes): a run that stores
        tool results or branches, a custom translation, repositories that are not a
        ``Store``, or a history that grew meanwhile.
        """
        if (
            reads.branch is not None
            or reads.results
            or self.branch_from is not None
            or not self._default_translation
            or not isinstance(self.message_repo, Store)
        ):
            return None
        history = reads.history
        added = [as_stored(create, reads.chat_uuid) for create in reads.creates]
        whole = Appended(history, added)
        if self.history_window is not None:
            given = self.history_window.select(whole)
            if given is not whole:
                return await off_loop(given, translate_messages, given)
        if isinstance(history, HistoryView):
            return translation_after(history, added)
        return translate_messages(added) if not history else None

    async def _write(
        self, input: RunAgentInput, reads: _Reads
    ) -> tuple[Chat, Sequence[Message], StoredFacts]:
        """Create the chat if it is new, record the run, store the input.

        Returns the chat, its history after the input and what the history holds.
        """
        chat, history, facts = reads.chat, reads.history, reads.facts
        creates, results = reads.creates, reads.results
        fresh = False
        if chat is None:
            assert reads.chat_create is not None
            opened = await self._open_chat(input, reads.chat_create, creates, results)
            if opened is not None:
                chat, history = opened
                return chat, history, await _facts(history)
            chat = await self.chat_repo.create_chat(reads.chat_create)
            # A chat with our uuid is the one we just created, so it is empty; any other
            # was created by a concurrent run meanwhile and may hold messages already.
            fresh = chat.chat_uuid == reads.chat_create.chat_uuid
            if not fresh:
                history = await self._history(chat)
                facts = await _facts(history)
                if history:
                    creates, results = self._screen(reads.inbound, input.run_id, facts)
        if self.run_repo is not None:
            # Before the input is stored: a chat with a running run that continues its
            # leaf (in any process; the store holds it to one) refuses another such run
            # with nothing written. A run that branches hangs under its own branch point.
            await self.run_repo.start_run(self._run_record(input, chat.chat_uuid))
        try:
            history, facts = await self._store_inbound(
                chat, history, facts, reads.branch, creates, results, fresh=fresh
            )
        except BaseException:
            await self._abandon_run(chat, input.run_id, "the run's input could not be stored")
            raise
        return chat, history, facts

    async def _open_chat(
        self,
        input: RunAgentInput,
        chat_create: ChatCreate,
        creates: list[MessageCreate],
        results: list[tuple[UUID, MessageToolCallUpdate]],
    ) -> tuple[Chat, list[Message]] | None:
        """A new thread's set-up as one write (chat, run, input), when one store holds all.

        The steps below it do the same in three writes; under load each write waits
        its turn behind the other runs' flushes, so one write is a third of the wait.
        None when they must run instead: the repositories are not one ``Store``, or
        another run created the thread's chat meanwhile.
        """
        store = self.chat_repo
        if not (
            isinstance(store, Store)
            and store is self.message_repo
            and self.run_repo in (None, store)
            and not results
            and not self._branched
        ):
            return None
        run = None if self.run_repo is None else self._run_record(input, chat_create.chat_uuid)
        try:
            return await store.open_chat(chat_create, run=run, messages=creates)
        except ConflictError:
            return None

    def _run_record(self, input: RunAgentInput, chat_uuid: UUID) -> Run:
        """This run's record, as ``start_run`` takes it."""
        return Run(
            chat_uuid=chat_uuid,
            thread_id=input.thread_id,
            run_id=input.run_id,
            parent_run_id=input.parent_run_id,
            owner=self.owner,
            exclusive=not self._branched,
        )

    async def _abandon_run(self, chat: Chat, run_id: str, reason: str) -> None:
        """End the run record of a run that failed before it began: it must not hold the chat."""
        if self.run_repo is not None:
            with contextlib.suppress(Exception):
                await self.run_repo.finish_run(chat.chat_uuid, run_id, RunStatus.ERRORED, reason)

    async def _store_inbound(
        self,
        chat: Chat,
        history: Sequence[Message],
        facts: StoredFacts,
        branch: _Branch | None,
        creates: list[MessageCreate],
        results: list[tuple[UUID, MessageToolCallUpdate]],
        *,
        fresh: bool,
    ) -> tuple[Sequence[Message], StoredFacts]:
        """Store the run's new input messages (and tool results).

        Returns the history after them and what it holds. ``fresh``: the chat was
        created by this run, so it holds only what is stored now.
        """
        if branch is not None and not creates:
            # Nothing new to hang on the branch point: the run continues from it (its
            # history is the path to it, whatever the leaf becomes meanwhile).
            assert isinstance(self.message_repo, Store)
            await self.message_repo.set_active_leaf(chat.chat_uuid, branch.point)
        if creates or results:
            # One write is atomic by itself: a transaction around it would only cost
            # the store more trips (SQLite: BEGIN and COMMIT each queue for its writer).
            # A branching run keeps its read inside: another run branching from the same
            # message may add its own edit right after.
            inside = branch is not None or len(creates) + len(results) > 1
            # A chat this run just created holds only what it stores now: a store
            # returns each created message as stored, so nothing needs reading back.
            created: list[Message] | None = (
                [] if fresh and not results and isinstance(self.message_repo, Store) else None
            )
            async with self.message_repo.transaction() if inside else contextlib.nullcontext():
                for index, create in enumerate(creates):
                    fields: dict[str, Any] = {"chat_uuid": chat.chat_uuid}
                    if index == 0 and branch is not None:
                        # Explicitly under the branch point, so a concurrent run that
                        # branches from the same message lands beside this one.
                        fields["parent_uuid"] = branch.point
                    stored = await self.message_repo.create_message(
                        create.model_copy(update=fields)
                    )
                    if created is not None:
                        created.append(stored)
                for call_uuid, update in results:
                    await self.message_repo.update_message_tool_call(call_uuid, update)
                if branch is not None:
                    # Inside the transaction: the branch ends at this run's own message
                    # whatever a concurrent run branching from the same one writes next.
                    history = await self._history(chat)
            if created is not None:
                history = created
            elif branch is None:
                # A store reads only what these writes changed (store/_history.py).
                history = await self._history(chat)
            facts = await _facts(history)
        return history, facts

    async def _branch_point(
        self,
        input: RunAgentInput,
        chat: Chat | None,
        history: Sequence[Message],
        facts: StoredFacts,
    ) -> _Branch | None:
        """Where this run branches off the chat's tree, or ``None`` when it continues the leaf.

        A run branches (on a full :class:`Store`) when its ``parent_run_id`` names a run of
        the chat whose last message is not the leaf (it continues from that message), or
        when its ``messages`` are stored messages — of any branch — followed only by new
        user messages, and the last stored one is an answer that is not the leaf: an
        edit-and-resend, or a client resending from a branch it holds.
        """
        store = self.message_repo
        if chat is None or not isinstance(store, Store):
            return None
        on_branch = facts.messages
        # The whole tree is read only when the run names what the active branch (read
        # already) may lack: a message to continue, a parent run, or an echoed answer of
        # another branch. Otherwise the active branch's index answers.
        tree: Sequence[TreeNode] | None = None
        if (
            self.branch_from is not None
            or input.parent_run_id is not None
            or any(
                message.id not in on_branch and not isinstance(message, UserMessage | ToolMessage)
                for message in input.messages
            )
        ):
            tree = await store.get_message_tree(chat.chat_uuid)
        point: TreeNode | None = None
        if tree is None:
            point = _echoed_point(input, history, facts)
        elif self.branch_from is not None:
            point = next((node for node in tree if node.message_uuid == self.branch_from), None)
            if point is None:
                raise InvalidInputError(f"message {self.branch_from} is not in this chat")
            # Even when it is the leaf now: another request may move the leaf before the
            # run writes, and the run's messages must still hang under this one.
            self._branched = True
            return _Branch(point.message_uuid, await _path_to(store, tree, point, history))
        elif input.parent_run_id is not None:
            ran = [node for node in tree if node.run_id == input.parent_run_id]
            point = ran[-1] if ran else None
        else:
            by_id = {node.agui_id: node for node in tree if node.agui_id}
            point = _last_echoed(input, by_id.get)
        if point is None or point.message_uuid == chat.active_leaf_uuid:
            return None
        if tree is None:  # on the active branch: its history is a prefix of it
            at = facts.messages.get(point.agui_id or "")
            assert at is not None
            return _Branch(point.message_uuid, list(history[: at + 1]))
        return _Branch(point.message_uuid, await _path_to(store, tree, point, history))

    async def _history(self, chat: Chat | None) -> Sequence[Message]:
        """The chat's history: a store's shared view (read-only), or the repository's list."""
        if chat is None:
            return []
        repo = self.message_repo
        if isinstance(repo, Store):
            # Kept by the store and extended by what changed since its last read, not
            # copied: nothing in a run changes a stored message.
            return await repo.read_history(chat.chat_uuid, HISTORY_INDEX, TRANSLATION)
        history = list(await repo.get_chat_messages(chat.chat_uuid))
        await off_loop(history, self._check_chat, chat, history)
        return history

    async def _given(self, history: Sequence[Message]) -> list[ag_ui.core.Message]:
        """The translated history the inner agent is given (``input.messages``)."""
        given = history if self.history_window is None else self.history_window.select(history)
        if self._default_translation and isinstance(given, HistoryView):
            return kept_translation(given)
        # Whole-history work: off the event loop for a long chat (see store.offload).
        return await off_loop(given, self.translate, given)

    @property
    def _default_translation(self) -> bool:
        return self._translate is None and type(self).translate is StorageAgent.translate

    @staticmethod
    def _check_chat(chat: Chat, history: Sequence[Message]) -> None:
        for message in history:
            # A custom repository that mixes chats up must not leak one into another.
            if message.chat_uuid != chat.chat_uuid:
                which = message.agui_id or str(message.message_uuid)
                raise InvalidInputError(
                    f"the message repository returned message {which!r} of chat "
                    f"{message.chat_uuid} for chat {chat.chat_uuid}: messages do not all "
                    "belong to the same chat"
                )

    @staticmethod
    def _screen(
        messages: Sequence[ag_ui.core.Message], run_id: str, facts: StoredFacts
    ) -> tuple[list[MessageCreate], list[tuple[UUID, MessageToolCallUpdate]]]:
        """Sort inbound messages into new user messages and tool results; refuse the rest.

        Each inbound message is looked up in the history's index by id: the screening
        costs what the input holds, not what the chat holds.
        """
        known = IdsAdded(facts.ids)
        pending = dict(facts.pending)
        creates: list[MessageCreate] = []
        results: list[tuple[UUID, MessageToolCallUpdate]] = []
        for message in messages:
            if message.id in known:
                continue
            known.add(message.id)
            if isinstance(message, UserMessage):
                creates.append(message_create_from_agui(message, UUID(int=0), run_id))
                continue
            call = (
                pending.pop(message.tool_call_id, None)
                if isinstance(message, ToolMessage)
                else None
            )
            if isinstance(message, ToolMessage) and call is not None:
                text, _ = tool_result_text(message.content)
                update = MessageToolCallUpdate(
                    content=text,
                    result_message_id=message.id,
                    error=message.error,
                    status=MessageStatus.COMPLETE,
                    in_progress=False,
                )
                results.append((call.uuid, update))
                continue
            raise InvalidInputError(
                f"message {message.id!r} (role {message.role!r}) is not stored in this chat; "
                "a run accepts only new user messages and results of tool calls still "
                "waiting for one"
            )
        return creates, results

    def translate(self, messages: Sequence[Message]) -> list[ag_ui.core.Message]:
        """Translate stored messages into AG-UI history (default: ``translate_messages``)."""
        if self._translate is not None:
            return self._translate(messages)
        return translate_messages(messages)

    # --- extension point 1: the event-dispatch registry ------------------------------------

    @classmethod
    def event_handlers(cls) -> dict[type[BaseEvent], str]:
        """Map each AG-UI event class to the name of the method that folds it.

        Override as ``{**super().event_handlers(), MyEvent: "handle_my_event"}``. The
        event's MRO is walked, so subclasses of a registered class resolve to it.
        """
        lifecycle = (RunStartedEvent, RunFinishedEvent, RunErrorEvent)
        steps = (StepStartedEvent, StepFinishedEvent)
        text = (TextMessageStartEvent, TextMessageContentEvent, TextMessageEndEvent)
        tools = (ToolCallStartEvent, ToolCallArgsEvent, ToolCallEndEvent, ToolCallResultEvent)
        reasoning = (
            ReasoningStartEvent,
            ReasoningMessageStartEvent,
            ReasoningMessageContentEvent,
            ReasoningMessageEndEvent,
            ReasoningMessageChunkEvent,
            ReasoningEndEvent,
            ReasoningEncryptedValueEvent,
            ThinkingStartEvent,
            ThinkingEndEvent,
            ThinkingTextMessageStartEvent,
            ThinkingTextMessageContentEvent,
            ThinkingTextMessageEndEvent,
        )
        subagents = (SubagentStartedEvent, SubagentFinishedEvent, SubagentErrorEvent)
        table: dict[type[BaseEvent], str] = {}
        for classes, handler in (
            (lifecycle, "handle_run_lifecycle"),
            (steps, "handle_step"),
            ((*text, TextMessageChunkEvent), "handle_text_message"),
            ((*tools, ToolCallChunkEvent), "handle_tool_call"),
            (reasoning, "handle_reasoning"),
            ((StateSnapshotEvent, StateDeltaEvent), "handle_state"),
            ((MessagesSnapshotEvent,), "handle_messages_snapshot"),
            ((ActivitySnapshotEvent, ActivityDeltaEvent), "handle_activity"),
            (subagents, "handle_subagent"),
        ):
            table.update(dict.fromkeys(classes, handler))
        return table

    def _handler_for(self, event_type: type[BaseEvent]) -> Callable[..., Awaitable[None]]:
        handler = self._dispatch.get(event_type)
        if handler is None:
            if self._table is None:
                self._table = type(self).event_handlers()
            table = self._table
            name = next((table[c] for c in event_type.__mro__ if c in table), None)
            handler = getattr(self, name) if name is not None else self.handle_unknown_event
            self._dispatch[event_type] = handler
        return handler

    @_applies
    async def handle_unknown_event(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        """Handle an event with no registered handler (CUSTOM, RAW...).

        The default folds it: a CUSTOM event becomes a data or citation part of the
        agent's message (docs/chat-engine.md); RAW and event types the fold does not
        know change nothing. An override that persists its own event types calls this
        for the rest, to keep CUSTOM parts stored.
        """
        state.apply(event)

    # --- extension point 2: category handlers (fold only; no I/O) ---------------------------

    @_applies
    async def handle_run_lifecycle(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        """Fold RUN_STARTED / RUN_FINISHED / RUN_ERROR: the run's outcome and final statuses."""
        state.apply(event)

    @_applies
    async def handle_step(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Track the active step across STEP_STARTED / STEP_FINISHED."""
        state.apply(event)

    @_applies
    async def handle_text_message(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        """Fold text message events (start/content/end/chunk) onto their message."""
        state.apply(event)

    @_applies
    async def handle_tool_call(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Fold tool call events (start/args/end/chunk/result) onto their tool call."""
        state.apply(event)

    @_applies
    async def handle_reasoning(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Fold REASONING_* (and the deprecated THINKING_*) events onto reasoning steps."""
        state.apply(event)

    @_applies
    async def handle_state(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Fold STATE_SNAPSHOT / STATE_DELTA into the chat's state."""
        state.apply(event)

    @_applies
    async def handle_messages_snapshot(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        """Store the messages of a MESSAGES_SNAPSHOT that are not stored yet."""
        state.apply(event)

    @_applies
    async def handle_activity(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Fold ACTIVITY_SNAPSHOT / ACTIVITY_DELTA onto an activity message."""
        state.apply(event)

    @_applies
    async def handle_subagent(self, state: ConversationFold, chat: Chat, event: BaseEvent) -> None:
        """Fold SUBAGENT_STARTED / FINISHED / ERROR onto the subagent's records."""
        state.apply(event)

    async def flush_message_buffer(self, state: ConversationFold | None = None) -> None:
        """Persist buffered message content now; return when it is durable.

        Callable from a handler override, as in the seed layer (``state`` is accepted
        for its signature and not needed). Raises
        :class:`~threadstore.errors.StoreError` when the writer gave up. The three
        ``flush_*_buffer`` methods do the same: one flush writes every record.
        """
        await self.persisted()

    async def flush_tool_call_buffer(self, state: ConversationFold | None = None) -> None:
        """Persist buffered tool call arguments now; return when they are durable."""
        await self.persisted()

    async def flush_reasoning_buffer(self, state: ConversationFold | None = None) -> None:
        """Persist buffered reasoning content now; return when it is durable."""
        await self.persisted()

    # --- extension point 3: build hooks ------------------------------------------------------

    def build_message_create(
        self, state: ConversationFold, chat: Chat, agui_id: str | None, role: Role | str | None
    ) -> MessageCreate:
        """Build the DTO that creates a new agent message (override to fill subclass fields)."""
        return MessageCreate(
            chat_uuid=chat.chat_uuid,
            role=Role(role or Role.ASSISTANT),
            agui_id=agui_id,
            step_name=state.active_step,
            run_id=state.run_id,
            created_at=utcnow(),
        )

    def build_tool_call_create(
        self,
        state: ConversationFold,
        chat: Chat,
        message_uuid: UUID,
        tool_call_id: str,
        name: str,
    ) -> MessageToolCallCreate:
        """Build the DTO that creates a tool call nested in ``message_uuid``."""
        return MessageToolCallCreate(
            message_uuid=message_uuid,
            tool_call_id=tool_call_id,
            name=name,
            step_name=state.active_step,
        )

    def build_reasoning_create(
        self,
        state: ConversationFold,
        chat: Chat,
        message_uuid: UUID,
        agui_id: str | None,
        name: str | None,
    ) -> MessageReasoningCreate:
        """Build the DTO that creates a reasoning step nested in ``message_uuid``."""
        return MessageReasoningCreate(
            message_uuid=message_uuid, agui_id=agui_id, name=name, step_name=state.active_step
        )

    def message_update_fields(
        self, state: ConversationFold, event: BaseEvent | None
    ) -> dict[str, Any]:
        """Extra fields written when a message reaches a terminal status (default: none).

        ``event`` is the event that ended it, or ``None`` when the run ended without
        one (cancelled, crashed). Keys the base ``MessageUpdate`` does not declare are
        kept when the store's message model declares them.
        """
        return {}


AGUIStorageAgent = StorageAgent
"""The seed's name for :class:`StorageAgent`."""


async def _finished_or_deleted(persister: RunPersister, finished: BaseEvent) -> BaseEvent:
    """``finished``, or a ``RUN_ERROR`` when the run's chat is gone: its answer is not stored."""
    if not await persister.check_chat_deleted():
        return finished
    return RunErrorEvent(
        message="The chat was deleted during the run; its answer is not stored.",
        code=CHAT_DELETED_ERROR_CODE,
    )


class _Streaming:
    """``async with``: one run's inner stream; on the way out, how it ended finalizes the run.

    Normal end -> complete; cancelled (or the consumer closed ``run()``) -> interrupted;
    anything raised -> errored. Shared by :meth:`StorageAgent.run` and ``run_into``.
    """

    __slots__ = ("agent", "started", "stream")

    def __init__(
        self, agent: StorageAgent, started: RunPersister | asyncio.Task[RunPersister]
    ) -> None:
        self.agent, self.started = agent, started
        self.stream: AsyncIterator[BaseEvent] | None = None

    def open(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Start the inner agent's stream (closed on the way out)."""
        stream = self.stream = self.agent.inner_agent.run(input)
        return stream

    async def __aenter__(self) -> _Streaming:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        status, error = MessageStatus.COMPLETE, None
        if kind is not None and issubclass(kind, asyncio.CancelledError | GeneratorExit):
            status = MessageStatus.INTERRUPTED
        elif kind is not None:
            status, error = MessageStatus.ERRORED, f"{kind.__name__}: {exc}"
        await self.agent._finish(self.stream, self.started, status, error)


class _Hooks:
    """A storage agent as its run's persister sees it (``writer.AgentHooks``)."""

    __slots__ = ("agent",)

    def __init__(self, agent: StorageAgent) -> None:
        self.agent = agent

    @property
    def chat_repo(self) -> ChatRepositoryLike:
        return self.agent.chat_repo

    @property
    def message_repo(self) -> MessageRepositoryLike:
        return self.agent.message_repo

    @property
    def run_repo(self) -> RunRepositoryLike | None:
        return self.agent.run_repo

    def handler_kind(self, event_type: type[BaseEvent]) -> HandlerKind:
        kind = getattr(self.agent._handler_for(event_type), _KIND_ATTRIBUTE, HandlerKind.CUSTOM)
        return kind if isinstance(kind, HandlerKind) else HandlerKind.CUSTOM

    def handler(self, event_type: type[BaseEvent]) -> EventHandler:
        return self.agent._handler_for(event_type)

    def build_hook(self, name: str, *, default: bool) -> Callable[..., BaseModel]:
        source = StorageAgent if default else self.agent
        hook: Callable[..., BaseModel] = getattr(source, name)
        return functools.partial(hook, self.agent) if default else hook

    def message_update_fields(
        self, state: ConversationFold, event: BaseEvent | None
    ) -> dict[str, Any]:
        return self.agent.message_update_fields(state, event)


@dataclass(frozen=True, slots=True)
class _Reads:
    """What a run's set-up read and worked out before it writes anything."""

    chat: Chat | None
    chat_create: ChatCreate | None
    """The chat to create when the thread has none."""
    history: Sequence[Message]
    facts: StoredFacts
    branch: _Branch | None
    inbound: list[ag_ui.core.Message]
    """The client's messages (``input.messages`` is then replaced with the history)."""
    creates: list[MessageCreate]
    results: list[tuple[UUID, MessageToolCallUpdate]]

    @property
    def chat_uuid(self) -> UUID:
        """The run's chat: the one found, or the one to create."""
        chat = self.chat if self.chat is not None else self.chat_create
        assert chat is not None
        return chat.chat_uuid


_Started: TypeAlias = "list[BaseEvent] | RunPersister | asyncio.Task[RunPersister]"
"""How a run's set-up ends: refused (its events), set up, or started early (the task
whose writes make its persister)."""


@dataclass(frozen=True, slots=True)
class _Branch:
    """A run's branch point: the stored message it continues, and the history up to it."""

    point: UUID
    history: Sequence[Message]


async def _path_to(
    store: Store, tree: Sequence[TreeNode], point: TreeNode, active: Sequence[Message]
) -> list[Message]:
    """The messages from the root to ``point``: a prefix of ``active`` when it is on it."""
    for index, message in enumerate(active):
        if message.message_uuid == point.message_uuid:
            return list(active[: index + 1])
    parents = {node.message_uuid: node.parent_uuid for node in tree}
    path: list[Message] = []
    current: UUID | None = point.message_uuid
    while current is not None:
        found = await store.get_message(current)
        if found is None:  # deleted meanwhile: the branch is gone
            raise InvalidInputError(f"message {current} of this chat no longer exists")
        path.append(found)
        current = parents.get(current)
    return path[::-1]


def _last_echoed(input: RunAgentInput, find: Callable[[str], TreeNode | None]) -> TreeNode | None:
    """The stored answer an edit-and-resend continues from, or ``None``.

    The last input message ``find`` knows, when only new user messages follow it and it
    is not a user message. A stored tool result echoed back is named by its own id, not
    a message's. A prefix ending at a user message is a client that echoes only what it
    sent (not the answers): it continues the leaf, as it always did.
    """
    point: TreeNode | None = None
    known = -1
    for index, message in enumerate(input.messages):
        found = find(message.id)
        if found is not None:
            point, known = found, index
    rest = input.messages[known + 1 :]
    if (
        point is None
        or point.role == "user"
        or not rest
        or not all(isinstance(message, UserMessage) for message in rest)
    ):
        return None
    return point


def _echoed_point(
    input: RunAgentInput, history: Sequence[Message], facts: StoredFacts
) -> TreeNode | None:
    """:func:`_last_echoed` among the messages of the active branch, found by index."""

    def find(agui_id: str) -> TreeNode | None:
        at = facts.messages.get(agui_id)
        if at is None:
            return None
        m = history[at]
        return TreeNode(m.message_uuid, m.parent_uuid, m.role, m.seq, m.agui_id, m.run_id)

    return _last_echoed(input, find)


async def _facts(history: Sequence[Message]) -> StoredFacts:
    """What ``history`` holds: from the index kept with a store's history, or built now."""
    if isinstance(history, HistoryView):
        return history.derived(HISTORY_INDEX).at(len(history))
    built = HistoryIndex()
    await in_steps(history, built.feed)
    return built.at(len(history))
