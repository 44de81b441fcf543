"""The binary-safe JSON value codec: bytes anywhere in a value survive JSON text.

Plain ``json.dumps`` cannot write bytes, so an image in a message part or a tool
result in ``metadata`` would fail or decay. :func:`encode_value` writes ``bytes``
anywhere in a value as the tag ``{"$deuzBytes": "<base64>"}`` — the same shape as the
TypeScript SDK's codec, so either side reads the other's data — and :func:`decode_value`
turns only that exact shape (one key, a valid base64 string) back into bytes.

A plain object that happens to have exactly that shape (or the escape shape below) is
written as ``{"$deuzPlain": {...}}`` and read back unchanged, so every value round-trips
exactly. Values with neither bytes nor look-alikes encode to what ``json.dumps`` writes,
which is why rows written before the codec read as they did.

This module sits beside the models so that the store (every JSON column), the export
format and the chat record codec share one codec.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from pydantic_core import to_jsonable_python

__all__ = [
    "BYTES_TAG",
    "PLAIN_TAG",
    "decode_value",
    "dumps",
    "encode_value",
    "loads",
    "may_hold_tags",
]

BYTES_TAG = "$deuzBytes"
"""The key of the one-key object that stands for bytes."""

PLAIN_TAG = "$deuzPlain"
"""The key that wraps a plain object which would otherwise read as a tag."""

_TAGS = frozenset({BYTES_TAG, PLAIN_TAG})
_TAG_PREFIX = "$deuz"
"""What every tag's key starts with: JSON text without it holds no tag."""


def encode_value(value: Any) -> Any:
    """Return ``value`` as JSON-compatible data, bytes written as the bytes tag."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {BYTES_TAG: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        encoded = {str(key): encode_value(item) for key, item in value.items()}
        if len(encoded) == 1 and next(iter(encoded)) in _TAGS:
            return {PLAIN_TAG: encoded}
        return encoded
    if isinstance(value, list | tuple):
        return [encode_value(item) for item in value]
    # Models, datetimes, UUIDs, decimals: pydantic's own JSON form, bytes still tagged.
    return encode_value(to_jsonable_python(value, bytes_mode="base64"))


def _bytes_of(tagged: Any) -> bytes | None:
    """The bytes a tag's value stands for, or ``None`` when it is not valid base64 text."""
    if not isinstance(tagged, str):
        return None
    try:
        return base64.b64decode(tagged.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None


def decode_value(value: Any) -> Any:
    """The inverse of :func:`encode_value` on parsed JSON."""
    if isinstance(value, list):
        return [decode_value(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, item),) = value.items()
        if key == BYTES_TAG:
            data = _bytes_of(item)
            if data is not None:
                return data
        elif key == PLAIN_TAG and isinstance(item, dict) and len(item) == 1:
            # An escaped look-alike: its own key is kept as data, its value decoded.
            return {name: decode_value(inner) for name, inner in item.items()}
    return {key: decode_value(item) for key, item in value.items()}


def _refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


def dumps(value: Any) -> str:
    """Compact JSON text of ``value`` with bytes tagged (strict JSON: no NaN).

    The reference is ``json.dumps(encode_value(value))``; a value ``json`` writes as it
    is and whose text holds no tag prefix is written directly, with the same result.
    """
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=_refuse)
    except TypeError:
        text = None
    if text is None or _TAG_PREFIX in text:
        text = json.dumps(encode_value(value), separators=(",", ":"), allow_nan=False)
    return text


def may_hold_tags(text: str | bytes) -> bool:
    """Whether JSON ``text`` may hold a tag (else ``json.loads`` alone reads it)."""
    if isinstance(text, str):
        return _TAG_PREFIX in text
    return _TAG_PREFIX.encode() in text


def loads(text: str | bytes) -> Any:
    """Parse JSON ``text``, tags turned back into what they stand for."""
    value = json.loads(text)
    return decode_value(value) if may_hold_tags(text) else value
