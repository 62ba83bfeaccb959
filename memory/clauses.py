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
subject, or, for the reply's first clause, when the player's line does ("Who is the king?" ->
"His name is Bob"). Nothing further back is an antecedent: "The captain? He is Marcus." is not
about the king.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from loreguard.schemas.text import norm_words, stem

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
#: Words that negate what follows them in a clause ("is not named", "doesn't close").
NEGATING_WORDS = frozenset({"not", "never", "isn", "wasn", "aren", "no", "doesn", "don", "didn", "won", "cannot"})
#: Pronouns that stand for a subject named just before, and possessives ("his name is ...").
PRONOUNS = frozenset("he she it they his her its their".split())


@dataclass(frozen=True, slots=True)
class Clause:
    tokens: tuple[str, ...]
    stems: tuple[str, ...]
    #: Per word: written with a capital letter.
    capital: tuple[bool, ...]
    question: bool


def _capitals(text: str, tokens: tuple[str, ...]) -> tuple[bool, ...]:
    """Which of `tokens` (the normalised words of `text`) were capitalised; all False when the
    words of `text`, taken chunk by chunk, do not line up with them (spaced-out letters)."""
    flags: list[bool] = []
    for chunk in _CHUNK.findall(text):
        words = norm_words(chunk)
        first = next((ch for ch in chunk if ch.isalpha()), "")
        flags.append(first.isupper())
        flags.extend(False for _ in words[1:])  # the "s" of "Edward's", the "t" of "isn't"
        if not words:
            flags.pop()
    return tuple(flags) if len(flags) == len(tokens) else (False,) * len(tokens)


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
            out.append(Clause(tokens, stems, _capitals(match.group(1), tokens), "?" in match.group(2)))
    return tuple(out), frozenset(seen)


def _holds(tokens: tuple[str, ...], phrase: tuple[str, ...], limit: int) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(max(0, limit - n + 1)))


def not_vouched(clause: Clause, upto: int) -> bool:
    """Whether the words before index `upto` make the clause no assertion of what follows: it
    is a question, a condition or wish, or a reported rumour."""
    if clause.question:
        return True
    before = clause.tokens[:upto]
    if CONDITIONS.intersection(before):
        return True
    return any(_holds(before, rumour, upto) for rumour in RUMOURS)


def denied(clause: Clause, upto: int) -> bool:
    """Whether a denying frame ("it is not true that") stands before index `upto`."""
    return any(_holds(clause.tokens, frame, upto) for frame in DENYING_FRAMES)


def names(stems: tuple[str, ...], subjects: tuple[tuple[str, ...], ...]) -> bool:
    """Whether `stems` hold one of `subjects` (each a tuple of singulars)."""
    for subject in subjects:
        n = len(subject)
        for i in range(len(stems) - n + 1):
            if stems[i : i + n] == subject:
                return True
    return False


def _pronoun_at(clause: Clause) -> int | None:
    """Where the pronoun a clause opens with stands, or None."""
    for i, token in enumerate(clause.tokens[:4]):
        if token in PRONOUNS:
            return i
        if token not in _OPENERS:
            return None
    return None


def resolve_pronouns(
    clauses: tuple[Clause, ...], subjects: tuple[tuple[str, ...], ...], context_names: bool
) -> tuple[Clause, ...]:
    """`clauses` with each opening pronoun whose antecedent is one of `subjects` replaced by
    the subject's words (see the module's docstring); `context_names`: the player's line names
    a subject. The clauses come back unchanged (the same tuple) when there is nothing to do."""
    if not subjects:
        return clauses
    out: list[Clause] = []
    changed = False
    before_names = context_names
    for clause in clauses:
        here_names = names(clause.stems, subjects)
        at = None if here_names or not before_names else _pronoun_at(clause)
        if at is None:
            out.append(clause)
        else:
            subject = subjects[0]
            tokens = clause.tokens[:at] + subject + clause.tokens[at + 1 :]
            stems = clause.stems[:at] + subject + clause.stems[at + 1 :]
            capital = clause.capital[:at] + (False,) * len(subject) + clause.capital[at + 1 :]
            out.append(Clause(tokens, stems, capital, clause.question))
            changed = True
            here_names = True
        before_names = here_names
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
