"""A scene's line that speaks for someone else: the model writing the others' lines too. Pure.

A scene's prompt shows what the others said as `Mira: "..."`, and a small model goes on with
the script: `Aye. Mira: "What do you mean?" Brom: "The hinge."`. Words put in another's mouth
are no line of the speaker's, and what is left once they are cut was written as a script too,
so such a line fails the gate's hard limits (`speaks_for_others`) and is retried. A speaker
label of its own at the line's very start is output hygiene's to strip; this looks at the line as
the model wrote it (before hygiene) for a label naming anyone else in the scene, the player or
the narrator, anywhere, and the speaker's own past the start. A line that opens by calling its
own speaker by name ("Brom, take the gate..." said by Brom) fails too (`speaks_to_itself`): the
model answered as the one spoken to; so does a line that is only a name (`only_a_name`). Outside
a scene a line that calls the player by the NPC's own name fails the same way ("I enjoy my job,
Brom.", "No, Brom. The gate is shut.", both Qwen2.5-Coder-1.5B's as Brom).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from loreguard.schemas.interaction import SceneTurn
from loreguard.schemas.npc import IntentSpec
from loreguard.schemas.prevention import Banned
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Severity
from loreguard.schemas.text import norm_words
from loreguard.server.pipeline.gate.grounding import CURRENCY
from loreguard.text.asking import receives
from loreguard.text.phrases import sentences

SPEAKS_FOR_OTHERS_RULE = "speaks_for_others"
#: A line that opens by calling the speaker by its own name ("Brom, take the gate..." said by
#: Brom): the model took the others' part, answering as if spoken to.
SPEAKS_TO_ITSELF_RULE = "speaks_to_itself"
#: A line that is nothing but a name of someone in the scene ("Brom the gate guard."): a label
#: with the words it would have introduced missing.
ONLY_A_NAME_RULE = "only_a_name"
#: A line in which the NPC gives itself another name ("Amen, I am Captain Sir Edward." said by Brom).
NAMES_ITSELF_WRONGLY_RULE = "names_itself_wrongly"
#: A seller speaking as the buyer: paying the player, or asking for its own wares.
SPEAKS_AS_THE_BUYER_RULE = "speaks_as_the_buyer"


#: The player's own first-person sentence said back as the NPC's ("I have a letter for Arthur."
#: to "I have a letter for the castle.", Qwen2.5-Coder-1.5B as Brom): the model answered as the
#: player. Counted over the sentence's opening words, clitics ("'m", "'s") left out.
SPEAKS_AS_THE_PLAYER_RULE = "speaks_as_the_player"
AS_THE_PLAYER_WORDS = 5
_CLITICS = frozenset({"m", "s", "d", "ll", "re", "ve", "t"})


def find_player_voice(dialogue: str, player_line: str) -> list[GateFailure]:
    """One failure when a sentence of `dialogue` opens with the first AS_THE_PLAYER_WORDS words
    of one of the player's sentences that speaks of itself ("I ...")."""
    n = AS_THE_PLAYER_WORDS
    theirs = {words[:n] for words in _openings(player_line) if len(words) >= n and words[0] == "i"}
    said = next((sentence for sentence in sentences(dialogue) if _opening(sentence)[:n] in theirs), None)
    if said is None:
        return []
    return [_failure(SPEAKS_AS_THE_PLAYER_RULE, "the line says the player's own words as the NPC's: answer them", said)]


def _openings(line: str) -> list[tuple[str, ...]]:
    return [_opening(sentence) for sentence in sentences(line)] if line else []


def _opening(sentence: str) -> tuple[str, ...]:
    return tuple(word for word in norm_words(sentence) if word not in _CLITICS)


def find_other_voices(
    dialogue: str, turn: SceneTurn | None, speaker: str, intents: Iterable[IntentSpec] = ()
) -> list[GateFailure]:
    """One failure when a scene's line (as written, before hygiene) holds a speaker label of
    anyone in the scene, or any line calls its speaker by its own name, gives the speaker another
    name, or has a seller speak as the buyer (`intents`: the NPC's, whose wares it sells)."""
    mine = _wrong_name(dialogue, speaker) or _as_the_buyer(dialogue, speaker, intents)
    if mine:
        return mine
    if turn is None:
        # a name opening the line is the NPC giving it ("Mira, that's me."), not calling anyone
        return _to_itself(dialogue, speaker, opening=False)
    others = tuple(m.name for m in turn.present) + ("Player", "Narrator")
    found = _labels(others).search(dialogue) or _labels((speaker,)).search(dialogue, 1)
    if found is None:
        return _to_itself(dialogue, speaker) or _only_a_name(dialogue, (speaker, *others))
    evidence = dialogue[found.start() : found.end() + 40].strip()
    return [_failure(SPEAKS_FOR_OTHERS_RULE, f"the line speaks for {found.group(1)} (a speaker label inside it)", evidence)]


