"""Context contract: task classification, section gating, sufficiency."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import rich_guard_profile, rich_world, say
from pipeline_helpers import ask, make_pipeline

from loreguard.schemas import Authority, Belief, InteractionContext, MemoryWrite, UpsertBelief
from loreguard.server.pipeline.contract import (
    ContextContract,
    Section,
    TaskType,
    Verdict,
    Vocabulary,
    check_sufficiency,
    classify,
    contract_for,
    vocabulary,
)


@pytest.mark.parametrize(
    ("trigger", "text", "task"),
    [
        ("player_utterance", "Who is the king of this town?", TaskType.LORE_QUESTION),
        ("player_utterance", "Got any work for me? I need the reward.", TaskType.QUEST),
        ("player_utterance", "What's the price of that sword? I'll pay in gold.", TaskType.TRADE),
        ("player_utterance", "Nice hat!", TaskType.SMALL_TALK),
        ("quest_trigger", "", TaskType.QUEST),
        ("zone_trigger", "", TaskType.AMBIENT),
        ("time_trigger", "", TaskType.AMBIENT),
        ("world_event", "", TaskType.WORLD_EVENT),
        ("npc_interaction", "", TaskType.NPC_EXCHANGE),
        ("custom", "tell me the story of the war", TaskType.LORE_QUESTION),
    ],
)
def test_classification(trigger: str, text: str, task: TaskType) -> None:
    ctx = InteractionContext.model_validate({"npc_id": "n", "trigger_reason": trigger, "player_input": text})
    assert classify(ctx) is task


def test_sections_gate_memory() -> None:
    lore = contract_for(
        InteractionContext.model_validate(
            {"npc_id": "n", "trigger_reason": "player_utterance", "player_input": "Who is the king?"}
        )
    )
    assert Section.BELIEFS in lore.sections and Section.WORLD_STATE not in lore.sections
    quest = contract_for(InteractionContext.model_validate({"npc_id": "n", "trigger_reason": "quest_trigger"}))
    assert Section.WORLD_STATE in quest.sections and quest.required_prefixes == ("quest.",)


def test_sufficiency_pass_retry_clarify() -> None:
    contract = ContextContract(task_type=TaskType.QUEST, sections=(), required_prefixes=("quest.",))
    assert check_sufficiency(contract, (), {"quest.stage": 1}, {}).verdict is Verdict.PASS
    retry = check_sufficiency(contract, ("alarm",), {"quest.stage": 1}, {"alarm": False})
    assert retry.verdict is Verdict.RETRY and retry.derived == {"alarm": False}
    derived_prefix = check_sufficiency(contract, (), {}, {"quest.stage": 0})
    assert derived_prefix.verdict is Verdict.RETRY and derived_prefix.derived == {"quest.stage": 0}
    clarify = check_sufficiency(contract, ("alarm", "curfew"), {}, {"alarm": False})
    assert clarify.verdict is Verdict.CLARIFY
    assert clarify.missing == ("world_state:curfew", "world_state:quest.*")


def test_a_mistyped_key_asks_the_game_to_clarify_and_is_never_derived() -> None:
    contract = ContextContract(task_type=TaskType.SMALL_TALK, sections=())
    verdict = check_sufficiency(contract, (), {"curfew": "yes"}, {"curfew": False}, ("curfew",))
    assert verdict.verdict is Verdict.CLARIFY
    assert (verdict.missing, verdict.mistyped, verdict.derived) == (("world_state:curfew",), ("curfew",), {})


# --- retrieval answers the question that was asked -------------------------------------------

W, B, E, X = Section.WORLD_STATE, Section.BELIEFS, Section.EPISODIC, Section.EXCHANGES
LORE, QUEST, TRADE, SMALL = TaskType.LORE_QUESTION, TaskType.QUEST, TaskType.TRADE, TaskType.SMALL_TALK

#: A world whose keys can be named in six languages through their state claims' aliases.
ASKED_WORLD = rich_world(
    initial_state={
        "alarm": False,
        "door.tavern": "locked",
        "gate.north": "closed",
        "price.sword": 50,
        "quest.wolves": "accepted",
        "weather": "rain",
    },
    state_claims={
        "gate.north": {
            "subject": "north gate",
            "attribute": "state",
            "subject_aliases": ["gate", "Tor", "portón", "portail", "ворота", "門"],
            "cues": ["is"],
            "values": {"closed": ["shut"], "open": ["opened"]},
        },
        "door.tavern": {
            "subject": "tavern door",
            "attribute": "state",
            "subject_aliases": ["door", "Tür", "puerta", "porte", "дверь", "扉"],
            "cues": ["is"],
            "values": {"locked": ["shut"], "open": ["unlocked"]},
        },
        "quest.wolves": {
            "subject": "wolf hunt",
            "attribute": "stage",
            "subject_aliases": ["wolves", "Wölfe", "lobos", "loups", "волки", "狼"],
            "values": {"accepted": [], "done": []},
        },
        "weather": {
            "subject": "weather",
            "attribute": "kind",
            "subject_aliases": ["Wetter", "tiempo", "météo", "погода", "天気"],
            "values": {"rain": ["raining"], "sun": ["sunny"]},
        },
    },
)
#: The guard's beliefs, by id: (content, confidence).
ASKED_BELIEFS = {
    "wolves": ("The wolves took three sheep last week.", 0.7),
    "mayor": ("The mayor pays well for a wolf pelt.", 0.6),
    "market": ("市場は朝に開く。", 0.5),
    "miller": ("Мельник прячет муку.", 0.4),
}
ASKED_VOCABULARY = vocabulary(
    ASKED_WORLD.initial_state,
    ASKED_WORLD.state_claims,
    ASKED_WORLD.canonical_facts + rich_guard_profile().canonical_facts,
    [
        Belief(id=b, seq=i, content=c, confidence=x, source=Authority.VALIDATED_OUTPUT)
        for i, (b, (c, x)) in enumerate(ASKED_BELIEFS.items())
    ],
    0.2,
)

ASKED = [
    # English: world state, yes/no and wh-
    ("Is the door open?", LORE, {B, E, X, W}),
    ("Is the gate open?", LORE, {B, E, X, W}),
    ("Is the north gate still shut?", LORE, {B, E, X, W}),
    ("Are the gates open?", LORE, {B, E, X, W}),  # gates = gate
    ("What's the weather like today?", LORE, {B, E, X, W}),
    ("When does the gate close?", LORE, {B, E, X, W}),
    ("Is the alarm ringing?", LORE, {B, E, X, W}),
    ("Tell me about the gate.", LORE, {B, E, X, W}),  # not a question, but it names a key
    ("Open the gate!", SMALL, {B, E, X, W}),
    ("The weather is awful.", SMALL, {B, E, X, W}),
    # English: quests (a named quest key makes a question a quest question) and trade
    ("Where are the wolves?", QUEST, {W, B, E, X}),
    ("How are my quests going?", QUEST, {W, B, E, X}),  # quests = quest
    ("Any news on the quest?", QUEST, {W, B, E, X}),
    ("Got any work for me? I need the reward.", QUEST, {W, B, E, X}),
    ("How much is a sword?", TRADE, {W, X}),  # names price.sword
    ("What does the mayor pay for pelts?", TRADE, {W, X, B}),  # names a belief: beliefs join
    # English: canonical facts and beliefs
    ("Who is the king of this town?", LORE, {B, E, X}),
    ("Is the king named Arthur?", LORE, {B, E, X}),
    ("Does the river Ald flood?", LORE, {B, E, X}),
    ("Have you seen any sheep?", LORE, {B, E, X}),
    ("I heard about the sheep.", SMALL, {B, E, X}),
    # English: small talk
    ("Nice hat!", SMALL, {B, E, X}),
    ("How are you?", SMALL, {B, E, X}),
    ("Can I pass?", SMALL, {B, E, X}),
    ("I love the rain.", SMALL, {B, E, X, W}),  # a value the key's claim lists names the key
    # German
    ("Ist das Tor offen?", LORE, {B, E, X, W}),
    ("Ist die Tür verschlossen?", LORE, {B, E, X, W}),
    ("Hast du Arbeit für mich?", QUEST, {W, B, E, X}),
    ("Wer ist der König?", LORE, {B, E, X}),
    ("Wo sind die Wölfe", QUEST, {W, B, E, X}),  # no question mark: "wo" opens it
    ("Schönes Wetter heute.", SMALL, {B, E, X, W}),
    # Spanish
    ("¿Está abierta la puerta?", LORE, {B, E, X, W}),
    ("¿Tienes una misión para mí?", QUEST, {W, B, E, X}),
    ("¿Cuánto cuesta la espada?", TRADE, {W, X}),
    ("¿Quién es el rey?", LORE, {B, E, X}),
    ("¿Dónde están los lobos?", QUEST, {W, B, E, X}),
    ("Hola, amigo.", SMALL, {B, E, X}),
    # French
    ("La porte est-elle ouverte ?", LORE, {B, E, X, W}),
    ("Où sont les loups ?", QUEST, {W, B, E, X}),
    ("Quel est le prix de l'épée ?", TRADE, {W, X}),
    ("Qui est le roi ?", LORE, {B, E, X}),
    ("Quelle est la météo ?", LORE, {B, E, X, W}),
    # Russian
    ("Ворота открыты?", LORE, {B, E, X, W}),
    ("Открыта ли дверь", LORE, {B, E, X, W}),  # the particle ли makes it a question
    ("Есть работа?", QUEST, {W, B, E, X}),
    ("Кто король?", LORE, {B, E, X}),
    ("Где волки?", QUEST, {W, B, E, X}),
    ("Что прячет мельник?", LORE, {B, E, X}),  # names a belief
    # Japanese
    ("門は開いていますか？", LORE, {B, E, X, W}),
    ("扉は閉まっていますか", LORE, {B, E, X, W}),  # a closing か
    ("何か仕事はありますか？", QUEST, {W, B, E, X}),
    ("王様は誰ですか？", LORE, {B, E, X}),
    ("狼はどこ？", QUEST, {W, B, E, X}),
    ("市場はいつ開く？", LORE, {B, E, X}),  # names a belief
    ("こんにちは", SMALL, {B, E, X}),
]


@pytest.mark.parametrize(("line", "task", "sections"), ASKED)
def test_retrieval_answers_the_question_that_was_asked(line: str, task: TaskType, sections: set[Section]) -> None:
    ctx = InteractionContext.model_validate({"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": line})
    contract = contract_for(ctx, ASKED_VOCABULARY)
    assert (contract.task_type, set(contract.sections)) == (task, sections)
    assert list(contract.sections) == sorted(sections, key=lambda s: s.value)  # a strict order


def test_the_table_covers_forty_lines_in_six_languages() -> None:
    assert len(ASKED) >= 40 and len({task for _, task, _ in ASKED}) == 4


def test_without_the_npcs_vocabulary_a_state_question_is_small_talk() -> None:
    # The old answer, and why the contract needs the vocabulary: nothing in the words says "door".
    ctx = InteractionContext.model_validate(
        {"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": "Is the door open?"}
    )
    assert contract_for(ctx).task_type is SMALL and Section.WORLD_STATE not in contract_for(ctx).sections


#: Lines through the real pipeline (scripted model) and the non-canonical context keys their
#: prompt carried: the guard retrieves one belief at most, so the belief shown is the best match.
ALL_STATE = tuple(f"world_state:{k}" for k in sorted(ASKED_WORLD.initial_state))


@pytest.mark.parametrize(
    ("line", "keys"),
    [
        ("Is the door open?", ALL_STATE + ("belief:wolves",)),
        ("Where are the wolves?", ALL_STATE + ("belief:wolves",)),
        ("What does the mayor pay for pelts?", ALL_STATE + ("belief:mayor",)),
        ("Ist das Tor offen?", ALL_STATE + ("belief:wolves",)),
        ("市場はいつ開く？", ("belief:market",)),
        ("Что прячет мельник?", ("belief:miller",)),
        ("Nice hat!", ("belief:wolves",)),
    ],
)
def test_the_prompt_carries_what_the_question_asks_for(tmp_path: Path, line: str, keys: tuple[str, ...]) -> None:
    profile = rich_guard_profile(bounds={"max_beliefs": 1})
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", [say("Hm.")], profile=profile, world=ASKED_WORLD)
    beliefs = [
        MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=UpsertBelief(scope="guard", belief_id=b, content=c, confidence=x))
        for b, (c, x) in ASKED_BELIEFS.items()
    ]
    assert pipeline.store.apply(beliefs).committed
    result = pipeline.interact(ask(line))
    assert tuple(k for k in result.receipt.context_keys if not k.startswith("canonical:")) == keys
    assert result.receipt.context_keys == backend.requests[0].prompt.context_keys


def test_a_line_that_calls_for_a_memory_brings_memories_in_whatever_its_task() -> None:
    from loreguard.memory.recall import RecallIndex
    from loreguard.schemas.memory import Authority, EpisodicEntry

    told = EpisodicEntry(
        id="ep1", seq=1, text="The player's sister Sesav buried the coin under the harbour.", significance=0.3,
        at_interaction=0, source=Authority.VALIDATED_OUTPUT,
    )  # fmt: skip
    chatter = [
        EpisodicEntry(
            id=f"ep{i}",
            seq=i,
            text=f"The player asked about the weather, day {i}.",
            significance=0.3,
            at_interaction=i,
            source=Authority.VALIDATED_OUTPUT,
        )  # fmt: skip
        for i in range(2, 12)
    ]
    vocab = Vocabulary(memories=RecallIndex.of([told, *chatter]))
    asked = InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="Where did Sesav bury the coin?")
    contract = contract_for(asked, vocab)
    assert contract.task_type is TaskType.TRADE  # "coin" says trade...
    assert Section.EPISODIC in contract.sections  # ...and Sesav is in memory
    trade = InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="What does a sword cost?")
    assert Section.EPISODIC not in contract_for(trade, vocab).sections
