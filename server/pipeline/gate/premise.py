"""A yes to a false claim: the player asserts what canon denies, and the NPC agrees.

"The king is called Edward now, isn't he?" answered "Yes, he is, love." asserts that the king is
Edward as surely as saying it: the instruct models do this readily (they agree with the user).
The claim is the player's, so the contradiction checker finds nothing in the reply itself. Here
the player's line is read as the statement it carries (a tag question or a question mark on a
statement, "..., isn't he?", "..., right?", is still the player's claim), checked against canon
and world state like a reply, and a reply that opens by agreeing ("Yes", "Oh, yes", "Aye",
"Indeed", "That's right"...) without naming the value that holds fails as that fact's contradiction. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from loreguard.memory.claims import Contradiction, find_contradictions
from loreguard.schemas.base import JsonScalar
from loreguard.schemas.memory import CanonicalFact, StateClaim
from loreguard.schemas.text import norm_words
from loreguard.text.negation import DENIALS
from loreguard.text.phrases import sentences
from loreguard.text.questions import opens_as_question

#: A tag after a statement that asks for agreement: ", isn't he?", ", right?", ", yes?".
_TAG = re.compile(
    r",?\s*(?:(?:is|isn't|are|aren't|does|doesn't|do|don't|did|didn't|was|wasn't|has|hasn't|have|haven't|will|won't|can|can't)"
    r"(?:\s+not)?\s+(?:he|she|it|they|there|we|you|i)|right|yes|no|eh|correct|true|am i right|don't you think)\s*\?\s*$",
    re.IGNORECASE,
)
#: A reply that opens by agreeing with what it was told.
_AGREEING = re.compile(
    r"^\W*(?:(?:oh|ah|aah|well|why|hm+|mm+|ooh|och|ha)\W+)?(?:yes|yeah|yep|aye|indeed|right|true|correct|exactly|certainly|of course|sure|so it is|that's right|that's true|"
    r"that is right|that is true|you're right|you are right|(?:he|she|it|they) (?:is|are|does|do|has|have|was))\b",
    re.IGNORECASE,
)
#: Hearsay taken up, said on its own ("I hear that. He's been busy ruling the land.",
#: qwen2.5-coder-1.5b as Mira): agreement, unless the reply goes on to doubt it ("So they say. I
#: wouldn't believe a word of it.").
_HEARSAY = re.compile(
    r"^\W*(?:(?:oh|ah|well)\W+)?(?:i(?:'ve| have)? (?:hear|heard) (?:that|so|as much|the same)|so i(?:'ve| have)? "
    r"(?:hear|heard)|so (?:they|people) say|that's what (?:i|they|people) (?:hear|heard|say)|i (?:believe|think|suppose|guess) so)"
    r"\s*(?:[.!,;]|$)",
    re.IGNORECASE,
)
_DOUBTS = DENIALS | {"nonsense", "lie", "lies", "rubbish", "gossip"}


def tag_statements(text: str) -> str:
    """`text` with each tag question read as the statement it carries ("Edward is the king now,
    isn't he?" -> "Edward is the king now."); "" when it has none. A reply that asks for
    agreement with a false claim asserts it as much as the player's line does."""
    tagged = [_TAG.sub(".", s) for s in sentences(text) if _TAG.search(s) and not opens_as_question(s)]
    return " ".join(tagged)


def player_claims(said: str) -> str:
    """The last sentence of the player's line as a statement: a tag question's tag dropped and a
    question mark on a statement read as a full stop; "" for a real question ("Is the king
    Edward?"), which asserts nothing."""
    said_sentences = sentences(said)
    if not said_sentences:
        return ""
    last = said_sentences[-1]
    statement = _TAG.sub(".", last)
    if statement.endswith("?"):
        if opens_as_question(statement):  # a real question asserts nothing
            return ""
        statement = statement[:-1] + "."
    return statement


def find_agreed_false_claims(
    dialogue: str,
    said: str,
    facts: Iterable[CanonicalFact],
    state: Iterable[tuple[str, JsonScalar]] = (),
    state_claims: Mapping[str, StateClaim] | None = None,
) -> list[Contradiction]:
    """The contradictions of canon or world state in the player's claim, when `dialogue` opens by
    agreeing with it and does not say the value that holds."""
    hearsay = _HEARSAY.match(dialogue) and not _DOUBTS & set(norm_words(dialogue))
    if not (_AGREEING.match(dialogue) or hearsay):
        return []
    claim = player_claims(said)
    if not claim:
        return []
    reply = set(norm_words(dialogue))
    return [
        hit for hit in find_contradictions(claim, facts, state, state_claims) if not set(norm_words(hit.canonical_value)) <= reply
    ]
