"""Stage 9 (last resort): author-controlled fallback lines, held to the rules they stand in for.

Order: the NPC's lines for this trigger, the world's lines for this trigger, the NPC's generic
lines, the world's generic lines, then the world's emergency line. All the lines that apply are
one rotation, in that order, stepped by the NPC's fallback count (its interactions that ended
without a conversation exchange in memory: `interaction_index - exchanges_held`; once memory has
pruned exchanges it steps on replies too). The count alone cannot keep two fallbacks apart (the
lines that apply differ per trigger: a zone's fallback after a player's may land on the generic
line just said), so the store remembers the last fallback line each NPC spoke (`last_fallback`;
outside the memory hash, like its interaction count) and the rotation passes over that line
while another line passes the checks: two fallbacks in a row, or with replies between them,
never say the same line while the lines that apply hold another that passes. Never random, and
read from the store (the audit record keeps the last line), so a replay picks the same line. A
fallback never changes memory.

A fallback is spoken with no model, so each line is judged by the gate's own checks
(`checks.check_constraint`, `checks.secret_leaks`) as a reply with that dialogue, neutral emotion
and no mutations would be: every hard and critical constraint, and every secret. Soft rules bend,
as they do on a last attempt. Intent checks do not apply: a fallback takes no action of the
model's, and a required intent is one no line could meet. A request the rules decided
(`turn.deals`) is the exception: its outcome was never the model's, so it stands, and the line
comes first from the intent's `deal_lines` for that outcome (`deal_fallback`, source
`deal_lines`), then the order above.

- At registration (`fallback_problems`): every authored line (the NPC's, the world's, the
  emergency line) against the rules that hold for the NPC whatever the context (`holds_everywhere`)
  and the NPC's secrets. `npc.register` and `world.load` refuse a line that fails.
- At run time (`choose_fallback`): against the constraints active in the interaction. A line
  that fails is skipped and recorded, and the next one in the rotation is tried. If even the emergency line fails in context, the NPC says nothing
  (source `silence`): no line at all is better than one that breaks a rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.interaction import TriggerReason
from loreguard.schemas.npc import Fallbacks, NpcProfile, Secret, WorldDefinition
from loreguard.schemas.output import ParsedOutput
from loreguard.schemas.receipt import GateFailure, GateName, SkippedFallback
from loreguard.schemas.rules import Constraint, ExpectancyRule, RuleChecks, Severity
from loreguard.server.pipeline.expectancy import holds_everywhere, to_constraint
from loreguard.server.pipeline.gate.checks import check_constraint, secret_leaks
from loreguard.server.pipeline.gate.deeds import find_grants_in_words_only
from loreguard.server.pipeline.turn.deals import Deal
from loreguard.text.phrases import clean_dialogue

BUILTIN_EMERGENCY = "..."


class FallbackChoice(FrozenModel):
    text: str
    source: str
    #: Lines passed over before this one, each with the rules it would break.
    skipped: tuple[SkippedFallback, ...] = ()


def _spoken(checks: RuleChecks) -> RuleChecks:
    return checks.model_copy(update={"forbidden_intents": (), "required_intents": ()})


def line_failures(text: str, constraints: Iterable[Constraint], secrets: Iterable[Secret]) -> list[GateFailure]:
    """Why a fallback line may not be spoken under these constraints and secrets; [] when it may.
    A critical rule fails at the hard limits and a hard one at the constraints gate, as in the gate."""
    output = ParsedOutput(dialogue=clean_dialogue(text) or text)
    failures: list[GateFailure] = []
    for c in constraints:
        if c.severity is Severity.SOFT:
            continue
        gate = GateName.HARD_LIMITS if c.severity is Severity.CRITICAL else GateName.CONSTRAINTS
        failures += check_constraint(c.model_copy(update={"checks": _spoken(c.checks)}), output, text, gate)
    return failures + secret_leaks([output.dialogue], secrets)


def _lines(owner: str, fallbacks: Fallbacks, trigger: TriggerReason) -> tuple[str, tuple[str, ...]]:
    return f"{owner}.fallbacks.by_trigger.{trigger.value}", fallbacks.by_trigger.get(trigger, ())


def choose_fallback(
    profile: NpcProfile,
    world: WorldDefinition | None,
    trigger: TriggerReason,
    position: int,
    constraints: Sequence[Constraint] = (),
    secrets: Sequence[Secret] = (),
    last_said: str | None = None,
) -> FallbackChoice:
    """The first line in fallback order that breaks none of `constraints` (the interaction's
    active designer rules) and reveals none of `secrets`; `position` is the NPC's fallback count,
    where each list's rotation starts. `last_said` (the NPC's last fallback line) is said only
    when no other line of the pool passes."""
    candidates: list[tuple[str, str, tuple[str, ...]]] = [("npc_trigger", *_lines("npc", profile.fallbacks, trigger))]
    if world is not None:
        candidates.append(("world_trigger", *_lines("world", world.fallbacks, trigger)))
    candidates.append(("npc_generic", "npc.fallbacks.generic", profile.fallbacks.generic))
    if world is not None:
        candidates.append(("world_generic", "world.fallbacks.generic", world.fallbacks.generic))
    emergency = ("world.emergency_fallback", world.emergency_fallback) if world else ("builtin.emergency", BUILTIN_EMERGENCY)
    # One rotation through every line that applies, in fallback order.
    pool = [(source, f"{path}.{i}", line) for source, path, lines in candidates for i, line in enumerate(lines)]
    skipped: list[SkippedFallback] = []
    repeat: tuple[str, str] | None = None  # (source, line): the last line said, if it passes
    for k in range(len(pool)):
        source, where, line = pool[(position + k) % len(pool)]
        failures = line_failures(line, constraints, secrets)
        if failures:
            skipped.append(SkippedFallback(line=where, failures=tuple(failures)))
        elif line != last_said:
            return FallbackChoice(text=line, source=source, skipped=tuple(skipped))
        elif repeat is None:
            repeat = (source, line)
    if repeat is not None:  # no other line passes: saying it again beats the emergency line
        return FallbackChoice(text=repeat[1], source=repeat[0], skipped=tuple(skipped))
    failures = line_failures(emergency[1], constraints, secrets)
    if not failures:
        return FallbackChoice(text=emergency[1], source="emergency", skipped=tuple(skipped))
    skipped.append(SkippedFallback(line=emergency[0], failures=tuple(failures)))
    return FallbackChoice(text="", source="silence", skipped=tuple(skipped))


def deal_fallback(
    profile: NpcProfile,
    deals: Sequence[Deal],
    position: int,
    constraints: Sequence[Constraint] = (),
    secrets: Sequence[Secret] = (),
    last_said: str | None = None,
) -> FallbackChoice | None:
    """For a request the rules decided, the first of its intent's `deal_lines` for the outcome
    (a sale where one was made, else the decline) that breaks no rule, from `position` on; None
    when there is no decided request or no such line passes."""
    if not deals:
        return None
    sold = any(deal.granted for deal in deals)
    kind = next(deal.offer.spec.type for deal in deals if deal.granted == sold)
    at = next(i for i, spec in enumerate(profile.allowed_intents) if spec.type == kind)
    lines = getattr(profile.allowed_intents[at].deal_lines, "sold" if sold else "declined")
    skipped: list[SkippedFallback] = []
    for k in range(len(lines)):
        i = (position + k) % len(lines)
        failures = line_failures(lines[i], constraints, secrets)
        if failures:
            where = f"npc.allowed_intents.{at}.deal_lines.{'sold' if sold else 'declined'}.{i}"
            skipped.append(SkippedFallback(line=where, failures=tuple(failures)))
        elif lines[i] != last_said or len(lines) == 1:
            return FallbackChoice(text=lines[i], source="deal_lines", skipped=tuple(skipped))
    return None


class FallbackProblem(FrozenModel):
    """An authored fallback line that breaks a rule or reveals a secret whatever the context."""

    #: The NPC it was checked for (None: a world checked with no NPC registered).
    npc_id: str | None
    #: Where the line is: `npc.fallbacks.generic.0`, `world.fallbacks.by_trigger.zone_trigger.1`,
    #: `world.emergency_fallback`.
    line: str
    #: Where the rule or secret is: `npc.rules.2`, `world.rules.0`, `npc.secrets.0`.
    broken: str
    failure: GateFailure


def _authored(owner: str, fallbacks: Fallbacks) -> list[tuple[str, str]]:
    lines = [
        (f"{owner}.fallbacks.by_trigger.{trigger.value}.{i}", line)
        for trigger, trigger_lines in sorted(fallbacks.by_trigger.items(), key=lambda item: item[0].value)
        for i, line in enumerate(trigger_lines)
    ]
    return lines + [(f"{owner}.fallbacks.generic.{i}", line) for i, line in enumerate(fallbacks.generic)]


def _standing(owner: str, rules: Sequence[ExpectancyRule], npc_id: str | None) -> list[tuple[str, Constraint]]:
    return [(f"{owner}.rules.{i}", to_constraint(rule)) for i, rule in enumerate(rules) if holds_everywhere(rule, npc_id)]


def fallback_problems(world: WorldDefinition | None, profiles: Iterable[NpcProfile]) -> list[FallbackProblem]:
    """Every authored fallback line that breaks a rule holding whatever the context, or reveals a
    secret, for each of `profiles` with `world` (or for `world` alone when there is no profile):
    what `npc.register` and `world.load` refuse. In the order of NPC, line, then rule."""
    problems: list[FallbackProblem] = []
    world_lines = _authored("world", world.fallbacks) + [("world.emergency_fallback", world.emergency_fallback)] if world else []
    checked: list[tuple[str | None, NpcProfile | None]] = [(p.id, p) for p in profiles]
    if not checked and world is not None:
        checked = [(None, None)]  # the world's lines against the rules that hold for any NPC
    for npc_id, profile in checked:
        lines = (_authored("npc", profile.fallbacks) if profile else []) + world_lines
        rules = _standing("world", world.rules if world else (), npc_id) + _standing(
            "npc", profile.rules if profile else (), npc_id
        )
        rule_paths = {c.rule_id: path for path, c in rules}
        secrets = profile.secrets if profile else ()
        secret_paths = {s.id: f"npc.secrets.{i}" for i, s in enumerate(secrets)}
        intents = profile.allowed_intents if profile else ()
        for line, text in lines:
            for failure in line_failures(text, [c for _, c in rules], secrets):
                paths = secret_paths if failure.gate is GateName.KNOWLEDGE else rule_paths
                problems.append(FallbackProblem(npc_id=npc_id, line=line, broken=paths[failure.rule_id or ""], failure=failure))
            # a fallback grants nothing, so one that says an act is done says it in words only
            for failure in find_grants_in_words_only(text, (), intents, (), profile.name if profile else ""):
                at = next(i for i, spec in enumerate(intents) if failure.evidence in spec.grant_phrases)
                problems.append(FallbackProblem(npc_id=npc_id, line=line, broken=f"npc.allowed_intents.{at}", failure=failure))
    return problems
