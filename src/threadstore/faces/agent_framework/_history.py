"""``ThreadstoreHistoryProvider``: Agent Framework history kept in a threadstore chat.

One provider instance serves every session. A session's storage key (the chat's
thread id) lives in the session's provider-scoped state under ``"thread_id"``, set on
first use to the session's id, so a session serialized with ``to_dict()`` and restored
with ``AgentSession.from_dict`` anywhere finds its history again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, overload
from uuid import UUID, uuid4

from agent_framework import AgentSession, HistoryProvider, SessionContext, SupportsAgentRun
from agent_framework import Message as AFMessage

from threadstore._steps import in_steps
from threadstore.codec import TOOL_CALL_ID_METADATA_KEY
from threadstore.errors import ConfigurationError
from threadstore.faces._chat import load_history
from threadstore.faces.agent_framework._convert import (
    Plain,
    message_identity,
    message_to_records,
    messages_of,
    plain_reading,
    records_to_messages,
)
from threadstore.faces.agent_framework._scope import ChatScope
from threadstore.faces.agent_framework._state import ProviderSessionState, ThreadstoreSessionState
from threadstore.fold import append_writes
from threadstore.models import Chat, Message, Summary
from threadstore.store import Derivation, Store, Write
from threadstore.usage import RunUsage, UsageReport

__all__ = ["STATE_KEY", "MessageFilter", "ThreadstoreHistoryProvider"]

STATE_KEY = "thread_id"
"""Key of the provider-scoped session state that holds the session's thread id."""

MessageFilter = Callable[[list[AFMessage]], list[AFMessage]]
"""Takes the loaded history (oldest first) and returns what the agent gets."""

_TAIL_MARGIN = 4
"""Stored messages read beyond the incoming count when looking for re-sent messages."""


class _ReadingsDerivation:
    """Each message's plain reading, by position, kept with the store's history
    (``store.Derivation``): a load reads the fields of only the messages new since the
    last. It holds strings only."""

    def start(self) -> list[Plain | None]:
        return []

    def feed(self, value: list[Plain | None], messages: Sequence[Message]) -> None:
        value.extend(map(plain_reading, messages))

    def rewound(
        self, value: list[Plain | None], length: int, dropped: Sequence[Message]
    ) -> list[Plain | None]:
        return value[:length]


_READINGS: Derivation[list[Plain | None]] = _ReadingsDerivation()


class _Span(Sequence[Message]):
    """Messages ``start`` to ``stop`` of a history, each built when it is read."""

    __slots__ = ("_history", "_start", "_stop")

    def __init__(self, history: Sequence[Message], start: int, stop: int) -> None:
        self._history, self._start, self._stop = history, start, stop

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            return [self[at] for at in range(*index.indices(len(self)))]
        if not 0 <= index < len(self):
            raise IndexError("span index out of range")
        return self._history[self._start + index]


_NO_UPPER_BOUND = 2**62
"""A ``before`` cursor past every message, to read the newest page."""


