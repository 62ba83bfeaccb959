"""The claim checker (memory/claims.py): what the canonical gate flags in dialogue and what marks
a belief contradicted."""

from __future__ import annotations

import pytest

from loreguard.memory.claims import find_contradictions
from loreguard.schemas import CanonicalFact, Claim

KING = CanonicalFact(
    id="king_name",
    text="The king is Arthur.",
    claims=(Claim(subject="king", attribute="name", value="Arthur", subject_aliases=("his majesty",), value_aliases=("Art",)),),
)
MILL = CanonicalFact(
    id="mill_location", text="The mill is in Oakvale.", claims=(Claim(subject="mill", attribute="location", value="Oakvale"),)
)


@pytest.mark.parametrize(
    ("text", "contradicts"),
    [
        ("The king is named Edward.", True),
        ("the KING is called edward!", True),
        ("The king's name is Edward.", True),
        ("His Majesty is named Edward the Bold.", True),
        ("The king is not named Arthur.", True),
        ("The king isn't named Arthur, you fool.", True),
        ("The king is named Arthur.", False),
        ("The king is called Art by his friends.", False),
        ("The king is not named Edward.", False),  # negating another value: consistent
        ("Edward? No. The king is named Arthur.", False),
        ("The queen is named Edwina.", False),
        ("The king likes bread.", False),
        ("The mill is in Riverford.", True),
        ("The mill is in Oakvale, by the bridge.", False),
    ],
)
def test_claims(text: str, contradicts: bool) -> None:
    assert bool(find_contradictions(text, [KING, MILL])) is contradicts


def test_claims_beat_substring_negation() -> None:
    # Substring negation would flag "not ... Edward" (harmless) and miss "named Edward" (wrong).
    assert not find_contradictions("No, the king is not named Edward.", [KING])
    (hit,) = find_contradictions("Aye, the king is named Edward.", [KING])
    assert hit.asserted == "edward" and not hit.negated
