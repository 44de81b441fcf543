"""Sealing: every streaming text or reasoning element of a turn becomes ``done``."""

from __future__ import annotations

from threadstore.chat._types import AssistantTurn, Chain

__all__ = ["seal_assistant_turn"]


def seal_assistant_turn(turn: AssistantTurn) -> AssistantTurn:
    """Close the turn's open element and its sub-agent frames' (abort, walk-away, restore).

    Idempotent, and returns ``turn`` itself when nothing is streaming, so a binding can
    call it unconditionally without producing a new state. A turn that is never sealed
    and got neither ``RUN_FINISHED`` nor ``RUN_ERROR`` keeps its tail ``streaming``:
    that is the truth about a truncated stream.
    """
    frames = turn.frames
    sealed_frames = {
        key: frame.with_turn(seal_assistant_turn(frame.turn)) for key, frame in frames.items()
    }
    frames_changed = any(sealed_frames[key].turn is not frames[key].turn for key in frames)
    if turn.tail is None and not frames_changed:
        return turn
    return turn.evolve(
        parts=closed_parts(turn),
        tail=None,
        frames=sealed_frames if frames_changed else frames,
    )


def closed_parts(turn: AssistantTurn) -> Chain:
    """The turn's part chain with its open element, if any, appended as ``done``."""
    if turn.tail is None:
        return turn.part_chain
    return (turn.part_chain, turn.tail.part("done"))
