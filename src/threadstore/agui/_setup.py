"""A run's set-up: find the chat, screen the input, find the branch point, store the input.

Everything is read and screened before anything is written, so a refused run
(``InvalidInputError``: a message the chat cannot take; ``RunLiveError``: its chat
already has a running run) writes nothing. When what the set-up's writes will store is
known from what it read (:meth:`RunSetUp.early_input`), the inner agent may start while
they go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

from ag_ui.core import RunAgentInput, ToolMessage, UserMessage

from threadstore._steps import in_steps, off_loop
from threadstore.agui._agent_input import (
    Appended,
    as_stored,
    compacted_translation,
    kept_translation,
    tail_translation,
    translation_after,
)
from threadstore.agui._window import HistoryWindow
from threadstore.codec import (
    TRANSLATION,
    chat_name_from_messages,
    message_create_from_agui,
    summary_message,
    tool_result_text,
    translate_messages,
)
from threadstore.errors import InvalidInputError
from threadstore.fold import (
    HISTORY_INDEX,
    HistoryIndex,
    HistoryLookup,
    IdsAdded,
    Record,
    append_writes,
)
from threadstore.lifecycle import applicable_summary
from threadstore.models import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageStatus,
    MessageToolCallUpdate,
    Run,
    Summary,
)
from threadstore.store import HistoryView, RunStorage, TreeNode, Write
from threadstore.store.ops import UpdateToolCall

if TYPE_CHECKING:
    import ag_ui.core

__all__ = ["Prepared", "RunSetUp", "SetUpDone", "history_lookup"]

Translate = Callable[[Sequence[Message]], list["ag_ui.core.Message"]]


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a run's set-up read and worked out before it writes anything."""

    chat: Chat | None
    chat_create: ChatCreate | None
    """The chat to create when the thread has none."""
    history: Sequence[Message]
    lookup: HistoryLookup
    branch: Branch | None
    inbound: list[ag_ui.core.Message]
    """The client's messages (``input.messages`` is then replaced with the history)."""
    creates: list[MessageCreate]
    results: list[tuple[UUID, MessageToolCallUpdate]]
    summaries: Sequence[Summary] = ()
    """The chat's summaries, newest first: what the agent is given starts at the one
    that applies (:mod:`threadstore.lifecycle`)."""

    @property
    def chat_uuid(self) -> UUID:
        """The run's chat: the one found, or the one to create."""
        chat = self.chat if self.chat is not None else self.chat_create
        assert chat is not None
        return chat.chat_uuid


@dataclass(frozen=True, slots=True)
class SetUpDone:
    """A set-up's writes done: the chat, its history after the input, what it holds."""

    chat: Chat
    history: Sequence[Message]
    lookup: HistoryLookup
    chain: UUID | None
    """For a run that branches: its newest message, the parent of its next one."""


@dataclass(frozen=True, slots=True)
class Branch:
    """A run's branch point: the stored message it continues, and the history up to it."""

    point: UUID
    history: Sequence[Message]


async def history_lookup(history: Sequence[Message]) -> HistoryLookup:
    """What ``history`` holds: the index kept with a store's history, or one built now."""
    if isinstance(history, HistoryView):
        return history.derived(HISTORY_INDEX).at(len(history))
    built = HistoryIndex()
    await in_steps(history, built.feed)
    return built.at(len(history))