class ThreadstoreHistoryProvider(HistoryProvider):
    """A framework ``HistoryProvider`` that loads and stores history in a threadstore store.

    Histories are chats of ``user_uuid`` (within ``tenant_id``/``app_id`` when given),
    one per session, readable through every other face of the store. The base class's
    flags (``load_messages``, ``store_inputs``, ``store_outputs``,
    ``store_context_messages``, ``store_context_from``) mean what they mean there.
    ``message_filter`` is applied to the history the agent loads (see
    :func:`~threadstore.faces.agent_framework.keep_last_messages`).
    """

    DEFAULT_SOURCE_ID = "threadstore"

    def __init__(
        self,
        store: Store,
        user_uuid: UUID,
        *,
        tenant_id: str | None = None,
        app_id: str | None = None,
        source_id: str = DEFAULT_SOURCE_ID,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        message_filter: MessageFilter | None = None,
    ) -> None:
        super().__init__(
            source_id,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self.store = store
        self.scope = ChatScope(store, user_uuid, tenant_id, app_id)
        self.message_filter = message_filter

    # --- the session's storage key --------------------------------------------------------

    @property
    def session_state(self) -> ProviderSessionState[ThreadstoreSessionState]:
        """The provider's typed state in a session (``session.state[source_id]``)."""
        return ProviderSessionState(
            ThreadstoreSessionState,
            lambda session: ThreadstoreSessionState(
                thread_id=(session.session_id if session else None) or str(uuid4())
            ),
            self.source_id,
        )

    def thread_id(self, session_id: str | None, state: dict[str, Any] | None) -> str | None:
        """Return the session's thread id, recording it in ``state`` on first use."""
        if state is None:
            return session_id
        typed = self.session_state
        kept = typed.read(state)
        if kept is not None and kept.thread_id is not None:
            return kept.thread_id
        key = session_id or str(uuid4())
        typed.write(state, ThreadstoreSessionState(thread_id=key))
        return key

    async def get_chat(self, session_id: str | None, state: dict[str, Any] | None) -> Chat | None:
        """Return the chat holding the session's history, or ``None`` when it has none yet."""
        thread_id = self.thread_id(session_id, state)
        return None if thread_id is None else await self.scope.find(thread_id)

    # --- HistoryProvider ----------------------------------------------------------------------

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[AFMessage]:
        """Return the session's history, oldest first, after ``message_filter``.

        A compacted chat's history is its summary (a system message), then the messages
        after it (``store.branches.agent_history``).
        """
        messages = await self._given(session_id, state)
        return self.message_filter(messages) if self.message_filter else messages

    async def get_session_messages(self, session: AgentSession) -> list[AFMessage]:
        """Return everything stored for ``session``, oldest first (no ``message_filter``)."""
        return await self._stored(session.session_id, session.state.get(self.source_id))

    async def _stored(
        self, session_id: str | None, state: dict[str, Any] | None, chat: Chat | None = None
    ) -> list[AFMessage]:
        chat = chat or await self.get_chat(session_id, state)
        if chat is None:
            return []
        history = await self.store.messages.read_history(chat.chat_uuid, _READINGS)
        readings = history.derived(_READINGS)
        answered: set[str] = set()  # carried from piece to piece of a long history
        out: list[AFMessage] = []

        def convert(span: Sequence[int]) -> None:
            if not span:
                return
            start, stop = span[0], span[-1] + 1
            records = _Span(history, start, stop)
            out.extend(messages_of(records, readings[start:stop], answered))

        await in_steps(range(len(history)), convert)
        return out

    async def _given(self, session_id: str | None, state: dict[str, Any] | None) -> list[AFMessage]:
        """What the agent is given: the stored history, or a compacted chat's summary and tail."""
        chat = await self.get_chat(session_id, state)
        if chat is None:
            return []
        if not await self.store.branches.summaries(chat.chat_uuid):
            return await self._stored(session_id, state, chat)
        answered: set[str] = set()  # carried from piece to piece of a long history
        return await load_history(
            self.store,
            chat.chat_uuid,
            lambda piece: records_to_messages(piece, answered),
            lambda summary: [summary_message(summary)],
        )

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[AFMessage],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Append the messages not stored yet, in one transaction.

        Skipped: messages this provider loaded (they carry its attribution) and
        messages re-sent from the end of the stored history (recognised by id, else by
        role and contents), so a tool loop that persists after every model call, or a
        client that sends its whole transcript, stores each message once.
        """
        incoming = [message for message in messages if not self._loaded_here(message)]
        if not incoming:
            return
        thread_id = self.thread_id(session_id, state) or str(uuid4())
        chat = await self.scope.open(thread_id)
        tail = await self.store.get_chat_messages(
            chat.chat_uuid, before=_NO_UPPER_BOUND, limit=min(len(incoming) + _TAIL_MARGIN, 1000)
        )
        new = unsaved(records_to_messages(tail), incoming)
        if new:
            await self.store.apply_writes(_writes(chat.chat_uuid, tail, new))

    def _loaded_here(self, message: AFMessage) -> bool:
        attribution = message.additional_properties.get("_attribution")
        return isinstance(attribution, dict) and attribution.get("source_id") == self.source_id

    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Load history, unless the service keeps this session's history."""
        if _service_managed(session, context):
            return
        self._check_only_loader(agent)
        await super().before_run(agent=agent, session=session, context=context, state=state)
        # A caller that sends its whole transcript as input would otherwise give the
        # model every earlier turn twice: drop the history the input repeats.
        loaded = context.context_messages.get(self.source_id, [])
        repeated = _overlap(loaded, context.input_messages)
        if repeated:
            context.context_messages[self.source_id] = loaded[: len(loaded) - repeated]

    async def after_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Store the run's new messages, unless the service keeps this session's history.

        A run that failed (it has no response) stores nothing, not even its request, as
        the seed's providers skip a run with an invocation exception. The response's
        ``usage_details`` go into the usage ledger, one row per response id.
        """
        if _service_managed(session, context) or context.response is None:
            return
        await super().after_run(agent=agent, session=session, context=context, state=state)
        usage = run_usage(context.response)
        if usage is not None and self.store.usage.kept:
            chat = await self.get_chat(context.session_id, state)
            if chat is not None:
                run_id = f"agent-framework:{context.response.response_id or uuid4()}"
                await self.store.usage.record(
                    RunUsage.of(
                        chat.chat_uuid, run_id, chat.user_uuid, usage, source="agent-framework"
                    )
                )

    def _check_only_loader(self, agent: SupportsAgentRun) -> None:
        others = [
            provider.source_id
            for provider in getattr(agent, "context_providers", ())
            if isinstance(provider, HistoryProvider)
            and provider.load_messages
            and provider is not self
        ]
        if others:
            raise ConfigurationError(
                f"only one history provider may load messages; {self.source_id!r} and "
                f"{', '.join(map(repr, others))} both do (set load_messages=False on the others)"
            )


def summary_message(summary: Summary) -> AFMessage:
    """What a compacted chat's summary reads as: one system message, before what follows it."""
    return AFMessage("system", [summary.content], message_id=summary.agui_id)


def _service_managed(session: AgentSession, context: SessionContext) -> bool:
    # The service is then the source of the conversation; local history would double it.
    return session.service_session_id is not None or context.service_session_id is not None


def _overlap(stored: Sequence[AFMessage], incoming: Sequence[AFMessage]) -> int:
    """Return how many messages ``incoming`` starts with that end ``stored``.

    A lone user message without an id does not count: users do say the same thing twice.
    """
    stored_ids = [message_identity(message) for message in stored]
    ids = [message_identity(message) for message in incoming]
    for overlap in range(min(len(stored_ids), len(ids)), 0, -1):
        if stored_ids[-overlap:] != ids[:overlap]:
            continue
        if overlap == 1 and incoming[0].role == "user" and ids[0][0] != "id":
            continue
        return overlap
    return 0


def unsaved(stored: Sequence[AFMessage], incoming: Sequence[AFMessage]) -> list[AFMessage]:
    """Return the messages of ``incoming`` that ``stored`` (the history's tail) lacks.

    Dropped: the messages ``incoming`` starts with that end ``stored`` (a replay) and
    the messages whose id is in ``stored``, wherever they are.
    """
    known = {message_identity(message) for message in stored if message.message_id is not None}
    rest = incoming[_overlap(stored, incoming) :]
    return [message for message in rest if message_identity(message) not in known]


def _writes(chat_uuid: UUID, tail: Sequence[Message], new: Sequence[AFMessage]) -> list[Write]:
    """The writes that append ``new`` and put each tool result on the call it answers."""
    calls = {call.tool_call_id: call.uuid for record in tail for call in record.tool_calls}
    records = [message_to_records(message, chat_uuid) for message in new]
    answerable = set(calls)
    for record in records:
        unmatched = [call_id for call_id, _ in record.results if call_id not in answerable]
        if len(record.results) == 1 and unmatched:
            # No call in this chat to hold it: the AG-UI replay reads it from the message.
            record.message.metadata[TOOL_CALL_ID_METADATA_KEY] = unmatched[0]
        answerable.update(call.tool_call_id for call in record.calls)
    return append_writes(records, calls=calls)


def run_usage(response: Any) -> UsageReport | None:
    """The ``usage_details`` of an ``AgentResponse`` as a usage report (``None``: none)."""
    details = getattr(response, "usage_details", None)
    if not details:
        return None
    return UsageReport(
        input_tokens=details.get("input_token_count") or 0,
        output_tokens=details.get("output_token_count") or 0,
        cached_input_tokens=details.get("cache_read_input_token_count") or 0,
        reasoning_tokens=details.get("reasoning_output_token_count") or 0,
    )
