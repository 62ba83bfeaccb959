"""Machine checks of one constraint, or of the secrets, against one output: the validation
gate's, and the fallback check's (so a fallback line and a reply are judged alike)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache

from loreguard.schemas.npc import Secret
from loreguard.schemas.output import EmitWorldIntentMutation, ParsedOutput, ProposedMutation
from loreguard.schemas.prevention import Banned
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Constraint, Severity
from loreguard.schemas.text import fold
from loreguard.text.phrases import contains_phrase, reveals
from loreguard.text.request_terms import said_only_to_deny
from loreguard.text.words import STOPWORDS, word_tokens


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def mutation_texts(output: ParsedOutput, skip: Callable[[ProposedMutation], bool] | None = None) -> list[str]:
    """Free text the model put into proposed mutations (memory it wants to write), but for the
    mutations `skip` says to leave out."""
    texts = []
    for m in output.mutations:
        if skip is not None and skip(m):
            continue
        if m.kind == "append_episodic":
            texts.append(m.text)
        elif m.kind == "transform_belief":
            texts.append(m.content)
        elif m.kind == "emit_world_intent":
            texts.extend(str(v) for _, v in sorted(m.params.items()) if isinstance(v, str))
    return texts


def said_texts(output: ParsedOutput | None, raw: str) -> list[str]:
    """What a forbidden phrase is looked for in: the dialogue (the raw text when the output did
    not parse) and the mutation texts."""
    return [output.dialogue, *mutation_texts(output)] if output is not None else [raw]


def _says_phrase(text: str, phrase: str, refusable: bool) -> bool:
    """Whether `text` says the forbidden `phrase`. A phrase that is also one of the rule's
    `forbidden_requests` is not said where each clause holding it denies it ("No, love. Not for
    free."): that is the NPC refusing the request the rule forbids (the 1.5B's merchant was
    refused for it, and the player heard a fallback)."""
    return contains_phrase(text, phrase) and not (refusable and said_only_to_deny(text, phrase))


def check_constraint(
    c: Constraint, output: ParsedOutput | None, raw: str, gate: GateName, *, said: list[str] | None = None
) -> list[GateFailure]:
    """Failures of `c` on `output` (or on the raw text when the output did not parse).

    Forbidden phrases and patterns are looked for in the dialogue and in mutation texts, since
    what the model writes into memory is said again later (`said_texts`, which a caller checking
    many constraints passes as `said`). Requirements look at the dialogue.
    """
    checks = c.checks
    dialogue = output.dialogue if output is not None else raw
    if said is None:
        said = said_texts(output, raw)
    failures: list[GateFailure] = []

    def fail(reason: str, evidence: str | None = None) -> None:
        failures.append(GateFailure(gate=gate, reason=reason, severity=c.severity, rule_id=c.rule_id, evidence=evidence))

    terms = {fold(t) for t in checks.forbidden_requests}
    for phrase in checks.forbidden_phrases:
        if any(_says_phrase(text, phrase, fold(phrase) in terms) for text in said):
            fail(f'forbidden phrase "{phrase}"', phrase)
    for pattern in checks.forbidden_patterns:
        for text in said:
            match = _regex(pattern).search(text)
            if match:
                fail(f"forbidden pattern /{pattern}/", match.group(0))
                break
    for phrase in checks.required_phrases:
        if not contains_phrase(dialogue, phrase):
            fail(f'missing required phrase "{phrase}"')
    for pattern in checks.required_patterns:
        if not _regex(pattern).search(dialogue):
            fail(f"missing required pattern /{pattern}/")
    if checks.max_length is not None and len(dialogue) > checks.max_length:
        fail(f"dialogue is {len(dialogue)} characters, the limit is {checks.max_length}")
    if output is not None:
        intents = {m.intent for m in output.mutations if isinstance(m, EmitWorldIntentMutation)}
        for intent in checks.forbidden_intents:
            if intent in intents:
                fail(f"forbidden intent {intent}", intent)
        for intent in checks.required_intents:
            if intent not in intents:
                fail(f"missing required intent {intent}")
        if output.emotion in checks.forbidden_emotions:
            fail(f"forbidden emotion {output.emotion.value}", output.emotion.value)
    return failures


def constraint_bans(constraints: Iterable[Constraint], secrets: Iterable[Secret]) -> tuple[Banned, ...]:
    """What the sampler keeps out of a reply for the active rules and the secrets
    (`gate.prevention`): each rule's forbidden phrases and patterns, and each secret's words. A
    forbidden phrase that is also one of the rule's forbidden requests is left to the gate,
    which lets the NPC say it to deny it ("No, love. Not for free.")."""
    banned: list[Banned] = []
    for c in constraints:
        terms = {fold(t) for t in c.checks.forbidden_requests}
        banned.extend(Banned(rule_id=c.rule_id, phrase=p) for p in c.checks.forbidden_phrases if fold(p) not in terms)
        banned.extend(Banned(rule_id=c.rule_id, pattern=p) for p in c.checks.forbidden_patterns)
    for secret in secrets:
        banned.extend(Banned(rule_id=secret.id, phrase=marker) for marker in secret.reveal_markers())
    return tuple(banned)


def secret_leaks(texts: Iterable[str], secrets: Iterable[Secret]) -> list[GateFailure]:
    """The knowledge check: one critical failure for each secret one of `texts` reveals, and a
    hard one for each secret whose topic a text gives a made-up value for ("The password is
    'rainbow'": a player would try it). The evidence names the secret's id, never its text."""
    texts = list(texts)
    failures = []
    for secret in secrets:
        if any(reveals(text, marker) for text in texts for marker in secret.reveal_markers()):
            failures.append(
                GateFailure(
                    gate=GateName.KNOWLEDGE,
                    reason=f"reveals secret {secret.id}",
                    severity=Severity.CRITICAL,
                    rule_id=secret.id,
                    evidence=secret.id,
                )
            )
        elif (told := _told_value(texts, secret.topic)) is not None:
            failures.append(
                GateFailure(
                    gate=GateName.KNOWLEDGE,
                    # the value stays out of the reason, which the retry's repair quotes: the
                    # 1.5B, told "('Raven')", said "The password is 'Raven.'" twice more
                    reason=f"tells a value for {secret.topic}: a secret is neither told nor made up; say you will not tell it",
                    severity=Severity.HARD,
                    rule_id=secret.id,
                    evidence=told,
                )
            )
    return failures


@lru_cache(maxsize=256)
def _value_told(topic: str) -> re.Pattern[str] | None:
    """The topic's thing ("the gate password" -> password), then within a few words "is" and a
    quoted value: "The password to the north gate is 'rainbow'", "The password? It's 'sword'"."""
    words = [w for w in word_tokens(topic) if w not in STOPWORDS]  # the last is the thing
    if not words:
        return None
    thing = re.escape(words[-1])
    return re.compile(
        rf"\b{thing}s?\b[^.!]{{0,40}}?\b(?:is|was|be|it's|it is)\s*:?\s*(['\"\u2018\u201c][^'\"\u2019\u201d]{{1,40}}['\"\u2019\u201d]?)",
        re.IGNORECASE,
    )


def _told_value(texts: list[str], topic: str) -> str | None:
    pattern = _value_told(topic) if topic else None
    if pattern is None:
        return None
    for text in texts:
        match = pattern.search(text.replace("\u2019", "'"))
        if match is not None:
            return match.group(1)
    return None
