"""The governance pipeline, one module per stage, in the order an interaction visits them:

1. interaction   intake of the untrusted InteractionContext
2. expectancy    designer rules -> ConstraintSet
   contract      task type, context gating, sufficiency (pass / retry / clarify)
3. (memory)      authoritative memory: `loreguard.memory`
4. snapshot      retrieval into an immutable StateSnapshot
5. prompt        bounded working memory, static prefix | dynamic suffix
6. inference     model backends behind one interface
7. parsing, gate structured parse, then hard limits and gates in order
8. mutation      approved mutations in one transaction; intents
9. fallback      author-controlled fallback lines; retry for escalation and repair
   lifecycle     the orchestrator
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
