"""The canonical gate's failures: contradicted claims (canonical facts, world-state keys; a tag
question's statement, a yes to the player's false claim: `premise`) and numbers that disagree
with the context (`grounding`), each as the `GateFailure` the receipt lists. Pure."""

from __future__ import annotations

from loreguard.memory.claims import Contradiction, find_contradictions
from loreguard.schemas.npc import UngroundedNumbers
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Severity
from loreguard.server.pipeline.gate.deals import UNPRICED_WARE_RULE, asked_ware, is_priced, prices_nothing_named, stock_keys
from loreguard.server.pipeline.gate.grounding import NumberProblem, describe, find_number_problems, subjects_in_context
from loreguard.server.pipeline.gate.premise import find_agreed_false_claims, tag_statements
from loreguard.server.pipeline.snapshot import StateSnapshot


def claim_failures(texts: list[str], snapshot: StateSnapshot) -> tuple[list[GateFailure], list[GateFailure]]:
    """Contradicted claims (canonical facts, world-state keys) and ungrounded numbers in `texts`."""
    stock = stock_keys(snapshot)
    shown = tuple(item for item in snapshot.world_state if item[0] not in stock) if stock else snapshot.world_state
    # what an offered act changes may be spoken of as done (`IntentSpec.changes`)
    acted = {key for offer in snapshot.offered_intents for key in offer.spec.changes}
    held = tuple(item for item in snapshot.world_state if item[0] not in acted)
    subjects = subjects_in_context(shown, snapshot.canonical)
    sells = [ware for spec in snapshot.allowed_intents for ware in sorted(spec.wares)]
    contradictions: list[GateFailure] = []
    ungrounded: list[GateFailure] = []
    state_claims = dict(snapshot.state_claims)
    for i, text in enumerate(texts):
        # the dialogue answers the player's line (where a pronoun may find its subject); a
        # mutation's text answers nothing
        context = snapshot.context.said() if i == 0 else ""
        hits = find_contradictions(text, snapshot.canonical, held, state_claims, context=context)
        contradictions.extend(_contradiction_failure(hit) for hit in hits)
        if i == 0 and not hits:  # a tag question asks agreement with what it says (`premise`)
            tagged = tag_statements(text)
            hits = find_contradictions(tagged, snapshot.canonical, held, state_claims) if tagged else []
            contradictions.extend(_contradiction_failure(hit) for hit in hits)
        if i == 0 and not hits:  # a yes to the player's false claim says it too (`premise`)
            agreed = find_agreed_false_claims(text, context, snapshot.canonical, held, state_claims)
            contradictions.extend(_contradiction_failure(hit, agreed=True) for hit in agreed)
        # A claim the checker above already caught is not reported twice.
        caught = {hit.label for hit in hits}
        for problem in find_number_problems(text, subjects):
            failure = _unpriced(problem, snapshot, sells, text) or _number_failure(problem, snapshot.ungrounded_numbers)
            if failure is not None and failure.rule_id not in caught:
                ungrounded.append(failure)
    return contradictions, ungrounded


def _contradiction_failure(hit: Contradiction, *, agreed: bool = False) -> GateFailure:
    """A contradicted claim fails hard (retried with a repair that names the value that holds),
    whether it is a canonical fact's or a world-state key's; the rule is the fact's id, or
    `world_state:KEY` as the prompt's context keys name the key."""
    if hit.state_key:
        what, rule_id = f"world state {hit.state_key}", hit.label
    else:
        what, rule_id = f"canonical fact {hit.fact_id}", hit.fact_id
    return GateFailure(
        gate=GateName.CANONICAL,
        reason=(
            f"contradicts {what}: {hit.subject} {hit.attribute} is {hit.canonical_value}, "
            + (
                f"and the output agrees with the player that it is {'not ' if hit.negated else ''}{hit.asserted}: "
                f"tell them they are wrong"
                if agreed
                else f"output says {'not ' if hit.negated else ''}{hit.asserted}"
            )
        ),
        severity=Severity.HARD,
        rule_id=rule_id,
        evidence=(
            f"{hit.subject}'s {hit.attribute} is not {hit.canonical_value}"
            if hit.negated
            else f"{hit.subject}'s {hit.attribute} is {hit.asserted}"
        ),
    )


def _number_failure(problem: NumberProblem, ungrounded: UngroundedNumbers) -> GateFailure | None:
    """A number that disagrees with the context fails hard, like a contradicted claim; an amount
    about nothing in the context fails soft only where the NPC's profile flags it."""
    if problem.subject is None:
        if ungrounded is UngroundedNumbers.ALLOW:
            return None
        return GateFailure(
            gate=GateName.GROUNDING,
            reason=describe(problem),
            severity=Severity.SOFT,
            rule_id="ungrounded_numbers",
            evidence=problem.stated,
        )
    return GateFailure(
        gate=GateName.GROUNDING,
        reason=describe(problem),
        severity=Severity.HARD,
        rule_id=problem.subject.label,
        evidence=problem.stated,
    )


def _unpriced(problem: NumberProblem, snapshot: StateSnapshot, sells: list[str], text: str) -> GateFailure | None:
    """A price about nothing in the context, from an NPC that sells priced wares: no price of its
    wares (a few at a time) nor money the player named ("Swords are 30 gold."), or any amount in
    a sentence about something else ("The torch is 1 copper.")."""
    if problem.subject is not None or not sells:
        return None
    if is_priced(problem.stated, snapshot) and not prices_nothing_named(text, snapshot):
        return None
    npc_name, asked = snapshot.npc_name, asked_ware(snapshot)
    if asked is not None:  # the player asked about one ware: a bare price is its price
        reason = f"names a price ({problem.stated}) that is not what {asked[0]} costs: {asked[1].price} {asked[1].currency} each"
    else:
        reason = (
            f"names a price ({problem.stated}) for nothing {npc_name} sells: {npc_name} sells {', '.join(sells)} and nothing else"
        )
    return GateFailure(
        gate=GateName.GROUNDING,
        reason=reason,
        severity=Severity.HARD,
        rule_id=UNPRICED_WARE_RULE,
        evidence=problem.stated,
    )
