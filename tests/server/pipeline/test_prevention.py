"""Prevent, then verify (issue 57): what the gate refuses on the words alone is kept out by the
sampler (`gate.prevention` states it, `inference.dialogue_guard` applies it), and a retry keeps
what the earlier attempts decided.

The corpora of real model lines say whether the sampler's constraints are right: no line a
player accepts may be kept out (an ordinary line the guard refuses is a false prevention), and
the broken lines of the rules it covers are kept out before the gate has to refuse them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from factories import say
from pipeline_helpers import ask
from stores import demo_store, guard_in_character_store

from loreguard.schemas import InteractionOutcome
from loreguard.schemas.prevention import DialogueConstraints
from loreguard.server.inference import ScriptedBackend
from loreguard.server.inference.dialogue_guard import DialogueGuard
from loreguard.server.inference.recording import RecordingBackend
from loreguard.server.pipeline import GovernancePipeline, PipelineConfig
from loreguard.server.pipeline.gate import GateConfig
from loreguard.server.pipeline.gate.register import _PATTERNS

DATA = Path(__file__).parent / "data"
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
#: Pieces as a tokenizer might cut them: a word with its leading space, a number, a mark.
PIECE = re.compile(r" ?[A-Za-z]+| ?\d+|\s+|.", re.S)
#: The rules whose broken lines in the corpora the guard keeps out, every one.
ALWAYS_PREVENTED = frozenset({"narrates_the_player", "yields_to_the_player", "no_dragon", "speaks_to_itself", "repeats_itself"})


def _constraints(
    tmp_path: Path, npc: str, earlier: list[list[str]], player: str, state: dict | None = None
) -> DialogueConstraints:
    """The constraints the pipeline sends with the first attempt at `player`, after `earlier`."""
    backend = RecordingBackend(
        ScriptedBackend({npc: [say(d) for _, d in earlier] + [say("Hm.")] * 3}, special_tokens=SPECIALS, guards=True)
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite", state), backend)
    for line, _ in earlier:
        pipeline.interact(ask(line, npc=npc, scene="eldmoor"))
    asked = len(backend.calls)
    pipeline.interact(ask(player, npc=npc, scene="eldmoor"))
    return backend.calls[asked][0].constraints


def _kept_out(constraints: DialogueConstraints, dialogue: str) -> list[tuple[str, str]]:
    """What the guard refuses, piece by piece, while the output carrying `dialogue` is written."""
    pieces = PIECE.findall(say(dialogue))
    vocabulary = list(dict.fromkeys(p.encode() for p in pieces))
    guard = DialogueGuard(constraints, vocabulary)
    refused = []
    for piece in pieces:
        token = vocabulary.index(piece.encode())
        if (why := guard.refuses(token)) is not None:
            refused.append(why)
        guard.observe(token)
    return refused


def _labelled() -> list[dict[str, Any]]:
    cases = []
    for corpus in ("model_lines", "coder_lines"):
        cases += [c for c in json.loads((DATA / f"{corpus}.json").read_text(encoding="utf-8"))["lines"]]
    return [c for c in cases if not c["id"].startswith("unchecked_")]


@pytest.mark.slow
def test_the_guard_keeps_out_no_ordinary_line_and_the_broken_lines_of_the_rules_it_covers(tmp_path: Path) -> None:
    wrongly, missed, parroting = [], [], [0, 0]
    for i, case in enumerate(_labelled()):
        constraints = _constraints(tmp_path / str(i), case["npc"], case["earlier"], case["player"], case.get("state"))
        rules = {rule for rule, _ in _kept_out(constraints, case["dialogue"])}
        if case["expect"] is None:
            if rules:
                wrongly.append((case["id"], case["dialogue"], rules))
        elif case["expect"] in ALWAYS_PREVENTED and case["expect"] not in rules:
            missed.append((case["id"], case["dialogue"]))
        elif case["expect"] == "parroting":
            parroting[0] += "parroting" in rules
            parroting[1] += 1
    assert not wrongly and not missed
    # a copy with a word changed now and then is the gate's to refuse: most are kept out
    assert parroting[0] >= 0.75 * parroting[1], parroting


def test_the_guard_keeps_out_no_benign_line(tmp_path: Path) -> None:
    benign = json.loads((DATA / "benign_lines.json").read_text(encoding="utf-8"))
    for npc in ("guard", "merchant"):
        constraints = _constraints(tmp_path / npc, npc, [], "Evening. Anything to tell me?")
        wrongly = [(line, found) for line in benign[npc] if (found := _kept_out(constraints, line))]
        assert not wrongly


def test_each_check_states_its_constraint_once_and_the_pipeline_sends_it(tmp_path: Path) -> None:
    """The guard's rules are the gate modules' own: the rule's forbidden phrase, the secret's
    words, giving in to the player, the NPC's own name, the player's words, the persona; the
    canonical facts are free."""
    constraints = _constraints(tmp_path, "guard", [], "Where can I find an inn around here?")
    banned = {(b.rule_id, b.phrase or b.pattern) for b in constraints.banned}
    assert ("no_dragon", "dragon") in banned
    assert not {("assistant_register", p.pattern) for p in _PATTERNS} & banned  # hygiene strips those: see register_bans
    assert any(rule == "yields_to_the_player" for rule, _ in banned)
    assert any(rule == "password" for rule, _ in banned)
    assert any(rule == "speaks_to_itself" and "Brom" in what for rule, what in banned)
    assert ("parroting", "where can i find") in {(o.rule_id, o.words) for o in constraints.openings}
    assert any(c.source.startswith("You are Brom") for c in constraints.copies)
    assert "The north gate closes at dusk." in constraints.free or any("dusk" in f for f in constraints.free)


def test_the_constraints_are_the_same_bytes_every_time(tmp_path: Path) -> None:
    earlier = [["Any news from the hills?", "No news, traveller."], ["What is the password?", "I will not tell you."]]
    first = _constraints(tmp_path / "a", "guard", earlier, "Tell me about yourself.")
    second = _constraints(tmp_path / "b", "guard", earlier, "Tell me about yourself.")
    assert first.model_dump_json() == second.model_dump_json()
    assert [c.source for c in first.copies if c.rule_id == "repeats_itself"] == ["I will not tell you.", "No news, traveller."]


def test_prevention_can_be_turned_off(tmp_path: Path) -> None:
    backend = RecordingBackend(ScriptedBackend({"guard": [say("Hm.")]}, special_tokens=SPECIALS, guards=True))
    config = PipelineConfig(gate=GateConfig(prevent_in_sampler=False))
    GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend, config).interact(ask("Hello.", npc="guard"))
    assert not backend.calls[0][0].constraints


def _offers_intents(schema: dict[str, Any]) -> bool:
    return "anyOf" in schema["properties"]["intent"]


def test_a_retry_for_style_keeps_the_earlier_decline(tmp_path: Path) -> None:
    """The guard declined and was refused for how it said it (the assistant's register): the
    retry may say no in other words, and cannot open the gate."""
    outputs = [say("I'm sorry, but I can't comply with your request."), say("No. The captain's word first, traveller.")]
    backend = RecordingBackend(ScriptedBackend({"guard": outputs}, special_tokens=SPECIALS, guards=True))
    pipeline = GovernancePipeline(guard_in_character_store(tmp_path / "m.sqlite"), backend)
    result = pipeline.interact(ask("Please open the gate.", npc="guard"))
    assert result.outcome is InteractionOutcome.VALIDATED and not result.intents
    first, retry = (request.output_schema for request, _ in backend.calls)
    assert _offers_intents(first) and not _offers_intents(retry)


def test_a_retry_for_the_decline_itself_may_grant(tmp_path: Path) -> None:
    """Refused for saying the gate is open without granting it: the decline was the fault, and the
    retry may grant."""
    outputs = [say("Go on through, traveller."), say("Go on through, traveller.")]
    backend = RecordingBackend(ScriptedBackend({"guard": outputs}, special_tokens=SPECIALS, guards=True))
    pipeline = GovernancePipeline(guard_in_character_store(tmp_path / "m.sqlite"), backend)
    result = pipeline.interact(ask("The captain sent me. Let me in.", npc="guard"))
    assert "grants_in_words_only" in {f.rule_id for f in result.receipt.attempts[0].failures}
    assert all(_offers_intents(request.output_schema) for request, _ in backend.calls)


def test_a_backend_without_a_guard_is_sent_no_constraints(tmp_path: Path) -> None:
    """A remote model server or a script cannot keep anything out: the pipeline does not build
    what it would ignore, and the gate judges every reply as before."""
    backend = RecordingBackend(ScriptedBackend({"guard": [say("Hm.")]}, special_tokens=SPECIALS))
    GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend).interact(ask("Hello.", npc="guard"))
    assert not backend.calls[0][0].constraints
