"""Stage 7b, the validation gate: `validation` runs the gates in order; beside it, its checks,
one module each, in the order `validation` asks them:

- `hygiene`       only the NPC's own words: markup, labels, stage directions, fragments
- `register`      the assistant's register, narrating the player, giving in to a jailbreak
- `readout`       the prompt's instructions read out
- `degenerate`    loops, brackets left open, a word cut off, special tokens
- `parroting`     an example, the player's line or the persona copied
- `self_repeats`  a reply the NPC said before to another question
- `non_answers`   a word from nowhere, an introduction instead of an answer
- `voices`        lines spoken for someone else, to itself, under another name, as the buyer
- `deeds`         an act said done (an intent's `grant_phrases`) that the reply does not grant
- `deals`         a sale the rules made turned down in words, a ware in stock denied, a price for nothing sold
- `checks`        the designer's constraints and the secrets
- `prevention`    what of the above the sampler keeps out while the words are decoded
- `premise`       a yes to a claim canon denies
- `grounding`     numbers about what the prompt carried (`loreguard.text.numbers` reads them)
- `canonical`     a contradicted fact, state key or number as the failure the receipt lists

The gate's face (`validate`, `run_gate`, `GateConfig`, `GateResult`, `Judge`, `JudgeVerdict`)
is importable from here; it loads on first use, so a check imported on its own (by the prompt,
the intents or a bench) loads no other stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loreguard.server.pipeline.gate.validation import GateConfig, GateResult, Judge, JudgeVerdict, run_gate, validate

__all__ = ["GateConfig", "GateResult", "Judge", "JudgeVerdict", "run_gate", "validate"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from loreguard.server.pipeline.gate import validation

        return getattr(validation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
