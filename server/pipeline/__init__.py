"""The governance pipeline: its listing is its stages, in the order an interaction visits them
(`LISTING`, which a test holds against this folder).

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
   retry         escalation and repair between attempts

And what runs them: `lifecycle` (the orchestrator), `running/` (preparation, one attempt, the
run's state, the incremental gate while streaming, the semantic judge, settings, the seam to
audit), `turn/` (the intents on the table this turn, the output the model may emit),
`summaries` (the model's notes of what an NPC forgets) and `errors`. Reading text (words,
negation, questions, requests) is `loreguard.text`'s.
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

#: The folder's listing: the stages in the order an interaction visits them (memory and inference
#: live beside the pipeline: `loreguard.memory`, `loreguard.server.inference`), then what runs them.
LISTING = (
    "interaction", "expectancy", "contract", "snapshot", "prompt", "parsing", "gate", "mutation", "fallback", "retry",
    "lifecycle", "running", "turn", "summaries", "errors",
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
    # (`loreguard.server.inference`) imported on its own then loads no governance stage.
    if name in ("GovernancePipeline", "PipelineConfig"):
        from loreguard.server.pipeline import lifecycle

        return getattr(lifecycle, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