class RunSetUp:
    """The set-up of one run of a storage agent (see the module docstring)."""

    def __init__(
        self,
        storage: RunStorage,
        input: RunAgentInput,
        *,
        user_uuid: UUID,
        owner: str | None,
        chat_name: str | None,
        tenant_id: str | None,
        app_id: str | None,
        records_run: bool,
        history_window: HistoryWindow | None = None,
        translate: Translate | None = None,
        branch_from: UUID | None = None,
    ) -> None:
        self.storage, self.input = storage, input
        self.user_uuid, self.owner = user_uuid, owner
        self.chat_name, self.tenant_id, self.app_id = chat_name, tenant_id, app_id
        self.history_window, self.translate = history_window, translate
        self.branch_from = branch_from
        self.records_run = records_run
        self.branched = False
        """Whether the run branches off the chat's leaf (see :meth:`_branch_point`)."""
        self.summaries: Sequence[Summary] = ()
        """The chat's summaries, as :meth:`prepare` read them."""

    # --- reading -------------------------------------------------------------------------

    async def prepare(self, looked_up: tuple[Chat | None] | None) -> Prepared:
        """Find the chat and its history, screen the input: everything before a write.

        ``looked_up``: the thread's chat as the caller just read it, if it did.
        Refuses (``InvalidInputError``) before anything is written.
        """
        input = self.input
        if looked_up is None or getattr(looked_up[0], "thread_id", input.thread_id) != (
            input.thread_id
        ):
            chat = await self.storage.find_chat(self.user_uuid, input.thread_id)
        else:
            chat = looked_up[0]
        if chat is not None:
            self.summaries = await self.storage.summaries(chat)
        history = await self._history(chat)
        lookup = await history_lookup(history)
        branch = await self._branch_point(chat, history, lookup)
        if branch is not None:
            history = branch.history
            lookup = await history_lookup(history)
            self.branched = True
        inbound = list(input.messages)
        creates, results = screen(inbound, input.run_id, self.known(lookup))
        chat_create = None
        if chat is None:
            chat_create = ChatCreate(
                user_uuid=self.user_uuid,
                thread_id=input.thread_id,
                name=self.chat_name or chat_name_from_messages(inbound),
                tenant_id=self.tenant_id,
                app_id=self.app_id,
            )
        return Prepared(
            chat, chat_create, history, lookup, branch, inbound, creates, results, self.summaries
        )

    def known(self, lookup: HistoryLookup) -> HistoryLookup:
        """``lookup`` with the ids of the chat's summaries known too.

        An agent given a summary may send it back (a ``MESSAGES_SNAPSHOT``), and a client
        echo it: it is stored already, as what it stands for.
        """
        if not self.summaries:
            return lookup
        ids = IdsAdded(lookup.ids)
        for summary in self.summaries:
            ids.add(summary.agui_id)
        return lookup._replace(ids=ids)

    async def _history(self, chat: Chat | None) -> Sequence[Message]:
        if chat is None:
            return []
        if not self.summaries:
            return await self.storage.history(chat, HISTORY_INDEX, TRANSLATION)
        # A compacted chat's agent gets what follows its summary: that is translated and
        # kept, not the whole history (tens of thousands of models the collector scans).
        history = await self.storage.history(
            chat, HISTORY_INDEX, tail_translation(self.summaries[0])
        )
        if self._summary_of(history) is None:  # none on this branch: the whole history
            history = await self.storage.history(chat, HISTORY_INDEX, TRANSLATION)
        return history

    async def early_input(self, prepared: Prepared) -> list[ag_ui.core.Message] | None:
        """What the inner agent is given once the run's input is stored, told before it is.

        The run then starts while its set-up writes go on. ``None`` when only the
        stored history can tell (the run must wait for its writes): a run that stores
        tool results or branches, a custom translation, a storage that cannot foresee
        its writes, or a history that grew meanwhile.
        """
        if (
            prepared.branch is not None
            or prepared.results
            or self.branch_from is not None
            or self.translate is not None
            or not self.storage.foresees
        ):
            return None
        history = prepared.history
        added = [as_stored(create, prepared.chat_uuid) for create in prepared.creates]
        found = self._summary_of(history)
        if found is not None:
            summary, last = found
            if self.history_window is None and isinstance(history, HistoryView):
                return compacted_translation(history, summary, last, added)
            return None  # from the stored history: few runs of a compacted chat have a window
        whole = Appended(history, added)
        if self.history_window is not None:
            given = self.history_window.select(whole)
            if given is not whole:
                return await off_loop(given, translate_messages, given)
        if isinstance(history, HistoryView):
            return translation_after(history, added)
        return translate_messages(added) if not history else None

    def _summary_of(self, history: Sequence[Message]) -> tuple[Summary, int] | None:
        """The summary that applies to ``history`` and where its last message stands."""
        if not self.summaries:
            return None
        if isinstance(history, HistoryView):
            return applicable_summary(self.summaries, history.position)
        positions = {message.message_uuid: at for at, message in enumerate(history)}
        return applicable_summary(self.summaries, positions.get)

    async def given(self, history: Sequence[Message]) -> list[ag_ui.core.Message]:
        """The translated history the inner agent is given (``input.messages``).

        A compacted chat's: the summary that applies, then what follows it.
        """
        found = self._summary_of(history)
        if found is not None:
            summary, last = found
            if (
                self.history_window is None
                and self.translate is None
                and isinstance(history, HistoryView)
            ):
                return compacted_translation(history, summary, last)
            tail = history[last + 1 :]
            if self.history_window is not None:
                tail = self.history_window.select(tail)
            return [summary_message(summary), *(self.translate or translate_messages)(tail)]
        given = history if self.history_window is None else self.history_window.select(history)
        if self.translate is None and isinstance(given, HistoryView):
            return kept_translation(given)
        # Whole-history work: off the event loop for a long chat.
        return await off_loop(given, self.translate or translate_messages, given)

    # --- writing -------------------------------------------------------------------------

    async def write(self, prepared: Prepared) -> SetUpDone:
        """Create the chat if it is new, record the run, store the input."""
        input, storage = self.input, self.storage
        chat, history, lookup = prepared.chat, prepared.history, prepared.lookup
        creates, results = prepared.creates, prepared.results
        if chat is None:
            assert prepared.chat_create is not None
            if not results and not self.branched:
                run = self.run_record(prepared.chat_uuid) if self.records_run else None
                opened = await storage.open_chat(prepared.chat_create, run, creates)
                if opened is not None:
                    chat, history = opened
                    return SetUpDone(chat, history, await history_lookup(history), None)
            chat = await storage.create_chat(prepared.chat_create)
            # A chat with our uuid is the one we just created, so it is empty; any other
            # was created by a concurrent run meanwhile and may hold messages already.
            if chat.chat_uuid != prepared.chat_create.chat_uuid:
                history = await self._history(chat)
                lookup = await history_lookup(history)
                if history:
                    creates, results = screen(prepared.inbound, input.run_id, lookup)
        # Before the input is stored: a chat with a running run that continues its leaf
        # (in any process; the store holds it to one) refuses another such run with
        # nothing written. A run that branches hangs under its own branch point.
        if self.records_run:
            await storage.start_run(self.run_record(chat.chat_uuid))
        try:
            return await self._store_input(chat, history, lookup, prepared.branch, creates, results)
        except BaseException:
            await storage.abandon_run(
                chat.chat_uuid, input.run_id, "the run's input could not be stored"
            )
            raise

    async def _store_input(
        self,
        chat: Chat,
        history: Sequence[Message],
        lookup: HistoryLookup,
        branch: Branch | None,
        creates: list[MessageCreate],
        results: list[tuple[UUID, MessageToolCallUpdate]],
    ) -> SetUpDone:
        """Store the run's new input messages and tool results; the history after them."""
        storage = self.storage
        if branch is not None and not creates:
            # Nothing new to hang on the branch point: the run continues from it (its
            # history is the path to it, whatever the leaf becomes meanwhile).
            await storage.set_active_leaf(chat.chat_uuid, branch.point)
        if creates or results:
            # One batch, through the one append plan: a branching run's messages hang under
            # its branch point, each under the one before, whatever another run branching
            # from the same message writes meanwhile.
            records = [Record(c.model_copy(update={"chat_uuid": chat.chat_uuid})) for c in creates]
            writes: list[Write] = append_writes(records, branch.point if branch else None)
            writes += [UpdateToolCall(call, update) for call, update in results]
            await storage.write(writes)
            if branch is not None:
                # The branch ends at this run's own messages, whatever the chat's leaf is.
                stored = [await storage.get_message(r.message.message_uuid) for r in records]
                history = [*branch.history, *(m for m in stored if m is not None)]
            else:
                history = await self._history(chat)  # a store reads only what changed
            lookup = await history_lookup(history)
        chain = history[-1].message_uuid if branch is not None and history else None
        return SetUpDone(chat, history, lookup, chain)

    def run_record(self, chat_uuid: UUID) -> Run:
        """This run's record, as ``start_run`` takes it."""
        input = self.input
        return Run(
            chat_uuid=chat_uuid,
            thread_id=input.thread_id,
            run_id=input.run_id,
            parent_run_id=input.parent_run_id,
            owner=self.owner,
            exclusive=not self.branched,
        )

    # --- branches ------------------------------------------------------------------------

    async def _branch_point(
        self, chat: Chat | None, history: Sequence[Message], lookup: HistoryLookup
    ) -> Branch | None:
        """Where this run branches off the chat's tree, or ``None`` when it continues the leaf.

        A run branches (where the storage keeps a tree) when its ``parent_run_id`` names
        a run of the chat whose last message is not the leaf (it continues from that
        message), or when its ``messages`` are stored messages — of any branch — followed
        only by new user messages, and the last stored one is an answer that is not the
        leaf: an edit-and-resend, or a client resending from a branch it holds.
        """
        input = self.input
        if chat is None or not self.storage.branches:
            return None
        on_branch = lookup.messages
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
            tree = await self.storage.tree(chat.chat_uuid)
        point: TreeNode | None = None
        if tree is None:
            point = _echoed_point(input, history, lookup)
        elif self.branch_from is not None:
            point = next((node for node in tree if node.message_uuid == self.branch_from), None)
            if point is None:
                raise InvalidInputError(f"message {self.branch_from} is not in this chat")
            # Even when it is the leaf now: another request may move the leaf before the
            # run writes, and the run's messages must still hang under this one.
            self.branched = True
            return Branch(point.message_uuid, await self._path_to(tree, point, history))
        elif input.parent_run_id is not None:
            ran = [node for node in tree if node.run_id == input.parent_run_id]
            point = ran[-1] if ran else None
        else:
            by_id = {node.agui_id: node for node in tree if node.agui_id}
            point = _last_echoed(input, by_id.get)
        if point is None or point.message_uuid == chat.active_leaf_uuid:
            return None
        if tree is None:  # on the active branch: its history is a prefix of it
            at = lookup.messages.get(point.agui_id or "")
            assert at is not None
            return Branch(point.message_uuid, history[: at + 1])
        return Branch(point.message_uuid, await self._path_to(tree, point, history))

    async def _path_to(
        self, tree: Sequence[TreeNode], point: TreeNode, active: Sequence[Message]
    ) -> list[Message]:
        """The messages from the root to ``point``: a prefix of ``active`` when it is on it."""
        at = (
            active.position(point.message_uuid)
            if isinstance(active, HistoryView)
            else next(
                (i for i, m in enumerate(active) if m.message_uuid == point.message_uuid), None
            )
        )
        if at is not None:
            return list(active[: at + 1])
        parents = {node.message_uuid: node.parent_uuid for node in tree}
        path: list[Message] = []
        current: UUID | None = point.message_uuid
        while current is not None:
            found = await self.storage.get_message(current)
            if found is None:  # deleted meanwhile: the branch is gone
                raise InvalidInputError(f"message {current} of this chat no longer exists")
            path.append(found)
            current = parents.get(current)
        return path[::-1]


