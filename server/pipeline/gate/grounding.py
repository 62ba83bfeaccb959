"""Numbers in dialogue against the values the prompt carried (part of the canonical gate).

A trader whose world state says `price.sword: 50` must not say "a sword costs 500 gold". The
values checked are the ones the prompt showed: numeric world-state entries (only when the
contract put world state in the prompt) and canonical claims whose value is a number
("lantern.price = 5 silver"). Each becomes a *subject*: the nouns that name it (`price.sword` ->
"sword"; a claim's subject words) and whether it is money (a key part or claim attribute such as
price, cost, toll; or a currency in the value).

A number in dialogue is read with the word after it (`numbers.read_numbers`) and is about:
* money, when that word is a currency ("500 gold"): the nearest money subject named within
  `WINDOW_WORDS` in the same clause. A money amount that is about no subject is *ungrounded*;
  the NPC's `ungrounded_numbers` setting allows it or flags it (a soft failure);
* the noun it counts ("two guards"): a subject with that noun that is not money (`guards.count`).
  Counting anything else ("two guards" with no such key, "one lantern" next to its price) is
  ordinary talk and never checked;
* nothing in particular, when the clause ends or a small word follows ("it costs 500.",
  "500 for the sword"): the nearest subject named within the window with no person named in
  between ("I held a sword when I was ten" is about the speaker).
A number in a question is asked, not stated, and never checked ("Ten silver? No, dear, 5.").
Times ("at 6", "6 o'clock"), durations and counts of other things ("20 years"), and ordinals
("the first time") are never about a subject. A bare "one" is a pronoun more often than a
number ("the one you want"), so it only counts with a currency or a noun after it.

Limits, honestly: "two swords cost 100 gold" is a total, not a unit price, so a money amount
next to a noun that is itself counted (by anything but one) is not compared. Pronouns ("it costs
500" in a clause that names no sword), values spread over clauses, and arithmetic are not
followed. A count key matched by its noun ("guards.count: 4") is compared with any count of that
noun, even "two guards are at the gate".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from loreguard.memory.memo import IdentityMemo
from loreguard.schemas.base import JsonScalar
from loreguard.schemas.memory import CanonicalFact
from loreguard.schemas.text import words
from loreguard.text.numbers import Clause, Number, parse_number, read_numbers
from loreguard.text.words import stem

WINDOW_WORDS = 6

CURRENCY = frozenset("gold silver copper coin crown mark ducat penny pence shilling florin dollar credit gp sp cp gc".split())
#: Key parts and claim attributes that make a value an amount of money.
MONEY_WORDS = frozenset("price cost fee toll fare wage rate value worth pay bounty reward rent tax fine".split())
#: Key parts that say what is measured, not what it is about (`guards.count`, `stock.rope`).
MEASURE_WORDS = frozenset(
    "count number num amount total qty quantity stock left remaining level age max min current size".split()
)
#: Words after a number that do not say what it counts: the number stands for itself.
SMALL_WORDS = frozenset(
    """a an the and or but for to each apiece of is are was were be been at in on if then now only per with by from that
    this it its you i we they he she me him her them my your our their his so too no not as than there here today
    already altogether even flat tops total all said""".split()
)
#: A person named between a noun and a bare number starts another statement: "I held a sword
#: when I was ten" says nothing about the sword. ("it" usually is the noun: "the sword, it's 50".)
PERSONS = frozenset("i you he she we they me him her us them".split())
#: After these a number is a time of day ("at 6", "until 9"), unless a currency follows it.
TIME_BEFORE = frozenset("at by until till before after around past".split())
TIME_AFTER = frozenset({"o", "oclock", "am", "pm"})


@dataclass(frozen=True)
class Subject:
    """A numeric value the prompt carried, and the words that name it."""

    #: As in the receipt's context keys: `world_state:price.sword`, `canonical:lantern_price`.
    label: str
    #: How a reason names it: the key, or "lantern price".
    name: str
    value: float
    nouns: frozenset[str]
    money: bool


@dataclass(frozen=True)
class NumberProblem:
    """A number that disagrees with its subject (`subject` set), or an ungrounded money amount."""

    stated: str
    subject: Subject | None = None


def _shown(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _nouns(parts: Iterable[str]) -> frozenset[str]:
    stems = [stem(p) for p in parts if p not in SMALL_WORDS]
    named = [s for s in stems if s not in MONEY_WORDS | MEASURE_WORDS | CURRENCY]
    return frozenset(named or stems)


def _numeric(value: JsonScalar) -> tuple[float, str] | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value), ""
    return parse_number(value)


def subjects_in_context(world_state: Iterable[tuple[str, JsonScalar]], canonical: Iterable[CanonicalFact]) -> tuple[Subject, ...]:
    """The numeric values of the prompt's world state and canonical claims, in prompt order."""
    found = []
    for key, raw in world_state:
        number = _numeric(raw)
        if number is None:
            continue
        parts = words(key).split()
        money = bool({stem(p) for p in parts} & (MONEY_WORDS | CURRENCY)) or stem(number[1]) in CURRENCY
        found.append(Subject(label=f"world_state:{key}", name=key, value=number[0], nouns=_nouns(parts), money=money))
    facts = tuple(canonical)
    # The canonical facts change only when the designer registers again: their subjects are
    # memoised on the very fact objects.
    return tuple(found) + _CANONICAL_SUBJECTS.get(facts, lambda: _canonical_subjects(facts))


