"""Form 4 of the claim checker: a name said of a claim's subject (`loreguard.memory.claims`).

For a claim whose attribute is `name` (king.name = Arthur), a clause gives the subject another
name or makes it another person in the ways a model writes it:

- a copula and another name or a person: "the king is Bob", "the king has become Edward", "the
  king of Eldmoor is the captain's wife" (someone's kin or household, `PERSON_NOUNS`, named by
  what they are: "the king is Edward's father" or "my brother" says whose kin he is, not who);
- the subject as a title before another name: "King Edward", "the river Thames";
- a name and the subject side by side, set off by commas: "Edward, king of Eldmoor!", "the
  king, Edward, is kind" (not "Edward, the king is Arthur", which speaks to Edward);
- another name first, then a copula and the subject ("Edward is the king"), or one of the
  claim's `role_cues` ("Edward rules", "Edward rules here"; a one-word cue before an object,
  "Marcus rules the guard", is about something else).

A name is a run of capitalised words (`Clause.capital`) that are no pronoun, article or title of
someone else ("Queen Edwina rules the south" is about a queen); a title before it goes ("King
Arthur" is Arthur) and part of the canonical name is the name ("Arthur" for "Arthur
Pendragon"). "The king is a kind man" gives no name; "Brom is the king's man" is about the
king's man; "the old king was Uther" is about another king. A negation denies the name ("the king was
never Edward" is consistent, "Arthur is not the king" contradicts). Pure and deterministic.
"""

from __future__ import annotations

from typing import Protocol

from loreguard.text.clauses import Clause, denied, not_vouched, subject_spans
from loreguard.text.negation import DENIALS


class NameClaim(Protocol):
    """What form 4 reads of a compiled claim."""

    subjects: tuple[tuple[str, ...], ...]
    values: tuple[tuple[str, ...], ...]
    roles: tuple[tuple[str, ...], ...]

    def is_value(self, words: tuple[str, ...]) -> bool: ...


#: The attribute whose claims are names, checked in the name forms too (form 4).
NAME_ATTRIBUTE = "name"
#: Words that join a subject to what it is ("the king is", "the king will be", "has become").
#: Not the "s" of "the king's": "the King's Road" is a road.
COPULAS = frozenset({"is", "was", "be", "remains", "become", "becomes", "became"})
#: Words that may stand between a copula and the value without changing it.
FILLERS = frozenset(
    {"now", "still", "really", "truly", "actually", "indeed", "currently", "surely", "will", "has", "have", "had"}
)
#: Determiners of a person a name claim may be given ("my brother", "the captain's wife").
DETERMINERS = frozenset({"the", "my", "your", "his", "her", "our", "their"})
#: Words that say the subject is the one in office, between a name and its role: "Edward is the
#: current king", "the rightful king", "the new king".
STANDING = frozenset({"current", "present", "reigning", "rightful", "true", "real", "new", "only", "sole"})
#: People a name may be said to be instead: kin and household ("the captain's wife").
PERSON_NOUNS = frozenset(
    "wife husband son daughter brother sister mother father uncle aunt cousin nephew niece widow "
    "friend servant mistress lover child heir bastard".split()
)
#: Capitalised words that are no name: pronouns, articles, words that open a sentence.
NOT_NAMES = frozenset(
    "i he she it they we you who what which where when why how nobody noone none everyone someone "
    "anyone everybody somebody anybody this that these those there here the a an one no yes aye "
    "nay well oh ah and but so our my your his her its their sir madam ok okay".split()
)
#: Words before a subject that make it another one than the claim's: "the old king was Uther".
OTHER_ONE = frozenset("old late former previous dead last first".split())
#: Words that may follow a one-word role cue when it is about the realm ("Edward rules here",
#: "rules from the castle"); anything else makes it about something else ("rules the guard").
ROLE_FOLLOWERS = frozenset("here now today still well wisely justly us over from in at all everyone everything alone".split())
#: Titles a name run may open with that make it another person than the subject ("Queen Edwina").
TITLES = frozenset(
    "queen king prince princess lord lady duke duchess baron baroness sir dame captain count "
    "countess earl master mistress father mother brother sister".split()
)


