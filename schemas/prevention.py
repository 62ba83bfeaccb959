"""What the sampler keeps out of a reply while it is written, and what it kept out.

The validation gate judges a whole reply after it is written; on a player's machine every reply
it refuses costs a whole generation. The checks the gate makes on the words themselves (a
forbidden phrase, an assistant's turn of phrase, a copied line, the NPC calling itself by name)
can be decided on each word as it is decoded instead. Each gate module states its own as a
`DialogueConstraints` piece (`loreguard.server.pipeline.gate.prevention` gathers them); the
sampler refuses a token that would make the dialogue break one and draws another
(`loreguard.server.inference.dialogue_guard`). The gate still judges every reply: this is
prevention, not a second verdict.
"""

from __future__ import annotations

from pydantic import Field

from loreguard.schemas.base import FrozenModel


class Banned(FrozenModel):
    """Words the dialogue may never hold: a phrase (found as the gate finds a forbidden phrase:
    case, punctuation and plurals do not hide it) or a regular expression (case-insensitive,
    searched in the dialogue)."""

    #: The gate rule the dialogue would fail (a designer rule's id, a secret's, or a built-in
    #: rule such as `assistant_register`).
    rule_id: str
    phrase: str = ""
    pattern: str = ""


class CopyLimit(FrozenModel):
    """A text the dialogue may repeat at most `longest` words of in a row (the player's line, the
    persona, an example line, one of the NPC's recent replies)."""

    rule_id: str
    source: str
    longest: int = Field(ge=1)


class BannedOpening(FrozenModel):
    """Words the dialogue may not begin with (the NPC's habit of late)."""

    rule_id: str
    words: str


class DialogueConstraints(FrozenModel):
    """Everything the sampler keeps out of one attempt's dialogue, in a fixed order."""

    banned: tuple[Banned, ...] = ()
    copies: tuple[CopyLimit, ...] = ()
    openings: tuple[BannedOpening, ...] = ()
    #: Texts whose runs of words are never refused as a copy: the canonical facts and the world's
    #: lore, which saying as they are written is right.
    free: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.banned or self.copies or self.openings)


class Prevention(FrozenModel):
    """One thing the sampler kept out of an attempt's dialogue: the gate rule it would have
    failed, what (a phrase, a pattern, the copied words) and how many drawn tokens it refused for
    it."""

    rule_id: str
    evidence: str
    refused: int = Field(ge=1)
