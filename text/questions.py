"""Questions: the one detector of whether a line asks, in the six languages the checks read.

The task contract asks it whether the player's line is a question, the premise check whether a
line that ends in a question mark asks or asserts ("Is the king Edward?" asks; "The king is
Edward?" asserts), and the gate whether a reply answers with a question. Pure.
"""

from __future__ import annotations

import re

from loreguard.schemas.text import fold
from loreguard.text.words import word_tokens

#: Words that open a question (folded): English wh-words and auxiliaries, German, Spanish,
#: French and Russian question words. A line that ends in a question mark is a question anyway.
QUESTION_OPENERS = frozenset(
    """who whom whose what when where why which how is are was were do does did can could will would shall should
    may might has have had wer wen wem wessen was wann wo woher wohin warum wieso weshalb wie welche welcher welches
    ist sind hast hat habt gibt kann kannst weisst que quien quienes donde cuando como cual cuales cuanto cuanta
    esta estan hay qui quoi quand pourquoi comment quel quelle quels quelles combien est кто что где когда почему
    зачем как какой какая какие сколько""".split()
)
#: Auxiliaries whose negated form opens a question: "Isn't he the king?", "Don't you sell rope?".
_NEGATED_AUXILIARIES = frozenset("isn aren wasn weren don doesn didn hasn haven hadn won wouldn can couldn shouldn".split())
#: Japanese question words, and the particles that end a question.
_JAPANESE_QUESTION_WORDS = ("どこ", "いつ", "だれ", "誰", "なに", "何", "なぜ", "どう", "どれ", "どちら", "いくら")
_JAPANESE_QUESTION_END = re.compile(r"(か|の|かい|かな)[\s。．!！]*$")
#: Russian yes/no questions: "Открыты ли ворота".
_PARTICLES = frozenset({"ли"})


def opens_as_question(text: str) -> bool:
    """Whether `text` opens as a question does, with a question word or its verb ("Is the king
    Edward?", "Isn't he the king?"): what tells a question from a statement said with a
    question mark ("The king is Edward?")."""
    tokens = word_tokens(text)
    return bool(tokens) and (tokens[0] in QUESTION_OPENERS or tokens[0] in _NEGATED_AUXILIARIES and tokens[1:2] == ("t",))


def is_question(text: str) -> bool:
    """A yes/no or wh-question: it ends in a question mark (any width; Spanish opens with ¿),
    opens with a question word, carries the Russian particle ли, or is Japanese
    with a question word or a closing か/の."""
    folded = fold(text).strip()
    if not folded:
        return False
    if folded.rstrip(" .!\"'»”)").endswith("?") or "¿" in folded:
        return True
    tokens = word_tokens(text)
    if tokens and tokens[0] in QUESTION_OPENERS:  # not a negated auxiliary: "Don't go." orders
        return True
    if _PARTICLES.intersection(tokens):
        return True
    return bool(_JAPANESE_QUESTION_END.search(folded)) or any(w in folded for w in _JAPANESE_QUESTION_WORDS)