#: Words that call out to someone before a comma, capitalised at a clause's start and no name:
#: "Hail, the king of Eldmoor!".
CALLS = frozenset(
    "hail hello greetings welcome praise thanks thank behold lo hark look listen alas ho sire majesty "
    "long god gods glory cheers please pardon sorry mercy".split()
)


def _name_run(clause: Clause, at: int) -> int:
    """Where a run of capitalised words (a name, at most three) starting at `at` ends; `at` when
    none starts there."""
    end = at
    while end < len(clause.tokens) and end - at < 3 and clause.capital[end] and clause.tokens[end] not in NOT_NAMES:
        end += 1
    return end


def _person(tokens: tuple[str, ...], at: int, capital: tuple[bool, ...]) -> int:
    """Where a person a name may be said to be ends, starting at `at`: "the captain's wife"
    (someone's kin, named by what they are); `at` when none does. "Edward's father" or "my
    brother" says whose kin the subject is, not who: no other name."""
    if tokens[at : at + 1] != ("the",):
        return at
    for i in range(at + 2, min(len(tokens) - 1, at + 4)):
        if tokens[i] == "s" and tokens[i + 1] in PERSON_NOUNS and not any(capital[at + 1 : i]):
            return i + 2
    return at


def _verdict(compiled: NameClaim, value: tuple[str, ...], negated: bool) -> tuple[str, bool] | None:
    """A name said of the subject: a contradiction when it is another one (and not denied), or
    the canonical one denied. A title before it goes ("King Arthur" is Arthur), and part of the
    canonical name is the name ("Arthur" for "Arthur Pendragon")."""
    while len(value) > 1 and value[0] in TITLES:
        value = value[1:]
    if compiled.is_value(value) or _part_of_value(compiled, value):
        return (" ".join(value), True) if negated else None
    if value and value[0] in TITLES:
        return None  # a title alone ("the king is Lord of all"): no name
    return None if negated else (" ".join(value).replace(" s ", "'s "), False)


def _part_of_value(compiled: NameClaim, value: tuple[str, ...]) -> bool:
    return any(set(value) <= set(v) for v in compiled.values)


def _after_copula(tokens: tuple[str, ...], at: int) -> tuple[int, bool] | None:
    """Where the value starts after "is", "is not", "will now be" at `at`, and whether it is
    negated; None when no copula stands there."""
    negated, seen_copula = False, False
    while at < len(tokens):
        word = tokens[at]
        if word in COPULAS:
            seen_copula = True
        elif word in DENIALS or word == "t":
            negated = True
        elif word not in FILLERS:
            break
        at += 1
    return (at, negated) if seen_copula else None