#: Titles before a name: "I am Captain Sir Edward" names Edward.
_TITLES = frozenset("captain sir lord lady master mistress dame madam sergeant old young father mother brother sister".split())
_SELF_NAMED = re.compile(
    r"(?:^|[.!?,;]\s*|\b(?:and|but|amen|aye|yes|well)\W+)(?i:i'm|i am|i’m|my name is|my name's|(?:they |folk |people )?call me|the name's)\s+"
    r"((?:[A-Z][\w\-]*\s+){0,3}[A-Z][\w\-]*)(?=\s*(?:[.,!?;:]|$|\s+(?:the|of|and|at|here)\b))"
)


def _wrong_name(dialogue: str, speaker: str) -> list[GateFailure]:
    """ "Amen, I am Captain Sir Edward." said by Brom: an NPC's own name is canon."""
    own = {form.casefold() for form in (speaker, *speaker.split())}
    for match in _SELF_NAMED.finditer(dialogue):
        names = [word for word in match.group(1).split() if word.casefold() not in _TITLES]
        if names and names[0].casefold() not in own:
            first = speaker.split()[0] if speaker.split() else speaker
            return [
                _failure(NAMES_ITSELF_WRONGLY_RULE, f"the speaker calls itself {names[0]}: its name is {first}", match.group(0))
            ]
    return []


def _as_the_buyer(dialogue: str, speaker: str, intents: Iterable[IntentSpec]) -> list[GateFailure]:
    """A seller who pays the player or asks for its own wares: "I'll give you 20 silver." said
    by Mira, who sells lanterns."""
    wares = sorted({value for spec in intents if receives(spec) for param in spec.params.values() for value in param.enum})
    if not wares:
        return []
    ware = "|".join(re.escape(w) for w in sorted(wares, key=lambda w: (-len(w), w)))
    found = _PAYS.search(dialogue) or re.search(
        rf"\bi(?:'d|’d| would| will|'ll|’ll)? (?:(?:want|need|like|take|buy) (?:to buy )?{_SOME}(?:{ware})(?:e?s)?\b"
        rf"|(?<=ll )have {_SOME}(?:{ware})(?:e?s)?\b{_BUYER_ENDS})",
        dialogue,
        re.IGNORECASE,
    )
    if found is None:
        return []
    first = speaker.split()[0] if speaker.split() else speaker
    reason = f"{first} sells {', '.join(wares)}: the line speaks as the buyer; answer as the seller"
    return [_failure(SPEAKS_AS_THE_BUYER_RULE, reason, found.group(0))]


_SOME = r"(?:a|an|the|one|two|three|some|\d+) (?:\w+ )?(?:\w+ of )?"
#: "I'll have two lanterns." said as the buyer ends there, or thanks; "I'll have some bread for
#: you", "I'll have a lantern ready", "I'll have two lanterns in by Friday" are the seller's.
_BUYER_ENDS = r"(?=\s*(?:[.!?]|$|,?\s*(?:please|thanks|thank you)\b))"
_COINS = (
    r"(?:\d+|a|one|two|three|four|five|six|seven|eight|nine|ten|twenty|thirty|fifty|a hundred|some|a few) (?:\w+ )?(?:"
    + "|".join(sorted(CURRENCY))
    + r")s?\b"
)
#: The seller paying: "I'll give you 20 silver.", and handing coins over: "Here's 5 silver."
#: (qwen2.5-coder-1.5b as Mira, to "Can you give me a torch?").
_PAYS = re.compile(
    rf"\bi(?:'ll|’ll| will|'d|’d| would| can)? ?(?:give|pay|offer|hand) you {_COINS}|\bhere(?:'s|’s| is| are) {_COINS}"
    # "I don't have bread for free, love. I'll have to pay for it." (qwen2.5-coder-1.5b as Mira)
    r"|\bi(?:'ll|’ll| will)? (?:have|need) to pay (?:for (?:it|them|that)|you)\b",
    re.IGNORECASE,
)


def _only_a_name(dialogue: str, names: tuple[str, ...]) -> list[GateFailure]:
    said = " ".join(re.findall(r"[\w'\-]+", dialogue.casefold()))
    forms = {form for name in names for form in (name.casefold(), name.split()[0].casefold() if name.split() else "")}
    if not said or said not in forms:
        return []
    return [_failure(ONLY_A_NAME_RULE, "the line is only a name", dialogue[:80])]


