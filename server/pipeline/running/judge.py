"""Stage 7b, optional: the semantic judge, asked in the NPC's own KV sequence.

The deterministic gate catches the forms it knows; a paraphrase ("the gate is shut at sundown")
or a secret said in other words needs a model. The judge asks the NPC's own model about the
reply it just wrote, in the same conversation: the judge's prompt is the attempt's prompt, the
reply as the assistant's turn, and one new user message, the judge's question, listing by id the
canonical facts (`canonical:ID`), the secrets (`secret:ID`, by topic, never their text) and the
designer's prohibitions the reply must keep. An engine that reuses the longest cached prefix
(the batched one) finds the prompt and the reply in the NPC's sequence, so the question is the
only new prefill; the answer is constrained by a grammar to `{"broken": [<ids>]}`, ids from the
list only. The judge's question and verdict never enter the NPC's conversation: its next turn's
prompt goes on from the reply.

A verdict that names an id fails the attempt: hard for a fact or a secret (retried with a repair
that names it), the rule's own severity for a rule (critical becomes hard: a model's verdict
alone never stops an interaction outright). A judge that times out, answers out of grammar or
fails never blocks a line by itself: the deterministic checks decide (for prohibitions, also the
keyword check, `keyword_judge`), and the gate's semantic check says so (`GateCheck.note`). What
the model answered, and its cost, is the attempt's `JudgeRecord`: a replay answers the judge
from it.

Modes (`loreguard serve --judge`): `keyword` (the keyword check only, no model), `model` (this
judge, on the dialogue model or its own `--judge-model` / `--judge-url`, where the prompt is
evaluated in full), `auto` (the default: `model` for a catalogue model marked `judge_capable`,
otherwise off).
"""

from __future__ import annotations

import json

from loreguard.memory.retrieval import keywords
from loreguard.schemas.memory import ExchangeTurn
from loreguard.schemas.output import ParsedOutput
from loreguard.schemas.prompt import Prompt
from loreguard.schemas.receipt import GateFailure, GateName, JudgeRecord
from loreguard.schemas.rules import RuleType, Severity
from loreguard.schemas.text import norm_words
from loreguard.server.inference.base import BackendError, BackendTimeout, GenerationRequest, InferenceBackend
from loreguard.server.pipeline.gate import Judge, JudgeVerdict
from loreguard.server.pipeline.parsing import parse_output
from loreguard.server.pipeline.retry import is_retry_rule
from loreguard.server.pipeline.snapshot import StateSnapshot

JUDGE_HEADING = "### Check your last reply\n"
#: Most ids one verdict names (the grammar's bound, and so the verdict's longest answer).
MAX_BROKEN = 4


def judged_items(snapshot: StateSnapshot) -> list[tuple[str, str, Severity]]:
    """What the reply must keep, as (id, what it says, the severity of breaking it), in a fixed
    order: canonical facts, secrets, then the
    designer's prohibitions (a retry's own prohibitions quote the reply: not asked about)."""
    items = [(f"canonical:{fact.id}", fact.text, Severity.HARD) for fact in snapshot.canonical]
    items += [(f"secret:{s.id}", f"reveals {s.topic or s.id}", Severity.HARD) for s in snapshot.secrets]
    for c in snapshot.constraints.constraints:
        if c.type is RuleType.PROHIBITION and not is_retry_rule(c):
            severity = Severity.HARD if c.severity is Severity.CRITICAL else c.severity
            items.append((c.rule_id, f"must never {c.text}", severity))
    return items


def judge_question(items: list[tuple[str, str, Severity]]) -> str:
    lines = [
        JUDGE_HEADING.rstrip("\n"),
        "Does your last reply contradict a fact, reveal a secret or break a rule below? "
        "List the ids it breaks; an empty list if it breaks none.",
        *(f"- {item_id}: {text}" for item_id, text, _ in items),
        'Answer with JSON: {"broken": [<ids>]}',
    ]
    return "\n".join(lines)


def verdict_schema(ids: list[str]) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {
            "broken": {"type": "array", "items": {"type": "string", "enum": ids}, "maxItems": min(MAX_BROKEN, len(ids))}
        },
        "required": ["broken"],
    }


def judge_prompt(prompt: Prompt, raw: str, question: str) -> Prompt:
    """The attempt's prompt with the reply as the assistant's turn and the question as the new
    message: the NPC's sequence, continued."""
    # model_construct: the reply is the model's own text, already bounded by the gate's size limit
    reply = ExchangeTurn.model_construct(player=prompt.player_turn, reply=raw)
    return prompt.model_copy(update={"turns": (*prompt.turns, reply), "player_turn": question, "manifest": "[judge]"})


