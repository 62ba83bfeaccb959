"""Whether the player's line asks for an act, read from what it asks rather than from a phrase
list: the sentences that are requests, and the act's words in them.

Players do not use the designer's words ("unbar the gate", "I need a lantern for the road"), and
the designer's words turn up in lines that ask for nothing ("Who is allowed to open the gate?",
"The captain opened the gate for me yesterday", "I don't need rope"). So a line is read sentence
by sentence, and a sentence is a request by its mood:

- an imperative: it opens (after "please", "oh", a vocative) with a verb ("Unbar the gate");
- a polite question whose verb is the act: "Could you open up?", "Can I have a lantern?",
  "May I pass?", "Would you mind selling me rope?", "Why don't you let me in?";
- a wish: "I need a lantern", "I'd like two ropes", "I'll take the bread", "I must get through";
- a value asked for with "please": "A lantern, please."

Not requests: other questions (who, when, whether, "Do you sell rope?"), reports of the past
("opened", "bought", "yesterday"), negated sentences ("Don't open it", "I won't buy"), and plain
statements. A request names the act: a verb of the intent's family (its type's first word, its
description's, their common synonyms), one of the designer's cues, or for a receiving act
(giving, selling) the wish itself. English only; designers add cues for the phrasings of their
own game. Pure and deterministic: words in, a tuple out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from typing import NamedTuple

from loreguard.schemas.npc import IntentSpec
from loreguard.text.negation import NEGATIONS
from loreguard.text.words import stem, word_tokens

#: Verb families: an intent named after one verb is asked for with any of them. The first word of
#: each family is its name. Words are stemmed, lower case.
ACT_FAMILIES: tuple[tuple[str, ...], ...] = (
    ("open", "unbar", "unlock", "unlatch", "unbolt", "raise", "lift", "swing", "let", "allow", "pass", "enter", "admit",
     "through"),
    ("close", "shut", "bar", "lock", "bolt", "seal", "lower"),
    ("give", "hand", "sell", "spare", "fetch", "bring", "trade", "buy", "purchase", "get", "have", "take", "grab"),
    ("heal", "cure", "mend", "patch", "tend", "bandage"),
    ("follow", "come", "join", "accompany", "escort", "guide", "lead"),
    ("teach", "train", "show", "instruct"),
    ("repair", "fix", "forge", "sharpen"),
)  # fmt: skip
#: Acts in which the player receives something: a wish names them on its own ("I need rope").
RECEIVING = frozenset({"give", "hand", "sell", "trade"})
#: Movement that asks for a way through ("I must get through", "let me pass", "Could I go in?").
_MOVEMENT = frozenset({"through", "in", "into", "inside", "pass", "past", "enter", "out", "by"})
_MOVING = frozenset({"come", "go", "get", "walk", "ride", "head", "step", "slip"})
#: Verbs of talk and manners: "please" with them asks to be told or excused, not given.
_TALK = frozenset("tell say explain describe speak talk answer remind show stop wait listen look leave forgive excuse".split())
_PAYING = frozenset({("here", "s"), ("here", "is"), ("here", "are"), ("take", "this"), ("take", "these")})

_WISH_VERBS = frozenset({"want", "need", "like", "love", "wish", "take", "have", "buy", "get", "purchase", "require"})
#: "I'm asking you to open the gate", "I beg you, let me in".
_ASKING = frozenset({"ask", "asking", "beg", "begging", "request", "requesting", "implore"})
#: Questions that are requests in their shape: "Is there any way you could let me in?", "How
#: about you sell me a rope?", "Mind if I take this rope?". Stemmed.
_POLITE_OPENERS = (
    ("is", "there", "any", "way"), ("any", "chance"), ("is", "it", "possible"), ("would", "it", "be", "possible"),
    ("how", "about"), ("what", "about"), ("mind", "if"), ("do", "you", "mind"), ("do", "you", "think", "you"),
)  # fmt: skip
_WISH_AFTER = frozenset({"d", "ll", "would", "will", "should", "must", "really", "just", "still", "also", "only"})
_SUBJECTS = frozenset({"i", "we"})
_MODALS = frozenset({"could", "can", "would", "will", "may", "might", "shall"})
_ASKED = frozenset({"you", "i", "we", "u"})
_OPENERS = frozenset(
    "please oh ah hey hi hello well ok okay so now then just kindly alright look listen yes yeah aye right "
    "good sir madam ma am friend guard merchant lady master mistress quick quickly come on".split()
)
#: Past forms and time words that make a sentence a report, not a request.
_PAST = frozenset(
    "opened unbarred unlocked closed gave sold bought handed took had got needed wanted liked asked "
    "passed came went did was were yesterday ago earlier last used".split()
)
_WH = frozenset({"who", "whom", "whose", "what", "when", "where", "why", "how", "which", "whether", "if"})
_POLITE_WHY = ("why", "don", "t", "you")
_THE_PLAYER = frozenset({"me", "my", "myself", "us", "our"})
#: Words with which a request points back at what the sentence before named.
_REFERS = frozenset({"one", "it", "some", "them", "that", "those", "these", "this"})
_SENTENCES = re.compile(r"[^.!?;]+[.!?;]*")
_CLAUSES = re.compile(r",|\b(?:so|but|and)\b", re.IGNORECASE)
#: "No, I need a lantern": the "no" answers something else; "No rope for me" refuses.
_ANSWER = re.compile(r"^\s*(?:no|nah|nope)\s*,", re.IGNORECASE)


@cache
def _family(word: str) -> frozenset[str]:
    for family in ACT_FAMILIES:
        if word in family:
            return frozenset(family)
    return frozenset({word})


def act_words(spec: IntentSpec) -> frozenset[str]:
    """The verbs that name this intent's act: its type's first word and its description's, with
    their families ("open_gate": open, unbar, unlock, let, pass ...)."""
    words = {stem(word) for word in word_tokens(spec.type.replace("_", " "))[:1]}
    words |= {stem(word) for word in word_tokens(spec.description)[:1]}
    return frozenset().union(*(_family(word) for word in words)) if words else frozenset()


def object_words(spec: IntentSpec) -> frozenset[str]:
    """What the act is done to, as the intent names it ("open_gate": gate; "heal_player": the
    player, who says "me")."""
    words = frozenset(stem(word) for word in word_tokens(spec.type.replace("_", " "))[1:])
    return words | _THE_PLAYER if "player" in words else words


def receives(spec: IntentSpec) -> bool:
    """Whether the player receives something by this act (then a wish names it)."""
    return bool(act_words(spec) & RECEIVING)


class Sentence(NamedTuple):
    """A sentence of the player's line: its closing punctuation, its stemmed words, and its
    clauses' words (split at commas and at "so", "but", "and")."""

    punctuation: str
    words: tuple[str, ...]
    clauses: tuple[tuple[str, ...], ...]


