"""The contract suite as one pytest test class, bound to a repository factory.

The tests are plain module-level functions of the package's test modules;
:class:`ContractSuite` gathers them as static methods, so one copy of each test runs
for every repository a subclass names. They ask for one of three
fixtures, which is how a test declares what it needs:

- ``repo``: any object with the methods of ``ChatRepositoryLike`` and
  ``MessageRepositoryLike`` (every repository runs these tests);
- ``run_repo``: the same object, when it also implements ``RunRepositoryLike``;
- ``store``: the same object, when it is a full threadstore :class:`~threadstore.Store`.

Tests whose fixture the repository cannot give are skipped, saying why.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import ModuleType
from typing import Any, ClassVar, Protocol
from uuid import UUID

import pytest
import pytest_asyncio
from pydantic import BaseModel

from threadstore import (
    Chat,
    ChatCreate,
    ChatRepositoryLike,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageRepositoryLike,
    MessageToolCallCreate,
    NotFoundError,
    RunRepositoryLike,
    Store,
)
from threadstore.models import Reasoning, ToolCall

RepositoryFactory = Callable[..., AsyncIterator[Any]]
"""An async generator function that yields one fresh, empty repository and then cleans up.

It is called with no arguments, except by the full-Store tests of subclassed models,
which pass ``chat_model=``, ``message_model=``, ``tool_call_model=`` or
``reasoning_model=`` (the options of :func:`threadstore.open_store`).
"""

OpenRepository = Callable[..., AbstractAsyncContextManager[Any]]
"""Opens one fresh repository as an async context manager (the factory, wrapped)."""


class Repository(ChatRepositoryLike, MessageRepositoryLike, Protocol):
    """What every repository under the contract implements: chats and messages."""


class RunRepository(Repository, RunRepositoryLike, Protocol):
    """A repository that also keeps the run registry."""


MakeChat = Callable[..., Awaitable[Chat]]
"""``make_chat(user_uuid=None, thread_id=None, **fields)``: a new chat, fresh ids unless given."""

AddMessage = Callable[..., Awaitable[Message]]
"""``add_message(chat, content="", **fields)``: a message on the chat's active branch."""

OpenStore = Callable[..., Awaitable[Store]]
"""``open_test_store(**options)``: another fresh store from the factory, closed after the test."""


async def stored_chat(repo: Repository, chat: Chat) -> Chat | None:
    """``chat`` as stored now, or ``None``: read by (user, thread) and, on a Store, by uuid too.

    Both reads must agree, so a full Store is checked on each of its lookups.
    """
    found = await repo.get_chat_by_thread_id(chat.user_uuid, chat.thread_id)
    if found is not None and found.chat_uuid != chat.chat_uuid:
        found = None  # the thread was deleted and started again as another chat
    if isinstance(repo, Store):
        assert await repo.chats.get_chat(chat.chat_uuid) == found
    return found


async def stored_message(repo: MessageRepositoryLike, message: Message) -> Message:
    """``message`` as stored now; the test fails when it is not found."""
    found = await repo.get_message(message.message_uuid)
    assert found is not None, f"message {message.message_uuid} is not stored"
    return found


def _missing_methods(repository: object) -> list[str]:
    """The Protocol methods ``repository`` lacks (``isinstance`` only says whether any are)."""
    wanted = [
        name
        for protocol in (ChatRepositoryLike, MessageRepositoryLike)
        for name in vars(protocol)
        if not name.startswith("_")
    ]
    return [name for name in wanted if not callable(getattr(repository, name, None))]


class ContractSuite:
    """The repository contract suite; subclass it with a factory to run it (see the package).

    A subclass sets :attr:`factory`, or overrides the ``open_repository`` fixture when
    the repository depends on other fixtures (threadstore's own backends do).
    """

    factory: ClassVar[RepositoryFactory | None] = None

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.asyncio]

    @pytest.fixture
    def open_repository(self) -> OpenRepository:
        """The factory, as a function that opens one repository in an ``async with``."""
        factory = type(self).factory
        if factory is None:
            raise TypeError(
                f"{type(self).__name__} has no repository factory: set `factory` or use"
                " threadstore.testing.contract_tests(factory)"
            )
        return asynccontextmanager(factory)

    @pytest_asyncio.fixture
    async def repo(self, open_repository: OpenRepository) -> AsyncIterator[Repository]:
        """A fresh repository that implements the chat and message Protocols."""
        async with open_repository() as repository:
            missing = _missing_methods(repository)
            if missing:
                pytest.fail(
                    f"{type(repository).__name__} does not implement ChatRepositoryLike and"
                    f" MessageRepositoryLike: it lacks {', '.join(missing)}",
                    pytrace=False,
                )
            yield repository

    @pytest.fixture
    def run_repo(self, repo: Repository) -> RunRepository:
        """The repository, when it also implements ``RunRepositoryLike``."""
        if not isinstance(repo, RunRepositoryLike):
            pytest.skip(f"{type(repo).__name__} does not implement RunRepositoryLike")
        return repo

    @pytest.fixture
    def store(self, repo: Repository) -> Store:
        """The repository, when it is a full threadstore ``Store``."""
        if not isinstance(repo, Store):
            pytest.skip(f"{type(repo).__name__} is not a threadstore Store (a full-Store test)")
        return repo

    @pytest_asyncio.fixture
    async def open_test_store(
        self, store: Store, open_repository: OpenRepository
    ) -> AsyncIterator[OpenStore]:
        """Open more fresh stores from the factory, e.g. with subclassed models."""
        async with AsyncExitStack() as stack:

            async def open_one(**options: Any) -> Store:
                opened: Store = await stack.enter_async_context(open_repository(**options))
                return opened

            yield open_one

    @pytest.fixture
    def make_chat(self, repo: Repository) -> MakeChat:
        """Create a chat in the repository; a fresh user and thread unless given."""
        return chat_maker(repo)

    @pytest.fixture
    def add_message(self, repo: Repository) -> AddMessage:
        """Append a message to a chat (on its active branch unless a parent is given)."""
        return message_adder(repo)


