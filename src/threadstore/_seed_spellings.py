"""How the models accept the seed layer's spellings of their fields.

Users switch from the seed layer with its names in hand: a renamed field's old name, an
``error=`` it kept on the message (threadstore keeps it in ``metadata``), a ``role=`` on
records whose role is fixed. The model validators in ``threadstore.models`` call these.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import AliasChoices

__all__ = [
    "ERROR_METADATA_KEY",
    "alias",
    "error_from_metadata",
    "error_into_metadata",
    "error_of",
    "fixed_role",
]

ERROR_METADATA_KEY = "error"
"""The ``metadata`` key that holds a reasoning step's :attr:`Reasoning.error` text.

Messages written before :attr:`Message.error` had a column kept it there too; a
migration moves it into the column, and a message built from such a dict reads it as
the field."""


def alias(name: str, seed_name: str) -> Any:
    """Accept the seed layer's name for a field threadstore renamed, as well as its own."""
    return AliasChoices(name, seed_name)


def error_into_metadata(data: Any, *, update: bool = False) -> Any:
    """Move a seed-style ``error=`` into ``metadata`` (where a message keeps it).

    An update replaces ``metadata`` whole, so an update's ``error`` needs the metadata
    it goes into: without it the error is refused rather than dropped or wiping the rest.
    """
    if not isinstance(data, dict) or "error" not in data:
        return data
    data = dict(data)
    error = data.pop("error")
    if error is None:
        return data
    metadata = data.get("metadata")
    if metadata is None and update:
        raise ValueError(
            "an update's error=... is kept in the record's metadata, which an update "
            "replaces whole: pass metadata={**record.metadata} along with it"
        )
    data["metadata"] = {**(metadata or {}), ERROR_METADATA_KEY: error}
    return data


def error_from_metadata(data: Any) -> Any:
    """A message dict whose ``metadata`` holds an ``error`` text, as older versions kept
    it: the text moves to the field (unless the dict sets that too, as their exports did)."""
    if not isinstance(data, dict):
        return data
    metadata = data.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get(ERROR_METADATA_KEY), str):
        return data
    data = dict(data)
    data["metadata"] = {k: v for k, v in metadata.items() if k != ERROR_METADATA_KEY}
    if data.get("error") is None:
        data["error"] = metadata[ERROR_METADATA_KEY]
    return data


def fixed_role(data: Any, role: StrEnum) -> Any:
    """Accept the seed layer's ``role=`` on a nested record, which can only be ``role``."""
    if isinstance(data, dict) and "role" in data:
        data = dict(data)
        given = data.pop("role")
        if given is not None and given != role:
            raise ValueError(f"a {role.value} record's role is {role.value!r}, not {given!r}")
    return data


def error_of(metadata: dict[str, Any]) -> str | None:
    error = metadata.get(ERROR_METADATA_KEY)
    return error if isinstance(error, str) else None
