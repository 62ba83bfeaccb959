"""What a demo turn did, read from its receipt: the heading says what happened on this run, not
what the turn was written to show (a live model answers as it answers)."""

from __future__ import annotations

from loreguard.schemas import InteractionResult


def what_happened(result: InteractionResult) -> str:
    """One line: how many attempts were refused and by which gate, the fallback, the intents
    approved, the rules' deals, and the memory changes applied or refused."""
    receipt = result.receipt
    refused = [a for a in receipt.attempts if a.failures]
    parts: list[str] = []
    gates = ", ".join(sorted({f.gate.value for a in refused for f in a.failures}))
    attempts = f"{len(refused)} attempt{'s' if len(refused) != 1 else ''} refused ({gates or receipt.fallback_reason})"
    if result.fallback_used:
        parts.append(f"{attempts}: the authored fallback was said")
    elif refused:
        parts.append(f"{attempts}, then one passed")
    else:
        parts.append("passed first time")
    parts += [f"approved {intent.type}" for intent in result.intents]
    parts += [f"the rules {'sold' if deal.granted else 'declined'}" for deal in receipt.deals]
    if receipt.applied_mutations:
        parts.append(f"{len(receipt.applied_mutations)} memory change(s) applied")
    overrides = [r for r in receipt.rejected_mutations if r.canonical_override]
    if overrides:
        parts.append("an override of a canonical fact refused")
    elif receipt.rejected_mutations:
        parts.append(f"{len(receipt.rejected_mutations)} memory change(s) refused")
    return "; ".join(parts)
