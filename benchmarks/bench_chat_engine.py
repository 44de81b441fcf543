"""The pure chat engine's fold, side by side with the storage fold on the same streams.

Three streams, each folded by ``threadstore.chat.apply_event`` (a new immutable turn per
event, then ``turn.message`` read once) and by the storage fold (``ConversationFold.apply``
per event, then every record's content read once):

1. a scripted run of 10,000 events (20 turns of reasoning, text and a tool call with
   streamed arguments and a result), and the same run at 2x and 4x;
2. one answer of 0.25, 0.5 and 1 MB streamed in 10-character deltas;
3. an answer with a live status part (a CUSTOM event replacing it in place after every
   10 text deltas) of 10,000, 20,000 and 40,000 events.

Times are the process's CPU time (medians of interleaved repetitions). Linear folding
shows as a constant time per event (or per MB) across the three sizes.
Run ``python benchmarks/bench_chat_engine.py`` (``--quick`` for a smoke run).
Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from common import Samples, collect_garbage, machine_line, markdown_table, rotated
from threadstore.chat import apply_event, create_assistant_turn

# The storage fold is imported here and nowhere else in this file, through its public
# class only, so a move of its module is a one-line change.
from threadstore.fold import ConversationFold

RUN_ID = "bench-run"


def scripted_run(turns: int) -> list[BaseEvent]:
    """``turns`` assistant turns of about 500 events each (the streaming benchmark's shape)."""
    events: list[BaseEvent] = [RunStartedEvent(thread_id="t", run_id=RUN_ID)]
    for n in range(turns):
        text_id, reasoning_id, call_id = f"m{n}", f"r{n}", f"c{n}"
        events += [
            StepStartedEvent(step_name=f"step-{n}"),
            ReasoningStartEvent(message_id=f"span{n}"),
            ReasoningMessageStartEvent(message_id=reasoning_id),
            *(
                ReasoningMessageContentEvent(message_id=reasoning_id, delta="thinks..")
                for _ in range(122)
            ),
            ReasoningMessageEndEvent(message_id=reasoning_id),
            ReasoningEndEvent(message_id=f"span{n}"),
            TextMessageStartEvent(message_id=text_id, role="assistant"),
            *(TextMessageContentEvent(message_id=text_id, delta="answers.") for _ in range(306)),
            TextMessageEndEvent(message_id=text_id),
            ToolCallStartEvent(
                tool_call_id=call_id, tool_call_name="search", parent_message_id=text_id
            ),
            *(ToolCallArgsEvent(tool_call_id=call_id, delta='"q":"xy",') for _ in range(61)),
            ToolCallEndEvent(tool_call_id=call_id),
            ToolCallResultEvent(message_id=f"{call_id}-result", tool_call_id=call_id, content="ok"),
            StepFinishedEvent(step_name=f"step-{n}"),
        ]
    events.append(RunFinishedEvent(thread_id="t", run_id=RUN_ID))
    return events


def long_answer(size: int) -> list[BaseEvent]:
    """One text message of ``size`` characters in 10-character deltas."""
    chunk = "0123456789"
    return [
        RunStartedEvent(thread_id="t", run_id=RUN_ID),
        TextMessageStartEvent(message_id="answer", role="assistant"),
        *(TextMessageContentEvent(message_id="answer", delta=chunk) for _ in range(size // 10)),
        TextMessageEndEvent(message_id="answer"),
        RunFinishedEvent(thread_id="t", run_id=RUN_ID),
    ]


def status_widget(events: int) -> list[BaseEvent]:
    """An answer in 10-character deltas with a live status part: after every 10 deltas a
    CUSTOM event replaces it in place (same name and id), about ``events`` events."""
    out: list[BaseEvent] = [
        RunStartedEvent(thread_id="t", run_id=RUN_ID),
        CustomEvent(name="status", value={"id": "job", "done": 0}),
        TextMessageStartEvent(message_id="answer", role="assistant"),
    ]
    for n in range(events // 11):
        out += [TextMessageContentEvent(message_id="answer", delta="0123456789")] * 10
        out.append(CustomEvent(name="status", value={"id": "job", "done": n + 1}))
    out += [
        TextMessageEndEvent(message_id="answer"),
        RunFinishedEvent(thread_id="t", run_id=RUN_ID),
    ]
    return out


def chat_engine(events: Sequence[BaseEvent]) -> int:
    """Fold with the pure chat engine, then read the message once."""
    turn = create_assistant_turn("bench")
    for event in events:
        turn = apply_event(turn, event)
    return len(turn.message.content)


def storage_fold(events: Sequence[BaseEvent]) -> int:
    """Fold with the storage fold, then read every record's content once."""
    fold = ConversationFold(RUN_ID)
    for event in events:
        fold.apply(event)
    return sum(len(record.content) for record in fold.records.values())


CONTENDERS: dict[str, Callable[[Sequence[BaseEvent]], int]] = {
    "chat engine (apply_event)": chat_engine,
    "storage fold (ConversationFold.apply)": storage_fold,
}


def measure(
    label: str,
    streams: dict[str, list[BaseEvent]],
    reps: int,
    unit: str,
    per: Callable[[str], float],
) -> None:
    samples = Samples()
    jobs = [(size, name) for size in streams for name in CONTENDERS]
    for rep in range(reps):
        for size, name in rotated(jobs, rep):
            collect_garbage()
            # CPU time of this process: the folds are pure computation, and on a shared
            # machine wall-clock time mostly measures the other processes.
            start = time.process_time()
            CONTENDERS[name](streams[size])
            samples.add(f"{size}|{name}", time.process_time() - start)
    rows = []
    first = next(iter(streams))
    for size in streams:
        engine = samples.median(f"{size}|chat engine (apply_event)")
        storage = samples.median(f"{size}|storage fold (ConversationFold.apply)")
        base = samples.median(f"{first}|chat engine (apply_event)") / per(first)
        rows.append(
            [
                size,
                f"{len(streams[size]):,}",
                f"{engine * 1e3:.1f}",
                f"{storage * 1e3:.1f}",
                f"{engine / storage:.2f}x",
                f"{engine / per(size) * 1e3:.2f}",
                f"{engine / per(size) / base:.2f}",
            ]
        )
    print(f"\n{label}")
    print(
        markdown_table(
            [
                "stream",
                "events",
                "chat engine (ms)",
                "storage fold (ms)",
                "engine / storage",
                f"engine ms per {unit}",
                "vs smallest",
            ],
            rows,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one small repetition")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    reps = 1 if args.quick else args.reps
    print(machine_line())

    turns = {"10k events": 20, "20k events": 40, "40k events": 80}
    runs = {name: scripted_run(n) for name, n in turns.items()}
    measure("1. the scripted run", runs, reps, "10k events", lambda s: len(runs[s]) / 10_000)

    sizes = {"0.25 MB": 250_000, "0.5 MB": 500_000, "1 MB": 1_000_000}
    if args.quick:
        sizes = {"25 KB": 25_000, "50 KB": 50_000, "100 KB": 100_000}
    answers = {name: long_answer(size) for name, size in sizes.items()}
    measure(
        "2. one long answer, 10-character deltas", answers, reps, "MB", lambda s: sizes[s] / 1e6
    )

    counts = {"10k events": 10_000, "20k events": 20_000, "40k events": 40_000}
    widgets = {name: status_widget(n) for name, n in counts.items()}
    measure(
        "3. a status part replaced after every 10 text deltas",
        widgets,
        reps,
        "10k events",
        lambda s: len(widgets[s]) / 10_000,
    )


if __name__ == "__main__":
    main()
