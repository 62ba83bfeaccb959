"""Who speaks next in a scene: pure, so a scene replays line for line.

An NPC a line names (by its name, or the first word of it) answers next; otherwise a rotation
weighted by the designer: each NPC's next turn falls due at (lines spoken + 1) / weight, the
earliest due speaks, and between two due at once the one who did not speak last, then the
scene's order. Equal weights alternate; weights 2:1 give A B A A B A A B...
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from loreguard.schemas.interaction import SceneMember


def named_in(text: str, members: Sequence[SceneMember], speaker: str | None) -> str | None:
    """The NPC among `members` (not `speaker`) whose name `text` mentions first; None for none.
    A name matches whole and ignoring case, as does its first word ("Brom" for "Brom Ironhand")."""
    folded = text.casefold()
    best: tuple[int, int, str] | None = None
    for order, member in enumerate(members):
        if member.npc_id == speaker:
            continue
        for name in _names(member.name):
            found = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", folded)
            if found is not None and (best is None or (found.start(), order) < best[:2]):
                best = (found.start(), order, member.npc_id)
    return best[2] if best is not None else None


def _names(name: str) -> tuple[str, ...]:
    full = name.casefold().strip()
    first = full.split()[0] if full.split() else full
    return (full,) if first == full else (full, first)


def next_speaker(
    speakers: Sequence[str],
    weights: Mapping[str, float],
    spoken: Mapping[str, int],
    last: str | None,
    addressed: str | None,
) -> str:
    """The NPC who speaks next: `addressed` when it is a speaker other than `last`, else the
    weighted rotation's (module docstring)."""
    if addressed is not None and addressed in speakers and addressed != last:
        return addressed
    order = {npc: i for i, npc in enumerate(speakers)}
    return min(speakers, key=lambda npc: ((spoken.get(npc, 0) + 1) / weights.get(npc, 1.0), npc == last, order[npc]))
