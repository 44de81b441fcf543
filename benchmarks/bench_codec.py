"""Models from trusted values: the codec's fast constructor beside pydantic's own paths.

``threadstore.store._codec.constructor`` (a ``model_copy(update=...)`` of a blank
instance) builds the models of every history load, cache hit and append. This times
it, per model, against ``model_construct`` (its reference) and one ``TypeAdapter`` over
a list of models (validation), for a message and a tool call, interleaved in one
process, and prints µs per model and the ratios.

Run ``python benchmarks/bench_codec.py`` (``--quick`` for a small run).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from pydantic import BaseModel, TypeAdapter

from common import Samples, machine_line, markdown_table, rotated
from threadstore.models import Message, ToolCall
from threadstore.store._codec import construct, constructor


def sample(model: type[BaseModel]) -> dict[str, Any]:
    """Every field of one stored record, as a row loader hands it to the codec."""
    now = datetime.now(UTC)
    if model is Message:
        record: BaseModel = Message(
            message_uuid=uuid4(),
            chat_uuid=uuid4(),
            parent_uuid=uuid4(),
            agui_id="msg-1",
            role="assistant",
            content="a reply of a few words " * 8,
            run_id="run-1",
            seq=7,
            created_at=now,
            updated_at=now,
        )
    else:
        record = ToolCall(
            uuid=uuid4(),
            message_uuid=uuid4(),
            tool_call_id="call-1",
            name="search",
            arguments='{"q": "weather"}',
            seq=1,
            created_at=now,
            updated_at=now,
        )
    return dict(record)


def paths(model: type[BaseModel]) -> dict[str, Callable[[list[dict[str, Any]]], list[Any]]]:
    """The three ways to build a list of models from a list of field dicts."""
    fast = constructor(model)
    adapter: TypeAdapter[list[Any]] = TypeAdapter(list[model])  # type: ignore[valid-type]
    return {
        "codec.constructor": lambda rows: [fast(dict(row)) for row in rows],
        "model_construct": lambda rows: [construct(model, dict(row)) for row in rows],
        "TypeAdapter(list)": lambda rows: adapter.validate_python([dict(row) for row in rows]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run")
    parser.add_argument("--rows", type=int, default=2000, help="models per timed call")
    parser.add_argument("--reps", type=int, default=15, help="interleaved repetitions")
    args = parser.parse_args()
    reps = 3 if args.quick else args.reps
    print("# Models from trusted values: codec.constructor, model_construct, TypeAdapter\n")
    print(machine_line() + "\n")
    table = []
    for model in (Message, ToolCall):
        rows = [sample(model)] * args.rows
        contenders = paths(model)
        samples = Samples()
        for rep in range(reps):
            for name in rotated(list(contenders), rep):
                start = time.perf_counter()
                contenders[name](rows)
                samples.add(name, (time.perf_counter() - start) / args.rows * 1e6)
        reference = samples.median("model_construct")
        for name in contenders:
            median = samples.median(name)
            table.append([model.__name__, name, f"{median:.2f}", f"{median / reference:.2f}x"])
    print(
        markdown_table(["model", "path", "µs per model (median)", "time / model_construct"], table)
    )


if __name__ == "__main__":
    main()
