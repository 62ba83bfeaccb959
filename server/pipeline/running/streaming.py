"""The incremental gate: release a reply sentence by sentence, never a word the gate has not passed.

While the model decodes the bounded JSON, `dialogue` is its first property (`output_schema`
lists it first and the grammar keeps that order), so its text is known as it grows
(`partial_dialogue`). At each sentence end (`chunk_ends`) the text so far is judged twice, each
time by the gate's own public `validate`, on the output that would be spoken if the reply were
cut there (`{"dialogue": <text so far>, "emotion": "neutral", "mutations": []}`):

* the **prefix check** runs every rule a longer text cannot repair (hard limits and hygiene,
  forbidden phrases and patterns, length caps, canonical claims, grounding, secrets): the
  snapshot's requirements (required phrases, patterns and intents) and forbidden emotions are
  left out, since later text can still satisfy them. A failure here stops the generation at
  once;
* the **release check** runs every rule, exactly as the whole-output gate would on that cut
  output. Only when it accepts is the text up to here released.

Why released text is never rejected (`released_then_rejected` is 0 by construction): a release
happens only once the cut output is itself an output the whole gate accepts. From then on the
attempt can only end in one of two ways: the whole output passes the gate and its dialogue
starts with the released text (the rest is released as the last chunk), or anything else (a
later sentence fails, the mutations or emotion break a rule, the whole dialogue was scrubbed
differently) and the attempt is cut back to the last release: the accepted cut output is the
interaction's answer (no mutations, no intents, a neutral emotion) unless a retry adds to it.
Nothing released is ever taken back, so the protocol has no retract.

A retry after a cut (`continue_after_cut`, with a backend that `continues_output`) is given
the released words as the start of its output (`continuation_prefix`) and goes on from them,
judged from there on as above, with the last accepted cut still standing if it is cut too. Any
retry after a cut may not begin with the sentence that was rejected (`failed_sentence`, sent as
`avoid_start`): a small model retried with a new seed often writes the same sentence again. An
attempt that released nothing otherwise fails as without streaming (retry, then fallback).

The semantic judge (a model call) is never asked per sentence: with it on, nothing is released
before the whole output has passed, as without streaming.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import Field

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.npc import OutputHygiene
from loreguard.schemas.receipt import AttemptStream, StreamCut, StreamRelease
from loreguard.schemas.rules import Constraint
from loreguard.server.pipeline.expectancy import ConstraintSet
from loreguard.server.pipeline.gate import GateConfig, GateResult, validate
from loreguard.server.pipeline.parsing import parse_output
from loreguard.server.pipeline.snapshot import StateSnapshot


class StreamingConfig(FrozenModel):
    #: A chunk is at least this many characters: shorter sentences wait for the next one (the
    #: designer's choice between first words sooner and fewer, longer chunks).
    min_chunk_chars: int = Field(default=1, ge=1, le=2000)
    #: After a cut that followed released words, retry with an attempt that continues them
    #: (when attempts are left and the backend can continue an output), and let no retry after a
    #: cut begin with the sentence that was rejected. False ends the reply at the released
    #: words, as a backend that cannot continue always does.
    continue_after_cut: bool = True


@dataclass(frozen=True)
class ReleasedChunk:
    """One released piece of dialogue, as the client receives it."""

    seq: int
    text: str
    attempt: int


#: The opening of the bounded JSON up to the dialogue string's first character.
_DIALOGUE_OPEN = re.compile(r'\s*\{\s*"dialogue"\s*:\s*"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
#: A sentence end: terminal punctuation, closing quotes or brackets, then whitespace (which
#: must have arrived, so "3.5" and "..." are never cut early).
_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*(?=\s)")


def partial_dialogue(raw: str) -> tuple[str, bool] | None:
    """The dialogue string decoded so far from a growing JSON output, and whether it is closed;
    None when the output does not start with the dialogue (an unconstrained backend)."""
    opening = _DIALOGUE_OPEN.match(raw)
    if opening is None:
        return None
    out: list[str] = []
    i = opening.end()
    while i < len(raw):
        ch = raw[i]
        if ch == '"':
            return "".join(out), True
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(raw):
            break  # an escape cut in half: wait for the rest
        code = raw[i + 1]
        if code == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) < 4:
                break
            try:
                out.append(chr(int(digits, 16)))
            except ValueError:
                return None
            i += 6
            continue
        if code not in _ESCAPES:
            return None
        out.append(_ESCAPES[code])
        i += 2
    return "".join(out), False


def chunk_ends(text: str, closed: bool) -> list[int]:
    """Where sentences end in `text` (offsets after the punctuation), in order; the end of the
    text too once the string is closed."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    if closed and text.strip() and (not ends or ends[-1] < len(text.rstrip())):
        ends.append(len(text.rstrip()))
    return ends


