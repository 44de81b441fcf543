"""Export a chat as one JSON document and import it back, for the API and the CLI.

An export holds the chat (with its lineage and active leaf) and every message of its
tree, oldest first, each with its tool calls and reasoning steps: every branch
survives. Importing creates a new chat for the importing user, with fresh uuids, in
one transaction: it lands whole or not at all, with the same branches and the same
active branch. The CLI writes one export per line (JSON lines).

Versions of the document (``export_version``): 1 held only the active branch; 2 holds
the whole tree and writes bytes anywhere (metadata, parts) with the binary-safe codec
(:mod:`threadstore.binary_json`); 3 is written since reasoning nests in the assistant
message of its turn. All import. Versions 1 and 2 may hold the ``role="reasoning"``
messages older versions stored one per reasoning block: import folds them by the rule
the database migration applies to such rows (:func:`fold_reasoning_messages`).

Import checks the whole document before it writes anything (:func:`check_document`):
versions it knows, each message once, parents that are in the document and come before
their children (by ``seq``), no cycle. A document that fails is refused whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid4

from pydantic import (
    BaseModel,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic_core import to_json

from threadstore._steps import dropped_in_steps, in_steps, joined_in_steps, off_loop
from threadstore.binary_json import decode_value, encode_value
from threadstore.errors import ConflictError, InvalidInputError, LimitExceededError
from threadstore.models import (
    FORMAT_VERSION,
    Chat,
    Message,
    Reasoning,
    Role,
    Summary,
    ToolCall,
    utcnow,
)
from threadstore.store import (
    Store,
    chat_create,
    message_create,
    reasoning_create,
    tool_call_create,
)

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "NESTED_REASONING_EXPORT_VERSION",
    "ChatExport",
    "check_document",
    "export_chat",
    "export_chat_json",
    "export_chat_json_pieces",
    "export_json",
    "export_json_pieces",
    "fold_reasoning_messages",
    "import_chat",
]

EXPORT_FORMAT = "threadstore.chat"
"""The ``format`` tag of an export document."""

EXPORT_VERSION = 3
"""The ``export_version`` this code writes (see the module's docstring)."""

NESTED_REASONING_EXPORT_VERSION = 3
"""The first ``export_version`` whose reasoning is nested as runs write it (not folded)."""

_SUBAGENT_METADATA_KEY = "subagent_run_id"  # as the fold writes it (codec.messages)


class ChatExport(BaseModel):
    """One chat and its history, as exported (``GET /api/chats/{id}/export``)."""

    format: Literal["threadstore.chat"] = "threadstore.chat"
    format_version: int = FORMAT_VERSION
    export_version: int = 1
    """1: ``messages`` is the active branch; 2: every message of the tree (and bytes
    tagged); 3: reasoning nested as runs write it (see the module's docstring)."""
    exported_at: datetime = Field(default_factory=utcnow)
    chat: Chat
    messages: list[Message] = Field(default_factory=list)
    """Every message of the chat, oldest first, each with its tool calls and reasoning."""
    roots: list[UUID] | None = None
    """The messages that start a tree of their own (a first message and its edits).

    A message without a parent that is not listed continues the one before it, as in
    version 1, where this field is absent.
    """
    summaries: list[Summary] = Field(default_factory=list)
    """The chat's summaries (compaction), newest first; an import keeps those whose
    messages it holds. Absent from documents made before compaction."""

    @model_serializer(mode="wrap")
    def _tag_bytes(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        # JSON text would write bytes outside typed fields as (lossy) text: tag them.
        if info.mode_is_json():
            return encode_value(self.model_dump(by_alias=info.by_alias))
        return handler(self)

    @model_validator(mode="before")
    @classmethod
    def _untag_bytes(cls, data: Any) -> Any:
        return decode_value(data) if isinstance(data, dict) else data


async def export_chat(store: Store, chat: Chat) -> ChatExport:
    """Return the export document of ``chat``: every branch, the active one marked by the leaf."""
    # The whole active branch at once: from the store's kept history, its models built
    # off the event loop (a long chat's are tens of thousands).
    active = list(await store.get_chat_messages(chat.chat_uuid))
    off_branch: list[UUID] = []
    if not await store.branches.is_linear(chat.chat_uuid):  # else every message is on the branch
        # By the uuids' ints, in steps: hashing 50,000 UUID objects at once holds the loop.
        on_branch: set[int] = set()
        await in_steps(active, lambda step: on_branch.update(m.message_uuid.int for m in step))
        tree = await store.branches.get_message_tree(chat.chat_uuid)
        await in_steps(
            tree,
            lambda step: off_branch.extend(
                node.message_uuid for node in step if node.message_uuid.int not in on_branch
            ),
        )
        await dropped_in_steps(tree)
    # The active branch is read by pages; the (usually few) messages off it one by one.
    others = [found for uuid in off_branch if (found := await store.get_message(uuid)) is not None]
    messages = [*active, *others]
    summaries = await store.branches.summaries(chat.chat_uuid) if store._lifecycle else []
    # Validating a long chat's document holds the thread for as long: not the loop's.
    return await off_loop(messages, _document, chat, messages, summaries)


async def export_chat_json(store: Store, chat: Chat) -> bytes:
    """:func:`export_chat`'s document as JSON text (the export route's body)."""
    return b"".join([piece async for piece in await export_chat_json_pieces(store, chat)])


async def export_chat_json_pieces(store: Store, chat: Chat) -> AsyncIterator[bytes]:
    """:func:`export_chat_json` in pieces, once the document is read: what ``GET .../export``
    streams, so no step of it joins the whole text (see :func:`export_json_pieces`)."""
    return export_json_pieces(await export_chat(store, chat))


def _document(chat: Chat, messages: list[Message], summaries: list[Summary]) -> ChatExport:
    messages.sort(key=lambda message: message.seq)
    roots = [message.message_uuid for message in messages if message.parent_uuid is None]
    return ChatExport(
        export_version=EXPORT_VERSION,
        chat=chat,
        messages=messages,
        roots=roots,
        summaries=summaries,
    )


async def export_json(document: ChatExport) -> bytes:
    """``document.model_dump_json(by_alias=True)``, built a message at a time (see
    :func:`export_json_pieces`)."""
    return b"".join([piece async for piece in export_json_pieces(document)])


async def export_json_pieces(document: ChatExport) -> AsyncIterator[bytes]:
    """``document.model_dump_json(by_alias=True)`` in pieces that concatenate to it.

    A long chat's document is megabytes of JSON; serialized in one call (even on a
    worker thread, which holds the interpreter as long), or joined in one, it would
    stall the event loop. So each message is serialized on its own, a step of them to a
    piece with a turn of the loop between pieces, and the document goes around them.
    """
    empty = document.model_copy(update={"messages": []}).model_dump_json(by_alias=True)
    head, marker, tail = empty.encode().partition(_NO_MESSAGES)
    assert marker, "the document's JSON names its messages"
    yield head + _NO_MESSAGES[:-1]
    async for piece in joined_in_steps(document.messages, _message_json):
        yield piece
    yield b"]" + tail


def _message_json(message: Message) -> bytes:
    return to_json(encode_value(message.model_dump(by_alias=True)))


_NO_MESSAGES = b'"messages":[]'


async def import_chat(
    store: Store,
    document: ChatExport,
    *,
    user_uuid: UUID,
    thread_id: str | None = None,
    max_messages: int | None = None,
) -> Chat:
    """Create ``document``'s chat for ``user_uuid`` (under ``thread_id`` if given).

    Raises :class:`~threadstore.errors.ConflictError` when the user already has a
    chat with that thread id, and :class:`~threadstore.errors.InvalidInputError` when
    :func:`check_document` refuses the document; nothing is written then.
    """
    if max_messages is not None and len(document.messages) > max_messages:
        raise LimitExceededError(
            f"the export holds {len(document.messages)} messages; the limit is {max_messages}"
        )
    await off_loop(document.messages, check_document, document)
    if document.export_version < NESTED_REASONING_EXPORT_VERSION:
        document = fold_reasoning_messages(document)
    source = document.chat
    thread = thread_id or source.thread_id
    async with store.transaction():
        if await store.get_chat_by_thread_id(user_uuid, thread) is not None:
            raise ConflictError(
                f"a chat with thread id {thread!r} already exists; import it under another id"
            )
        chat = await store.create_chat(chat_create(source, user_uuid=user_uuid, thread_id=thread))
        roots = set(document.roots or ())
        new_uuids: dict[UUID, UUID] = {}  # exported message uuid -> imported one
        new_seqs: dict[UUID, int] = {}
        created_by_index: dict[int, UUID] = {}
        last: UUID | None = None
        for index, record in _in_production_order(document.messages):
            if isinstance(record, Message):
                parent = new_uuids.get(record.parent_uuid) if record.parent_uuid else None
                data = message_create(record, chat.chat_uuid, parent)
                if parent is None and record.message_uuid in roots:
                    created = await store.branches.create_root_message(data)
                else:
                    created = await store.create_message(data)
                new_uuids[record.message_uuid] = created.message_uuid
                new_seqs[created.message_uuid] = created.seq
                created_by_index[index] = last = created.message_uuid
            elif isinstance(record, ToolCall):
                await store.create_message_tool_call(
                    tool_call_create(record, created_by_index[index])
                )
            else:
                await store.create_message_reasoning(
                    reasoning_create(record, created_by_index[index])
                )
        leaf = new_uuids.get(source.active_leaf_uuid) if source.active_leaf_uuid else None
        if leaf is None:
            leaf = last  # a version 1 export: its last message ends the branch
        if leaf is not None:
            await store.branches.set_active_leaf(chat.chat_uuid, leaf)
        for summary in reversed(document.summaries):  # oldest first, as they were made
            first = new_uuids.get(summary.first_message_uuid)
            end = new_uuids.get(summary.last_message_uuid)
            if first is not None and end is not None and store._lifecycle is not None:
                await store.branches.add_summary(
                    summary.model_copy(
                        update={
                            "summary_uuid": uuid4(),
                            "chat_uuid": chat.chat_uuid,
                            "first_message_uuid": first,
                            "last_message_uuid": end,
                            "last_seq": new_seqs[end],
                        }
                    )
                )
        imported = await store.chats.get_chat(chat.chat_uuid)
    return imported or chat


def check_document(document: ChatExport) -> None:
    """Raise ``InvalidInputError`` naming the first thing that makes ``document`` unimportable.

    Checks the versions, that each message appears once, that every parent is a message
    of the document with a smaller ``seq`` (messages are recreated in ``seq`` order, so a
    parent after its child would leave the child without it), that no parent chain
    loops. (``roots`` or an active leaf naming no message of the document are ignored:
    the chat's last message ends its branch then.)
    """
    if not 1 <= document.export_version <= EXPORT_VERSION:
        raise InvalidInputError(
            f"export_version {document.export_version} is not one this version of threadstore "
            f"reads (1 to {EXPORT_VERSION}); import it with the version that exported it"
        )
    _check_format_version("format_version", document.format_version)
    _check_format_version("chat.format_version", document.chat.format_version)
    index_of: dict[UUID, int] = {}
    for index, message in enumerate(document.messages):
        where = f"messages[{index}]"
        _check_format_version(f"{where}.format_version", message.format_version)
        for kind in ("tool_calls", "reasonings"):
            for n, child in enumerate(getattr(message, kind)):
                _check_format_version(f"{where}.{kind}[{n}].format_version", child.format_version)
        if (first := index_of.setdefault(message.message_uuid, index)) != index:
            raise InvalidInputError(
                f"{where}.message_uuid {message.message_uuid} is also messages[{first}]'s"
            )
    messages = document.messages
    for index, message in enumerate(messages):
        if message.parent_uuid is None:
            continue
        parent = index_of.get(message.parent_uuid)
        if parent is None:
            raise InvalidInputError(
                f"messages[{index}].parent_uuid {message.parent_uuid} is not a message of "
                "the document"
            )
        if parent == index:
            raise InvalidInputError(f"messages[{index}] is its own parent")
    _check_no_cycle(messages, index_of)
    for index, message in enumerate(messages):
        if message.parent_uuid is None:
            continue
        parent = index_of[message.parent_uuid]
        if messages[parent].seq >= message.seq:
            raise InvalidInputError(
                f"messages[{index}].seq {message.seq} is not after its parent's "
                f"(messages[{parent}].seq {messages[parent].seq}); a message's seq must be "
                "greater than its parent's"
            )


def _check_format_version(where: str, version: int) -> None:
    if not 1 <= version <= FORMAT_VERSION:
        raise InvalidInputError(
            f"{where} {version} is not one this version of threadstore reads "
            f"(1 to {FORMAT_VERSION}); import it with the version that exported it"
        )


def _check_no_cycle(messages: list[Message], index_of: dict[UUID, int]) -> None:
    """Raise when following parents from some message comes back to it."""
    done: set[int] = set()  # messages whose chain is known to end at a root
    for start in range(len(messages)):
        path: list[int] = []
        on_path: set[int] = set()
        current: int | None = start
        while current is not None and current not in done:
            if current in on_path:
                raise InvalidInputError(
                    f"messages[{current}]'s parents lead back to it: the parents form a cycle"
                )
            path.append(current)
            on_path.add(current)
            parent = messages[current].parent_uuid
            current = None if parent is None else index_of[parent]
        done.update(path)


def _in_production_order(
    messages: list[Message],
) -> list[tuple[int, Message | ToolCall | Reasoning]]:
    """Return (message index, record) in the original seq order, each message first.

    Recreating records in that order keeps the interleaving of text, tool calls and
    reasoning; a child whose seq says otherwise waits for its message.
    """
    keyed: list[tuple[int, int, int, Message | ToolCall | Reasoning]] = []
    for index, message in enumerate(messages):
        keyed.append((message.seq, 0, index, message))
        keyed.extend((call.seq, 1, index, call) for call in message.tool_calls)
        keyed.extend((step.seq, 2, index, step) for step in message.reasonings)
    keyed.sort(key=lambda item: (item[0], item[1], item[2]))
    ordered: list[tuple[int, Message | ToolCall | Reasoning]] = []
    waiting: dict[int, list[ToolCall | Reasoning]] = {}
    emitted: set[int] = set()
    for _, _, index, record in keyed:
        if isinstance(record, Message):
            ordered.append((index, record))
            emitted.add(index)
            ordered.extend((index, child) for child in waiting.pop(index, []))
        elif index in emitted:
            ordered.append((index, record))
        else:
            waiting.setdefault(index, []).append(record)
    return ordered


def fold_reasoning_messages(document: ChatExport) -> ChatExport:
    """Return ``document`` with its stored reasoning messages folded, as the migration does.

    Versions before reasoning nested stored each reasoning block as a ``role="reasoning"``
    message holding one step and no text of its own. The rule is the one the database
    migration applies to such rows (SQLite migration 3, PostgreSQL 4), kept alike by a
    test on the same old chats: such a message folds into its only child when that child
    is an assistant message (or another such message) of the same run and sub-agent and
    the message is not the chat's active leaf; a chain folds into the message it ends at.
    The holder takes the place of the first message folded into it; the folded messages'
    records come first among its own, in the order they streamed. A holder left without
    an answer is an assistant message with no AG-UI id, holding only reasoning.

    Parents are made explicit first (a version 1 message without one continues the
    message before it), so the result imports the same way whatever its version.
    """
    messages, leaf = _explicit_tree(document)
    by_uuid = {message.message_uuid: message for message in messages}
    children: dict[UUID, list[Message]] = {}
    for message in messages:
        if message.parent_uuid is not None:
            children.setdefault(message.parent_uuid, []).append(message)

    def next_of(message: Message) -> Message | None:
        """The message ``message`` folds into next, if it is one of the older kind."""
        below = children.get(message.message_uuid, [])
        if not _is_reasoning_message(message) or len(below) != 1 or message.message_uuid == leaf:
            return None
        (child,) = below
        same_turn = child.run_id == message.run_id and _subagent(child) == _subagent(message)
        if same_turn and (child.role is Role.ASSISTANT or _is_reasoning_message(child)):
            return child
        return None

    holder_of: dict[UUID, UUID] = {}
    for message in messages:
        if _is_reasoning_message(message):
            current = message
            while (following := next_of(current)) is not None:
                current = following
            holder_of[message.message_uuid] = current.message_uuid
    if not holder_of:
        return document
    folded: dict[UUID, list[Message]] = {}  # holder -> the messages folding into it
    for uuid, holder in holder_of.items():
        folded.setdefault(holder, []).append(by_uuid[uuid])

    result: list[Message] = []
    for message in messages:
        if holder_of.get(message.message_uuid, message.message_uuid) != message.message_uuid:
            continue  # folded into a message after it
        moved = folded.get(message.message_uuid)
        result.append(message if moved is None else _holding(message, moved))
    chat = document.chat
    if chat.active_leaf_uuid in holder_of:
        chat = chat.model_copy(update={"active_leaf_uuid": holder_of[chat.active_leaf_uuid]})
    return document.model_copy(
        update={
            "chat": chat,
            "messages": result,
            "roots": [m.message_uuid for m in result if m.parent_uuid is None],
        }
    )


def _is_reasoning_message(message: Message) -> bool:
    """A message of the older kind: one reasoning block, no text of its own."""
    return (
        message.role is Role.REASONING
        and message.content == ""
        and message.encrypted_value is None
        and bool(message.reasonings)
    )


def _subagent(message: Message) -> object:
    return message.metadata.get(_SUBAGENT_METADATA_KEY)


def _explicit_tree(document: ChatExport) -> tuple[list[Message], UUID | None]:
    """The messages in the order import creates them, each naming the parent it gets.

    Returns them and the active leaf (a version 1 document's last message when the
    chat's leaf is not among them), as :func:`import_chat` would resolve both.
    """
    listed = set(document.roots or ())
    known = {message.message_uuid for message in document.messages}
    ordered = [r for _, r in _in_production_order(document.messages) if isinstance(r, Message)]
    messages: list[Message] = []
    last: UUID | None = None
    for message in ordered:
        parent = message.parent_uuid if message.parent_uuid in known else None
        if parent is None and message.message_uuid not in listed:
            parent = last  # continues the chat's leaf, as a create without a parent does
        if parent != message.parent_uuid:
            message = message.model_copy(update={"parent_uuid": parent})
        messages.append(message)
        last = message.message_uuid
    leaf = document.chat.active_leaf_uuid
    return messages, leaf if leaf in known else last


def _holding(holder: Message, moved: Iterable[Message]) -> Message:
    """``holder`` with the records of ``moved`` (folded into it) ahead of its own."""
    own_folds = _is_reasoning_message(holder)  # then its own records are among those folded
    others = [m for m in moved if m.message_uuid != holder.message_uuid]
    sources = sorted([*others, *([holder] if own_folds else [])], key=lambda m: m.seq)
    keyed: list[tuple[int, int, str, ToolCall | Reasoning]] = []
    for source in sources:
        keyed.extend((source.seq, step.seq, "r", step) for step in source.reasonings)
        keyed.extend((source.seq, call.seq, "t", call) for call in source.tool_calls)
    keyed.sort(key=lambda item: item[:3])
    steps: list[Reasoning] = []
    calls: list[ToolCall] = []
    for seq, (_, _, _, record) in enumerate(keyed, start=1):
        copied = record.model_copy(update={"seq": seq, "message_uuid": holder.message_uuid})
        if isinstance(copied, Reasoning):
            steps.append(copied)
        else:
            calls.append(copied)
    if not own_folds:
        shift = len(keyed)
        steps += [r.model_copy(update={"seq": r.seq + shift}) for r in holder.reasonings]
        calls += [c.model_copy(update={"seq": c.seq + shift}) for c in holder.tool_calls]
    first = min(others, key=lambda m: m.seq, default=None)
    update: dict[str, object] = {"reasonings": steps, "tool_calls": calls}
    if first is not None:
        update["parent_uuid"] = first.parent_uuid
    if holder.role is Role.REASONING:
        update |= {"role": Role.ASSISTANT, "agui_id": None}
    return holder.model_copy(update=update)
