"""Models from trusted field values: the one place the store builds models without validating.

Rows this code wrote (in columns whose types the schema fixes), copies of models it
holds, and a create's DTO fields plus what the database assigned are already valid, so
re-validating them on every read would cost more than the read itself. Both paths use
pydantic's public API only:

- :func:`construct` is the reference: ``model_construct``;
- :func:`constructor` is the fast path of the hot paths (history loads, cache hits,
  appends): a new instance given its state through the pickle and copy protocol
  (``__new__``, then ``__setstate__`` with the state ``__getstate__`` gives, its
  ``__dict__`` being the given fields): what ``copy.copy`` of a model does, without
  copying a blank's fields first. Given every field it builds the same instance as
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

    The dict becomes the instance's own, so give it in the model's field order (the
    order an instance iterates in, as ``model_construct`` makes it). Every field counts
    as set. Classes that allow extra fields or have private attributes, and a dict
    missing some field (its default must be filled in), get :func:`construct`.
    """
    if model.model_config.get("extra") == "allow" or model.__private_attributes__:
        return functools.partial(construct, model)
    # The state of a blank holding every field, as the copy protocol passes it on; each
    # instance gets its own ``fields`` as its ``__dict__`` and its own set of them.
    names = tuple(model.model_fields)
    state = model.model_construct(**dict.fromkeys(names)).__getstate__()
    every = frozenset(names)
    count = len(names)
    new, set_state = model.__new__, model.__setstate__

    def build(fields: dict[str, Any]) -> _M:
        if len(fields) != count:
            return construct(model, fields)
        made = new(model)
        set_state(made, {**state, "__dict__": fields, "__pydantic_fields_set__": set(every)})
        return made

    return build