def _without_requirements(c: Constraint) -> Constraint:
    checks = c.checks.model_copy(
        update={"required_phrases": (), "required_patterns": (), "required_intents": (), "forbidden_emotions": ()}
    )
    return c.model_copy(update={"checks": checks})


def prefix_snapshot(snapshot: StateSnapshot) -> StateSnapshot:
    """The snapshot the prefix check judges by: every rule a longer text cannot repair."""
    constraints = ConstraintSet(constraints=tuple(_without_requirements(c) for c in snapshot.constraints.constraints))
    return snapshot.model_copy(update={"constraints": constraints})


def continuation_prefix(released: str) -> str:
    """The start of a bounded JSON output whose dialogue begins with `released` and goes on
    (`GenerationRequest.output_prefix`): the layout the model writes, the string left open."""
    return '{"dialogue": ' + json.dumps(released, ensure_ascii=False)[:-1]


def cut_output(dialogue: str) -> str:
    """The model output a reply cut after `dialogue` stands for."""
    return json.dumps({"dialogue": dialogue, "emotion": "neutral", "mutations": []}, ensure_ascii=False)


@dataclass
class StreamSession:
    """The streaming side of one interaction: where released chunks go, and whether the client
    is still there. Released text belongs to the interaction: once a chunk is out, no later
    attempt runs (see the module's docstring)."""

    emit: Callable[[ReleasedChunk], None]
    #: True while the client still wants the reply; False stops the generation.
    wanted: Callable[[], bool] = lambda: True
    clock_ms: Callable[[], float] = lambda: 0.0
    released: str = ""
    seq: int = 0
    cancelled: bool = False

    def release(self, text: str, attempt: int) -> StreamRelease:
        start = len(self.released)
        self.released += text
        chunk = ReleasedChunk(seq=self.seq, text=text, attempt=attempt)
        self.seq += 1
        self.emit(chunk)
        return StreamRelease(seq=chunk.seq, start=start, end=len(self.released), released_ms=self.clock_ms())