def chat_maker(repo: ChatRepositoryLike) -> MakeChat:
    """A ``make_chat`` for ``repo``: creates a chat, with a fresh user and thread unless given."""

    async def make(
        user_uuid: UUID | None = None, thread_id: str | None = None, **fields: Any
    ) -> Chat:
        return await repo.create_chat(
            ChatCreate(
                user_uuid=user_uuid or uuid.uuid4(),
                thread_id=thread_id or f"thread-{uuid.uuid4().hex[:8]}",
                **fields,
            )
        )

    return make


def message_adder(repo: MessageRepositoryLike) -> AddMessage:
    """An ``add_message`` for ``repo``: appends to a chat's active branch unless given a parent."""

    async def add(chat: Chat | UUID, content: str = "", **fields: Any) -> Message:
        chat_uuid = chat.chat_uuid if isinstance(chat, Chat) else chat
        return await repo.create_message(
            MessageCreate(chat_uuid=chat_uuid, content=content, **fields)
        )

    return add


NOT_UTF8 = b"\xff\xfe\x00\x80binary\xc3"
"""Bytes that are no text: only a binary-safe field keeps them."""


def assert_given_fields(record: object, data: BaseModel) -> None:
    """Every field set on ``data`` (a create DTO or a patch) reads the same on ``record``."""
    for name in sorted(data.model_fields_set):
        assert (name, getattr(record, name)) == (name, getattr(data, name))


async def add_tool_call(
    repo: MessageRepositoryLike,
    message: Message,
    tool_call_id: str = "c",
    name: str = "f",
    **fields: Any,
) -> ToolCall:
    """A tool call on ``message``, ``f`` with id ``c`` unless given."""
    return await repo.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=message.message_uuid, tool_call_id=tool_call_id, name=name, **fields
        )
    )


async def add_reasoning(repo: MessageRepositoryLike, message: Message, **fields: Any) -> Reasoning:
    """A reasoning step on ``message``."""
    return await repo.create_message_reasoning(
        MessageReasoningCreate(message_uuid=message.message_uuid, **fields)
    )


async def check_rejects_foreign_and_unknown(
    make_chat: MakeChat,
    add_message: AddMessage,
    attempt: Callable[[Chat, UUID], Awaitable[object]],
) -> tuple[Chat, Message]:
    """``attempt(chat, message_uuid)`` must refuse another chat's message (``ValueError``)
    and an unknown one (``NotFoundError``); returns the chat and its one message."""
    chat, other = await make_chat(), await make_chat()
    mine = await add_message(chat, "mine")
    foreign = await add_message(other, "foreign")

    with pytest.raises(ValueError):
        await attempt(chat, foreign.message_uuid)
    with pytest.raises(NotFoundError):
        await attempt(chat, uuid.uuid4())
    return chat, mine


def gather_tests(suite: type[ContractSuite], modules: list[ModuleType]) -> None:
    """Attach every ``test_*`` function of ``modules`` to ``suite`` as a static method."""
    for module in modules:
        for name, value in vars(module).items():
            if name.startswith("test_") and callable(value):
                if hasattr(suite, name):
                    raise RuntimeError(f"two contract tests are named {name}")
                setattr(suite, name, staticmethod(value))


def contract_tests(factory: RepositoryFactory, name: str = "ContractTests") -> type[ContractSuite]:
    """Return a test class that runs the contract suite on the repositories ``factory`` yields.

    Assign it to a ``Test…`` name in a test module and pytest collects it.
    """
    return type(name, (ContractSuite,), {"factory": staticmethod(factory)})
