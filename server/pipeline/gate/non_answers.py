"""A reply that answers nothing the player said. Pure.

Two shapes the real models wrote, both validated before this check:

- **A word from nowhere.** "Nominated", said to "When does the gate close?" and again to "Any
  news from the hills?": a line of one word, a verb's or an adverb's form, that the player's
  line, the persona, the world's lore, the canonical facts, world state or the examples do not
  hold, and which is no interjection or common short answer ("Aye.", "Tomorrow.", "Indeed.",
  "Closed."). A noun alone may answer ("Wolves." to "What are you afraid of?") and passes.
- **An introduction instead of an answer.** "I'm Brom." to "Can I wait here until morning?";
  "Oh, hello there! I'm Mira, a merchant by the river market." to "What do you have for sale?":
  every sentence a greeting, the NPC naming itself, or asking what the player wants, to a
  question that was not about who it is and a line that was no greeting.
- **A greeting left for an answer.** "Good evening, traveller." to "Can I wait here until
  morning?" (Qwen2.5-Coder-1.5B as Brom: hygiene cut the unfinished sentence that answered):
  every sentence left a greeting, to a question that was no greeting and did not ask who is
  there. A greeting the model wrote alone is let be: streamed, it is the start of an answer.
- **The question thrown back.** "What would you like to talk about instead?" to "The king is
  called Edward now, isn't he?"; "What else would you like to know about Eldmoor?" to "Where is
  the old mill?" (both Qwen2.5-Coder-1.5B's as the demo NPCs): every sentence asks what the
  player would like to talk about or know, to a question that was not asking leave to ask ("Can
  I ask you something?" is answered by "What would you like to know?").
- **The refusal stripped.** "I'm sorry, love, but I can't give you bread at this time. We need
  to be careful with our supplies." to "Give me a loaf of bread, here's a copper." (the 1.5B's
  merchant): hygiene strips the assistant's refusal, and the player hears only "We need to be
  careful with our supplies.". Where the player asked for something, nothing was granted, a
  stripped sentence said no and nothing left does (nor puts the player off, nor speaks of what
  was asked: "Rope's sold out, love."), the line lost its answer.

Each fails the gate's hard limits (`non_answer`) and is retried with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING

from loreguard.schemas.output import ParsedOutput
from loreguard.schemas.receipt import FindingKind, GateFailure, GateName, OutputFinding
from loreguard.schemas.rules import Severity
from loreguard.text.negation import DENIALS
from loreguard.text.numbers import ONES, TENS
from loreguard.text.phrases import VOCATIVES, sentences
from loreguard.text.words import keywords, word_tokens

if TYPE_CHECKING:
    from loreguard.server.pipeline.snapshot import StateSnapshot

NON_ANSWER_RULE = "non_answer"
#: What hygiene strips whole sentences for: a reply cut by one may be left with a greeting only.
SENTENCES_CUT = frozenset({FindingKind.SENTENCE_FRAGMENT, FindingKind.REPEATED_SENTENCE, FindingKind.ASSISTANT_REGISTER})
#: The longest line (in words) that can be a word from nowhere: two words ("Stay calm.", "Fair
#: enough.") are ordinary speech too often to judge by where they came from.
MAX_STRAY_WORDS = 1

#: Short answers and interjections a person says to anything (keywords form: stemmed).
COMMON_ANSWERS = frozenset(
    keywords(
        "hmph hmm hm ha hah bah pfft ugh eh heh oi hey ahem aha ah oh aye nay yes no yep yeah nope sure fine right "
        "well indeed certainly gladly absolutely perhaps maybe never always soon later now today tonight tomorrow "
        "yesterday morning evening night noon midnight dawn dusk sunrise sunset here there nowhere everywhere "
        "somewhere someone nobody nothing everything anything welcome greetings hello farewell goodbye thanks "
        "thank sorry please halt stop wait go begone enough quiet silence careful listen look agreed done deal "
        "true false exactly precisely probably possibly unlikely alas north south east west left up down inside "
        "outside cheers huh really seriously truly honestly good bad great terrible excellent wonderful lovely "
        "splendid nice interesting strange odd curious sir madam friend traveller traveler stranger love dear "
        "lad lass rats blast damn bother move along off away leave come forward back gone closed open shut "
        "busy free cheap expensive costly safe dangerous quite very much many few some none all both either "
        "hail howdy evening afternoon nonsense ridiculous rubbish impossible unbelievable incredible amazing "
        "marvellous marvelous brilliant perfect wonderful superb dreadful awful horrible fool idiot liar thief "
        "coward traitor hush shh psst enough done ready coming understood noted granted denied correct wrong "
        "exactly naturally obviously surely definitely agreed deal bye later again what whatever who why how "
        "when where which pardon excuse apologies congratulations welcome cheers bless mercy gods"
    )
)

#: Endings of a word that cannot answer alone unless the question gave it: "Nominated".
_NOT_ALONE = ("ed", "ing", "ly")
NUMBER_WORDS = frozenset((*ONES, *TENS, "hundred", "thousand", "dozen", "none"))

_GREETING = (
    r"(?:oh|ah|well|hello|hi|hey|greetings|hail|welcome|good (?:day|morning|evening|afternoon)|well met)"
    rf"(?:\s+there)?(?:,?\s+(?:{'|'.join(VOCATIVES)}))?"
)
_GREETING_ONLY = re.compile(rf"^\W*(?:{_GREETING}\W*)+$", re.IGNORECASE)
_ASKS_BACK = re.compile(
    r"^\W*(?:what (?:do|can|may|would) (?:you|i) (?:need|want|like|do for you|get you|be after)[^.!?]*"
    r"|how (?:can|may) i help(?: you)?|what brings you[^.!?]*)\W*$",
    re.IGNORECASE,
)
#: A player's line that asks who the NPC is, or greets it: an introduction answers it.
_ASKS_WHO = re.compile(
    r"\b(?:who (?:are|r) (?:you|u)|your name|who is (?:this|that|there|it)|introduce|what are you|"
    r"call you|who goes there|are you\b|any(?:one|body) (?:there|here|home|around)|(?:some|any)(?:one|body) there)",
    re.IGNORECASE,
)
#: A sentence asking what the player would talk about or know: the assistant's way of answering
#: nothing ("What would you like to talk about instead?", "Anything else you'd like to know?").
_WHAT_TO_TALK_ABOUT = re.compile(
    r"^\W*(?:so\W+|well\W+)?(?:what|which|is there anything|anything)(?: else| more| other)?(?: topic| subject)?"
    r"(?: would| do| did| can)? you(?:'d| would)? (?:like|want|wish|care|need)(?: me)? to (?:talk|chat|speak|know|hear|"
    r"discuss|ask|learn)(?: about| of| more)?[^.!?]*[.!?]*\s*$",
    re.IGNORECASE,
)
#: A player's line that asks leave to ask: "What would you like to know?" answers it.
_ASKS_TO_ASK = re.compile(
    r"\b(?:(?:can|could|may|might) i (?:ask|tell|talk|have a word|say)|i (?:have|got) (?:a|some) questions?|"
    r"(?:can|could|would|will) you (?:tell|help|answer|teach|explain)|mind if i|a question\b|"
    r"(?:want|like|need) to (?:ask|talk|know)|a word with you|(?:have|got|spare) a (?:minute|moment|sec|second)|"
    r"anything (?:about|on)\b)",
    re.IGNORECASE,
)
_GREETS = re.compile(rf"^\W*(?:{_GREETING}|hiya|howdy|evening|morning)\b", re.IGNORECASE)


@lru_cache(maxsize=256)
def _introduction(speaker: str) -> re.Pattern[str]:
    """A sentence that only names the speaker, after a greeting maybe, with an appositive maybe:
    "Oh, hello there! I'm Mira, a merchant by the river market."."""
    first = speaker.split()[0] if speaker.split() else speaker
    names = "|".join(re.escape(n) for n in sorted({speaker, first}, key=lambda n: (-len(n), n)))
    return re.compile(
        rf"^\W*(?:{_GREETING}\W+)*(?:i'm|i am|i’m|my name is|my name's|the name's|they call me|it's)\s+(?:{names})\b"
        r"(?:\s*,\s*(?:a|an|the)\s+[^,.!?]*)?\W*$",
        re.IGNORECASE,
    )


#: Words that put the player off without a no: "Come back at dawn, traveller.", "Sold out, love."
_PUTS_OFF = frozenset("later tomorrow dawn morning back wait sold closed shut tonight away elsewhere".split())


def find_non_answer(
    dialogue: str,
    player_line: str,
    speaker: str,
    known: Iterable[str],
    findings: Iterable[OutputFinding] = (),
    *,
    asked_for_act: bool = False,
) -> list[GateFailure]:
    """One failure when `dialogue` answers nothing of `player_line` (see the module); `known`:
    the texts the prompt carried (persona, lore, facts, state, examples); `findings`: what
    hygiene found (what it cut away may have been the answer); `asked_for_act`: the player asked
    for an act and the reply grants none."""
    findings = tuple(findings)
    cut_short = any(f.kind in SENTENCES_CUT for f in findings)
    refusals = [f.text for f in findings if f.kind is FindingKind.ASSISTANT_REGISTER and DENIALS & set(word_tokens(f.text))]
    left = set(word_tokens(dialogue))
    if asked_for_act and refusals and not left & (DENIALS | _PUTS_OFF) and not keywords(dialogue) & keywords(player_line):
        return [_failure(f"your answer was in an assistant's words ({refusals[0][:80]!r}): say no in your own", dialogue[:80])]
    said = word_tokens(dialogue)
    if 0 < len(said) <= MAX_STRAY_WORDS:
        # a noun from nowhere may answer ("Wolves." to "What are you afraid of?"); a verb's or
        # an adverb's form alone answers nothing
        stray = {word for word in keywords(dialogue) - COMMON_ANSWERS if word.endswith(_NOT_ALONE)}
        if stray and not any(word.isdigit() or word in NUMBER_WORDS for word in said):
            heard = keywords(player_line).union(*(keywords(text) for text in known))
            if not stray & heard:
                word = sorted(stray)[0]
                return [_failure(f"the line is a word from nowhere ({word!r}): answer what the player said", dialogue)]
    if not player_line.rstrip().endswith("?") or _ASKS_WHO.search(player_line) or _GREETS.match(player_line):
        return []
    parts = sentences(dialogue)
    if parts and all(_WHAT_TO_TALK_ABOUT.match(p) or _GREETING_ONLY.match(p) for p in parts):
        if any(_WHAT_TO_TALK_ABOUT.match(p) for p in parts) and not _ASKS_TO_ASK.search(player_line):
            return [_failure("the line throws the question back instead of answering it", dialogue[:80])]
        if cut_short and all(_GREETING_ONLY.match(p) for p in parts):
            return [_failure("all that is left is a greeting: answer the question", dialogue[:80])]
    if not parts or not any(_introduction(speaker).match(part) for part in parts):
        return []
    if all(_introduction(speaker).match(p) or _GREETING_ONLY.match(p) or _ASKS_BACK.match(p) for p in parts):
        first = speaker.split()[0] if speaker.split() else speaker
        return [_failure(f"{first} introduces themselves instead of answering the question", dialogue[:80])]
    return []


def non_answer_of(output: ParsedOutput, snapshot: StateSnapshot, findings: Iterable[OutputFinding]) -> list[GateFailure]:
    """`find_non_answer` of a parsed reply in its interaction: `findings` are hygiene's."""
    asked = not output.grants and (any(o.requested for o in snapshot.offered_intents) or bool(snapshot.deals))
    said = snapshot.context.said()
    return find_non_answer(output.dialogue, said, snapshot.npc_name, known_texts(snapshot), findings, asked_for_act=asked)


def known_texts(snapshot: StateSnapshot) -> tuple[str, ...]:
    """What the prompt carried for a line to draw on: persona, lore, facts, state, examples."""
    state = tuple(f"{key} {value}" for key, value in snapshot.world_state)
    examples = tuple(text for example in snapshot.few_shot for text in (example.player, example.npc))
    return (snapshot.persona, snapshot.world_lore, *(fact.text for fact in snapshot.canonical), *state, *examples)


def _failure(reason: str, evidence: str) -> GateFailure:
    return GateFailure(
        gate=GateName.HARD_LIMITS, reason=reason, severity=Severity.HARD, rule_id=NON_ANSWER_RULE, evidence=evidence
    )
