"""Reference ``ChatStore``s: in memory, and one JSON file per chat in a directory.

Both implement the optional ``delete_chat`` and ``list_chats`` too. They depend on
nothing beyond the standard library and the codec. A stored record that cannot be read
loads as ``None`` with a logged warning, as on every ``ChatStore`` here.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from urllib.parse import quote

from threadstore.chatstore._codec import deserialize_chat_record, serialize_chat_record
from threadstore.chatstore._record import ChatRecord, Scope

__all__ = ["InMemoryChatStore", "JsonlChatStore"]

logger = logging.getLogger(__name__)

_SUFFIX = ".json"
_MAX_NAME = 200
"""Longest file name made from a chat id; longer ids are named by their SHA-256."""


class InMemoryChatStore:
    """A dict of chats for tests, development and one long-lived process.

    Records are copied on save and on load (through the codec), so a caller that keeps
    changing its objects never changes what is stored.
    """

    def __init__(self) -> None:
        self._chats: dict[str, str] = {}

    def save_chat(self, record: ChatRecord) -> None:
        """Store a copy of ``record`` under its ``chat_id``."""
        self._chats[record.chat_id] = serialize_chat_record(record)

    def load_chat(self, chat_id: str) -> ChatRecord | None:
        """Return a copy of the stored record, or ``None`` (missing, or unreadable: logged)."""
        text = self._chats.get(chat_id)
        if text is None:
            return None
        try:
            return deserialize_chat_record(text)
        except ValueError as exc:
            logger.warning(
                "chat %r: stored record cannot be read (%s); loaded as None", chat_id, exc
            )
            return None

    def delete_chat(self, chat_id: str) -> None:
        """Forget the chat; a missing one is not an error."""
        self._chats.pop(chat_id, None)

    def list_chats(self, scope: Scope | None = None) -> list[str]:
        """The ids of the stored chats whose scope matches ``scope``, in save order."""
        return [
            chat_id
            for chat_id, text in self._chats.items()
            if scope is None or scope.matches(deserialize_chat_record(text).scope)
        ]


class JsonlChatStore:
    """One JSON file per chat under ``directory``, created on the first save.

    A save writes a temporary file in the same directory, flushes it to disk and renames
    it over the chat's file, so a crash during a save leaves the previous version whole.
    A missing or unreadable file loads as ``None``. File names are the chat id with
    anything unsafe percent-encoded (ids longer than 200 characters are named by their
    SHA-256), so any string is a valid chat id.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, chat_id: str) -> Path:
        raw = chat_id.encode("utf-8", "surrogatepass")
        name = quote(raw, safe="")
        if len(name) > _MAX_NAME or name.startswith("."):
            name = "sha256-" + hashlib.sha256(raw).hexdigest()
        return self.directory / (name + _SUFFIX)

    def save_chat(self, record: ChatRecord) -> None:
        """Write ``record`` atomically, replacing the chat's earlier version."""
        self.directory.mkdir(parents=True, exist_ok=True)
        text = serialize_chat_record(record)
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
        try:
            # ``surrogatepass``: any Python string round-trips, even a lone surrogate.
            with os.fdopen(handle, "w", encoding="utf-8", errors="surrogatepass") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self._path(record.chat_id))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise

    def _read(self, path: Path) -> ChatRecord | None:
        try:
            return deserialize_chat_record(path.read_text(encoding="utf-8", errors="surrogatepass"))
        except OSError:
            return None  # missing (or not readable by this process)
        except ValueError as exc:  # not UTF-8, not JSON, not a record
            logger.warning("%s: stored record cannot be read (%s); loaded as None", path, exc)
            return None

    def load_chat(self, chat_id: str) -> ChatRecord | None:
        """Return the stored record, or ``None`` when the file is missing or corrupt."""
        record = self._read(self._path(chat_id))
        # A hashed name could in theory be shared; the record says whose it is.
        return record if record is not None and record.chat_id == chat_id else None

    def delete_chat(self, chat_id: str) -> None:
        """Remove the chat's file; a missing one is not an error."""
        with contextlib.suppress(FileNotFoundError):
            self._path(chat_id).unlink()

    def list_chats(self, scope: Scope | None = None) -> list[str]:
        """The ids of readable chats whose scope matches ``scope``, sorted."""
        if not self.directory.is_dir():
            return []
        records = map(self._read, self.directory.glob("*" + _SUFFIX))
        return sorted(
            record.chat_id
            for record in records
            if record is not None and (scope is None or scope.matches(record.scope))
        )
