"""Deals the rules decide: whether a request is granted, from the designer's data and the
game's state, never from the model's mood.

For an intent the designer gives to the rules (`IntentSpec.decided_by`), each alternative the
player's line asks for (`intents.requested_offers`) is granted or declined here:

1. a rule in force that forbids the intent, or a request worded in terms a rule forbids
   ("for free"), declines it;
2. every `requires` world-state key must hold its value ("alarm": false);
3. a ware must be in stock (`Ware.stock`, as the game reports it), as many as asked;
4. the player must be able to pay: the purse the game reports (`Economy.purse`), or, only where
   the world allows it and the game reports no purse, the money the line hands over.

A granted request is offered as `decided` (the output grammar then admits only it, and the
approved intent carries its `Payment`); a declined one is offered no more. The prompt tells the
model the outcome and why (`prompt`), the sampler keeps out the words that would contradict it,
and the gate refuses a reply that does (`gate.deals`). Pure: the same line, profile and state
give the same deals, in the order the table lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from loreguard.memory.memo import IdentityMemo
from loreguard.schemas.base import FrozenModel, JsonScalar
from loreguard.schemas.memory import CanonicalFact, Claim, value_text
from loreguard.schemas.npc import Decider, Economy, IntentSpec
from loreguard.schemas.output import Payment, WorldIntent
from loreguard.schemas.receipt import DealRecord
from loreguard.server.pipeline.turn.intents import IntentTable, OfferedIntent, requested_offers
from loreguard.text.asking import asking_sentences, receives
from loreguard.text.money import money_named, money_text
from loreguard.text.stock_talk import asked_thing

#: What introduces a ware's price in a reply the canonical gate reads ("a rope costs 5 silver").
#: Singular only: "two ropes cost 4 silver" is a total, which `grounding` leaves alone.
PRICE_CUES = ("costs", "is priced at", "sells for", "goes for")


def ware_facts(name: str, specs: tuple[IntentSpec, ...]) -> tuple[CanonicalFact, ...]:
    """What the NPC sells, at what price, and nothing else, as a canonical fact per intent with
    wares: the prompt's facts state it, and a reply that prices a ware otherwise contradicts it.
    Memoised per tuple of specs (the profile's, the same every interaction)."""
    return _WARE_FACTS.get(specs, lambda: tuple(_ware_fact(name, spec) for spec in specs if spec.wares))


_WARE_FACTS: IdentityMemo[tuple[CanonicalFact, ...]] = IdentityMemo(maxsize=256)


def _ware_fact(name: str, spec: IntentSpec) -> CanonicalFact:
    priced = [(ware, spec.wares[ware]) for ware in sorted(spec.wares)]
    told = [f"{ware} at {w.price} {w.currency}" for ware, w in priced]
    listed = told[0] if len(told) == 1 else ", ".join(told[:-1]) + f" and {told[-1]}"
    claims = [Claim(subject=ware, attribute="price", value=f"{w.price} {w.currency}", cues=PRICE_CUES) for ware, w in priced]
    return CanonicalFact(id=f"wares.{spec.type}", text=f"{name} sells {listed} each, and nothing else.", claims=tuple(claims))


class Deal(FrozenModel):
    """One decided request: the offer, the outcome, why, and what a sale costs."""

    offer: OfferedIntent
    granted: bool
    reason: str
    payment: Payment | None = None

    def granted_intent(self) -> WorldIntent:
        """The intent the game gets for this sale, with what it costs the player."""
        return WorldIntent(type=self.offer.spec.type, params=dict(self.offer.params), payment=self.payment)

    def record(self) -> DealRecord:
        return DealRecord(intent=self.offer.intent(), granted=self.granted, reason=self.reason)

    @property
    def item(self) -> str:
        """What is asked for, as the prompt says it: "1 rope", or the intent's name."""
        return _item(self.offer)


def _item(offer: OfferedIntent) -> str:
    spec, params = offer.spec, dict(offer.params)
    ware = params.get(spec.ware_param) if spec.ware_param else None
    if ware is None:
        return spec.type.replace("_", " ")
    count, priced = _count(params, spec), spec.wares.get(str(ware))
    if count == 1:
        return f"{count} {ware}"
    return f"{count} {priced.plural if priced is not None and priced.plural else f'{ware}s'}"


class DealTable(FrozenModel):
    """The turn's table once the rules decided their requests."""

    table: IntentTable
    deals: tuple[Deal, ...] = ()
    #: What the line asks for that the NPC does not sell (`asked_unsold`).
    asked_unsold: tuple[str, ...] = ()
    #: The wares the game reports gone (`sold_out`).
    sold_out: tuple[str, ...] = ()

    def snapshot_fields(self) -> dict[str, object]:
        """The `StateSnapshot` fields this table fills."""
        return {
            "offered_intents": self.table.offered,
            "refused_requests": self.table.refused,
            "deals": self.deals,
            "sold_out": self.sold_out,
            "asked_unsold": self.asked_unsold,
        }


def decide(
    table: IntentTable,
    specs: Sequence[IntentSpec],
    asked: str,
    state: Mapping[str, JsonScalar],
    economy: Economy,
    forbidding: Mapping[str, str],
) -> DealTable:
    """The table with every request of a rules-decided intent decided. `asked`: the player's
    words; `state`: the merged world state; `forbidding`: intent type -> why a rule in force
    forbids it, in words (`forbidden_now`)."""
    deals: list[Deal] = []
    for spec in sorted(specs, key=lambda s: s.type):
        if spec.decided_by is not Decider.RULES:
            continue
        if spec.type in forbidding:  # the table leaves out what a rule forbids: read the line for it
            reason = forbidding[spec.type]
            deals += [Deal(offer=offer, granted=False, reason=reason) for offer in requested_offers(spec, asked)]
            continue
        for r in table.refused:
            if r.offer.spec.type == spec.type:
                reason = f'the player asks for it "{r.phrase}", which rule {r.rule_id} forbids'
                deals.append(Deal(offer=r.offer, granted=False, reason=reason))
        asked_for = [o for o in table.offered if o.spec.type == spec.type and o.requested]
        deals += [_decide(offer, asked, state, economy) for offer in asked_for]
    read = {"asked_unsold": asked_unsold(specs, asked), "sold_out": sold_out(specs, state)}
    if not deals:
        return DealTable(table=table, **read)
    decided = {deal.offer.spec.type for deal in deals}
    granted = [deal.offer.model_copy(update={"decided": True}) for deal in deals if deal.granted]
    kept = [offer for offer in table.offered if offer.spec.type not in decided]
    offered = tuple(sorted((*kept, *granted), key=lambda o: o.spec.type))  # stable: the table's order is by type
    return DealTable(table=table.model_copy(update={"offered": offered}), deals=tuple(deals), **read)


def forbidden_now(rule_id: str, text: str) -> str:
    """A declined request's reason when a rule in force forbids it, as the model is told it and
    the game's log shows it: the rule's own words, and its id for the designer."""
    return f"never {text} (rule {rule_id} is in force)" if text else f"rule {rule_id} forbids it now"


def _decide(offer: OfferedIntent, asked: str, state: Mapping[str, JsonScalar], economy: Economy) -> Deal:
    spec, params = offer.spec, dict(offer.params)
    for key, wanted in sorted(spec.requires.items()):
        if key not in state or state[key] != wanted:
            return Deal(offer=offer, granted=False, reason=spec.requires_words.get(key) or f"{key} is not {value_text(wanted)}")
    item = str(params.get(spec.ware_param or ""))
    ware = spec.wares.get(item)
    if ware is None:
        return Deal(offer=offer, granted=True, reason=f"{spec.type} is granted: every condition holds")
    count = _count(params, spec)
    if ware.stock is not None:
        left = _number(state.get(ware.stock))
        if left is None or left < count:
            have = "none left" if not left else f"only {int(left)} left"
            return Deal(offer=offer, granted=False, reason=f"you have {have} of {item}")
    amount = ware.price * count
    worth = economy.currencies.get(ware.currency)
    if worth is None:
        return Deal(offer=offer, granted=False, reason=f"{ware.currency} is not one of the world's currencies")
    payment = Payment(amount=amount, currency=ware.currency, value=amount * worth)
    sale = f"{_item(offer)} for {amount} {ware.currency}"
    purse = _number(state.get(economy.purse))
    if purse is not None:
        paid, whose = int(purse), "the player has"
    elif economy.payment_in_words:
        paid, whose = money_named(asked, economy.currencies), "the player hands over"
    else:
        return Deal(offer=offer, granted=False, reason=f"the game reports no purse ({economy.purse}) to pay for {sale}")
    if paid < payment.value:
        have = money_text(paid, economy.currencies)
        return Deal(offer=offer, granted=False, reason=f"{whose} {have}, and {sale.replace(' for ', ' cost ', 1)}")
    return Deal(offer=offer, granted=True, reason=f"sells {sale}", payment=payment)


def asked_unsold(specs: Iterable[IntentSpec], asked: str) -> tuple[str, ...]:
    """What the player's line asks an NPC with wares for that it does not sell ("Can you give me
    a torch?" -> torch), stemmed: a reply must not offer it (`gate.deals`)."""
    things: set[str | None] = set()
    for spec in specs:
        if spec.wares and receives(spec):
            things.update(asked_thing(a.words, spec.wares) for a in asking_sentences(asked, spec))
    return tuple(sorted(thing for thing in things if thing is not None))


def sold_out(specs: Iterable[IntentSpec], state: Mapping[str, JsonScalar]) -> tuple[str, ...]:
    """The wares whose stock key the game reports below one, by name."""
    gone = set()
    for spec in specs:
        for name, ware in spec.wares.items():
            left = _number(state.get(ware.stock)) if ware.stock else None
            if left is not None and left < 1:
                gone.add(name)
    return tuple(sorted(gone))


def _count(params: Mapping[str, JsonScalar], spec: IntentSpec) -> int:
    value = params.get(spec.count_param) if spec.count_param else None
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1


def _number(value: JsonScalar | None) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
