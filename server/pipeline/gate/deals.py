"""Words that contradict what the rules decided (`turn.deals`), and wares denied. Pure.

- A sale the rules made must not be turned down in words ("I'm sorry, I can't give you the
  rope") nor its ware denied ("I don't have any rope"): the game hands the rope over, so the
  player would hear a no and get a yes.
- In any reply, a ware the NPC sells and has in stock is never denied ("There's no bread for
  sale"), except one whose stock the rules found short this turn; and what the player asked for
  that it does not sell is not offered ("Can you give me a torch?" -> "A torch, love.").
- A declined request is not granted: its intent is off the table (the grammar cannot write it),
  and "Here's your rope" without it fails `deeds.grants_in_words_only`.

Each check also states what the sampler keeps out while the line is written (`deal_bans`): with
a sale, the words that turn a request down; with a decline, the intent's grant phrases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loreguard.schemas.npc import IntentSpec, Ware
from loreguard.schemas.output import EmitWorldIntentMutation, ParsedOutput, Payment
from loreguard.schemas.prevention import Banned, BannedOpening
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Severity
from loreguard.server.pipeline.turn.deals import Deal
from loreguard.server.pipeline.turn.intents import REFUSALS, describe, refusal
from loreguard.text.numbers import parse_number, read_numbers
from loreguard.text.stock_talk import denied_ware, offers_thing
from loreguard.text.words import contains_run, stem, stems

if TYPE_CHECKING:
    from loreguard.server.pipeline.snapshot import StateSnapshot

DEAL_OUTCOME_RULE = "deal_outcome"
WARE_DENIED_RULE = "ware_denied"
#: What the player asked for that the NPC does not sell, offered anyway ("A torch, love.").
NOT_SOLD_RULE = "not_sold"
#: A money amount about nothing the NPC sells, from an NPC with priced wares (`canonical`).
UNPRICED_WARE_RULE = "unpriced_ware"


#: What the sampler keeps out of a sale: the refusals of more than one word. A single word is
#: kept out while it is half written, and "cannot" or "forbid" would take "can" and "for" with them
#: ("Yes, I can", "the rope for you"); the gate still refuses them whole.
SALE_BANS = tuple(phrase for phrase in REFUSALS if len(stems(phrase)) > 1)


def _failure(rule: str, reason: str, evidence: str) -> GateFailure:
    return GateFailure(gate=GateName.HARD_LIMITS, reason=reason, severity=Severity.HARD, rule_id=rule, evidence=evidence)


def deal_failures(output: ParsedOutput, snapshot: StateSnapshot, *, prefix: bool = False) -> list[GateFailure]:
    """A sale turned down in words, or a ware in stock denied; and, once the whole reply is
    written (not `prefix`: the intent follows the dialogue), a sale the reply does not grant."""
    sales = [deal for deal in snapshot.deals if deal.granted]
    if sales:
        if not prefix and not grants_a_sale(output, sales):  # a backend without the output grammar
            wanted = " or ".join(describe(deal.offer) for deal in sales)
            reason = f'the rules made the sale ({sales[0].reason}): the reply must grant it in "intent": {wanted}'
            return [_failure(DEAL_OUTCOME_RULE, reason, "intent")]
        said_no = refusal(output.dialogue)
        if said_no:
            reason = f'the rules made the sale ({sales[0].reason}), but the reply turns it down ("{said_no}"): say it is done'
            return [_failure(DEAL_OUTCOME_RULE, reason, said_no)]
    offered = next((thing for thing in snapshot.asked_unsold if offers_thing(output.dialogue, thing)), "")
    if offered:
        reason = f"the reply offers {offered}, which {snapshot.npc_name} does not sell: say so instead"
        return [_failure(NOT_SOLD_RULE, reason, offered)]
    short = {str(dict(d.offer.params).get(d.offer.spec.ware_param or "")) for d in snapshot.deals if not d.granted}
    short.update(snapshot.sold_out)
    for spec in snapshot.allowed_intents:
        if not spec.wares:
            continue
        ware = denied_ware(output.dialogue, [w for w in sorted(spec.wares) if w not in short])
        if ware is not None:
            reason = f"the reply says there is no {ware}, which {snapshot.npc_name} sells and has: do not deny it"
            return [_failure(WARE_DENIED_RULE, reason, ware)]
    return []


def declined_problem(m: EmitWorldIntentMutation, deals: tuple[Deal, ...]) -> str:
    """Why the gate does not approve a grant of a request the rules declined, or ""."""
    declined = next((deal for deal in deals if not deal.granted and deal.offer.granted_by(m)), None)
    return f"the rules decline it: {declined.reason}" if declined is not None else ""


def grants_a_sale(output: ParsedOutput, sales: list[Deal]) -> bool:
    """Whether the output grants one of `sales`."""
    granted = [m for m in output.mutations if isinstance(m, EmitWorldIntentMutation)]
    return any(deal.offer.granted_by(m) for m in granted for deal in sales)


def stock_keys(snapshot: StateSnapshot) -> frozenset[str]:
    """The world-state keys counting the NPC's wares: a count in a reply ("two lanterns") is what
    it sells, not what is left, so `grounding` does not hold it to them."""
    return frozenset(w.stock for spec in snapshot.allowed_intents for w in spec.wares.values() if w.stock)


def payment_of(m: EmitWorldIntentMutation, deals: tuple[Deal, ...]) -> Payment | None:
    """What the player pays for the sale `m` grants (None: not a sale the rules made)."""
    return next((deal.payment for deal in deals if deal.granted and deal.offer.granted_by(m)), None)


#: How a sale may not begin: the 1.5B sold a rope as "Sorry, I can only sell one rope.".
SALE_OPENINGS = ("sorry", "i'm sorry", "i am sorry", "i apologize", "unfortunately")


def deal_openings(snapshot: StateSnapshot) -> tuple[BannedOpening, ...]:
    """With a sale the rules made, the openings of a refusal, kept out by the sampler."""
    if not any(deal.granted for deal in snapshot.deals):
        return ()
    return tuple(BannedOpening(rule_id=DEAL_OUTCOME_RULE, words=words) for words in SALE_OPENINGS)


def deal_bans(snapshot: StateSnapshot) -> tuple[Banned, ...]:
    """What the sampler keeps out: with a sale, the words that turn a request down; with only
    declines, the declined intents' grant phrases."""
    if any(deal.granted for deal in snapshot.deals):
        return tuple(Banned(rule_id=DEAL_OUTCOME_RULE, phrase=phrase) for phrase in SALE_BANS)
    declined = sorted({deal.offer.spec.type for deal in snapshot.deals})
    specs = {spec.type: spec for spec in snapshot.allowed_intents}
    return tuple(Banned(rule_id=DEAL_OUTCOME_RULE, phrase=phrase) for kind in declined for phrase in specs[kind].grant_phrases)


