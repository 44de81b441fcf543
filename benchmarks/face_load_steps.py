"""Where an Agent Framework history load goes: its steps timed apart, side by side.

Stores 2,000 messages through ``ThreadstoreHistoryProvider`` on SQLite and through the
framework's ``FileHistoryProvider``, then times, taking turns with a full collection
before each call and one turn of the loop after it (what a call left for the loop to
release, such as a worker thread's finished call holding its result, is released in
the step that made it): both whole loads, the chat lookup, the store read alone
(``read_history``), the records' plain readings (what a load works out only for the
messages new since the last), building the framework messages from them, the
framework's constructors alone for the same messages (``Message`` and ``Content`` from
ready values: the least any load of them costs), and the framework's own
``Message.from_dict`` of the same messages (what the file provider's load builds with).

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

from agent_framework import Content, FileHistoryProvider, Message

from bench_agent_framework import runs_of
from common import machine_line
from threadstore import open_store
from threadstore.faces.agent_framework import ThreadstoreHistoryProvider
from threadstore.faces.agent_framework._convert import (
    messages_of,
    plain_reading,
    records_to_messages,
)

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
        messages = records_to_messages(records)
        forms = [message.to_dict() for message in messages]
        readings = [plain_reading(record) for record in records]
        fields = [(m.role, m.text, m.author_name, m.message_id) for m in messages]
        assert all(len(m.contents) == 1 for m in messages)  # one text each: the floor below
        steps: dict[str, Callable[[], Any]] = {
            "threadstore load (get_messages)": lambda: ours.get_messages("s", state=state),
            "FileHistoryProvider load": lambda: file.get_messages("s", state=file_state),
            "chat lookup": lambda: ours.get_chat("s", state),
            "store read alone (read_history)": lambda: store.messages.read_history(chat.chat_uuid),
            "the records' plain readings": lambda: [plain_reading(r) for r in records],
            "building framework messages from the readings": lambda: messages_of(
                records, readings, set()
            ),
            "the framework's constructors alone, same messages": lambda: [
                Message(role, [Content("text", text=text)], author_name=name, message_id=mid)
                for role, text, name, mid in fields
            ],
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
                await asyncio.sleep(0)  # and what it left for the loop to release (a thread's)
                times[name].append(time.perf_counter() - start)
        await store.close()
    print(f"{machine_line()} · {args.messages} messages · medians of {args.loads}\n")
    print("| step | median (ms) |\n|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values) * 1000:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
