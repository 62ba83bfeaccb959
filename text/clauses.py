"""A reply as the claim checker reads it: clauses of words, with what makes a clause no assertion.

Pure and deterministic. A clause is the text between `.`, `!`, `?`, `;` and line breaks, as the
one normaliser's words (`loreguard.schemas.text.norm_words`), their singulars, and which words
were written with a capital letter (a name: "Edward", not "edward"; the first word of a clause
counts too, and each check decides what a capital at the start means).

What a clause says is not always what the NPC vouches for. Decided here, for every claim form:

- a question asserts nothing ("Is the king named Edward?");
- a condition or a wish asserts nothing ("If the gate stayed open all night...");
- a reported rumour asserts nothing: "They say the king is Edward", "I heard the gate never
  closes", "Rumour has it ...". Gossip is part of a world, and the NPC does not vouch for it;
- a denying frame negates what follows it: "It is not true that the king is named Arthur" says
  the king is *not* Arthur.

Pronouns: a clause that opens with "he", "she", "it", "they" or a possessive ("his name is Bob")
is read as being about a claim's subject when the clause just before it in the reply names that
subject, or, for the reply's first clause, when the last clause of the player's line does ("Who
is the king?" -> "His name is Bob"). That clause must name the subject itself, not as a
possessive ("Who is the king's wife?"), and no other person ("The king has a son. He is
Edward."). Nothing further back is an antecedent: "The captain? He is Marcus." is not about the
king.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from loreguard.schemas.text import norm_words
from loreguard.text.words import stem

#: A clause and what ends it.
_CLAUSE = re.compile(r"([^.!?;\n]+)([.!?;\n]*)")
_CHUNK = re.compile(r"\S+")

#: Words before a claim's subject that make the clause no assertion: a condition or a wish.
CONDITIONS = frozenset("if unless whether suppose supposing imagine wish hope".split())
#: Phrases before a claim's subject that report what others say rather than assert it.
RUMOURS: tuple[tuple[str, ...], ...] = tuple(
    tuple(p.split())
    for p in (
        "they say", "some say", "people say", "folk say", "folks say", "others say", "men say", "some claim",
        "they claim", "they tell", "people tell", "rumour", "rumours", "rumor", "rumors", "i heard", "i ve heard",
        "i have heard", "heard that", "word is", "it is said", "it s said", "legend", "legends", "the story goes",
        "gossip", "gossips", "whisper", "whispers", "some believe", "they believe",
    )
)  # fmt: skip
#: Phrases before a claim's subject that deny what follows them.
DENYING_FRAMES: tuple[tuple[str, ...], ...] = tuple(
    tuple(p.split())
    for p in (
        "not true", "isn t true", "is no truth", "untrue", "not the case", "a lie", "lies that", "false that",
        "nonsense that", "wrong that", "never true",
    )
)  # fmt: skip
#: Words a pronoun-led clause may open with before its pronoun.
_OPENERS = frozenset("yes no aye nay well oh ah and but so sure indeed now why of course".split())
#: Pronouns that stand for a subject named just before, and possessives ("his name is ...").
PRONOUNS = frozenset("he she it they his her its their".split())


@dataclass(frozen=True, slots=True)
class Clause:
    tokens: tuple[str, ...]
    stems: tuple[str, ...]
    #: Per word: written with a capital letter.
    capital: tuple[bool, ...]
    question: bool
    #: Indices of the words that open a new phrase inside the clause (after a comma, colon or
    #: dash): a negation does not reach across one ("The gate won't wait, it closes at dusk.").
    breaks: frozenset[int] = frozenset()

    def phrase_start(self, at: int) -> int:
        """Where the phrase holding word `at` starts."""
        return max((b for b in self.breaks if b <= at), default=0)


_PHRASE_ENDS = ",:;\u2013\u2014"


def _marks(text: str, tokens: tuple[str, ...]) -> tuple[tuple[bool, ...], frozenset[int]]:
    """Which of `tokens` (the normalised words of `text`) were capitalised, and which open a
    phrase; none of either when the words of `text`, taken chunk by chunk, do not line up with
    them (spaced-out letters)."""
    flags: list[bool] = []
    breaks: set[int] = set()
    for chunk in _CHUNK.findall(text):
        words = norm_words(chunk)
        if not words:
            if chunk[-1] in _PHRASE_ENDS or chunk in ("-", "--"):
                breaks.add(len(flags))
            continue
        first = next((ch for ch in chunk if ch.isalpha()), "")
        flags.append(first.isupper())
        flags.extend(False for _ in words[1:])  # the "s" of "Edward's", the "t" of "isn't"
        if chunk[-1] in _PHRASE_ENDS:
            breaks.add(len(flags))
    if len(flags) != len(tokens):
        return (False,) * len(tokens), frozenset()
    return tuple(flags), frozenset(b for b in breaks if 0 < b < len(tokens))


@lru_cache(maxsize=2048)
def split_clauses(text: str) -> tuple[tuple[Clause, ...], frozenset[str]]:
    """Each clause of `text`, and every singular it holds (a text without every word of a
    subject cannot be about it)."""
    out = []
    seen: set[str] = set()
    for match in _CLAUSE.finditer(text):
        tokens = norm_words(match.group(1))
        if tokens:
            stems = tuple(stem(t) for t in tokens)
            seen.update(stems)
            capital, breaks = _marks(match.group(1), tokens)
            out.append(Clause(tokens, stems, capital, "?" in match.group(2), breaks))
    return tuple(out), frozenset(seen)


@lru_cache(maxsize=4096)
def _hedge_at(tokens: tuple[str, ...]) -> int:
    """Where the first condition, wish or rumour of a clause stands; its length when none does.
    Memoised per clause: the checks ask for every subject mention and capitalised word."""
    for i, token in enumerate(tokens):
        if token in CONDITIONS or any(tokens[i : i + len(r)] == r for r in RUMOURS if r[0] == token):
            return i
    return len(tokens)


#: Words that may stand between a denying frame's "that" and the subject ("that the king").
_FRAME_GAP = frozenset("that the a an our your his her their this".split())


@lru_cache(maxsize=4096)
def _denial_ends(tokens: tuple[str, ...]) -> tuple[int, ...]:
    """Where each denying frame of a clause ends, with its "that" ("it is not true that")."""
    ends = []
    for i in range(len(tokens)):
        for frame in DENYING_FRAMES:
            if tokens[i : i + len(frame)] == frame:
                end = i + len(frame)
                if frame[-1] == "that" or tokens[end : end + 1] == ("that",):
                    ends.append(end)
    return tuple(sorted(set(ends)))


def not_vouched(clause: Clause, upto: int) -> bool:
    """Whether the words before index `upto` make the clause no assertion of what follows: it
    is a question, a condition or wish, or a reported rumour."""
    return clause.question or _hedge_at(clause.tokens) < upto


def denied(clause: Clause, upto: int) -> bool:
    """Whether a denying frame ("it is not true that") leads straight to index `upto`: only
    "that" and a determiner may stand between. "Not true, the gate closes at dusk." corrects the
    player; it denies nothing that follows."""
    tokens = clause.tokens
    return any(end <= upto and _FRAME_GAP.issuperset(tokens[end:upto]) for end in _denial_ends(tokens))


def names(stems: tuple[str, ...], subjects: tuple[tuple[str, ...], ...]) -> bool:
    """Whether `stems` hold one of `subjects` (each a tuple of singulars)."""
    return bool(subject_spans(stems, subjects))


def _pronoun_at(clause: Clause) -> int | None:
    """Where the pronoun a clause opens with stands, or None."""
    for i, token in enumerate(clause.tokens[:4]):
        if token in PRONOUNS:
            return i
        if token not in _OPENERS:
            return None
    return None


#: People a clause may name besides a claim's subject: a pronoun after it may be about them
#: ("The king has a son. He is Edward.").
OTHER_PEOPLE = frozenset(
    "wife husband son daughter brother sister mother father uncle aunt cousin nephew niece widow friend "
    "servant child heir captain guard merchant man woman boy girl smith priest queen prince princess "
    "knight lord lady soldier stranger traveller farmer miller baker steward".split()
)


def antecedent(clause: Clause, subjects: tuple[tuple[str, ...], ...]) -> bool:
    """Whether a pronoun in the clause after this one can only be about one of `subjects`: the
    clause names it, not as a possessive ("the king's wife"), and names no other person."""
    found = False
    for _, end in subject_spans(clause.stems, subjects):
        if clause.tokens[end : end + 1] == ("s",):
            return False
        found = True
    if not found:
        return False
    others = OTHER_PEOPLE.difference(*(set(s) for s in subjects))
    return not others.intersection(clause.stems)


def resolve_pronouns(
    clauses: tuple[Clause, ...], subjects: tuple[tuple[str, ...], ...], context_names: bool
) -> tuple[Clause, ...]:
    """`clauses` with each opening pronoun whose antecedent is one of `subjects` replaced by
    the subject's words (see the module's docstring); `context_names`: the last clause of the
    player's line is such an antecedent. The clauses come back unchanged (the same tuple) when
    there is nothing to do."""
    if not subjects:
        return clauses
    out: list[Clause] = []
    changed = False
    before = context_names
    for clause in clauses:
        at = None if names(clause.stems, subjects) or not before else _pronoun_at(clause)
        if at is None:
            out.append(clause)
            before = antecedent(clause, subjects)
            continue
        subject = subjects[0]
        tokens = clause.tokens[:at] + subject + clause.tokens[at + 1 :]
        stems = clause.stems[:at] + subject + clause.stems[at + 1 :]
        capital = clause.capital[:at] + (False,) * len(subject) + clause.capital[at + 1 :]
        shift = len(subject) - 1
        breaks = frozenset(b + shift if b > at else b for b in clause.breaks)
        out.append(Clause(tokens, stems, capital, clause.question, breaks))
        changed = True
        before = True
    return tuple(out) if changed else clauses


def subject_spans(stems: tuple[str, ...], subjects: tuple[tuple[str, ...], ...]) -> list[tuple[int, int]]:
    """Where each mention of a subject starts and ends in the clause, in order."""
    spans = set()
    for subject in subjects:
        n = len(subject)
        for i in range(len(stems) - n + 1):
            if stems[i : i + n] == subject:
                spans.add((i, i + n))
    return sorted(spans)
