"""Instructions read out: a reply that says the prompt's own instructions as dialogue. Pure.

A small model told "Reply with exactly one JSON object" or "Your previous reply was rejected"
sometimes says so to the player, in its own words: "Good day. Your answer is still in the same
format.", "...no extra spaces in your dialogue.", "The new response was rejected. The original
conversation is now available in text format." No list of phrases catches the next wording, so
the check measures how much of a sentence is talk about the text itself:

- the *instruction words* are the content words of the prompt's own instructions (the output
  format, the correction, their headings: `prompt`'s and `retry`'s constants) but for the ones
  everyday speech uses as much (`EVERYDAY_WORDS`: every, new, rule...), and the few words any
  model uses for its output (`TEXT_WORDS`: format, reply, response, JSON...);
- words the NPC's world also uses are not instruction words for this reply: the persona, the
  lore, the facts, the examples, the designer's rules and the player's line. A guard whose
  rules speak of "answers" may say "answer";
- a sentence whose instruction words weigh `MIN_INSTRUCTION_WEIGHT` (a word a character hardly
  ever says, `RARE_IN_SPEECH`: format, JSON, dialogue, output..., counts 2; any other 1) is the
  model reading its instructions out, and fails the gate's hard limits (`prompt_instructions`);
  so does one that copies `COPIED_RUN_WORDS` words in a row from the format or the correction.
  "That's my answer, and this conversation is over." and "Your petition was rejected, and my
  answer stands." are an NPC talking.

It is retried, never stripped: what is left of such a reply was written out of character too.
"""

from __future__ import annotations

from functools import lru_cache

from loreguard.memory.retrieval import keywords
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Severity
from loreguard.schemas.text import norm_words
from loreguard.server.pipeline.gate.parroting import copied_share
from loreguard.server.pipeline.prompt import (
    CHANGE_INSTRUCTION,
    FORBIDDEN_REQUEST_INSTRUCTION,
    FORMAT_INSTRUCTION,
    GRANT_INSTRUCTION,
    INTENT_INSTRUCTION,
    REFUSE_INSTRUCTION,
    RETRY_RULES_INSTRUCTION,
    SCENE_INSTRUCTION,
    SECRET_INSTRUCTION,
)
from loreguard.server.pipeline.retry import REPAIR_CLOSING, REPAIR_OPENING, is_retry_rule
from loreguard.server.pipeline.snapshot import StateSnapshot
from loreguard.text.phrases import sentences

PROMPT_INSTRUCTIONS_RULE = "prompt_instructions"
#: The prompt's instructions in its own words, and the output format's field names.
INSTRUCTIONS = " ".join(
    (
        FORMAT_INSTRUCTION,
        CHANGE_INSTRUCTION,
        SECRET_INSTRUCTION,
        RETRY_RULES_INSTRUCTION,
        SCENE_INSTRUCTION,
        REPAIR_OPENING,
        REPAIR_CLOSING,
        # the Request section: "You can grant the north gate, unless a rule above forbids it."
        # (qwen2.5-coder-0.5b as Brom) copies it
        GRANT_INSTRUCTION,
        REFUSE_INSTRUCTION,
        FORBIDDEN_REQUEST_INSTRUCTION,
        "Output format. Examples. Rules. Correction. Facts always true. Situation. Request.",
        "dialogue intent emotion mutations spoken words characters changes significance confidence sentiment",
    )
)
#: Words models use for their own output whatever the prompt said.
TEXT_WORDS = frozenset(
    keywords(
        "format formatted formatting json object reply replies response responses respond answer answers output "
        "prompt instruction instructions rejected correction corrected spaces sentence sentences text assistant "
        "model user message messages quotes punctuation markdown schema field fields token tokens conversation "
        "paragraph example examples dialogue"
    )
)
#: Words of the instructions that everyday speech uses as much: not evidence on their own. ("rule"
#: is one: a guard speaks of the captain's rules all day.)
EVERYDAY_WORDS = keywords(
    "every one exactly nothing else new previous write follows never reveal anything change changes now true "
    "always facts situation rule rules words spoken characters most kind give refuse unless forbid forbids above"
)
#: Instruction words a character hardly ever says: each counts twice.
RARE_IN_SPEECH = frozenset(
    keywords(
        "json format formatted formatting markdown schema prompt instruction instructions punctuation token tokens "
        "mutation mutations significance sentiment dialogue output assistant model field fields"
    )
)
#: A sentence whose instruction words weigh this much (a rare one 2, any other 1) reads the
#: instructions out: "your answer ... format" (3) does, "your petition was rejected, and my
#: answer stands" (2) does not.
MIN_INSTRUCTION_WEIGHT = 3
COPIED_RUN_WORDS = 4
#: What a copied run is looked for in: the format and the correction, not the prompt's phrases
#: that are ordinary speech ("never reveal anything about").
COPIED_FROM = norm_words(
    " ".join(
        (
            FORMAT_INSTRUCTION,
            CHANGE_INSTRUCTION,
            INTENT_INSTRUCTION,
            GRANT_INSTRUCTION,
            FORBIDDEN_REQUEST_INSTRUCTION,
            REFUSE_INSTRUCTION,
            REPAIR_OPENING,
            REPAIR_CLOSING,
        )
    )
)


