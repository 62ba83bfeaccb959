"""The one question detector: whether a line asks, and whether a line with a question mark
opens as a question or asserts."""

from __future__ import annotations

import pytest

from loreguard.text.questions import is_question, opens_as_question


@pytest.mark.parametrize(
    ("line", "question"),
    [
        ("Is the door open?", True),
        ("where is the smith", True),
        ("Est-ce que la porte est ouverte", True),  # "est-ce que" opens a French question
        ("¿La puerta?", True),
        ("Открыта ли дверь", True),
        ("門は開いていますか。", True),
        ("Nice hat!", False),
        ("The gate is open.", False),
        ("Ce n'est rien.", False),
        ("", False),
    ],
)
def test_is_question(line: str, question: bool) -> None:
    assert is_question(line) is question


@pytest.mark.parametrize(
    ("line", "opens"),
    [
        ("Is the king Edward?", True),
        ("Isn't the king Edward?", True),
        ("Could the king be Edward?", True),
        ("Who rules from the castle?", True),
        ("The king is Edward?", False),
        ("Edward is the king now, isn't he?", False),
        ("Don't open the gate.", True),  # opens as a question does; `is_question` says no
    ],
)
def test_opens_as_question(line: str, opens: bool) -> None:
    assert opens_as_question(line) is opens


def test_a_negated_order_is_no_question() -> None:
    assert not is_question("Don't open the gate.") and not is_question("Won't work, that.")