_CANONICAL_SUBJECTS: IdentityMemo[tuple[Subject, ...]] = IdentityMemo(maxsize=256)


def _canonical_subjects(canonical: Iterable[CanonicalFact]) -> tuple[Subject, ...]:
    found = []
    for fact in canonical:
        for claim in fact.claims:
            number = parse_number(claim.value)
            if number is None:
                continue
            attribute = {stem(p) for p in words(claim.attribute).split()}
            money = bool(attribute & MONEY_WORDS) or stem(number[1]) in CURRENCY
            parts = [p for name in (claim.subject, *claim.subject_aliases) for p in words(name).split()]
            found.append(
                Subject(
                    label=f"canonical:{fact.id}",
                    name=f"{claim.subject} {claim.attribute}",
                    value=number[0],
                    nouns=_nouns(parts),
                    money=money,
                )
            )
    return tuple(found)


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def _about(number: Number, clause: Clause, subjects: tuple[Subject, ...]) -> tuple[str, Subject | None]:
    """What a number is about: ("money" | "count" | "bare" | "other", the subject or None)."""
    head = stem(number.head)
    if head in CURRENCY:
        kind = "money"
    elif number.head in TIME_AFTER or number.before in TIME_BEFORE:
        return "other", None
    elif not number.head or number.head in SMALL_WORDS:
        if number.text == "one":
            return "other", None
        kind = "bare"
    else:
        counted = [s for s in subjects if head in s.nouns and not s.money]
        return "count", (counted[0] if counted else None)
    best: tuple[int, int, Subject] | None = None
    for position, word in enumerate(clause.words):
        if number.start <= position < number.end:
            continue
        distance = number.start - position if position < number.start else position - number.end + 1
        if distance > WINDOW_WORDS:
            continue
        for subject in subjects:
            if stem(word) not in subject.nouns or (kind == "money" and not subject.money):
                continue
            if kind == "bare" and PERSONS.intersection(clause.words[min(position, number.start) : max(position, number.end)]):
                continue
            if best is None or (distance, position) < best[:2]:
                best = (distance, position, subject)
    if best is None:
        return kind, None
    position = best[1]
    if kind == "money" and any(n.end == position and not _same(n.value, 1.0) for n in clause.numbers):
        return "other", None  # "two swords cost 100 gold": a total, not the price of one
    return kind, best[2]


def find_number_problems(text: str, subjects: tuple[Subject, ...]) -> list[NumberProblem]:
    """Numbers in `text` that disagree with their subject, and money amounts about no subject,
    in text order."""
    problems = []
    for clause in read_numbers(text):
        if clause.question:
            continue  # "Ten silver for a lantern? No, it's 5." asks, it does not state
        for number in clause.numbers:
            kind, subject = _about(number, clause, subjects)
            stated = f"{number.text} {number.head}" if kind == "money" else number.text
            if subject is not None:
                if not _same(number.value, subject.value):
                    problems.append(NumberProblem(stated=stated, subject=subject))
            elif kind == "money":
                problems.append(NumberProblem(stated=stated))
    return problems


def describe(problem: NumberProblem) -> str:
    """The reason a gate failure gives, naming the right value so a repair can use it."""
    if problem.subject is None:
        return f"states an amount ({problem.stated}) that nothing in its context gives"
    subject = problem.subject
    return f"{subject.name} is {_shown(subject.value)}, the reply says {problem.stated}"
