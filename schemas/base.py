"""Shared building blocks for every Loreguard model.

Facts are frozen and reject unknown fields: a typo in a designer's rule file must fail loudly,
never be silently ignored.
"""

from __future__ import annotations

import math
from typing import Annotated, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints


class FrozenModel(BaseModel):
    """An immutable value: equal content means equal model."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


#: NPC ids, fact ids, rule ids, belief ids: short, printable, no spaces. The `@` sign is
#: reserved for built-in scopes such as the world (`@world`).
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$")]

#: World-state keys are dotted paths such as `quest.dragon.stage`.
StateKey = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$")]


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


FiniteFloat = Annotated[float, AfterValidator(_finite)]
UnitInterval = Annotated[float, Field(ge=0.0, le=1.0), AfterValidator(_finite)]
SignedUnit = Annotated[float, Field(ge=-1.0, le=1.0), AfterValidator(_finite)]

#: A world-state value or an intent parameter: JSON scalars only, so every value has one
#: canonical serialization. Order matters: bool before int, or True would become 1.
JsonScalar = Union[bool, int, FiniteFloat, str]

ShortText = Annotated[str, StringConstraints(max_length=4000)]
LongText = Annotated[str, StringConstraints(max_length=32000)]
