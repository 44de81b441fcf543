"""Where an Agent Framework history load goes: its steps timed apart, side by side.

Stores 2,000 messages through ``ThreadstoreHistoryProvider`` on SQLite and through the
framework's ``FileHistoryProvider``, then times, taking turns with a full collection
before each call: both whole loads, the chat lookup, the store read alone
(``read_history``), building the framework messages from
the cached records, and the framework's own ``Message.from_dict`` of the same messages.

Run ``python benchmarks/face_load_steps.py`` (``--messages``, ``--loads``). Figures:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_framework import FileHistoryProvider, Message

from bench_agent_framework import runs_of
from common import machine_line
from threadstore import open_store
from threadstore.faces.agent_framework import ThreadstoreHistoryProvider
from threadstore.faces.agent_framework._convert import records_to_messages

warnings.filterwarnings("ignore", message=r"\[FILE_HISTORY\]")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--loads", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ts-steps-") as folder:
        store = await open_store(f"sqlite:///{Path(folder) / 'threadstore.db'}")
        ours = ThreadstoreHistoryProvider(store, uuid.uuid4())
        file = FileHistoryProvider(Path(folder) / "files")
        state: dict[str, Any] = {}
        file_state: dict[str, Any] = {}
        for run in runs_of(args.messages):
            await ours.save_messages("s", run, state=state)
            await file.save_messages("s", run, state=file_state)
        chat = await ours.get_chat("s", state)
        assert chat is not None
        records = list(await store.get_chat_messages(chat.chat_uuid))
        forms = [message.to_dict() for message in records_to_messages(records)]
        steps: dict[str, Callable[[], Any]] = {
            "threadstore load (get_messages)": lambda: ours.get_messages("s", state=state),
            "FileHistoryProvider load": lambda: file.get_messages("s", state=file_state),
            "chat lookup": lambda: ours.get_chat("s", state),
            "store read alone (read_history)": lambda: store.read_history(chat.chat_uuid),
            "building framework messages from the records": lambda: records_to_messages(records),
            "Message.from_dict of the same messages": lambda: [
                Message.from_dict(dict(form)) for form in forms
            ],
        }
        times: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(args.loads):
            for name, step in steps.items():
                gc.collect()
                start = time.perf_counter()
                result = step()
                if asyncio.iscoroutine(result):
                    result = await result
                del result  # freeing what a step made is part of the step
                times[name].append(time.perf_counter() - start)
        await store.close()
    print(f"{machine_line()} · {args.messages} messages · medians of {args.loads}\n")
    print("| step | median (ms) |\n|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values) * 1000:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