def sentences(line: str) -> tuple[Sentence, ...]:
    """The line's sentences, in order."""
    found = []
    for match in _SENTENCES.finditer(line):
        text = _ANSWER.sub("", match.group(0))
        words = tuple(stem(word) for word in word_tokens(text))
        if not words:
            continue
        clauses = []
        for piece in _CLAUSES.split(text):
            clause = tuple(stem(word) for word in word_tokens(piece))
            if clause:
                clauses.append(clause)
        end = text.rstrip()[-1:]
        found.append(Sentence(end if end in ".!?;" else "", words, tuple(clauses)))
    return tuple(found)


def sentence_mood(sentence: Sentence, acts: frozenset[str]) -> str:
    """The sentence's mood (`mood`); a statement may still hold a request in a later clause ("My
    lamp broke, so I need a lantern") or after a vocative ("Brom, open up!")."""
    found = mood(sentence.punctuation, sentence.words, acts)
    if found != "statement":
        return found
    for clause in sentence.clauses[1:]:
        if mood(sentence.punctuation, clause, acts) == "request":
            return "request"
    return found


def _opened(words: tuple[str, ...]) -> tuple[str, ...]:
    """The sentence without its openers ("Oh please, guard, open up" -> open up)."""
    at = 0
    while at < len(words) - 1 and words[at] in _OPENERS:
        at += 1
    return words[at:]


def _negated(words: tuple[str, ...], asked: Iterable[str]) -> bool:
    # "Can't you let me in?" pleads; "I don't need rope" and "Don't open it" refuse.
    if len(words) > 2 and words[0] in _MODALS | {"won", "don", "couldn", "wouldn"} and words[1] == "t" and words[2] in _ASKED:
        return False
    cut = min((i for i, word in enumerate(words) if word in asked), default=len(words))
    return not NEGATIONS.isdisjoint(words[:cut])


def mood(punctuation: str, words: tuple[str, ...], acts: frozenset[str]) -> str:
    """'request', 'question', 'report', 'negated' or 'statement', for a sentence about `acts`."""
    said = _opened(words)
    if not said:
        return "statement"
    if any(word in _PAST or (word.endswith("ed") and word[:-2] in acts) for word in said):
        return "report"
    if said[: len(_POLITE_WHY)] == _POLITE_WHY:
        return "request"  # "Why don't you let me in?"
    if said[:2] in {("let", "s"), ("let", "us")}:
        return mood(punctuation, said[2:], acts)  # "Let's trade" asks; "Let's talk about the gate" does not
    if any(said[: len(opener)] == opener for opener in _POLITE_OPENERS):
        return "request" if any(word in acts | _WISH_VERBS for word in said) else "question"
    wish = _wish_at(said, acts)
    if _negated(said, acts | _WISH_VERBS if wish is None else acts):
        return "negated"
    if said[0] in _MODALS and len(said) > 1 and said[1] in _ASKED:
        return "request" if _verb_near(said[2:], acts | _WISH_VERBS | _MOVING) else "question"
    if punctuation == "?" or said[0] in _WH or said[0] in {"do", "does", "did", "is", "are", "am", "was", "has"}:
        return "question"
    if said[0] in acts or said[0] in {"give", "hand", "sell", "let", "help"} or wish is not None:
        return "request"
    if said[:2] in _PAYING:
        return "request"  # "Here's 5 silver for bread": paying is asking
    if "please" in words and said[0] not in _TALK:
        return "request"  # "A lantern, please.", but not "Please tell me about the rope bridge."
    return "statement"


