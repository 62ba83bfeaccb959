"""The governance pipeline: one module per stage, in the order an interaction visits them
(`STAGES`), and the modules around them (`AROUND_THE_STAGES`); a test holds both lists against
this folder.

1. interaction   intake of the untrusted InteractionContext
2. expectancy    designer rules -> ConstraintSet
   contract      task type, context gating, sufficiency (pass / retry / clarify)
3. (memory)      authoritative memory: `loreguard.memory`
4. snapshot      retrieval into an immutable StateSnapshot
5. prompt        bounded working memory, static prefix | dynamic suffix
6. (inference)   model backends behind one interface: `loreguard.server.inference`
7. parsing       structured parse of the model's text
   gate/         hard limits and gates in order (`gate.validation`), each check its own module
8. mutation      approved mutations in one transaction; intents
9. fallback      author-controlled fallback lines

Around them: `lifecycle` (the orchestrator), `preparation` (intake to snapshot), `attempt` (one
prompt -> inference -> gate), `run` (an interaction in flight), `retry` (escalation and repair),
`streaming` (the incremental gate), `judge` (the optional semantic judge), `intents` (what is on
the table this turn), `asking` (whether the player's line asks for an act), `request_terms` (a
request worded in terms a rule forbids), `output_schema`
(what the model may emit), `phrases` (phrase matching), `summaries` (the model's notes of what
an NPC forgets), `config`, `sink` (the seam to audit), `errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loreguard.server.pipeline.errors import (
    DeadlineExceeded,
    InteractionCancelled,
    LifecycleHalt,
    PipelineError,
    UnknownNpcError,
)

if TYPE_CHECKING:
    from loreguard.server.pipeline.lifecycle import GovernancePipeline, PipelineConfig

#: The stages, in the order an interaction visits them (memory and inference live beside the
#: pipeline: `loreguard.memory`, `loreguard.server.inference`).
STAGES = ("interaction", "expectancy", "contract", "snapshot", "prompt", "parsing", "gate", "mutation", "fallback")
#: The modules that run the stages or serve them.
AROUND_THE_STAGES = (
    "lifecycle", "preparation", "attempt", "run", "retry", "streaming", "judge", "intents", "asking",
    "request_terms", "output_schema", "phrases", "summaries", "config", "sink", "errors",
)  # fmt: skip

__all__ = [
    "DeadlineExceeded",
    "GovernancePipeline",
    "InteractionCancelled",
    "LifecycleHalt",
    "PipelineConfig",
    "PipelineError",
    "UnknownNpcError",
]


def __getattr__(name: str) -> object:
    # The orchestrator is loaded on first use, not with the package: a model backend
    # (`pipeline.inference`) imported on its own then loads no governance stage.
    if name in ("GovernancePipeline", "PipelineConfig"):
        from loreguard.server.pipeline import lifecycle

        return getattr(lifecycle, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