def screen(
    messages: Sequence[ag_ui.core.Message], run_id: str, lookup: HistoryLookup
) -> tuple[list[MessageCreate], list[tuple[UUID, MessageToolCallUpdate]]]:
    """Sort inbound messages into new user messages and tool results; refuse the rest.

    Each inbound message is looked up in the history's index by id: the screening
    costs what the input holds, not what the chat holds.
    """
    known = IdsAdded(lookup.ids)
    pending = dict(lookup.pending)
    creates: list[MessageCreate] = []
    results: list[tuple[UUID, MessageToolCallUpdate]] = []
    for message in messages:
        if message.id in known:
            continue
        known.add(message.id)
        if isinstance(message, UserMessage):
            creates.append(message_create_from_agui(message, UUID(int=0), run_id))
            continue
        call = pending.pop(message.tool_call_id, None) if isinstance(message, ToolMessage) else None
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
    input: RunAgentInput, history: Sequence[Message], lookup: HistoryLookup
) -> TreeNode | None:
    """:func:`_last_echoed` among the messages of the active branch, found by index."""

    def find(agui_id: str) -> TreeNode | None:
        at = lookup.messages.get(agui_id)
        if at is None:
            return None
        m = history[at]
        return TreeNode(m.message_uuid, m.parent_uuid, m.role, m.seq, m.agui_id, m.run_id)

    return _last_echoed(input, find)
