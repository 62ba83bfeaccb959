"""A grant said but not done: the NPC tells the player it does an act ("Go on through,
traveller.", "Here you go, love.") while the reply grants no such intent, so the game does not do
what the player heard: the gate stays shut behind "Go on through". Pure.

The designer lists, per intent, the words with which the NPC says it does the act now
(`IntentSpec.grant_phrases`). A sentence that says one fails the gate's hard limits
(`grants_in_words_only`) unless the reply grants that intent, except where the words are not a
grant: a negation just before them ("I can't let you go on through"), a question ("Shall I say
go on through?"), or a condition earlier in the sentence ("If the captain comes, in you go."). The
retry is told to grant the intent where the player asked for it (the grammar offers it), or
else to say no in words.
"""

from __future__ import annotations

from collections.abc import Iterable

from loreguard.schemas.npc import IntentSpec
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Severity
from loreguard.server.pipeline.phrases import sentences
from loreguard.server.pipeline.request_terms import NEGATION_REACH, NEGATIONS, stems

GRANTS_IN_WORDS_ONLY_RULE = "grants_in_words_only"
#: Words that make the rest of their sentence a condition, not a deed done now.
CONDITIONS = frozenset(stems("if when once unless until after whenever"))


def _grant_said(sentence: str, phrases: tuple[str, ...]) -> str | None:
    """The first of `phrases` the sentence says as a deed done now, or None."""
    if sentence.rstrip().endswith("?"):
        return None
    words = stems(sentence)
    for phrase in phrases:
        needle = stems(phrase)
        for at in range(len(words) - len(needle) + 1) if needle else ():
            if words[at : at + len(needle)] != needle:
                continue
            if not NEGATIONS.intersection(words[max(0, at - NEGATION_REACH) : at]) and not CONDITIONS.intersection(words[:at]):
                return phrase
    return None


def find_grants_in_words_only(
    dialogue: str, granted: Iterable[str], specs: tuple[IntentSpec, ...], offered: Iterable[str], npc_name: str
) -> list[GateFailure]:
    """One failure for the first intent whose grant the dialogue says without the reply granting
    it; none otherwise. `granted`: the intent types the reply grants; `offered`: those the
    player's line put on the table (the reply may grant them)."""
    done, askable = frozenset(granted), frozenset(offered)
    for spec in specs:
        if not spec.grant_phrases or spec.type in done:
            continue
        phrase = next((p for s in sentences(dialogue) if (p := _grant_said(s, spec.grant_phrases))), None)
        if phrase is None:
            continue
        if spec.type in askable:
            todo = f'grant it in "intent" if {npc_name} agrees, or else say no'
        else:
            todo = f"nothing the player asked lets {npc_name} do that now: do not say it is done"
        return [
            GateFailure(
                gate=GateName.HARD_LIMITS,
                reason=f"dialogue says {phrase!r}, as if doing {spec.type}, but the reply grants no {spec.type}: {todo}",
                severity=Severity.HARD,
                rule_id=GRANTS_IN_WORDS_ONLY_RULE,
                evidence=phrase,
            )
        ]
    return []
