"""What a storage agent's inner agent is given: the translated history, kept and grown.

A store keeps each chat's history between runs (``store/_history.py``); the AG-UI
translation of it is kept beside it, so a run translates only what was appended since
the last one. A run that starts before its input is stored (the storage agent's early
start) is given the kept translation followed by its input's, worked out without
claiming the input's ids in the kept one: the input is not stored yet, and may never be.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, overload
from uuid import UUID

from threadstore.codec import TRANSLATION, KeptTranslation, summary_message, translate_messages
from threadstore.models import Message, MessageCreate, Summary
from threadstore.store import Derivation, HistoryView

if TYPE_CHECKING:
    import ag_ui.core

__all__ = [
    "TRANSLATION",
    "Appended",
    "as_stored",
    "compacted_translation",
    "kept_translation",
    "tail_translation",
    "translation_after",
]


def kept_translation(history: HistoryView) -> list[ag_ui.core.Message]:
    """``translate_messages(history)``, kept with the store's history and grown with it.

    ``history`` is read with :data:`TRANSLATION`. The AG-UI messages are shared between
    runs and readers (the list is each caller's own): nobody may change them.
    """
    return history.derived(TRANSLATION).upto(len(history))


def translation_after(
    history: HistoryView, added: Sequence[Message]
) -> list[ag_ui.core.Message] | None:
    """``translate_messages([*history, *added])`` for messages ``added`` not stored yet.

    ``None`` when the kept translation has grown past ``history`` meanwhile (another
    writer appended to the chat): the ids its later messages claimed would change the
    answer, and only the stored history can say what it is then.
    """
    kept = history.derived(TRANSLATION)
    if len(kept.ends) != len(history):
        return None
    given = kept.upto(len(history))  # the one copy of a long translation
    given += kept.translator.after(added)
    return given


class _Tail:
    """The translation of the messages after a summary's last one, and where it starts."""

    __slots__ = ("offset", "skipped", "translation")

    def __init__(self, offset: int | None = None, translation: KeptTranslation | None = None):
        self.offset = offset
        """Where the tail starts in the history (``None``: the summary's end not met yet)."""
        self.skipped = offset or 0
        """Messages fed before the tail."""
        self.translation = translation or KeptTranslation()


class _TailTranslation:
    """The AG-UI translation of what follows one summary, kept with a chat's history.

    A compacted chat's agent gets the summary and this: kept, a run translates only its
    new messages, and a long chat keeps no translation of what the summary covers (tens
    of thousands of models the collector would scan on every full collection).
    """

    __slots__ = ("last",)

    def __init__(self, last: UUID) -> None:
        self.last = last

    def __hash__(self) -> int:
        return hash((_TailTranslation, self.last))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _TailTranslation) and other.last == self.last

    def start(self) -> _Tail:
        return _Tail()

    def feed(self, value: _Tail, messages: Sequence[Message]) -> None:
        if value.offset is not None:
            value.translation.feed(messages)
            return
        for at, message in enumerate(messages):
            if message.message_uuid == self.last:
                value.offset = value.skipped + at + 1
                value.translation.feed(messages[at + 1 :])
                return
        value.skipped += len(messages)

    def rewound(self, value: _Tail, length: int, dropped: Sequence[Message]) -> _Tail | None:
        if value.offset is None or length < value.offset:
            return None  # the summary's end changed or went: built again
        kept = TRANSLATION.rewound(value.translation, length - value.offset, dropped)
        return _Tail(value.offset, kept)


def tail_translation(summary: Summary) -> Derivation[_Tail]:
    """The derivation that keeps the translation of what follows ``summary``."""
    return _TailTranslation(summary.last_message_uuid)


def compacted_translation(
    history: HistoryView, summary: Summary, last: int, added: Sequence[Message] = ()
) -> list[ag_ui.core.Message]:
    """What an agent is given of a compacted chat: the summary, then the translation of the
    messages after ``history[last]`` (its last message), then of ``added``.

    Its cost is the tail's, whatever the summary covers: the tail's translation kept
    with the history (:func:`tail_translation`), else a slice of the whole translation
    kept with it, else the tail translated now.
    """
    end = len(history)
    after: list[ag_ui.core.Message] = []
    try:
        tail = history.derived(tail_translation(summary))
    except LookupError:
        tail = None
    if (
        tail is not None
        and tail.offset == last + 1
        and len(tail.translation.ends) == end - last - 1
    ):
        after = tail.translation.translator.after(added) if added else []
        return [summary_message(summary), *tail.translation.upto(end - last - 1), *after]
    try:
        kept = history.derived(TRANSLATION)
    except LookupError:
        kept = None
    if kept is not None and len(kept.ends) == end:
        after = kept.translator.after(added) if added else []
        slice_ = kept.translator.out[kept.ends[last] : kept.ends[end - 1]]
        return [summary_message(summary), *slice_, *after]
    return [summary_message(summary), *translate_messages([*history[last + 1 :], *added])]


def as_stored(create: MessageCreate, chat_uuid: UUID) -> Message:
    """The message ``create`` will store, as far as a translation or a window reads it.

    The store assigns the rest (``seq``, the parent, the times), which neither reads.
    """
    fields = dict(create)
    del fields["created_at"]
    fields["chat_uuid"] = chat_uuid
    return Message.model_validate(fields)


class Appended(Sequence[Message]):
    """``history`` followed by ``added``, not copied: what a history window selects from."""

    __slots__ = ("added", "history")

    def __init__(self, history: Sequence[Message], added: Sequence[Message]) -> None:
        self.history = history
        self.added = added

    def __len__(self) -> int:
        return len(self.history) + len(self.added)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        stored = len(self.history)
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[at] for at in range(start, stop, step)]
            return [
                *self.history[start : max(start, min(stop, stored))],
                *self.added[max(start - stored, 0) : max(stop - stored, 0)],
            ]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("history index out of range")
        return self.history[index] if index < stored else self.added[index - stored]
