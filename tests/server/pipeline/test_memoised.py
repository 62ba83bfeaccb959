"""What the pipeline memoises between interactions (a rule's constraint, a constraint set's hash,
the words of the canonical facts, the changes a replayed reply wrote) equals what it would compute
afresh, and a re-registered profile is never answered from what the old one left behind; the
gate's fast paths give what the plain computation gives."""

from __future__ import annotations

import json
import random
import re
import unicodedata
from collections import Counter
from pathlib import Path

from factories import eldmoor_world, guard_profile, rich_guard_profile, say
from pipeline_helpers import ask, make_pipeline

from loreguard.memory import MemoryStore, content_hash
from loreguard.schemas import CanonicalFact, ExpectancyRule, InteractionContext
from loreguard.server.pipeline.contract import _canonical_words, vocabulary
from loreguard.server.pipeline.expectancy import ConstraintSet, _new_constraint, evaluate_rules, to_constraint
from loreguard.server.pipeline.gate.degenerate import _repeated_ngram
from loreguard.server.pipeline.gate.grounding import _canonical_subjects, subjects_in_context
from loreguard.server.pipeline.turn.intents import offered_intents
from loreguard.server.pipeline.turn.output_schema import GenerationLimits, _output_schema, output_schema
from loreguard.server.pipeline.turn.transcript import reply_changes
from loreguard.text.phrases import clean_dialogue


def test_a_rule_gives_one_constraint_equal_to_a_fresh_one() -> None:
    profile = rich_guard_profile()
    for rule in profile.rules:
        assert to_constraint(rule) is to_constraint(rule)
        assert to_constraint(rule) == _new_constraint(rule)


def test_a_changed_rule_gives_its_own_constraint() -> None:
    data = {"id": "no_dragons", "type": "prohibition", "severity": "hard", "checks": {"forbidden_phrases": ["dragon"]}}
    old = ExpectancyRule.model_validate(data)
    new = ExpectancyRule.model_validate({**data, "checks": {"forbidden_phrases": ["wyvern"]}})
    assert to_constraint(old).checks.forbidden_phrases == ("dragon",)
    assert to_constraint(new).checks.forbidden_phrases == ("wyvern",)


def test_the_memoised_set_hash_is_the_content_hash() -> None:
    profile = rich_guard_profile()
    ctx = InteractionContext(npc_id=profile.id, trigger_reason="player_utterance", player_input="hello")
    first = evaluate_rules(profile.rules, ctx, 5, {}, {}).constraints
    again = evaluate_rules(profile.rules, ctx, 5, {}, {}).constraints
    assert first is not again and first.hash() == again.hash() == content_hash(first)
    # A set of other constraint objects with the same content hashes the same.
    rebuilt = ConstraintSet.of(_new_constraint(r) for r in profile.rules if to_constraint(r) in first.constraints)
    assert rebuilt.constraints[0] is not first.constraints[0]
    assert rebuilt.hash() == content_hash(rebuilt) == first.hash()
    # And a different set does not take the first one's hash.
    fewer = ConstraintSet(constraints=first.constraints[1:])
    assert fewer.hash() == content_hash(fewer) != first.hash()
    # The prompt's rule lines likewise.
    for constraints in (first, again, rebuilt, fewer):
        assert constraints.to_prompt_injection() == constraints._prompt_lines()
    assert fewer.to_prompt_injection() != first.to_prompt_injection()


def test_canonical_words_follow_re_registered_facts(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "m.sqlite")
    profile = guard_profile(canonical_facts=[{"id": "gate", "text": "The north gate closes at dusk."}])
    store.register_npc(profile)

    def words() -> frozenset[str]:
        view = store.view(profile.id)
        facts = [c.fact for c in view.world_memory.canonical + view.npc.canonical]
        vocab = vocabulary({}, {}, facts, (), 0.2)
        assert vocab.canonical == _canonical_words(facts)
        return vocab.canonical

    assert "dusk" in words() and "dragon" not in words()
    changed = guard_profile(
        canonical_facts=[
            {"id": "gate", "text": "The north gate closes at dusk."},
            {"id": "lair", "text": "A dragon sleeps under the hill."},
        ]
    )
    assert store.register_npc(changed).committed
    assert "dragon" in words()
    store.close()


def test_vocabulary_words_equal_for_equal_facts_built_apart() -> None:
    fact = {"id": "gate", "text": "The north gate closes at dusk.", "tags": ["harbour"]}
    a, b = CanonicalFact.model_validate(fact), CanonicalFact.model_validate(fact)
    assert vocabulary({}, {}, [a], (), 0.2).canonical == vocabulary({}, {}, [b], (), 0.2).canonical