def contradicted_name(clause: Clause, compiled: NameClaim) -> tuple[str, bool] | None:
    """Another name or a person given to the subject of a name claim (see the module's
    docstring), as (asserted, negated); None when the clause gives none."""
    tokens, capital = clause.tokens, clause.capital
    for start, end in subject_spans(clause.stems, compiled.subjects):
        if not_vouched(clause, start):
            return None
        if start and tokens[start - 1] in OTHER_ONE:
            continue  # "the old king was Uther": another king
        flip = denied(clause, start)
        # in apposition: "the king, Edward, is kind", "our king, Edward."
        run = _name_run(clause, end) if end in clause.breaks else end
        if run > end and (run >= len(tokens) or run in clause.breaks):
            return _verdict(compiled, tokens[end:run], flip)
        # the subject as a title: "King Edward", "the river Thames"
        run = _name_run(clause, end) if end < len(tokens) and capital[end] else end
        if run > end and (run >= len(tokens) or tokens[run] != "s"):
            # "there's no King Edward": a negation just before the title denies the name
            negated = bool(DENIALS.intersection(tokens[max(0, start - 3) : start]))
            return _verdict(compiled, tokens[end:run], negated != flip)
        # "the king (of Eldmoor) is ...": another name, or a person
        at = end + 2 if tokens[end : end + 1] == ("of",) else end
        at += 1 if at < len(tokens) and capital[at] and at > end else 0
        copula = _after_copula(tokens, at)
        if copula is None:
            continue
        at, negated = copula
        negated ^= flip
        if compiled.is_value(tokens[at:]):
            return _verdict(compiled, next(v for v in compiled.values if tokens[at : at + len(v)] == v), negated)
        run = _name_run(clause, at)
        if run > at and tokens[run : run + 1] != ("s",):
            return _verdict(compiled, tokens[at:run], negated)
        person = _person(tokens, at, capital)
        if person > at and not compiled.is_value(tokens[at:]):
            return _verdict(compiled, tokens[at:person], negated)
    return _name_first(clause, compiled)


def _name_first(clause: Clause, compiled: NameClaim) -> tuple[str, bool] | None:
    """Form 4, name first: "Edward is the king", "Edward rules" (a role cue)."""
    tokens, capital = clause.tokens, clause.capital
    for i in range(len(tokens)):
        if not capital[i] or (i and capital[i - 1]) or tokens[i] in TITLES or tokens[i] in NOT_NAMES:
            continue
        run = _name_run(clause, i)
        if run == i or not_vouched(clause, i):
            continue
        name = tokens[i:run]
        if run in clause.breaks and not set(name) & CALLS and _appositive_subject(clause, compiled, run):
            return _verdict(compiled, name, denied(clause, i))  # "Edward, king of Eldmoor!"
        role = next((r for r in compiled.roles if tokens[run : run + len(r)] == r), None)
        if role is not None and _about_the_realm(clause, run + len(role), one_word=len(role) == 1):
            return _verdict(compiled, name, denied(clause, i))
        copula = _after_copula(tokens, run)
        if copula is None:
            continue
        at, negated = copula
        while at < len(tokens) and (tokens[at] in DETERMINERS or tokens[at] in STANDING):
            at += 1  # "Edward is the current king": the 1.5B's merchant, agreeing with the player
        stems = clause.stems
        for subject in compiled.subjects:
            after = at + len(subject)
            if stems[at:after] == subject and tokens[after : after + 1] != ("s",):
                return _verdict(compiled, name, negated != denied(clause, i))
    return None


def _appositive_subject(clause: Clause, compiled: NameClaim, at: int) -> bool:
    """Whether the phrase opening at `at` is only the subject ("king of Eldmoor", "the king"),
    set beside a name: no verb after it makes it a sentence of its own ("Edward, the king is
    Arthur" speaks to Edward)."""
    tokens, stems = clause.tokens, clause.stems
    while at < len(tokens) and tokens[at] in DETERMINERS:
        at += 1
    for subject in compiled.subjects:
        after = at + len(subject)
        if stems[at:after] != subject or tokens[after : after + 1] == ("s",):
            continue
        if tokens[after : after + 1] == ("of",):
            after = _name_run(clause, after + 1) if after + 1 < len(tokens) and clause.capital[after + 1] else after + 2
        if after >= len(tokens) or after in clause.breaks:
            return True
    return False


def _about_the_realm(clause: Clause, after: int, *, one_word: bool) -> bool:
    """Whether a role cue ending at `after` is said of the subject's place: a longer cue always
    ("sits on the throne"), a one-word cue ("rules") at the end of its phrase or before a word of
    `ROLE_FOLLOWERS` ("Edward rules here"), not before an object ("Marcus rules the guard")."""
    tokens = clause.tokens
    return not one_word or after >= len(tokens) or after in clause.breaks or tokens[after] in ROLE_FOLLOWERS