class SemanticJudge:
    def __init__(self, backend: InferenceBackend | None, *, timeout_ms: int | None = None) -> None:
        self.backend = backend
        #: The judge model's answer is waited for this long; then the deterministic checks decide.
        self.timeout_ms = timeout_ms
        #: How often the judge model gave no verdict (timeouts included).
        self.model_failures = 0
        self.timeouts = 0

    def for_reply(self, prompt: Prompt, raw: str, time_left_ms: int | None = None) -> Judge:
        """The gate's judge for one attempt: its prompt and the model's raw output. The judge's
        model is waited for no longer than `time_left_ms` (the interaction's deadline) either."""
        return lambda output, snapshot: self.judge(output, snapshot, prompt=prompt, raw=raw, time_left_ms=time_left_ms)

    def judge(
        self, output: ParsedOutput, snapshot: StateSnapshot, *, prompt: Prompt, raw: str, time_left_ms: int | None = None
    ) -> JudgeVerdict:
        """The verdict on a reply (see the module's docstring); each failure's reason says which
        judge found it ("judge: ..." or "keyword judge: ...")."""
        items = judged_items(snapshot)
        if not items:
            return JudgeVerdict()
        if self.backend is None:
            return JudgeVerdict(failures=tuple(keyword_judge(output, snapshot)))
        timeout_ms = min((t for t in (self.timeout_ms, time_left_ms) if t is not None), default=None)
        record = self._ask(snapshot, judge_prompt(prompt, raw, judge_question(items)), [i for i, _, _ in items], timeout_ms)
        if record.outcome != "verdict":
            self.model_failures += 1
            self.timeouts += record.outcome == "timeout"
            note = f"the judge's model gave no verdict ({record.outcome}): the deterministic checks decided"
            return JudgeVerdict(failures=tuple(keyword_judge(output, snapshot)), note=note, record=record)
        by_id = {item_id: (text, severity) for item_id, text, severity in items}
        failures = tuple(
            GateFailure(
                gate=GateName.SEMANTIC,
                reason=f"judge: breaks {item_id} ({by_id[item_id][0][:120]})",
                severity=by_id[item_id][1],
                rule_id=item_id,
            )
            for item_id in record.broken
        )
        return JudgeVerdict(failures=failures, record=record)

    def _ask(self, snapshot: StateSnapshot, prompt: Prompt, ids: list[str], timeout_ms: int | None) -> JudgeRecord:
        assert self.backend is not None
        request = GenerationRequest(
            npc_id=snapshot.npc_id,
            prompt=prompt,
            seed=snapshot.seed + snapshot.attempt - 1,
            # room for the longest verdict the grammar admits (a token is at least one character)
            max_tokens=len(json.dumps({"broken": sorted(ids, key=len)[-MAX_BROKEN:]})) + 8,
            output_schema=verdict_schema(ids),
            purpose="judge",
            timeout_ms=timeout_ms,
        )
        try:
            generation = self.backend.generate(request)
        except BackendTimeout:
            return JudgeRecord(outcome="timeout")
        except BackendError:
            return JudgeRecord(outcome="unavailable")
        cost = {
            "tokens_evaluated": generation.tokens_evaluated,
            "tokens_cached": generation.tokens_cached,
            "tokens_generated": generation.tokens_generated,
            "total_ms": round(generation.total_ms, 3),
        }
        parsed = parse_output(generation.text)
        broken = parsed.data.get("broken") if parsed.data else None
        if not isinstance(broken, list) or not all(isinstance(b, str) and b in ids for b in broken):
            return JudgeRecord(outcome="unparsable", raw=generation.text, **cost)
        return JudgeRecord(outcome="verdict", raw=generation.text, broken=tuple(sorted(set(broken))), **cost)


def _content_words(text: str) -> frozenset[str]:
    """Retrieval's keywords of `text`, also of its normalised form (`norm_words`: homoglyphs,
    zero-width characters, spaced-out letters undone), so the judge sees what the phrase checks see."""
    return keywords(text) | keywords(" ".join(norm_words(text)))


def keyword_judge(output: ParsedOutput, snapshot: StateSnapshot) -> list[GateFailure]:
    """A prohibition is flagged when its text's content words (at least two, or its only one)
    appear in the dialogue."""
    said = _content_words(output.dialogue)
    failures = []
    for c in snapshot.constraints.constraints:
        if c.type is not RuleType.PROHIBITION:
            continue
        cue = _content_words(c.text) - {"never", "discuss", "mention", "talk", "say", "speak", "about", "reveal"}
        if not cue:
            continue
        hits = sorted(cue & said)
        if len(hits) >= min(2, len(cue)):
            failures.append(
                GateFailure(
                    gate=GateName.SEMANTIC,
                    reason=f"keyword judge: mentions {', '.join(hits)}",
                    severity=Severity.SOFT,
                    rule_id=c.rule_id,
                    evidence=hits[0],
                )
            )
    return failures
