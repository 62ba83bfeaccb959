"""Task contracts: what kind of interaction this is, which memory it needs, and whether the
gathered context is sufficient before any model is called (pass / retry / clarify).

Classification is trigger-, keyword- and vocabulary-based and deterministic. Canonical facts
are always in the prompt (they live in the static prefix, which is what makes KV-cache reuse
possible); the contract gates the dynamic sections.

Retrieval answers the question that was asked. The contract sees a `Vocabulary`: the words that
name what this NPC's memory holds right now (world-state keys, their state claims' subjects and
aliases, canonical facts, beliefs). A player line that names a world-state key or a belief brings
that section into the prompt whatever its task ("Tell me about the gate" carries the gate's
state), and so does a line that calls for one of its episodic memories (retrieval's relevance
test); a question (`loreguard.text.questions.is_question`: yes/no or wh-, in English, German, Spanish, French, Russian or
Japanese) that names something the NPC knows is a lore question unless its keywords make it a
quest or a trade, and the words of a world-state key it names count as its keywords ("Where are
the wolves?" with `quest.wolves` set is a quest question). Words match as folded stems
(`keywords`: "quests" is "quest", "Tor" is "tor"), so a key answers in another language through
its state claim's aliases.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from loreguard.memory.memo import IdentityMemo
from loreguard.memory.recall import RecallIndex
from loreguard.memory.retrieval import RELEVANCE_FLOOR, keywords
from loreguard.schemas.base import FrozenModel, JsonScalar
from loreguard.schemas.interaction import InteractionContext, TaskType, TriggerReason
from loreguard.schemas.memory import Belief, CanonicalFact, StateClaim
from loreguard.schemas.text import fold
from loreguard.text.questions import is_question
from loreguard.text.words import stem

__all__ = ["TaskType"]  # defined with the wire models: rule conditions name task types


class Section(str, Enum):
    WORLD_STATE = "world_state"
    EPISODIC = "episodic"
    BELIEFS = "beliefs"
    EXCHANGES = "exchanges"


def _cues(text: str) -> frozenset[str]:
    """Cue words as a line's keywords hold them: folded, stemmed ("König" -> "konig", "coins" ->
    "coin"); an unspaced-script cue is one two-character piece ("仕事")."""
    return frozenset(stem(fold(word)) for word in text.split())


#: Keyword cues per task type, checked in this order; the type with most hits wins, ties go to
#: the earlier type. English first, then German, Spanish, French, Russian and Japanese.
TASK_KEYWORDS: tuple[tuple[TaskType, frozenset[str]], ...] = (
    (
        TaskType.QUEST,
        _cues(
            "quest task job work help reward mission bounty errand hunt "
            "auftrag aufgabe arbeit belohnung  misión tarea trabajo recompensa encargo  quête tâche travail récompense "
            "задание задания работа работу награда награду поручение  依頼 仕事 任務 報酬"
        ),
    ),
    (
        TaskType.TRADE,
        _cues(
            "buy sell price cost trade gold coin wares shop pay "
            "kaufen verkaufen preis kostet münzen handel  comprar vender precio cuesta oro monedas tienda "
            "acheter vendre prix coûte pièces boutique  купить продать цена стоит золото монеты  値段 価格 買う 売る"
        ),
    ),
    (
        TaskType.LORE_QUESTION,
        _cues(
            "who history king queen legend lore tell know story ancient war name city town river "
            "geschichte könig königin legende  historia rey reina leyenda  histoire roi reine légende "
            "история король королева легенда  歴史 伝説 王様 物語"
        ),
    ),
)

SECTIONS: dict[TaskType, frozenset[Section]] = {
    TaskType.LORE_QUESTION: frozenset({Section.BELIEFS, Section.EPISODIC, Section.EXCHANGES}),
    # What the NPC believes about the quest's target or the player matters to a quest too.
    TaskType.QUEST: frozenset({Section.WORLD_STATE, Section.BELIEFS, Section.EPISODIC, Section.EXCHANGES}),
    TaskType.TRADE: frozenset({Section.WORLD_STATE, Section.EXCHANGES}),
    TaskType.SMALL_TALK: frozenset({Section.EPISODIC, Section.BELIEFS, Section.EXCHANGES}),
    TaskType.AMBIENT: frozenset({Section.WORLD_STATE}),
    TaskType.WORLD_EVENT: frozenset({Section.WORLD_STATE, Section.BELIEFS}),
    TaskType.NPC_EXCHANGE: frozenset({Section.WORLD_STATE, Section.BELIEFS, Section.EPISODIC}),
}

#: World-state key prefixes a task needs at least one key under, when its trigger says so.
REQUIRED_STATE_PREFIXES: dict[TriggerReason, tuple[str, ...]] = {TriggerReason.QUEST_TRIGGER: ("quest.",)}


class ContextContract(FrozenModel):
    task_type: TaskType
    sections: tuple[Section, ...]
    #: Prefixes of world-state keys of which at least one must be present.
    required_prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Vocabulary:
    """The words (as `keywords` gives them) that name what an NPC's memory holds at one
    interaction, by section: what lets the contract see what a player line is about."""

    #: Each world-state key with the words that name it: its own ("gate.north": gate, north),
    #: and its state claim's subject, aliases and listed values. By key.
    state: tuple[tuple[str, frozenset[str]], ...] = ()
    #: Canonical facts' text, claim subjects and aliases, and tags.
    canonical: frozenset[str] = frozenset()
    #: The contents of the beliefs retrieval may return (not contradicted, confident enough).
    beliefs: frozenset[str] = frozenset()
    #: The NPC's episodic memory, indexed: a line that calls for one of its memories brings them in.
    memories: RecallIndex | None = None

    def state_keys_named(self, said: frozenset[str]) -> tuple[str, ...]:
        return tuple(key for key, names in self.state if names & said)

    def recalls(self, said: frozenset[str]) -> bool:
        """Whether the line calls for a memory (retrieval's own test: relevance at its floor)."""
        if self.memories is None or not said:
            return False
        return any(score >= RELEVANCE_FLOOR for score in self.memories.relevance(said).values())


EMPTY_VOCABULARY = Vocabulary()


def _state_names(key: str, claim: StateClaim | None) -> frozenset[str]:
    names = set(keywords(key))
    if claim is not None:
        for phrase in (claim.subject, *claim.subject_aliases, *claim.values):
            names |= keywords(phrase)
        for aliases in claim.values.values():
            for phrase in aliases:
                names |= keywords(phrase)
    return frozenset(names)


_CANONICAL_WORDS: IdentityMemo[frozenset[str]] = IdentityMemo(maxsize=256)


def _canonical_words(facts: Iterable[CanonicalFact]) -> frozenset[str]:
    canonical: set[str] = set()
    for fact in facts:
        canonical |= keywords(fact.text)
        for tag in fact.tags:
            canonical |= keywords(tag)
        for claim in fact.claims:
            for phrase in (claim.subject, *claim.subject_aliases):
                canonical |= keywords(phrase)
    return frozenset(canonical)


def vocabulary(
    state_keys: Iterable[str],
    state_claims: Mapping[str, StateClaim],
    facts: Iterable[CanonicalFact],
    beliefs: Iterable[Belief],
    belief_threshold: float,
    memories: RecallIndex | None = None,
) -> Vocabulary:
    """The vocabulary of an NPC's memory: pure, and the same whatever order anything came in."""
    facts = tuple(facts)
    # The facts change only when the designer registers again: their words are memoised on the
    # very fact objects (a frozen fact's words never change).
    canonical = _CANONICAL_WORDS.get(facts, lambda: _canonical_words(facts))
    believed: set[str] = set()
    for belief in beliefs:
        if belief.confidence >= belief_threshold and not belief.contradicted:  # as retrieval selects them
            believed |= keywords(belief.content)
    return Vocabulary(
        state=tuple((key, _state_names(key, state_claims.get(key))) for key in sorted(set(state_keys))),
        canonical=canonical,
        beliefs=frozenset(believed),
        memories=memories,
    )


def _task_from_trigger(trigger: TriggerReason) -> TaskType | None:
    if trigger is TriggerReason.QUEST_TRIGGER:
        return TaskType.QUEST
    if trigger in (TriggerReason.ZONE_TRIGGER, TriggerReason.TIME_TRIGGER):
        return TaskType.AMBIENT
    if trigger is TriggerReason.WORLD_EVENT:
        return TaskType.WORLD_EVENT
    if trigger is TriggerReason.NPC_INTERACTION:
        return TaskType.NPC_EXCHANGE
    return None


def _task_from_words(said: frozenset[str]) -> TaskType:
    best, best_hits = TaskType.SMALL_TALK, 0
    for task, cues in TASK_KEYWORDS:
        hits = len(said & cues)
        if hits > best_hits:
            best, best_hits = task, hits
    return best


def classify(ctx: InteractionContext, vocab: Vocabulary = EMPTY_VOCABULARY) -> TaskType:
    """The trigger decides, then the player's words: task cues, and for a question also the
    words of the world-state keys it names; a question about anything in `vocab` that no cue
    claims is a lore question."""
    # A scene's line answers what was said, whoever said it: its words decide, as a player's do.
    by_trigger = _task_from_trigger(ctx.trigger_reason) if ctx.scene_turn is None else None
    if by_trigger is not None:
        return by_trigger
    said = keywords(ctx.said())
    if not is_question(ctx.said()):
        return _task_from_words(said)
    named = vocab.state_keys_named(said)
    task = _task_from_words(said.union(*(keywords(key) for key in named)))
    if task is TaskType.SMALL_TALK and (named or said & vocab.canonical or said & vocab.beliefs):
        return TaskType.LORE_QUESTION
    return task


def contract_for(ctx: InteractionContext, vocab: Vocabulary = EMPTY_VOCABULARY) -> ContextContract:
    """The task's sections, and every section whose entries the player's line names."""
    task = classify(ctx, vocab)
    said = keywords(ctx.said())
    sections = set(SECTIONS[task])
    if ctx.scene_turn is not None:
        sections.add(Section.EXCHANGES)  # the speaker's own earlier lines in the scene
    if vocab.state_keys_named(said):
        sections.add(Section.WORLD_STATE)
    if said & vocab.beliefs:
        sections.add(Section.BELIEFS)
    if Section.EPISODIC not in sections and vocab.recalls(said):
        # "Where did my sister Kalix hide the coin?" is a trade question by its words; Kalix is in memory.
        sections.add(Section.EPISODIC)
    return ContextContract(
        task_type=task,
        sections=tuple(sorted(sections, key=lambda s: s.value)),
        required_prefixes=REQUIRED_STATE_PREFIXES.get(ctx.trigger_reason, ()),
    )


class Verdict(str, Enum):
    PASS = "pass"
    RETRY = "retry"
    CLARIFY = "clarify"


class Sufficiency(FrozenModel):
    verdict: Verdict
    #: What is missing: `world_state:KEY`, or `world_state:PREFIX*` for a required prefix.
    missing: tuple[str, ...] = ()
    #: Values that can be derived for missing keys (from the world's `state_defaults`).
    derived: dict[str, JsonScalar] = {}
    #: Keys the game set with a value of the wrong type for a rule that compares them.
    mistyped: tuple[str, ...] = ()
    #: The rules (by id) whose conditions those keys left unevaluated.
    rules: tuple[str, ...] = ()


def check_sufficiency(
    contract: ContextContract,
    missing_rule_keys: tuple[str, ...],
    state: Mapping[str, JsonScalar],
    defaults: Mapping[str, JsonScalar],
    mistyped_keys: tuple[str, ...] = (),
) -> Sufficiency:
    """pass when nothing is missing; retry when every missing key can be derived from
    `defaults` (the caller re-gathers with them); clarify otherwise, naming what the game must
    provide. A key whose value has the wrong type for a rule is never derived over: the game
    set it, so only the game can fix it (clarify). The model is never called on insufficient
    context."""
    if mistyped_keys:
        return Sufficiency(
            verdict=Verdict.CLARIFY,
            missing=tuple(sorted(f"world_state:{key}" for key in mistyped_keys)),
            mistyped=tuple(sorted(mistyped_keys)),
        )
    missing_keys = set(missing_rule_keys)
    missing_prefixes = []
    for prefix in contract.required_prefixes:
        if not any(key.startswith(prefix) for key in state):
            if any(key.startswith(prefix) for key in defaults):
                missing_keys.update(key for key in defaults if key.startswith(prefix))
            else:
                missing_prefixes.append(prefix)
    if not missing_keys and not missing_prefixes:
        return Sufficiency(verdict=Verdict.PASS)
    underivable = sorted(key for key in missing_keys if key not in defaults)
    if underivable or missing_prefixes:
        needs = [f"world_state:{key}" for key in underivable] + [f"world_state:{p}*" for p in missing_prefixes]
        return Sufficiency(verdict=Verdict.CLARIFY, missing=tuple(sorted(needs)))
    return Sufficiency(
        verdict=Verdict.RETRY,
        missing=tuple(f"world_state:{key}" for key in sorted(missing_keys)),
        derived={key: defaults[key] for key in sorted(missing_keys)},
    )
