"""``store.branches``: the message tree, switching, editing and forking, and compaction.

Compaction lives here because a summary stands for a span of one branch: what an agent
gets (``agent_history``) is the active branch with its newest applicable summary first.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID, uuid4

from threadstore import _telemetry
from threadstore.errors import ConflictError, InvalidInputError, NotFoundError
from threadstore.lifecycle import (
    CompactionPolicy,
    Summarizer,
    applicable_summary,
    deterministic_summary,
    plan_compaction,
    summarize,
    summarizer_name,
)
from threadstore.models import (
    Chat,
    Message,
    MessageCreate,
    Summary,
)
from threadstore.store._copies import chat_create, copy_message
from threadstore.store._lifecycle import LifecycleBackend
from threadstore.store._queries import (
    Siblings,
    TreeNode,
)
from threadstore.store.ops import (
    MakeRoot,
    SetActiveLeaf,
)

if TYPE_CHECKING:
    from threadstore.store._base import Store

__all__ = ["AgentHistory", "Branches"]


@dataclass(frozen=True, slots=True)
class AgentHistory:
    """What an agent is given of a chat: the summary that applies, then the messages after it."""

    summary: Summary | None
    messages: Sequence[Message]


class Branches:
    """A chat as a tree: its messages without content, the active leaf, new roots, the
    versions of a turn, regenerate and edit-and-resend, and forks."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def get_message_tree(self, chat_uuid: UUID) -> list[TreeNode]:
        """Every message of the chat (every branch) without content, oldest first."""
        return await self._store._select_tree(chat_uuid)

    async def is_linear(self, chat_uuid: UUID) -> bool:
        """True when the chat is known never to have branched: its messages are one line.

        Every message is then on the active branch, and nothing needs the tree to find
        others. ``False`` says only that it may have branched (a backend that does not
        track it always answers ``False``).
        """
        return await self._store._never_branched(chat_uuid)

    async def set_active_leaf(self, chat_uuid: UUID, message_uuid: UUID) -> Chat | None:
        """Make ``message_uuid`` (a message of this chat) the end of the active branch."""
        return cast(
            Chat | None, await self._store._apply_one(SetActiveLeaf(chat_uuid, message_uuid))
        )

    async def create_root_message(self, message_data: MessageCreate) -> Message:
        """Create a message with no parent, whatever the active leaf: a new first message.

        This is how the first message of a chat is edited: the new version is a second
        root, and the active branch starts from it. ``parent_uuid`` must not be given.
        """
        if message_data.parent_uuid is not None:
            raise InvalidInputError("a root message has no parent_uuid")
        async with self._store.transaction():
            created = await self._store.create_message(message_data)
            if created.parent_uuid is not None:
                assert created.chat_uuid is not None
                await self._store._apply_one(MakeRoot(created.chat_uuid, created.message_uuid))
        return created.model_copy(update={"parent_uuid": None})

    async def get_siblings(self, chat_uuid: UUID, message_uuid: UUID) -> Siblings:
        """The versions of ``message_uuid``'s turn: the messages sharing its parent."""
        tree = await self._tree(chat_uuid, message_uuid)
        return _siblings_in(tree.values(), {message_uuid})[message_uuid]

    async def get_branch_points(
        self, chat_uuid: UUID, message_uuids: Sequence[UUID]
    ) -> dict[UUID, Siblings]:
        """For each given message that has siblings, where it stands among them (one read)."""
        if not message_uuids:
            return {}
        nodes = await self._store._select_siblings(chat_uuid, message_uuids)
        found = _siblings_in(nodes, set(message_uuids))
        return {uuid: place for uuid, place in found.items() if place.count > 1}

    async def switch_branch(self, chat_uuid: UUID, message_uuid: UUID) -> Chat:
        """Make the branch through ``message_uuid`` active: its newest leaf becomes the leaf.

        Switching to a sibling shows that version of the turn and everything after it.
        """
        tree = await self._tree(chat_uuid, message_uuid)
        chat = await self.set_active_leaf(chat_uuid, _newest_leaf_under(tree, message_uuid))
        if chat is None:
            raise NotFoundError(f"chat {chat_uuid} does not exist")
        return chat

    async def branch_for_regenerate(self, chat_uuid: UUID, message_uuid: UUID) -> UUID:
        """Move the active leaf to the user turn of ``message_uuid`` and return that turn.

        ``message_uuid`` is a user message or a message answering one; the next message
        appended (the new answer) is then a sibling of the answers before it.
        """
        turn = await self.user_turn_of(chat_uuid, message_uuid)
        await self.set_active_leaf(chat_uuid, turn)
        return turn

    async def user_turn_of(self, chat_uuid: UUID, message_uuid: UUID) -> UUID:
        """The user message ``message_uuid`` is (or answers): what a regenerate answers again."""
        path = _path_to(await self._tree(chat_uuid, message_uuid), message_uuid)
        turn = next((node for node in reversed(path) if node.role == "user"), None)
        if turn is None:
            raise InvalidInputError(f"message {message_uuid} answers no user message")
        return turn.message_uuid

    async def edit_message(self, message_uuid: UUID, message_data: MessageCreate) -> Message:
        """Create ``message_data`` as a new version of the user message ``message_uuid``.

        The new message is its sibling (a new root when it is the first message) and
        becomes the active leaf; the old version and everything after it stay as a branch.
        """
        old = await self._store.get_message(message_uuid)
        if old is None:
            raise NotFoundError(f"message {message_uuid} does not exist")
        if old.role != "user":
            raise InvalidInputError(
                f"message {message_uuid} is a {old.role} message, not a user one"
            )
        data = message_data.model_copy(
            update={"chat_uuid": old.chat_uuid, "parent_uuid": old.parent_uuid}
        )
        if old.parent_uuid is None:
            return await self.create_root_message(data)
        return await self._store.create_message(data)

    async def fork_chat(
        self,
        chat_uuid: UUID,
        at_message_uuid: UUID,
        *,
        thread_id: str | None = None,
        user_uuid: UUID | None = None,
    ) -> Chat:
        """A new chat holding a copy of the branch from the root to ``at_message_uuid``.

        The copy has fresh uuids (the two chats never share rows, so either can be
        deleted alone) and records its lineage in ``forked_from_chat_uuid`` and
        ``forked_from_message_uuid``. It belongs to ``user_uuid`` (default: the
        source's owner) under ``thread_id`` (default: a new one).
        """
        source = await self._store.chats.get_chat(chat_uuid)
        if source is None:
            raise NotFoundError(f"chat {chat_uuid} does not exist")
        path = _path_to(await self._tree(chat_uuid, at_message_uuid), at_message_uuid)
        async with self._store.transaction():
            owner = user_uuid or source.user_uuid
            thread = thread_id or f"fork-{uuid4()}"
            if await self._store.get_chat_by_thread_id(owner, thread) is not None:
                raise ConflictError(f"a chat with thread id {thread!r} already exists")
            fork = await self._store.create_chat(
                chat_create(
                    source,
                    user_uuid=owner,
                    thread_id=thread,
                    forked_from_chat_uuid=chat_uuid,
                    forked_from_message_uuid=at_message_uuid,
                )
            )
            parent: UUID | None = None
            for node in path:
                message = await self._store.get_message(node.message_uuid)
                assert message is not None
                parent = await copy_message(self._store, message, fork.chat_uuid, parent)
            found = await self._store.chats.get_chat(fork.chat_uuid)
        return found or fork

    async def _tree(self, chat_uuid: UUID, message_uuid: UUID) -> dict[UUID, TreeNode]:
        """The chat's tree by uuid (by ``seq``); ``NotFoundError`` without ``message_uuid``."""
        tree = {node.message_uuid: node for node in await self._store._select_tree(chat_uuid)}
        if message_uuid not in tree:
            raise NotFoundError(f"message {message_uuid} is not in chat {chat_uuid}")
        return tree

    # --- compaction: summaries that agents get instead of a span -----------------------

    def _lifecycle(self) -> LifecycleBackend:
        return self._store._required(self._store._lifecycle, "summaries")

    async def summaries(self, chat_uuid: UUID) -> list[Summary]:
        """The chat's summaries, newest first (whichever branch they were made on)."""
        return await self._lifecycle().select_summaries(chat_uuid)

    async def add_summary(self, summary: Summary) -> Summary:
        """Store a summary made elsewhere (an import); ``NotFoundError`` without its chat."""
        await self._lifecycle().insert_summary(summary)
        return summary

    async def remove_summary(self, chat_uuid: UUID, summary_uuid: UUID) -> bool:
        """Undo a compaction: agents get the messages it covered again; whether it existed."""
        return await self._lifecycle().delete_summary(chat_uuid, summary_uuid)

    async def agent_history(self, chat_uuid: UUID) -> AgentHistory:
        """The summary that applies to the active branch and the messages after it.

        What a framework face gives its agent. Without a summary: the whole history. A
        chat that never branched reads only the messages after the summary.
        """
        summaries = await self.summaries(chat_uuid) if self._store._lifecycle else []
        if summaries and await self.is_linear(chat_uuid):
            summary = summaries[0]
            tail = await self._store.get_chat_messages(chat_uuid, after=summary.last_seq)
            return AgentHistory(summary, tail)
        history = await self._store.messages.read_history(chat_uuid)
        found = applicable_summary(summaries, history.position)
        if found is None:
            return AgentHistory(None, history)
        summary, last = found
        return AgentHistory(summary, history[last + 1 :])

    @_telemetry.traced("threadstore.compact", conversation=True)
    async def compact(
        self,
        chat_uuid: UUID,
        summarizer: Summarizer = deterministic_summary,
        *,
        keep_messages: int | None = 20,
        keep_tokens: int | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Summary | None:
        """Summarize the active branch up to a safe cut; ``None`` when nothing new would be.

        At least ``keep_messages`` messages (and ``keep_tokens`` tokens) stay out of the
        summary; a cut never separates a tool call from its result or a reasoning block
        from its message (:mod:`threadstore.lifecycle`). A chat with a summary already
        gets one covering both: the summarizer reads the earlier summary and the
        messages after it. No message changes; :meth:`remove_summary` undoes it.
        """
        if await self._store.chats.get_chat(chat_uuid) is None:
            raise NotFoundError(f"chat {chat_uuid} does not exist")
        summaries = await self.summaries(chat_uuid)
        history = await self._store.messages.read_history(chat_uuid)
        plan = await plan_compaction(
            history, summaries, keep_messages=keep_messages, keep_tokens=keep_tokens
        )
        if plan is None:
            return None
        covered = history[plan.new : plan.cut]
        text = await summarize(summarizer, covered, plan.previous)
        first, last = history[plan.first], history[plan.cut - 1]
        summary = Summary(
            chat_uuid=chat_uuid,
            first_message_uuid=first.message_uuid,
            last_message_uuid=last.message_uuid,
            last_seq=last.seq,
            message_count=plan.cut - plan.first,
            content=text,
            summarizer=name or summarizer_name(summarizer),
            metadata=dict(metadata or {}),
        )
        await self._lifecycle().insert_summary(summary)
        if self._store.history_cache is not None:
            # What was kept for agents given the whole history (its translation) goes.
            self._store.history_cache.discard(chat_uuid)
        return summary

    async def compact_over_budget(
        self, chat_uuid: UUID, policy: CompactionPolicy
    ) -> Summary | None:
        """Compact the chat when what its agent is given is over ``policy``'s budget."""
        chosen = policy.for_chat(chat_uuid)
        if chosen.max_messages is None and chosen.max_tokens is None:
            return None
        given = await self.agent_history(chat_uuid)
        if not await chosen.over_budget(given.messages):
            return None
        return await self.compact(
            chat_uuid,
            chosen.summarizer,
            keep_messages=chosen.keep_messages,
            keep_tokens=chosen.keep_tokens,
            name=chosen.summarizer_name,
        )


def _path_to(tree: dict[UUID, TreeNode], message_uuid: UUID) -> list[TreeNode]:
    """The branch from the root down to ``message_uuid``."""
    path = [tree[message_uuid]]
    while path[-1].parent_uuid is not None:
        path.append(tree[path[-1].parent_uuid])
    return path[::-1]


def _siblings_in(tree: Collection[TreeNode], wanted: set[UUID]) -> dict[UUID, Siblings]:
    """Where each wanted message stands among the messages sharing its parent."""
    by_parent: dict[UUID | None, list[UUID]] = {}
    for node in tree:  # by seq: creation order
        by_parent.setdefault(node.parent_uuid, []).append(node.message_uuid)
    found: dict[UUID, Siblings] = {}
    for node in tree:
        if node.message_uuid in wanted:
            group = tuple(by_parent[node.parent_uuid])
            found[node.message_uuid] = Siblings(group.index(node.message_uuid), group)
    return found


def _newest_leaf_under(tree: dict[UUID, TreeNode], top: UUID) -> UUID:
    """The most recently created message without children in ``top``'s subtree."""
    children: dict[UUID | None, list[UUID]] = {}
    for node in tree.values():
        children.setdefault(node.parent_uuid, []).append(node.message_uuid)
    leaves, stack = [], [top]
    while stack:
        current = stack.pop()
        below = children.get(current)
        if below:
            stack.extend(below)
        else:
            leaves.append(current)
    return max(leaves, key=lambda leaf: tree[leaf].seq)
