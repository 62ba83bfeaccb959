"""The pipeline's settings: one frozen model, hashed into every audit record so a replay runs
under the same ones."""

from __future__ import annotations

from pydantic import Field

from loreguard.schemas.base import FrozenModel
from loreguard.server.pipeline.gate import GateConfig
from loreguard.server.pipeline.prompt import PromptBoundary
from loreguard.server.pipeline.retry import RetryPolicy
from loreguard.server.pipeline.running.streaming import StreamingConfig
from loreguard.server.pipeline.turn.output_schema import GenerationLimits


class PipelineConfig(FrozenModel):
    retry: RetryPolicy = RetryPolicy()
    prompt_boundary: PromptBoundary = PromptBoundary.AFTER_CANONICAL
    gate: GateConfig = GateConfig()
    #: Bounds of what the model may write; they also bound constrained decoding.
    generation: GenerationLimits = GenerationLimits()
    #: Token cap for backends that cannot constrain decoding to the output schema.
    max_tokens: int = 320
    #: With the semantic judge on (`gate.semantic_judge`): how long its model may take before
    #: the keyword check stands in.
    judge_timeout_ms: int = Field(default=3000, ge=1)
    #: With a deadline (`GovernancePipeline.interact`): a generation still running this long
    #: before it is cut, and no attempt starts after that, so the answer (the NPC's fallback
    #: line when the model had none ready) commits and is sent by the deadline.
    deadline_margin_ms: int = Field(default=250, ge=0)
    #: How a streamed interaction cuts its reply into chunks (`interact` with `stream`).
    streaming: StreamingConfig = StreamingConfig()