def testreply_changes_are_what_the_reply_says() -> None:
    reply = json.dumps(
        {
            "dialogue": "Aye.",
            "emotion": "neutral",
            "mutations": [
                {"kind": "append_episodic", "text": "Met a traveller.", "significance": 0.4},
                {"kind": "transform_belief", "target": "traveller", "content": "Seems honest.", "confidence": 0.6},
                {"kind": "append_episodic", "text": "It rained.", "significance": 0.1},
            ],
        }
    )
    assert reply_changes(reply) == (("Met a traveller.", "It rained."), (("traveller", "Seems honest."),))
    assert reply_changes(json.dumps({"dialogue": "Aye.", "emotion": "neutral", "mutations": []})) == ((), ())


def test_the_output_schema_is_built_once_per_intents_and_equals_a_fresh_one() -> None:
    profile = rich_guard_profile()
    limits = GenerationLimits()
    intents = offered_intents("", profile.allowed_intents)
    first = output_schema(intents, limits)
    assert output_schema(tuple(intents), limits) is first
    assert first == _output_schema(intents, limits)
    tighter = GenerationLimits(dialogue_chars=100)
    assert output_schema(intents, tighter) == _output_schema(intents, tighter) != first
    assert output_schema((), limits) == _output_schema((), limits) != first


def test_canonical_number_subjects_are_memoised_per_facts_and_equal_fresh_ones() -> None:
    facts = tuple(
        CanonicalFact.model_validate(
            {
                "id": f"price_{i}",
                "text": f"A lantern costs {i} crowns.",
                "claims": [{"subject": "lantern", "attribute": "price", "value": f"{i} crowns"}],
            }
        )
        for i in (3, 7)
    )
    state = (("price.sword", 12), ("weather", "rain"))
    first = subjects_in_context(state, facts)
    assert [s.label for s in first] == ["world_state:price.sword", "canonical:price_3", "canonical:price_7"]
    assert first[1:] == _canonical_subjects(facts)
    assert subjects_in_context(state, list(facts))[1:] == first[1:]
    rebuilt = tuple(CanonicalFact.model_validate(f.model_dump()) for f in facts[:1])
    assert subjects_in_context((), rebuilt) == _canonical_subjects(rebuilt) == first[1:2]


def _clean_dialogue_reference(text: str) -> str:
    text = unicodedata.normalize("NFC", text)
    text = "".join(ch if ch.isprintable() or ch in " \n\t" else ("" if unicodedata.category(ch) == "Cf" else " ") for ch in text)
    return re.sub(r"\s+", " ", text).strip()


def test_clean_dialogue_fast_path_equals_the_character_walk() -> None:
    rng = random.Random(13)
    alphabet = ["a", "B", " ", "\n", "\t", "\u200b", "\u00ad", "\x07", "\u2028", "é", "e\u0301", "і", ".", "\u3000"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        assert clean_dialogue(text) == _clean_dialogue_reference(text), repr(text)


def _repeated_ngram_reference(words: tuple[str, ...], size: int, max_repeats: int) -> tuple[str, int] | None:
    grams = [words[i : i + size] for i in range(len(words) - size + 1)]
    if len(grams) <= max_repeats:
        return None
    counts = Counter(grams)
    best = max(grams, key=lambda g: counts[g])
    return (" ".join(best), counts[best]) if counts[best] > max_repeats else None


def test_repeated_ngram_shortcut_equals_the_ranking() -> None:
    rng = random.Random(17)
    for _ in range(2000):
        words = tuple(rng.choice("abc") for _ in range(rng.randrange(0, 14)))
        size, repeats = rng.randrange(1, 4), rng.randrange(1, 4)
        assert _repeated_ngram(words, size, repeats) == _repeated_ngram_reference(words, size, repeats)


def test_a_re_registered_profile_reaches_the_next_prompt_and_gate(tmp_path: Path) -> None:
    """Facts, rules and their prompt text are memoised on the objects the store holds; a new
    registration brings new objects, so the next interaction sees the new designer data."""
    rule = {"id": "no_beasts", "type": "prohibition", "severity": "hard", "prompt_injection": "speak of wolves"}
    rule["checks"] = {"forbidden_phrases": ["wolf"]}
    profile = guard_profile(rules=[rule])
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", profile=profile, world=eldmoor_world())
    backend.extend([say("The gate closes at dusk."), say("Wyverns? Never seen one.")])
    first = pipeline.interact(ask("When does the gate close?"))
    prompt = backend.requests[-1].prompt.full
    assert "speak of wolves" in prompt and "A dragon sleeps" not in prompt
    changed = guard_profile(
        canonical_facts=[
            *profile.model_dump(mode="json")["canonical_facts"],
            {"id": "lair", "text": "A dragon sleeps under the hill."},
        ],
        rules=[{**rule, "prompt_injection": "speak of wyverns", "checks": {"forbidden_phrases": ["wyvern"]}}],
    )
    assert pipeline.store.register_npc(changed).committed
    second = pipeline.interact(ask("Seen any wyverns?"))
    prompt = backend.requests[-1].prompt.full
    assert "speak of wyverns" in prompt and "speak of wolves" not in prompt
    assert "A dragon sleeps under the hill." in prompt
    assert second.failed_gates == ("constraints",)  # the new phrase is checked
    assert first.receipt.constraints_hash != second.receipt.constraints_hash
