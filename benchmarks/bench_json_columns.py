"""The SQL backends' JSON columns through the binary-safe codec, side by side with ``json``.

Every JSON column (metadata, state, content parts, extras) is written with
``threadstore.binary_json`` so bytes survive. This times its encode and decode of typical
column values against the ``json`` module calls the columns used before, in the same
process, and prints the ratios; a value holding bytes has no ``json`` peer (``json``
refuses it) and is timed for information.

Run ``python benchmarks/bench_json_columns.py`` (``--quick`` for a small run).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from common import Samples, machine_line, markdown_table
from threadstore import binary_json
from threadstore.store._rows import _json

VALUES: dict[str, Any] = {
    "small metadata": {"agui": {"id": "m-1", "role": "assistant"}, "tokens": 412},
    "chat state": {
        "plan": [{"step": i, "done": i % 2 == 0, "title": f"step {i}"} for i in range(40)],
        "cursor": {"city": "Lisbon", "days": [1, 2, 3]},
    },
}
WITH_BYTES = {"thumbnail": b"\x89PNG" + bytes(range(256)) * 8, "caption": "a cat"}


def _per_call(action: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        action()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls per round")
    args = parser.parse_args()
    calls, rounds = (2_000, 5) if args.quick else (20_000, 9)
    samples = Samples()
    for _ in range(rounds):
        for name, value in VALUES.items():
            text = json.dumps(value, separators=(",", ":"))
            samples.add(
                f"{name}/encode/json",
                _per_call(lambda v=value: json.dumps(v, separators=(",", ":")), calls),
            )
            samples.add(
                f"{name}/encode/codec", _per_call(lambda v=value: binary_json.dumps(v), calls)
            )
            samples.add(f"{name}/decode/json", _per_call(lambda t=text: json.loads(t), calls))
            samples.add(f"{name}/decode/codec", _per_call(lambda t=text: _json(t), calls))
        tagged = binary_json.dumps(WITH_BYTES)
        samples.add("bytes/encode/codec", _per_call(lambda: binary_json.dumps(WITH_BYTES), calls))
        samples.add("bytes/decode/codec", _per_call(lambda t=tagged: _json(t), calls))
    rows = []
    for name in VALUES:
        for step in ("encode", "decode"):
            peer = samples.median(f"{name}/{step}/json")
            mine = samples.median(f"{name}/{step}/codec")
            rows.append(
                [name, step, f"{peer * 1e6:.2f}", f"{mine * 1e6:.2f}", f"{mine / peer:.2f}x"]
            )
    for step in ("encode", "decode"):
        mine = samples.median(f"bytes/{step}/codec")
        rows.append(["2 KiB of bytes", step, "refused", f"{mine * 1e6:.2f}", "-"])
    print(machine_line())
    print(f"{calls} calls per round, median of {rounds} rounds (µs per call)\n")
    headers = ["value", "step", "json (µs)", "codec (µs)", "codec / json"]
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    sys.exit(main())
