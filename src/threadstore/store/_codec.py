"""Models from trusted field values: the one place the store builds models without validating.

Rows this code wrote (in columns whose types the schema fixes), copies of models it
holds, and a create's DTO fields plus what the database assigned are already valid, so
re-validating them on every read would cost more than the read itself. Both paths use
pydantic's public API only:

- :func:`construct` is the reference: ``model_construct``;
- :func:`constructor` is the fast path of the hot paths (history loads, cache hits,
  appends): a copy (``copy.copy``'s protocol) of one blank instance per class holding
  every field, its fields then replaced in its ``__dict__``: what pydantic's
  ``model_copy(update=fields)`` does, documented as not validating, without its
  per-call checks. Given every field it builds the same instance as
  ``model_construct`` (the tests hold it to that) in a fraction of the time, since it
  neither walks the fields nor fills defaults.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["Constructor", "construct", "constructor"]

_M = TypeVar("_M", bound=BaseModel)


def construct(model: type[_M], fields: dict[str, Any]) -> _M:
    """The reference path: ``model.model_construct(**fields)``."""
    return model.model_construct(**fields)


Constructor = Callable[[dict[str, Any]], _M]


@functools.cache
def constructor(model: type[_M]) -> Constructor[_M]:
    """A function building ``model`` from a dict holding every one of its fields.

    Every field counts as set. Classes that allow extra fields or have private
    attributes, and a dict missing some field (the blank's default would be shared),
    get :func:`construct`.
    """
    if model.model_config.get("extra") == "allow" or model.__private_attributes__:
        return functools.partial(construct, model)
    # A blank holding every field (so its copies keep the fields' order); each copy
    # gets all of them from ``fields``.
    names = tuple(model.model_fields)
    copy = model.model_construct(**dict.fromkeys(names)).__copy__
    count = len(names)

    def build(fields: dict[str, Any]) -> _M:
        if len(fields) != count:
            return construct(model, fields)
        made = copy()
        made.__dict__.update(fields)  # every field is set already, as in the blank
        return made

    return build
