"""Repair by cut: a reply whose later sentences the gate refuses keeps the sentences before them.

A first attempt whose first sentences answer and whose last one breaks a rule ("I will not tell
you the password. The password is 'sword in hand'.") need not cost the player a second
generation (5-30 s on two cores). When every failure is one a sentence holds (`CUTTABLE`), the
reply cut after its last sentence that keeps it acceptable (a statement of `MIN_KEPT_WORDS` words
or more) is judged by the whole gate, as a streamed reply cut after a release is
(`streaming.cut_output`: the dialogue, a neutral emotion, no mutations, no intents), and, if the
gate accepts it, it is the answer. The attempt's record keeps what the gate found in the whole
output and where it was cut (`AttemptRecord.cut_to`). A pure function of the output and the
snapshot: a replay cuts the same reply at the same place.
"""

from __future__ import annotations

from loreguard.schemas.npc import OutputHygiene
from loreguard.schemas.receipt import GateName
from loreguard.schemas.text import norm_words
from loreguard.server.pipeline.gate import GateConfig, GateResult, validate
from loreguard.server.pipeline.parsing import ParseResult, parse_output
from loreguard.server.pipeline.running.streaming import chunk_ends, cut_output
from loreguard.server.pipeline.snapshot import StateSnapshot

#: The gates whose failures a sentence holds: a fact contradicted, a secret told, a number about
#: nothing, a forbidden phrase. A reply refused as a whole (a copy, a loop, a non-answer, the
#: assistant's register, a grant in words only) is no better cut: "Sure, love." cut from "Sure,
#: love. Here's your lantern." says yes and sells nothing.
CUTTABLE = frozenset({GateName.CONSTRAINTS, GateName.CANONICAL, GateName.GROUNDING, GateName.KNOWLEDGE})
#: The fewest words a cut keeps: an answer, not "Aye." or "The king?".
MIN_KEPT_WORDS = 5


def cut_repair(
    whole: GateResult,
    parse: ParseResult,
    snapshot: StateSnapshot,
    config: GateConfig,
    hygiene: OutputHygiene,
    special_tokens: tuple[str, ...],
    cut_at: int | None,
) -> tuple[GateResult, int] | None:
    """The longest cut of the reply, at a sentence end, that the gate accepts, and its length in
    characters of the model's dialogue; None when the whole reply was accepted, failed
    critically or did not parse, or when no cut is accepted."""
    if whole.accepted or whole.critical or parse.data is None:
        return None
    if not whole.failures or any(f.gate not in CUTTABLE for f in whole.failures):
        return None
    dialogue = parse.data.get("dialogue")
    if not isinstance(dialogue, str):
        return None
    for end in reversed(chunk_ends(dialogue, closed=True)[:-1]):
        kept = dialogue[:end].rstrip()
        if len(norm_words(kept)) < MIN_KEPT_WORDS or kept.endswith("?"):
            break  # shorter cuts are shorter still
        raw = cut_output(dialogue[:end])
        result = validate(parse_output(raw), raw, snapshot, config, None, hygiene, special_tokens, cut_at)
        if result.accepted:
            return result, end
    return None
