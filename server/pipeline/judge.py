"""Optional semantic judge gate: a model checks the reply against the rules.

Off by default. When the judge model is unavailable, times out or answers nonsense, a
deterministic keyword check stands in, so the gate always gives an answer.
"""

from __future__ import annotations

import json

from loreguard.memory.retrieval import keywords
from loreguard.schemas.output import ParsedOutput
from loreguard.schemas.prompt import Prompt
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import RuleType, Severity
from loreguard.schemas.text import norm_words
from loreguard.server.pipeline.inference.base import BackendError, BackendTimeout, GenerationRequest, InferenceBackend
from loreguard.server.pipeline.parsing import parse_output
from loreguard.server.pipeline.snapshot import StateSnapshot

JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"violated": {"type": "array", "items": {"type": "string", "maxLength": 64}, "maxItems": 8}},
    "required": ["violated"],
}


class SemanticJudge:
    def __init__(self, backend: InferenceBackend | None, *, max_tokens: int = 64, timeout_ms: int | None = None) -> None:
        self.backend = backend
        self.max_tokens = max_tokens
        #: The judge model's answer is waited for this long; then the keyword check stands in.
        self.timeout_ms = timeout_ms
        #: How often the judge model failed (timeouts included) and the keyword check stood in.
        self.model_failures = 0
        self.timeouts = 0

    def judge(self, output: ParsedOutput, snapshot: StateSnapshot) -> list[GateFailure]:
        """Failures of the reply against the prohibitions; each failure's reason says which
        judge found it ("judge: ..." or "keyword judge: ...")."""
        if not any(c.type is RuleType.PROHIBITION for c in snapshot.constraints.constraints):
            return []
        if self.backend is not None:
            try:
                return self._model_judge(output, snapshot)
            except BackendTimeout:
                self.timeouts += 1
                self.model_failures += 1
            except (BackendError, ValueError):
                self.model_failures += 1
        return keyword_judge(output, snapshot)

    def _model_judge(self, output: ParsedOutput, snapshot: StateSnapshot) -> list[GateFailure]:
        assert self.backend is not None
        rules = "\n".join(
            f"{c.rule_id}: never {c.text}" for c in snapshot.constraints.constraints if c.type is RuleType.PROHIBITION
        )
        text = (
            "You check an NPC's reply against rules. List the ids of the rules the reply breaks.\n"
            f"Rules:\n{rules}\n\nReply: {json.dumps(output.dialogue)}\n"
            'Answer with JSON: {"violated": [<rule ids>]}\n'
        )
        generation = self.backend.generate(
            GenerationRequest(
                npc_id=snapshot.npc_id,
                prompt=Prompt(static_prefix="", dynamic_suffix=text, manifest="[judge]", context_keys=()),
                seed=snapshot.seed,
                max_tokens=self.max_tokens,
                output_schema=JUDGE_SCHEMA,
                purpose="judge",
                timeout_ms=self.timeout_ms,
            )
        )
        parsed = parse_output(generation.text)
        violated = parsed.data.get("violated") if parsed.data else None
        if not isinstance(violated, list):
            raise ValueError("judge gave no verdict")
        known = {c.rule_id: c for c in snapshot.constraints.constraints}
        return [
            GateFailure(gate=GateName.SEMANTIC, reason=f"judge: breaks {rule_id}", severity=Severity.SOFT, rule_id=rule_id)
            for rule_id in sorted({v for v in violated if isinstance(v, str) and v in known})
        ]


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
