"""Regenerate and edit-and-resend cut both views of a chat at the same turn."""

from __future__ import annotations

from ag_ui.core import AssistantMessage, FunctionCall, ToolCall, ToolMessage, UserMessage

from threadstore.chat import (
    ChatHistory,
    branch_before_user_message,
    canonical_from_ui,
    drop_trailing_assistant,
    ui_from_messages,
)

CANONICAL = (
    UserMessage(id="u1", content="first"),
    AssistantMessage(
        id="a1",
        content="checking",
        tool_calls=[ToolCall(id="c", function=FunctionCall(name="f", arguments="{}"))],
    ),
    ToolMessage(id="c-result", tool_call_id="c", content="ok"),
    AssistantMessage(id="a2", content="done"),
    UserMessage(id="u2", content="second"),
    AssistantMessage(id="a3", content="reply"),
)


def history() -> ChatHistory:
    ui = tuple(ui_from_messages(CANONICAL, lambda: "unused"))
    return ChatHistory(ui=ui, canonical=CANONICAL)


def test_the_ui_view_has_fewer_messages_than_the_canonical_one() -> None:
    assert [m.id for m in history().ui] == ["u1", "a1", "u2", "a3"]


def test_regenerate_drops_the_trailing_assistant_turn_from_both_views() -> None:
    dropped = drop_trailing_assistant(history())

    assert [m.id for m in dropped.ui] == ["u1", "a1", "u2"]
    assert dropped.canonical == CANONICAL[:5]


def test_regenerate_with_nothing_trailing_is_a_no_op() -> None:
    cut = drop_trailing_assistant(history())

    assert drop_trailing_assistant(cut) is cut


def test_regenerate_drops_tool_results_with_their_turn() -> None:
    h = history()
    cut = ChatHistory(ui=h.ui[:2], canonical=CANONICAL[:4])

    assert drop_trailing_assistant(cut).canonical == CANONICAL[:1]


def test_edit_and_resend_cuts_by_user_turn_ordinal_not_array_index() -> None:
    branched = branch_before_user_message(history(), "u2")

    assert branched is not None
    assert [m.id for m in branched.ui] == ["u1", "a1"]
    # u2 is the 3rd UI message but the 5th canonical one: the cut follows the user turn.
    assert branched.canonical == CANONICAL[:4]
    rebuilt = canonical_from_ui(branched.ui)
    assert rebuilt[:3] == list(CANONICAL[:3])
    # A continuation after tool results gets a derived id (a documented loss).
    assert (rebuilt[3].role, rebuilt[3].content) == ("assistant", "done")


def test_edit_and_resend_of_the_first_message_keeps_nothing() -> None:
    branched = branch_before_user_message(history(), "u1")

    assert branched == ChatHistory(ui=(), canonical=())


def test_edit_and_resend_of_a_non_user_message_is_none() -> None:
    assert branch_before_user_message(history(), "a1") is None
    assert branch_before_user_message(history(), "missing") is None