@lru_cache(maxsize=1)
def _instruction_words() -> frozenset[str]:
    return (keywords(INSTRUCTIONS) - EVERYDAY_WORDS) | TEXT_WORDS


@lru_cache(maxsize=256)
def _instruction_words_here(
    persona: str, lore: str, facts: tuple[str, ...], lines: tuple[str, ...], rules: tuple[str, ...]
) -> frozenset[str]:
    """The instruction words less the content words the NPC's world uses (memoised: the same
    strings every turn)."""
    return _instruction_words() - keywords(" ".join((persona, lore, *facts, *lines, *rules)))


def find_instructions_read_out(dialogue: str, snapshot: StateSnapshot) -> list[GateFailure]:
    """One failure for the first sentence of `dialogue` that reads the prompt's instructions
    out (see the module's docstring); none otherwise."""
    meta = _instruction_words_here(
        snapshot.persona,
        snapshot.world_lore,
        tuple(f.text for f in snapshot.canonical),
        tuple(line for e in snapshot.few_shot for line in (e.player, e.npc)),
        # the designer's rules, not a retry's ("say '...' or anything like it" quotes the reply)
        tuple(c.text for c in snapshot.constraints.constraints if not is_retry_rule(c)),
    )
    asked = keywords(snapshot.context.said())
    # an intent's name as the prompt writes it ("give_item") is no word a character says
    names = [spec.type for spec in snapshot.allowed_intents if "_" in spec.type]
    name = norm_words(snapshot.npc_name)
    frame = ("stay", *name)
    for sentence in sentences(dialogue):
        named = next((name for name in names if name in sentence.lower()), None)
        if named is not None:
            return [_read_out(sentence, f"the intent name {named}")]
        if name and _frame_said(sentence, frame, snapshot.npc_name):
            # the character frame's first words: "The gate closes at dusk. Stay Brom." (the 1.5B)
            return [_read_out(sentence, "the character frame")]
        said = (keywords(sentence) & meta) - asked
        # a run copied from the instructions holds one of their words: only then is it looked for
        copied = bool(said) and copied_share(norm_words(sentence), COPIED_FROM, run=COPIED_RUN_WORDS) > 0
        if len(said) + len(said & RARE_IN_SPEECH) >= MIN_INSTRUCTION_WEIGHT or copied:
            why = f"the words {', '.join(sorted(said))}" if not copied else "words copied from them"
            return [_read_out(sentence, why)]
    return []


def _frame_said(sentence: str, frame: tuple[str, ...], npc_name: str) -> bool:
    """Whether the sentence is the character frame's "Stay <name>" (and maybe "at all times"),
    the name written as the prompt writes it: "Stay sharp." said by an NPC named Sharp is speech."""
    words = norm_words(sentence)
    if words not in (frame, (*frame, "at", "all", "times")):
        return False
    return npc_name.strip() in sentence


def _read_out(sentence: str, why: str) -> GateFailure:
    return GateFailure(
        gate=GateName.HARD_LIMITS,
        reason=f"dialogue reads the prompt's instructions out ({why}): {sentence[:80]!r}; speak as the character",
        severity=Severity.HARD,
        rule_id=PROMPT_INSTRUCTIONS_RULE,
        evidence=sentence[:80],
    )
