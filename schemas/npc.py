"""Designer data: NPC profiles and the world definition."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

from pydantic import Field, StringConstraints, field_validator, model_validator

from loreguard.schemas.base import FrozenModel, Identifier, JsonScalar, LongText, ShortText, StateKey
from loreguard.schemas.interaction import TriggerReason
from loreguard.schemas.memory import CanonicalFact, StateClaim
from loreguard.schemas.output import Emotion, WorldIntent
from loreguard.schemas.rules import ExpectancyRule, Phrase
from loreguard.schemas.text import fold, matchable

Line = Annotated[str, StringConstraints(min_length=1, max_length=600)]


class Secret(FrozenModel):
    """Something the NPC knows but must never reveal. The gate blocks any output in which one
    of `markers` appears, after normalising case, punctuation, spacing and simple obfuscation.

    The secret's text never enters a prompt: a model cannot leak what it was never shown.
    """

    id: Identifier
    #: What the secret is (designer notes, debug views).
    text: ShortText
    #: What the prompt may name as off-limits, e.g. "the gate password". Empty: not mentioned.
    topic: Annotated[str, StringConstraints(max_length=200)] = ""
    #: Phrases whose appearance reveals the secret. Empty means `text` itself. A marker (or, with
    #: none, the text) must keep a word once folded, else the gate could never see it.
    markers: tuple[Phrase, ...] = ()

    @model_validator(mode="after")
    def _text_is_a_marker(self) -> Secret:
        if not self.markers:
            try:
                matchable(self.text)
            except ValueError as exc:
                raise ValueError(f"secret {self.id!r} has no markers, so its text is the marker: {exc}") from None
        return self

    def reveal_markers(self) -> tuple[str, ...]:
        return self.markers or (self.text,)


class ParamType(str, Enum):
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"


class IntentParam(FrozenModel):
    """The schema of one intent parameter: a deliberately small subset of JSON Schema, so that
    every parameter can be validated exactly and turned into a bounded grammar."""

    type: ParamType
    required: bool = True
    description: ShortText = ""
    enum: tuple[str, ...] = ()
    max_length: int = Field(default=64, ge=1, le=512)
    minimum: float | None = None
    maximum: float | None = None


class Decider(str, Enum):
    """Who decides whether a request for an intent is granted."""

    #: The model, in character: the guard may or may not believe "the captain sent me".
    CHARACTER = "character"
    #: The designer's data and the game's state (`turn.deals`): the price, the stock, the
    #: player's purse, the rules in force. The model only says the outcome in its own words.
    RULES = "rules"


class Ware(FrozenModel):
    """One thing an intent hands over, at its price (`IntentSpec.wares`)."""

    #: What one costs, in `currency`; 0 gives it away.
    price: int = Field(ge=0, le=1_000_000_000)
    #: One of the world's currencies (`Economy.currencies`), e.g. "silver".
    currency: Identifier
    #: World-state key counting how many are left (the NPC's scope first, then the world's), as
    #: the game reports it with `set_state`. None: never runs out.
    stock: StateKey | None = None
    #: How the prompt says several ("loaves of bread"); empty: the name and an "s".
    plural: Annotated[str, StringConstraints(max_length=64)] = ""


class DealLines(FrozenModel):
    """Authored lines for a request the rules decided (`IntentSpec.decided_by`), spoken when no
    reply of the model's passes the gate: the outcome stands (the rules made it), and the player
    hears one of these rather than a line about nothing. Held to the rules like every fallback."""

    #: Said with a sale the rules made ("Here you are, love. Mind the knots.").
    sold: tuple[Line, ...] = Field(default=(), max_length=16)
    #: Said with a request the rules declined ("Not today, love.").
    declined: tuple[Line, ...] = Field(default=(), max_length=16)


class IntentSpec(FrozenModel):
    """A world intent the NPC may emit, e.g. `open_door(door_id: str)`."""

    type: Identifier
    description: ShortText = ""
    params: dict[Identifier, IntentParam] = Field(default_factory=dict, max_length=8)
    #: Phrases with which a player asks for it ("open the gate", "let me in"). An intent with
    #: cues is on the table only when the player's line says one, and names one of the allowed
    #: values of each enum parameter that has several: the model is then offered exactly that
    #: intent, its parameters filled in from the line, and decides only whether to grant it; the
    #: gate approves nothing else. An intent without cues is offered every turn (the model
    #: decides when, and its parameters).
    cues: tuple[Phrase, ...] = Field(default=(), max_length=32)
    #: Phrases with which the NPC says it does the act now ("go on through", "here's your"). A
    #: reply that says one, not negated, in no question and under no condition ("if", "when"),
    #: must grant this intent, or the gate fails it (`grants_in_words_only`): the game would not
    #: do what the player heard. Pick words that only mean the act done now ("I'll open the gate"
    #: may be a promise for the morning).
    grant_phrases: tuple[Phrase, ...] = Field(default=(), max_length=32)
    #: Who decides a request: the model in character, or the rules (the wares' prices and
    #: stock, `requires`, the player's purse, the rules in force). Only a requested intent
    #: (one with `cues`) can be decided by the rules.
    decided_by: Decider = Decider.CHARACTER
    #: What the intent hands over and at what price, by the value of its ware parameter (its
    #: one enum parameter with several values, e.g. `item`): every value has its ware. The
    #: prompt lists them as what the NPC sells, and nothing else.
    wares: dict[Identifier, Ware] = Field(default_factory=dict, max_length=16)
    #: World-state keys and the values they must have for the rules to grant a request
    #: (e.g. `{"alarm": false}`); a key the game never set fails the condition.
    requires: dict[StateKey, JsonScalar] = Field(default_factory=dict, max_length=16)
    #: Why a request is declined when a `requires` key does not hold, in words the player may
    #: hear and the model is told ("the gate stays shut from dusk until dawn"); a key without
    #: words is told as itself ("curfew is not false").
    requires_words: dict[StateKey, ShortText] = Field(default_factory=dict, max_length=16)
    #: The world state the act leaves (`{"gate.north": "open"}`): the game sets it when it acts,
    #: and until then a reply on the act may speak of it as done ("in you go, it's open"), so
    #: the canonical gate does not hold the reply to these keys' values before the act.
    changes: dict[StateKey, JsonScalar] = Field(default_factory=dict, max_length=16)
    #: Lines for a decided request when every attempt is refused (`DealLines`).
    deal_lines: DealLines = DealLines()

    @property
    def ware_param(self) -> str | None:
        """The parameter that names the ware: the only enum parameter with several values."""
        named = [name for name, p in sorted(self.params.items()) if len(p.enum) > 1]
        return named[0] if len(named) == 1 else None

    @property
    def count_param(self) -> str | None:
        """The parameter that counts the wares: the only integer parameter."""
        counted = [name for name, p in sorted(self.params.items()) if p.type is ParamType.INTEGER]
        return counted[0] if len(counted) == 1 else None

    @model_validator(mode="after")
    def _deals_are_complete(self) -> IntentSpec:
        unknown = sorted(set(self.requires_words) - set(self.requires))
        if unknown:
            raise ValueError(f"intent {self.type!r}: requires_words for what it does not require: {', '.join(unknown)}")
        if self.decided_by is Decider.RULES and not self.cues:
            raise ValueError(f"intent {self.type!r} is decided by the rules but has no cues: nothing can request it")
        if not self.wares:
            return self
        name = self.ware_param
        if name is None:
            raise ValueError(f"intent {self.type!r} has wares but no one enum parameter with several values to name them")
        values = set(self.params[name].enum)
        if set(self.wares) != values:
            missing, extra = sorted(values - set(self.wares)), sorted(set(self.wares) - values)
            raise ValueError(
                f"intent {self.type!r}: every {name} needs its ware and price"
                + (f" (missing: {', '.join(missing)})" if missing else "")
                + (f" (not a {name}: {', '.join(extra)})" if extra else "")
            )
        return self


class FewShotExample(FrozenModel):
    player: Line
    #: The reply exactly as the model should produce it (dialogue only; the output format is
    #: shown by the prompt).
    npc: Line
    emotion: Emotion = Emotion.NEUTRAL
    #: The world intent this reply grants (one of the NPC's allowed intents), or None: an
    #: example that shows the model what granting a request looks like.
    intent: WorldIntent | None = None


class Fallbacks(FrozenModel):
    """Author-controlled lines used when no valid answer could be produced. Chosen in order:
    by trigger reason, then generic, then the world's emergency line. A line is held to the rules
    it stands in for: registration refuses one that breaks a hard or critical rule holding in
    every interaction, or reveals a secret; at run time one that breaks a rule active in context
    is skipped (the receipt's `skipped_fallbacks` says which, and why)."""

    by_trigger: dict[TriggerReason, tuple[Line, ...]] = Field(default_factory=dict)
    generic: tuple[Line, ...] = ()


class WorkingMemoryBounds(FrozenModel):
    """How much memory one prompt may carry."""

    max_exchanges: int = Field(default=4, ge=0, le=64)
    max_episodic: int = Field(default=6, ge=0, le=256)
    max_beliefs: int = Field(default=6, ge=0, le=256)
    max_few_shot: int = Field(default=3, ge=0, le=32)
    #: Character budget of the whole prompt. Canonical facts and world state are never dropped,
    #: so a prompt can exceed it; the manifest then says so.
    max_chars: int = Field(default=12000, ge=500, le=400_000)
    #: Beliefs below this confidence are not retrieved.
    belief_threshold: float = Field(default=0.2, ge=0.0, le=1.0)


class UngroundedNumbers(str, Enum):
    """What the gate does with an amount of money ("30 gold") in dialogue that is about nothing
    the interaction's context gives a value for. A number about a value the context does give
    must match it whatever this says; counting ("two guards"), times and durations are never
    flagged."""

    #: Said as the model wrote it.
    ALLOW = "allow"
    #: A soft failure: retried with a repair, accepted with a warning on the last attempt.
    FLAG = "flag"


class OutputHygiene(str, Enum):
    """What the gate does with a reply whose dialogue starts with a speaker label ("Brom: ..."),
    holds a stage direction ("*smiles*", "(laughs)"), bracket markup ("[MEMORY: ...]") or ends
    in a sentence fragment. Meta-text ("As an AI...", "Note: ...") is rejected either way.
    Every case is a finding in the attempt's record."""

    #: Strip it; a stage direction that clearly names a feeling ("laughs", "sighs") becomes the
    #: reply's emotion when the model left that neutral. A trailing fragment is cut back to the
    #: last full sentence. A reply with nothing left fails the attempt (hard), so it is retried.
    CLEAN = "clean"
    #: Reject it: each case is a hard failure, retried with a repair.
    STRICT = "strict"


class OutputLimits(FrozenModel):
    """Hard limits on what a reply may look like beyond the rules: degenerate text (loops,
    brackets or quotes left open, a word cut off, the model's special tokens, nothing to say),
    parroting (a prompt's example or text copied back) and self-repeats (a recent reply said
    again to another question). Each one the gate finds fails the
    attempt hard, with a reason that names it, so it is retried with a repair and then falls
    back. The defaults suit short spoken lines (see `server/pipeline/gate/degenerate.py`)."""

    #: A span of at least this many words said twice in a row is a loop ("the password is: the
    #: password is:"). 0: not checked.
    loop_span_words: int = Field(default=3, ge=0, le=32)
    #: Word n-grams of this length counted for repetition.
    ngram_words: int = Field(default=3, ge=2, le=16)
    #: An n-gram said more often than this is a loop. 0: not checked.
    max_ngram_repeats: int = Field(default=2, ge=0, le=64)
    #: Share of a reply's words that repeat an earlier word, above which it is a loop (counted
    #: only once it has `min_words_for_ratio` words). 1.0: not checked.
    max_repeated_word_ratio: float = Field(default=0.6, ge=0.0, le=1.0)
    min_words_for_ratio: int = Field(default=16, ge=2, le=2000)
    #: Brackets or quotes left open, or closed without being opened.
    unbalanced_brackets: bool = True
    #: A reply that stops in the middle of a word (no end punctuation, last word cut off).
    ends_mid_word: bool = True
    #: Text never shown to a player, on top of the loaded model's own special tokens (which the
    #: backend lists): markup of another model family, for instance.
    special_tokens: tuple[Annotated[str, StringConstraints(min_length=1, max_length=64)], ...] = Field(default=(), max_length=64)
    #: A reply whose normalised words are at least this similar to one of the prompt's examples
    #: (or another line of the prompt) is parroting. 1.0: only an exact copy; above 1: off.
    max_copy_similarity: float = Field(default=0.8, ge=0.0, le=1.01)
    #: Replies shorter than this many words are never parroting ("Aye, traveller.").
    min_copy_words: int = Field(default=4, ge=1, le=200)
    #: A reply, or one of its sentences, at least this similar to one of the NPC's recent replies
    #: (or one of their sentences) to a different player line repeats itself (`repeats_itself`).
    #: 1.0: only an exact repeat.
    max_self_similarity: float = Field(default=0.8, gt=0.0, le=1.0)
    #: Sentences (and replies) shorter than this many words may be said again: greetings, "Move
    #: along, traveller.".
    min_repeat_words: int = Field(default=5, ge=1, le=200)
    #: How many of the NPC's last replies a new one is compared with. 0: not checked.
    repeat_window: int = Field(default=24, ge=0, le=64)


class Person(FrozenModel):
    """What everyone in the world knows of one of its NPCs: a public card. The world's facts say
    it ("Brom is the guard at the north gate."), so every NPC can name the others, and a reply
    that gives the person another name or role fails the canonical gate."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    #: One noun or a short noun phrase ("guard", "merchant"): who the person is.
    role: Phrase
    #: Where to find them ("at the north gate"), said after the role.
    where: Annotated[str, StringConstraints(max_length=200)] = ""


class Economy(FrozenModel):
    """The world's money: its currencies and where the game keeps the player's purse."""

    #: Each currency's worth in the smallest one: `{"copper": 1, "silver": 10, "gold": 100}`.
    currencies: dict[Identifier, int] = Field(default_factory=dict, max_length=16)
    #: World-state key holding the player's money in the smallest currency, which the game
    #: reports with `set_state` (and sets again once it has settled a sale).
    purse: StateKey = "player.purse"
    #: Whether money the player's line hands over ("Here's 5 silver") pays where the game
    #: reports no purse. Where it does, the purse decides: words are not coin.
    payment_in_words: bool = False

    @field_validator("currencies")
    @classmethod
    def _positive(cls, currencies: dict[str, int]) -> dict[str, int]:
        for name, worth in currencies.items():
            if worth < 1:
                raise ValueError(f"currency {name!r} must be worth at least 1 of the smallest, not {worth}")
            matchable(name)
        return currencies


class NpcProfile(FrozenModel):
    id: Identifier
    name: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    #: Persona and system prompt: who the NPC is and how it speaks.
    persona: LongText
    canonical_facts: tuple[CanonicalFact, ...] = Field(default=(), max_length=512)
    secrets: tuple[Secret, ...] = Field(default=(), max_length=64)
    allowed_intents: tuple[IntentSpec, ...] = Field(default=(), max_length=32)
    rules: tuple[ExpectancyRule, ...] = Field(default=(), max_length=512)
    fallbacks: Fallbacks = Fallbacks()
    few_shot: tuple[FewShotExample, ...] = Field(default=(), max_length=32)
    bounds: WorkingMemoryBounds = WorkingMemoryBounds()
    #: Amounts of money the context does not cover: allowed, or flagged by the gate.
    ungrounded_numbers: UngroundedNumbers = UngroundedNumbers.ALLOW
    #: Speaker labels, stage directions, markup and fragments in a reply: stripped or rejected.
    output_hygiene: OutputHygiene = OutputHygiene.CLEAN
    #: Degenerate output and parroting: what fails the gate's hard limits, and how much of it.
    output_limits: OutputLimits = OutputLimits()

    @field_validator("canonical_facts")
    @classmethod
    def _facts_by_id(cls, facts: tuple[CanonicalFact, ...]) -> tuple[CanonicalFact, ...]:
        return _sorted_facts(facts)

    @model_validator(mode="after")
    def _unique_ids(self) -> NpcProfile:
        for label, ids in (
            ("canonical fact", [f.id for f in self.canonical_facts]),
            ("secret", [s.id for s in self.secrets]),
            ("intent", [i.type for i in self.allowed_intents]),
            ("rule", [r.id for r in self.rules]),
        ):
            seen: set[str] = set()
            for item in ids:
                if item in seen:
                    raise ValueError(f"duplicate {label} id {item!r}")
                seen.add(item)
        allowed = {i.type for i in self.allowed_intents}
        for example in self.few_shot:
            if example.intent is not None and example.intent.type not in allowed:
                raise ValueError(f"few-shot example grants intent {example.intent.type!r}, which the NPC may not emit")
        return self


class WorldDefinition(FrozenModel):
    id: Identifier
    #: Lore every NPC shares, placed in each NPC's static prompt prefix.
    lore: LongText = ""
    canonical_facts: tuple[CanonicalFact, ...] = Field(default=(), max_length=1024)
    rules: tuple[ExpectancyRule, ...] = Field(default=(), max_length=512)
    fallbacks: Fallbacks = Fallbacks()
    #: The last-resort line when no NPC or world fallback applies: a neutral line, checked like
    #: every fallback against each NPC's rules and secrets. Where even it would break a rule in
    #: context, the NPC says nothing.
    emergency_fallback: Line = "..."
    #: World state the game starts with.
    initial_state: dict[StateKey, JsonScalar] = Field(default_factory=dict)
    #: Values a missing world-state key may be derived from when a rule or contract needs it.
    state_defaults: dict[StateKey, JsonScalar] = Field(default_factory=dict)
    #: World-state keys described as claims (`gate.north` -> subject "north gate", attribute
    #: "state"): while the prompt carries the key, a reply that states another value than the
    #: key's fails the canonical gate like a contradicted canonical fact. The words of a claim's
    #: subject and aliases also name the key for task classification ("Is the gate open?").
    state_claims: dict[StateKey, StateClaim] = Field(default_factory=dict, max_length=256)
    #: The world's people by NPC id: each is a canonical fact of the world (`registration`).
    people: dict[Identifier, Person] = Field(default_factory=dict, max_length=256)
    #: Currencies and the player's purse, for the wares NPCs sell (`IntentSpec.wares`).
    economy: Economy = Economy()

    @field_validator("people")
    @classmethod
    def _distinct_names(cls, people: dict[str, Person]) -> dict[str, Person]:
        names = [fold(p.name) for p in people.values()]
        if len(names) != len(set(names)):
            raise ValueError("two people of the world share a name")
        return people

    @field_validator("canonical_facts")
    @classmethod
    def _unique_fact_ids(cls, facts: tuple[CanonicalFact, ...]) -> tuple[CanonicalFact, ...]:
        ids = [f.id for f in facts]
        if len(ids) != len(set(ids)):
            raise ValueError("duplicate canonical fact id")
        return _sorted_facts(facts)


def _sorted_facts(facts: tuple[CanonicalFact, ...]) -> tuple[CanonicalFact, ...]:
    """Canonical facts by id: the order a designer listed them in changes no hash, no stored
    definition and no sequence number the store assigns them."""
    return tuple(sorted(facts, key=lambda fact: fact.id))