#: How many of a ware a reply may price together ("three loaves, 3 copper") where the intent
#: sets no maximum count.
MAX_PRICED_COUNT = 12


def asked_ware(snapshot: StateSnapshot) -> tuple[str, Ware, int] | None:
    """The one ware the player's line names ("How much is a lantern?"), with how many of it may
    be priced together; None when it names none or several."""
    said = set(stems(snapshot.context.said()))
    named = []
    for spec in snapshot.allowed_intents:
        named += [(name, ware, _most(spec)) for name, ware in sorted(spec.wares.items()) if stem(name) in said]
    return named[0] if len(named) == 1 else None


def priced_amounts(snapshot: StateSnapshot) -> frozenset[tuple[float, str]]:
    """The money a reply may name without naming what it prices, as (value, currency word
    stem): the price of the ware the player asks about (for as many as the intent allows), or of
    any ware where the line names none; and what the player's line says it pays."""
    asked = asked_ware(snapshot)
    priced = (
        [asked]
        if asked is not None
        else [(name, ware, _most(spec)) for spec in snapshot.allowed_intents for name, ware in sorted(spec.wares.items())]
    )
    amounts = {(float(ware.price * k), stem(ware.currency)) for _, ware, most in priced for k in range(1, most + 1)}
    # what the player's line pays, and what the prompt told of a decline ("the player has 1 silver")
    for text in (snapshot.context.said(), *(deal.reason for deal in snapshot.deals)):
        for clause in read_numbers(text):
            amounts.update((n.value, stem(n.head)) for n in clause.numbers if n.head)
    return frozenset(amounts)


#: Words that make the player's line ask a price ("How much is a torch?").
PRICE_QUESTION = tuple(stems(p) for p in ("how much", "cost", "costs", "price", "prices", "what do you want for"))


def prices_nothing_named(dialogue: str, snapshot: StateSnapshot) -> bool:
    """Whether a reply that names none of the NPC's wares answers a price question that names
    none either ("How much is a torch?" -> "The torch is 1 copper."): any amount it says prices
    something the NPC does not sell."""
    said = stems(snapshot.context.said())
    if asked_ware(snapshot) is not None or not any(contains_run(said, words) for words in PRICE_QUESTION):
        return False
    wares = {stem(name) for spec in snapshot.allowed_intents for name in spec.wares}
    return not wares.intersection(stems(dialogue))


def _most(spec: IntentSpec) -> int:
    counted = spec.params.get(spec.count_param) if spec.count_param else None
    return max(int(counted.maximum), 1) if counted is not None and counted.maximum is not None else MAX_PRICED_COUNT


def is_priced(stated: str, snapshot: StateSnapshot) -> bool:
    """Whether an amount of money a reply states ("five silver") is one it may name."""
    parsed = parse_number(stated)
    return parsed is not None and (parsed[0], stem(parsed[1])) in priced_amounts(snapshot)