def _wish_at(words: tuple[str, ...], acts: frozenset[str]) -> int | None:
    """Where a wish's verb stands ("I'd like", "we need", "I'll take", "I must get"), or None; a
    wish to do something else ("I want to know ...") is none."""
    for at, word in enumerate(words[:3]):
        if word not in _SUBJECTS:
            continue
        rest = words[at + 1 :]
        obliged = False  # "I must go through": a need to move is a wish for the way
        while rest and rest[0] in _WISH_AFTER | {"m", "am", "re"}:
            obliged = obliged or rest[0] in {"must", "should", "ll", "will"}
            rest = rest[1:]
        if obliged and rest and rest[0] in _MOVING | acts:
            return len(words) - len(rest)
        if rest[:1] and rest[0] in _ASKING:
            return len(words) - len(rest)
        if rest[:2] in {("could", "use"), ("look", "for"), ("looking", "for"), ("have", "to"), ("got", "to")}:
            return len(words) - len(rest)
        if rest and rest[0] in _WISH_VERBS:
            if rest[1:2] == ("to",) and rest[2:3] and rest[2] not in _WISH_VERBS | acts | _MOVING:
                return None
            return len(words) - len(rest)
    return None


def _verb_near(words: tuple[str, ...], verbs: frozenset[str]) -> bool:
    """Whether the modal question's own verb (the first after "please", "kindly", "mind") is one
    of `verbs`: "Could you open the gate?" but not "Could you tell me who opens the gate?"."""
    rest = [
        word
        for word in words[:4]
        if word
        not in {"please", "kindly", "mind", "just", "maybe", "perhaps", "possibly", "quickly", "be", "so", "kind", "to", "as"}
    ]
    return bool(rest) and (rest[0] in verbs or rest[0].removesuffix("ing") in verbs)


def asking_words(line: str, spec: IntentSpec, cues: Iterable[tuple[str, ...]] = ()) -> tuple[str, ...]:
    """The words of the line's sentences that ask for this intent's act, joined (empty when the
    line asks for nothing it can give). `cues`: the designer's phrases, stemmed, that name the
    act too."""
    return tuple(word for asked in asking_sentences(line, spec, cues) for word in asked.words)


class Asking(NamedTuple):
    """A sentence that asks for the act: its words (with the sentence before, for one that points
    back: "Got any bread? I'll take one."), and the words of the sentence after it."""

    words: tuple[str, ...]
    after: tuple[str, ...]


def asking_sentences(line: str, spec: IntentSpec, cues: Iterable[tuple[str, ...]] = ()) -> tuple[Asking, ...]:
    """Each sentence of the line that asks for this intent's act (see `asking_words`)."""
    acts, objects = act_words(spec), object_words(spec)
    phrases = tuple(cues)
    asked: list[Asking] = []
    said = sentences(line)
    named = frozenset(word for sentence in said for word in sentence.words) & objects  # "Gate. Open. Now."
    values = frozenset(stem(word) for param in spec.params.values() for value in param.enum for word in word_tokens(value))
    for at, sentence in enumerate(said):
        if sentence_mood(sentence, acts) != "request":
            continue
        if _names_act(sentence.words, acts, named, phrases, receives(spec)):
            after = said[at + 1].words if at + 1 < len(said) else ()
            if at and not values & set(sentence.words) and _REFERS & set(sentence.words):
                asked.append(Asking(said[at - 1].words + sentence.words, after))  # "Got any bread? I'll take one."
            elif at and not values & set(sentence.words) and _opened(sentence.words)[:2] in _PAYING:
                # "I dropped my lantern in the river. Have you got another one? Here's 5 silver.":
                # money handed over for nothing named pays for what the line spoke of before
                asked.append(Asking(tuple(w for s in said[:at] for w in s.words) + sentence.words, after))
            else:
                asked.append(Asking(sentence.words, after))
    return tuple(asked)


def _says(words: tuple[str, ...], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return bool(n) and any(words[i : i + n] == phrase for i in range(len(words) - n + 1))


def _names_act(
    words: tuple[str, ...], acts: frozenset[str], objects: frozenset[str], cues: tuple[tuple[str, ...], ...], receiving: bool
) -> bool:
    """Whether a request sentence asks for this act; `objects`: the act's objects the whole line
    names ("Gate. Open. Now.")."""
    if any(_says(words, cue) for cue in cues):
        return True
    if receiving:
        return True  # a request of any shape; the value it names decides what is given
    said = frozenset(words) | {word.removesuffix("ing") for word in words}  # "opening the gate"
    if not said & acts and not (said & _MOVING and said & _MOVEMENT):
        return False
    # "open up", "let me through", "unbar the gate", "I must get through": the act with its object
    # or with the way through it gives
    return bool(objects) or bool(said & _MOVEMENT) or "up" in said
