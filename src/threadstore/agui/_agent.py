"""The storage agent: wrap an AG-UI agent and persist its stream as chat history.

:class:`StorageAgent` (also ``AGUIStorageAgent``, the seed's name) yields the inner
agent's events unchanged and in real time and never waits on the store; each event is
folded as it passes (``agui/_writer.py``) and a writer task stores the records in the
background. It stores through one port (:class:`~threadstore.store.RunStorage`): a
``Store``, or the seed's repository Protocols. Before the run it finds or creates the
chat, screens the input messages against the stored history and replays that history to
the inner agent (``agui/_setup.py``); when what its set-up writes will store is known
from what it read, the inner agent starts while they go on (its ``RUN_STARTED`` waits for
no write, its later events wait for them). How the run ends decides the status of its
records. The run's ``RUN_FINISHED`` goes out only once its records are durable: committed,
or journaled in the outbox when it has one (``agui/_outbox.py``); when neither can be
done within ``final_flush_deadline`` the client gets ``RUN_ERROR`` (``STORE_UNAVAILABLE``)
instead. The whole write path is in docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from uuid import UUID, uuid4

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    RunAgentInput,
    RunErrorEvent,
    RunStartedEvent,
)

from threadstore.agui._agent_run import (
    CHAT_DELETED_ERROR_CODE,
    RUN_FINISHED,
    STORE_UNAVAILABLE_ERROR_CODE,
    AgentRun,
    Started,
)
from threadstore.agui._compactor import BackgroundCompactor
from threadstore.agui._hooks import CATEGORIES
from threadstore.agui._outbox import Outbox, is_outage
from threadstore.agui._records import (
    default_message_create,
    default_reasoning_create,
    default_tool_call_create,
)
from threadstore.agui._setup import Prepared, RunSetUp, SetUpDone, history_lookup
from threadstore.agui._window import HistoryWindow
from threadstore.agui._writer import EventHandler, PersisterConfig, RunPersister
from threadstore.codec import translate_messages
from threadstore.errors import (
    BudgetExceededError,
    ErrorCodes,
    InvalidInputError,
    RunLiveError,
    StoreError,
)
from threadstore.fold import ConversationFold
from threadstore.keys import chat_deduplication_key
from threadstore.models import (
    Chat,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageToolCallCreate,
    Role,
)
from threadstore.store import (
    ChatRepositoryLike,
    MessageRepositoryLike,
    RunRepositoryLike,
    RunStorage,
)

if TYPE_CHECKING:
    import ag_ui.core

__all__ = [
    "CHAT_DELETED_ERROR_CODE",
    "HISTORY_SKIPPED_EVENT",
    "INVALID_INPUT_ERROR_CODE",
    "RUN_LIVE_ERROR_CODE",
    "STORE_UNAVAILABLE_ERROR_CODE",
    "AGUIAgent",
    "AGUIStorageAgent",
    "StorageAgent",
]

logger = logging.getLogger(__name__)

INVALID_INPUT_ERROR_CODE = ErrorCodes.INVALID_INPUT.value
"""``RunErrorEvent.code`` of a run refused because of its input messages."""

RUN_LIVE_ERROR_CODE = ErrorCodes.RUN_LIVE.value
"""``RunErrorEvent.code`` of a run refused because its chat already has a running run (one
at a time per chat; the store's ``start_run`` raises :class:`~threadstore.errors.RunLiveError`)."""

HISTORY_SKIPPED_EVENT = "threadstore.history_skipped"
"""``CustomEvent.name`` of the event that follows ``RUN_STARTED`` in a run that started while
the store was away: the inner agent got the client's messages, not the stored history, and
the run's writes wait in the outbox. Its ``value``: ``{"reason": "..."}``."""


@runtime_checkable
class AGUIAgent(Protocol):
    """Minimal AG-UI agent contract: a named object exposing an event stream."""

    name: str

    def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Yield the agent's AG-UI events for one run."""
        ...


class StorageAgent:
    """Wrap an inner AG-UI agent, persisting its event stream as chat history (see the
    module docstring). Build a fresh instance per run (the run manager's factory does).

    Extension points (the seed's): ``event_handlers()`` maps event classes to handler
    methods; a handler defined below ``StorageAgent`` (in a subclass, or set on the
    instance) is the agent's own and is awaited, in order, on a task of the run's, instead
    of the default fold; the ``build_*`` hooks and ``message_update_fields`` make the DTOs
    the store is given.
    """

    retry_base_delay: float = 0.05
    """First delay before retrying a failed flush; doubles per failure."""
    retry_max_delay: float = 2.0
    """Longest delay between flush retries."""
    final_flush_deadline: float = 30.0
    """Seconds the final flush retries a write that keeps failing before it gives up.

    A failed batch is first split down to single writes; only a single write that fails
    for this long stops the flush. The run is then marked ``errored`` with the reason,
    the loss is logged with its size, and :meth:`persisted` raises.
    """
    min_flush_interval: float = 0.25
    """Shortest time between the starts of two flushes that boundaries asked for.

    A fast stream crosses boundaries faster than a store commits; its boundaries then
    share one batch instead of each paying its own. The end of the run,
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
        compactor: BackgroundCompactor | None = None,
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
        """The name a chat this agent creates gets; by default its first user message's text."""
        self.history_window = history_window
        """Which stored turns the inner agent is given; ``None``: the whole history."""
        self.compactor = compactor
        """Asked to look at the run's chat once its records are final (compaction by budget)."""
        self.chat: Chat | None = None
        """The chat of the run, once resolved or created."""
        self._translate = translate
        self.branch_from: UUID | None = None
        """The stored message this run continues, whatever the chat's leaf is meanwhile.

        Set by the server's regenerate and edit routes before the run starts; the run's
        messages then hang under it (as with ``parent_run_id``).
        """
        self.set_up = asyncio.Event()
        """Set once the run is set up or refused, or by the run manager's handle when the
        run ended before that. Set up: its run record written and input stored, or, for a
        run that starts early, everything read and its writes under way (a refusal found
        by them then comes in the stream)."""
        self.refused_by: RunLiveError | None = None
        """Why the run was refused, when its chat already had a running run; its run id
        is still free."""
        self.outbox: Outbox | None = None
        """Where the run's writes wait while the store is away (the run manager's, if it
        has one): with it, a run ends ``RUN_FINISHED`` once its writes are journaled."""
        self.history_skipped = False
        """The run started while the store was away: on the client's messages, its set-up
        journaled (see ``HISTORY_SKIPPED_EVENT``)."""
        self._looked_up: tuple[Chat | None] | None = None
        self._persister: RunPersister | None = None
        self.storage: RunStorage | None = None
        """Where the run stores: the port over the repositories, made when it starts."""

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
        :meth:`run` (through a subclass's own ``run`` when it has one), with one
        async-generator layer fewer for every event to cross. Returns when the run's
        records are final; raises what the inner agent raised.
        """
        if type(self).run is not StorageAgent.run:
            async for event in self.run(input):
                emit(event)
            return
        run = AgentRun(self, input)
        try:
            async for event in run.prelude():
                emit(event)
            persister = run.persister
            if persister is None:
                return
            # As in _events, on purpose: a step function shared by both costs a call per event.
            take, stream = persister.take, run.events
            assert stream is not None
            async for event in stream:
                take(event)
                if event.type is RUN_FINISHED:
                    run.held = event  # goes out once the run is durable
                    continue
                if run.held is not None:  # the stream goes on after its end
                    emit(await run.release())
                emit(event)
            if run.held is not None:
                await run.finish()
                emit(await run.release())
        except BaseException as exc:
            run.failed(exc)
            raise
        finally:
            await run.finish()

    async def _events(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        """The run's one loop: set up, then fold every event as it passes to the caller."""
        run = AgentRun(self, input)
        try:
            async for event in run.prelude():
                yield event
            persister = run.persister
            if persister is None:
                return
            take, stream = persister.take, run.events
            assert stream is not None
            async for event in stream:
                take(event)
                if event.type is RUN_FINISHED:
                    run.held = event  # goes out once the run is durable
                    continue
                if run.held is not None:  # the stream goes on after its end
                    yield await run.release()
                yield event
            if run.held is not None:
                await run.finish()
                yield await run.release()
        except BaseException as exc:
            run.failed(exc)
            raise
        finally:
            await run.finish()

    def _setup(self, input: RunAgentInput) -> RunSetUp:
        assert self.storage is not None
        return RunSetUp(
            self.storage,
            input,
            user_uuid=self.user_uuid,
            owner=self.owner,
            chat_name=self.chat_name,
            tenant_id=self.tenant_id,
            app_id=self.app_id,
            history_window=self.history_window,
            translate=None if self._default_translation else self.translate,
            branch_from=self.branch_from,
            records_run=self.run_repo is not None,
        )

    async def _start(self, setup: RunSetUp) -> Started:
        """Set the run up: its persister, or the task that makes it (an early start)."""
        input = setup.input
        inbound = list(input.messages)
        try:
            prepared = await setup.prepare(self._looked_up)
            ledger = setup.storage.usage
            if ledger is not None:  # before anything is written or run
                chat_uuid = None if prepared.chat is None else prepared.chat.chat_uuid
                await ledger.check_budget(self.user_uuid, chat_uuid)
        except Exception as exc:
            # A store that is away cannot say what was spent: the run starts unchecked.
            return self._persister_for(setup, await self._journal_set_up(setup, inbound, exc))
        given = await setup.early_input(prepared)
        if given is not None:
            # What the writes will store is known: the inner agent need not wait for them.
            input.messages = given
            self._give_state(input, prepared.chat)
            return asyncio.ensure_future(self._written(setup, prepared))
        return await self._written(setup, prepared, early=False)

    async def _written(
        self, setup: RunSetUp, prepared: Prepared, early: bool = True
    ) -> RunPersister:
        """The set-up's writes, then the run's persister; the inner agent's input too unless
        it had it already (``early``)."""
        try:
            done = await setup.write(prepared)
        except Exception as exc:
            done = await self._journal_set_up(setup, prepared.inbound, exc)
        self.chat = done.chat
        if self.history_skipped and not early:
            return self._persister_for(setup, done)  # on the client's messages
        try:
            if not early:
                setup.input.messages = await setup.given(done.history)
                self._give_state(setup.input, done.chat)
            return self._persister_for(setup, done)
        except BaseException:
            await setup.storage.abandon_run(
                done.chat.chat_uuid, setup.input.run_id, "the run could not be set up"
            )
            raise

    async def _journal_set_up(
        self, setup: RunSetUp, inbound: list[ag_ui.core.Message], exc: Exception
    ) -> SetUpDone:
        """Start without the store: journal the set-up, run on the client's messages.

        Its writes name a provisional chat until the outbox's drain sets the run up and
        finds (or creates) the thread's chat. Raises ``exc`` again unless it says the
        store is away and there is an outbox.
        """
        if self.outbox is None or not is_outage(exc):
            raise exc
        input = setup.input
        chat = Chat(
            chat_uuid=uuid4(),
            user_uuid=self.user_uuid,
            thread_id=input.thread_id,
            dedup_key=chat_deduplication_key(self.user_uuid, input.thread_id),
        )
        spec = {
            "input": input.model_copy(update={"messages": inbound}).model_dump(
                mode="json", by_alias=True
            ),
            "user_uuid": str(self.user_uuid),
            "owner": self.owner,
            "chat_name": self.chat_name,
            "tenant_id": self.tenant_id,
            "app_id": self.app_id,
            "records_run": self.run_repo is not None,
        }
        await self.outbox.append_set_up(chat.chat_uuid, input.run_id, self.owner, spec)
        logger.warning("run %s starts while the store is away (%s)", input.run_id, exc)
        input.messages = inbound
        self.history_skipped = True
        self.chat = chat  # provisional: the outbox maps it to the real chat once drained
        return SetUpDone(chat, [], await history_lookup([]), None)

    def _skipped(self) -> CustomEvent:
        return CustomEvent(
            name=HISTORY_SKIPPED_EVENT,
            value={
                "reason": "the store is unavailable: the run started on the client's "
                "messages without the stored history; its writes wait in the outbox"
            },
        )

    def _refusal(
        self, input: RunAgentInput, exc: InvalidInputError | RunLiveError | BudgetExceededError
    ) -> list[BaseEvent]:
        """The events of a run refused before it wrote anything: RUN_STARTED, RUN_ERROR."""
        code = INVALID_INPUT_ERROR_CODE
        if isinstance(exc, RunLiveError):
            self.refused_by, code = exc, RUN_LIVE_ERROR_CODE
        elif isinstance(exc, BudgetExceededError):
            code = ErrorCodes.BUDGET_EXCEEDED.value
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

    def _persister_for(self, setup: RunSetUp, done: SetUpDone) -> RunPersister:
        """The run's persister: its fold starts from the history as stored."""
        input = setup.input
        fold = ConversationFold(
            input.run_id,
            thread_id=input.thread_id,
            parent_run_id=input.parent_run_id,
            state=input.state,
            lookup=setup.known(done.lookup),
        )
        # The agent's attributes of the same names (a subclass or the caller may set them).
        config = PersisterConfig(**{f.name: getattr(self, f.name) for f in fields(PersisterConfig)})
        persister = RunPersister(setup.storage, self, self._handlers(), config, done.chat, fold)
        persister.chain = done.chain
        persister.outbox, persister.owner = self.outbox, self.owner
        persister.journaling = self.history_skipped  # after its set-up, in the outbox
        self._persister = persister
        return persister

    def _handlers(self) -> dict[type[BaseEvent], EventHandler]:
        """The agent's own handlers, by event class: those defined below StorageAgent.

        A handler method of a subclass, or one set on this instance, replaces the default
        fold for the classes ``event_handlers()`` maps to it; every other event is
        folded as it passes. So is an event no entry names, unless ``handle_unknown_event``
        is the agent's own.
        """
        own: dict[type[BaseEvent], EventHandler] = {}
        registry = type(self).event_handlers()
        for event_type, name in registry.items():
            if self._own(name):
                own[event_type] = getattr(self, name)
        if self._own("handle_unknown_event"):
            own[BaseEvent] = self.handle_unknown_event  # the MRO walk ends at BaseEvent
            for event_type, name in registry.items():
                own.setdefault(event_type, getattr(self, name))
        return own

    def _own(self, name: str) -> bool:
        """Whether the method ``name`` is this agent's own (not the base class's default)."""
        if name in vars(self):
            return True
        for klass in type(self).__mro__:
            if klass is StorageAgent:
                return False
            if name in vars(klass):
                return True
        return True

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
        """Events waiting for the agent's own handlers (0 while every event folds as it passes)."""
        return 0 if self._persister is None else len(self._persister.queued)

    # --- input ---------------------------------------------------------------------------

    @property
    def _default_translation(self) -> bool:
        return self._translate is None and not self._own("translate")

    def translate(self, messages: Sequence[Message]) -> list[ag_ui.core.Message]:
        """Translate stored messages into AG-UI history (default: ``translate_messages``)."""
        if self._translate is not None:
            return self._translate(messages)
        return translate_messages(messages)

    # --- extension point 1: the event-dispatch registry ------------------------------------

    @classmethod
    def event_handlers(cls) -> dict[type[BaseEvent], str]:
        """Map each AG-UI event class to the name of the method that handles it.

        Override as ``{**super().event_handlers(), MyEvent: "handle_my_event"}``. The
        event's MRO is walked, so subclasses of a registered class resolve to it.
        """
        return {event_type: name for name, classes in CATEGORIES.items() for event_type in classes}

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

    async def handle_run_lifecycle(
        self, state: ConversationFold, chat: Chat, event: BaseEvent
    ) -> None:
        """Fold the event: the default of every category handler (the events each one
        handles are its entry in ``CATEGORIES``)."""
        state.apply(event)

    handle_step = handle_text_message = handle_tool_call = handle_run_lifecycle
    handle_reasoning = handle_state = handle_messages_snapshot = handle_run_lifecycle
    handle_activity = handle_subagent = handle_run_lifecycle

    async def flush_message_buffer(self, state: ConversationFold | None = None) -> None:
        """Persist buffered content now; return when it is durable.

        Callable from a handler, as in the seed layer (``state`` is accepted for its
        signature and not needed). Raises :class:`~threadstore.errors.StoreError` when
        the writer gave up. The three ``flush_*_buffer`` methods are one: one flush
        writes every record.
        """
        await self.persisted()

    flush_tool_call_buffer = flush_reasoning_buffer = flush_message_buffer

    # --- extension point 3: build hooks ------------------------------------------------------

    def build_message_create(
        self, state: ConversationFold, chat: Chat, agui_id: str | None, role: Role | str | None
    ) -> MessageCreate:
        """Build the DTO that creates a new agent message (override to fill subclass fields)."""
        return default_message_create(state, chat, agui_id, role)

    def build_tool_call_create(
        self,
        state: ConversationFold,
        chat: Chat,
        message_uuid: UUID,
        tool_call_id: str,
        name: str,
    ) -> MessageToolCallCreate:
        """Build the DTO that creates a tool call nested in ``message_uuid``."""
        return default_tool_call_create(state, chat, message_uuid, tool_call_id, name)

    def build_reasoning_create(
        self,
        state: ConversationFold,
        chat: Chat,
        message_uuid: UUID,
        agui_id: str | None,
        name: str | None,
    ) -> MessageReasoningCreate:
        """Build the DTO that creates a reasoning step nested in ``message_uuid``."""
        return default_reasoning_create(state, chat, message_uuid, agui_id, name)

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