@dataclass
class IncrementalGate:
    """Watches one attempt's output as it grows; `observe` is the backend's streaming callback."""

    session: StreamSession
    snapshot: StateSnapshot
    config: GateConfig
    hygiene: OutputHygiene
    streaming: StreamingConfig
    #: Releases wait for the whole output (the semantic judge is on).
    hold_all: bool = False
    #: The model's special tokens, for the hard limits (as the whole-output gate gets them).
    special_tokens: tuple[str, ...] = ()
    #: The dialogue length the output schema allows (the whole-output gate's `cut_at`).
    cut_at: int | None = None
    #: Characters of released dialogue this attempt's output was given to start with (it
    #: continues an attempt cut after them); they were judged when they were released.
    continued: int = 0
    #: Text of the dialogue up to the last sentence end checked.
    _checked_to: int = 0
    _prefix: StateSnapshot | None = None
    #: The accepted gate result of the last released cut (the answer if the attempt is cut).
    safe: GateResult | None = None
    #: The prefix check that stopped the generation.
    failed: GateResult | None = None
    releases: list[StreamRelease] = field(default_factory=list)
    cut: StreamCut | None = None
    _seen_chars: int = 0
    #: The output as last observed.
    last_raw: str = ""
    #: The backend failed mid-generation (`backend_failed`).
    backend_error: bool = False
    #: The sentence the prefix check failed (from the last one checked to its end), and where
    #: in the dialogue it began.
    failed_sentence: str = ""
    failed_from: int = 0
    #: The start this attempt's output was told not to begin with after `continued`.
    avoided: str = ""

    def __post_init__(self) -> None:
        self._checked_to = self.continued

    @property
    def stopped(self) -> bool:
        return self.failed is not None or self.session.cancelled

    def observe(self, raw: str) -> bool:
        """The output so far; False stops the generation (a failed sentence, or no client)."""
        if not self.session.wanted():
            self.session.cancelled = True
            return False
        if self.failed is not None:
            return False
        self.last_raw = raw
        found = partial_dialogue(raw)
        if found is None:
            return True  # not a dialogue-first output: judged whole, at the end
        text, closed = found
        self._seen_chars = len(text)
        for end in chunk_ends(text, closed):
            if end <= self._checked_to:
                continue
            if not self._check(text[:end]):
                self.failed_sentence, self.failed_from = text[self._checked_to : end], self._checked_to
                self.cut = StreamCut(
                    at_char=end,
                    released_chars=len(self.session.released),
                    reason="; ".join(f.reason for f in self.failed.failures) if self.failed else "",
                    failures=self.failed.failures if self.failed else (),
                )
                return False
            self._checked_to = end
        return True

    def _check(self, text: str) -> bool:
        """Judge the dialogue cut after `text`: False when it fails for good; release it when
        the whole gate would accept it."""
        if self._prefix is None:
            self._prefix = prefix_snapshot(self.snapshot)
        raw = cut_output(text)
        parse = parse_output(raw)
        prefix = validate(parse, raw, self._prefix, self.config, None, self.hygiene, self.special_tokens, prefix=True)
        if not prefix.accepted:
            self.failed = prefix
            return False
        if self.hold_all:
            return True
        whole = validate(parse, raw, self.snapshot, self.config, None, self.hygiene, self.special_tokens, self.cut_at)
        if whole.accepted and whole.output is not None:
            spoken = whole.output.dialogue
            pending = len(spoken) - len(self.session.released)
            if spoken.startswith(self.session.released) and pending >= self.streaming.min_chunk_chars:
                self.releases.append(self.session.release(spoken[len(self.session.released) :], self.snapshot.attempt))
                self.safe = whole
        return True

    def backend_failed(self, reason: str) -> None:
        """The backend failed mid-generation: the attempt ends at what was released."""
        self.backend_error = True
        self.cut = StreamCut(at_char=self._seen_chars, released_chars=len(self.session.released), reason=f"backend: {reason}")

    def finish(self, gate: GateResult | None) -> GateResult | None:
        """The attempt's result once generation ended: the whole gate's `gate` (None when the
        generation was stopped), or the last released cut when anything was released and the
        whole output cannot follow it. None: the attempt failed with `failed`."""
        released = self.session.released
        if gate is not None and gate.accepted and gate.output is not None and gate.output.dialogue.startswith(released):
            tail = gate.output.dialogue[len(released) :]
            if tail:
                self.releases.append(self.session.release(tail, self.snapshot.attempt))
            return gate
        if self.safe is not None:
            if self.cut is None:
                reasons = "; ".join(f.reason for f in gate.failures) if gate is not None else ""
                why = reasons or "the whole output's dialogue does not continue the released text"
                self.cut = StreamCut(
                    at_char=self._seen_chars,
                    released_chars=len(released),
                    reason=f"whole output rejected after release: {why}",
                    failures=gate.failures if gate is not None else (),
                )
            return self.safe
        return gate

    def record(self, aborted: bool) -> AttemptStream:
        return AttemptStream(
            releases=tuple(self.releases),
            cut=self.cut,
            aborted=aborted,
            continued_chars=self.continued,
            avoided_start=self.avoided,
        )
