"""A grant said but not done: the NPC tells the player it does an act ("Go on through,
traveller.", "Here you go, love.") while the reply grants no such intent, so the game does not do
what the player heard: the gate stays shut behind "Go on through". Pure.

The designer lists, per intent, the words with which the NPC says it does the act now
(`IntentSpec.grant_phrases`). A sentence that says one fails the gate's hard limits
(`grants_in_words_only`) unless the reply grants that intent (and the gate approves it), except
where the words are not a grant: a denial earlier in their clause ("I can't just let you go on
through"), a question ("Shall I say go on through?"), or a condition in the sentence ("If the
captain comes, in you go.", "You may pass at dawn, when the gate opens."). The
retry is told to grant the intent where the player asked for it (the grammar offers it), or
else to say no in words.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from loreguard.schemas.npc import IntentSpec
from loreguard.schemas.output import EmitWorldIntentMutation, ParsedOutput
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Severity
from loreguard.server.pipeline.turn.intents import grant_problem
from loreguard.text.negation import DENIALS
from loreguard.text.phrases import sentences
from loreguard.text.request_terms import CLAUSE_BREAK
from loreguard.text.words import stems

if TYPE_CHECKING:
    from loreguard.server.pipeline.snapshot import StateSnapshot

GRANTS_IN_WORDS_ONLY_RULE = "grants_in_words_only"
#: Words that make the sentence a condition, not a deed done now.
CONDITIONS = frozenset(stems("if when once unless until after whenever"))


def _grant_said(sentence: str, phrases: tuple[str, ...]) -> str | None:
    """The first of `phrases` the sentence says as a deed done now, or None."""
    if sentence.rstrip().endswith("?") or CONDITIONS.intersection(stems(sentence)):
        return None
    # a phrase is looked for within one clause ("Hold on, you go" says no "on you go"), and a
    # denial reaches to the clause's end
    for clause in CLAUSE_BREAK.split(sentence):
        words = stems(clause)
        for phrase in phrases:
            needle = stems(phrase)
            for at in range(len(words) - len(needle) + 1) if needle else ():
                if words[at : at + len(needle)] == needle and not DENIALS.intersection(words[:at]):
                    return phrase
    return None


def grants_in_words_only(output: ParsedOutput, snapshot: StateSnapshot) -> list[GateFailure]:
    """`find_grants_in_words_only` for a parsed reply: its intents that the gate will approve
    count as granted (one a rule refuses grants nothing: "Here you go" with it is still words)."""
    specs = {spec.type: spec for spec in snapshot.allowed_intents}
    granted = (
        m.intent
        for m in output.mutations
        if isinstance(m, EmitWorldIntentMutation)
        and not grant_problem(m, specs.get(m.intent), snapshot.offered_intents, snapshot.refused_requests, output.dialogue)
    )
    offered = (o.spec.type for o in snapshot.offered_intents if o.requested)
    return find_grants_in_words_only(output.dialogue, granted, snapshot.allowed_intents, offered, snapshot.npc_name)


def find_grants_in_words_only(
    dialogue: str, granted: Iterable[str], specs: tuple[IntentSpec, ...], offered: Iterable[str], npc_name: str
) -> list[GateFailure]:
    """One failure for the first intent whose grant the dialogue says without the reply granting
    it; none otherwise. `granted`: the intent types the reply grants; `offered`: those the
    player's line put on the table (the reply may grant them)."""
    done, askable = frozenset(granted), frozenset(offered)
    said = sentences(dialogue)  # split once, not once per intent
    for spec in specs:
        if not spec.grant_phrases or spec.type in done:
            continue
        phrase = next((p for s in said if (p := _grant_said(s, spec.grant_phrases))), None)
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