def _to_itself(dialogue: str, speaker: str, *, opening: bool = True) -> list[GateFailure]:
    called = (
        (_vocative(speaker).match(dialogue) if opening else None)
        or _greeted(speaker).match(dialogue)
        or _named_as_you(speaker).search(dialogue)
    )
    if called is None:
        called = next(
            (m for s in sentences(dialogue) if (m := _called_at_end(speaker).search(s)) and not _NAMES_ITSELF.search(s)),
            None,
        )
    if called is None:
        return []
    return [_failure(SPEAKS_TO_ITSELF_RULE, f"the line calls its own speaker by name ({called.group(1)})", dialogue[:80])]


@lru_cache(maxsize=256)
def self_address_bans(speaker: str, *, in_scene: bool) -> tuple[Banned, ...]:
    """What the sampler keeps out of the speaker's reply (`gate.prevention`): calling itself by
    its own name after a greeting ("No, Brom."), as the player ("You're Brom.") or after a comma
    ("..., Brom.", "..., Brom, as ..."), and in a scene opening a line with it ("Brom, ...")."""
    if not speaker.strip():
        return ()
    closing = _called_at_end(speaker).pattern
    patterns = [_greeted(speaker).pattern, _named_as_you(speaker).pattern, closing]
    if in_scene:
        patterns.append(_vocative(speaker).pattern)
    return tuple(Banned(rule_id=SPEAKS_TO_ITSELF_RULE, pattern=p) for p in patterns)


def _failure(rule_id: str, reason: str, evidence: str) -> GateFailure:
    return GateFailure(gate=GateName.HARD_LIMITS, reason=reason, severity=Severity.HARD, rule_id=rule_id, evidence=evidence)


@lru_cache(maxsize=256)
def _vocative(speaker: str) -> re.Pattern[str]:
    """The speaker's name (or its first word) opening a line, then a comma: "Brom, ..."."""
    return re.compile(rf"^\W*({_name_forms(speaker)})\s*,", re.IGNORECASE)


#: Words with which a sentence names its own speaker: "I'm the guard here, Brom." is no one
#: called by name. "I'm" names only before an article or a name: "I'm sorry, Brom." calls.
_NAMES_ITSELF = re.compile(
    r"\b(?i:i'm|i am|i’m)\s+(?:(?i:the|a|an|your|this|that|just|only)\b|[A-Z])"
    r"|\b(?i:my name|call me|called|named|this is|it's me)\b"
)
#: What opens a line before a name called out: "No, Brom.", "Good evening, Brom!".
_GREETINGS = r"(?:yes|no|aye|nay|well|oh|ah|sorry|hello|hi|greetings|welcome|thank you|thanks|good (?:day|evening|morning|night))"


def _name_forms(speaker: str) -> str:
    first = speaker.split()[0] if speaker.split() else speaker
    return "|".join(re.escape(f) for f in sorted({speaker, first}, key=lambda f: (-len(f), f)))


@lru_cache(maxsize=256)
def _greeted(speaker: str) -> re.Pattern[str]:
    """A greeting, a yes or no or an apology, then the speaker's own name: "No, Brom. The gate is
    shut.", "I'm sorry, Brom, but I can't allow that."."""
    return re.compile(
        rf"^\W*(?:(?:i'm|i am|i’m)\s+(?:so\s+|very\s+)?)?{_GREETINGS},?\s+({_name_forms(speaker)})\s*[,.!?]", re.IGNORECASE
    )


@lru_cache(maxsize=256)
def _named_as_you(speaker: str) -> re.Pattern[str]:
    """The player told they are the speaker: "You're Brom." said by Brom; "Your name is Mira."
    said by Mira when asked hers."""
    return re.compile(
        rf"(?:^|[.!?]\s+)\W*(?:you're|you are|you’re|your name is|your name's)\s+({_name_forms(speaker)})\b", re.IGNORECASE
    )


@lru_cache(maxsize=256)
def _called_at_end(speaker: str) -> re.Pattern[str]:
    """The speaker's own name after a comma: "I enjoy my job, Brom.", "It is safer to travel by
    day, Brom, as it is less likely...", "I can't help with that, Mira can you tell me more?"
    (the 1.5B, each once the sampler kept it from the one before)."""
    return re.compile(rf",\s*({_name_forms(speaker)})\b(?!['\u2019])", re.IGNORECASE)


@lru_cache(maxsize=256)
def _labels(names: tuple[str, ...]) -> re.Pattern[str]:
    """`Name:`, `Name the role:` or `Firstname:` for any of `names` (whole words, any case)."""
    forms = set()
    for name in names:
        forms.add(name)
        first = name.split()[0] if name.split() else name
        if len(first) >= 3:
            forms.add(first)
    alternatives = "|".join(re.escape(f) for f in sorted(forms, key=lambda f: (-len(f), f)))
    return re.compile(rf"(?<![\w'])({alternatives})(?: the [\w'\-]+)?\s*:(?!\d)", re.IGNORECASE)
