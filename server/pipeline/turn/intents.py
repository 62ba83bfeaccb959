"""World intents: which are on the table this turn (what the player asked for, in their words),
and whether one the model wrote may be granted.

A small model asked to pick an intent from everything its NPC may do picks one at random or
never; asked "the player wants the north gate opened: grant it or not?", it can answer. So the
governance plane reads the request, deterministically, and the model only decides.

An intent with `cues` is *requested* when a sentence of the player's line asks for its act
(`asking`: by the sentence's mood and the act's verbs, or one of the designer's cues said as a
contiguous run of folded words, plurals undone) and names one of
the allowed values of each enum parameter that has more than one (an enum with one value is
filled in); only the asking sentences are read for values. An integer or number parameter takes the number just before the named value ("two
loaves of bread" -> 2, digits or number words up to ninety and "dozen"), else its smallest
allowed value (at least 1): a number elsewhere in the line ("here's 5 silver for bread") is not
a count. Only the first enum parameter with several values sets the alternatives; another takes
the value the line names first, and a line that asks for two things of two kinds gets the first
kind's alternatives only (a known limit: designers with such intents give them one enum each). A requested value outside the parameter's bounds, or a
request for something the NPC does not have ("a torch"), puts nothing on the table. An intent
without cues is offered every turn with its parameters left to the model, as before cues.

An intent a rule forbids in this context is never offered; one a rule requires always is. A
grant agrees to the request as the player worded it, so a request worded in terms a prohibition's
`forbidden_requests` lists ("Can I have some bread for free?" to the merchant whose rule lists "for
free") is not offered either: it is a `RefusedRequest` (`request_terms`), which the prompt names
with the rule that forbids it (told only to grant unless a rule forbids, an instruct model read
"every sale has its price" and handed the bread over, saying "Yes, I'll have some bread for
you."). Pure: the same line and profile give the same offer, in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable

from loreguard.schemas.base import FrozenModel, JsonScalar
from loreguard.schemas.npc import IntentParam, IntentSpec, ParamType
from loreguard.schemas.output import EmitWorldIntentMutation, WorldIntent
from loreguard.schemas.text import fold
from loreguard.text.asking import Asking, asking_sentences
from loreguard.text.numbers import DOZEN, ONES, TENS
from loreguard.text.request_terms import refusing
from loreguard.text.words import stem, stems

#: How many words before a named value a number may stand and still count it ("two loaves of
#: bread": three).
COUNT_REACH = 3
#: The most alternatives offered for one line ("bread or rope": two).
MAX_OFFERS = 4
#: Words with which a reply turns a request down. A small model grants in its output's intent
#: and says no in its dialogue ("You're not allowed to open it." while the gate opens): then the
#: words win and the intent is not approved (English; a false "no" only costs a grant).
REFUSALS = (
    "not allowed", "not permitted", "cannot", "can't", "can not", "won't", "will not", "shan't", "refuse",
    "may not", "must not", "prohibit", "forbid", "not allow", "not allowing", "not give", "not open", "not sell",
    "no way",
    "no one can", "nobody can", "shouldn't", "should not", "not today", "stay shut", "stays shut",
    "stay closed", "stays closed", "remain closed", "remain shut", "stay locked", "remain locked", "keep it shut",
    "keep it closed", "go away", "move along", "not for sale", "not selling", "sold out", "not able", "unable",
)  # fmt: skip


class OfferedIntent(FrozenModel):
    """An intent the model may grant this turn."""

    spec: IntentSpec
    #: The parameters the player's line fixed, by name; the model writes the others.
    params: tuple[tuple[str, JsonScalar], ...] = ()
    #: True when the player asked for it (its cues); False for an intent offered every turn.
    requested: bool = False
    #: True when the rules granted it (`deals`): the output must grant it, in its own words.
    decided: bool = False

    def intent(self) -> WorldIntent:
        """The intent as granted, when every parameter is fixed."""
        return WorldIntent(type=self.spec.type, params=dict(self.params))

    @property
    def fixed(self) -> bool:
        return len(self.params) == len(self.spec.params)

    def granted_by(self, m: EmitWorldIntentMutation) -> bool:
        """Whether `m` grants this offer: its intent, with every parameter the line fixed."""
        return self.spec.type == m.intent and all(m.params.get(name) == value for name, value in self.params)


class RefusedRequest(FrozenModel):
    """A request worded in terms a rule forbids: not on the table, and the prompt says why."""

    offer: OfferedIntent
    #: The rule and the phrase of it that the player's asking sentences say.
    rule_id: str
    phrase: str


class IntentTable(FrozenModel):
    """What the model may grant this turn, and what the player asked for that a rule forbids."""

    offered: tuple[OfferedIntent, ...] = ()
    refused: tuple[RefusedRequest, ...] = ()


def _says(words: tuple[str, ...], phrase: str) -> bool:
    needle = stems(phrase)
    n = len(needle)
    return bool(n) and any(words[i : i + n] == needle for i in range(len(words) - n + 1))


def _positions(words: tuple[str, ...], phrase: str) -> list[int]:
    needle = stems(phrase)
    n = len(needle)
    return [i for i in range(len(words) - n + 1) if n and words[i : i + n] == needle]


#: Words that end the look back for a count: what stands before them counts something else
#: ("5 silver for bread", "two lanterns and bread").
_COUNT_STOPS = frozenset("and or for with here s but then".split())
_NUMBER_WORDS = {**ONES, **TENS, "dozen": DOZEN}


def _count_before(words: tuple[str, ...], at: int, others: frozenset[str]) -> int | None:
    """The number just before the value named at `at` (`others`: the parameter's other values,
    which end the look back too)."""
    for word in reversed(words[max(0, at - COUNT_REACH) : at]):
        if word.isdigit():
            return int(word)
        if word in _NUMBER_WORDS:
            return _NUMBER_WORDS[word]
        if word in _COUNT_STOPS or word in others:
            return None
    return None


def _within(param: IntentParam, value: float) -> bool:
    return (param.minimum is None or value >= param.minimum) and (param.maximum is None or value <= param.maximum)


def _default_count(param: IntentParam) -> int | None:
    value = max(1, int(param.minimum)) if param.minimum is not None else 1
    return value if _within(param, value) else None


def requested_offers(spec: IntentSpec, line: str) -> list[OfferedIntent]:
    """The alternatives of `spec` the line asks for (none when it asks for nothing it can give)."""
    return _requested(spec, line)[0] if spec.cues else []


def _requested(spec: IntentSpec, line: str) -> tuple[list[OfferedIntent], tuple[Asking, ...]]:
    """The alternatives the line asks for (none when it asks for nothing this intent can give),
    and the sentences that ask."""
    askings = asking_sentences(line, spec, [stems(cue) for cue in spec.cues])
    words = tuple(word for asking in askings for word in asking.words)
    return (_alternatives(spec, words) if words else []), askings


def _refused(
    spec: IntentSpec, offers: list[OfferedIntent], askings: tuple[Asking, ...], terms: tuple[tuple[str, str], ...]
) -> tuple[list[OfferedIntent], list[RefusedRequest]]:
    """`offers` split into those still on the table and those a forbidden term refuses
    (`request_terms`)."""
    if not terms or not offers:
        return offers, []
    choices = frozenset(name for name, p in spec.params.items() if len(p.enum) > 1)
    values = sorted({str(value) for offer in offers for name, value in offer.params if name in choices})
    refusals = refusing(askings, terms, values)
    kept: list[OfferedIntent] = []
    refused: list[RefusedRequest] = []
    for offer in offers:
        mine = {str(value) for name, value in offer.params if name in choices}
        hit = next(((rule, phrase) for named, rule, phrase in refusals if not mine or mine & named), None)
        if hit is None:
            kept.append(offer)
        else:
            refused.append(RefusedRequest(offer=offer, rule_id=hit[0], phrase=hit[1]))
    return kept, refused


def _alternatives(spec: IntentSpec, words: tuple[str, ...]) -> list[OfferedIntent]:
    named: list[tuple[int, str, str]] = []  # (where, param, value) of enum values the line names
    fixed: dict[str, JsonScalar] = {}
    for name, param in sorted(spec.params.items()):
        if len(param.enum) == 1:
            fixed[name] = param.enum[0]
        elif param.enum:
            hits = sorted((at, value) for value in param.enum for at in _positions(words, value)[:1])
            if not hits:
                return []  # the NPC has nothing of what was asked for
            named += [(at, name, value) for at, value in hits]
    enum_params = sorted({name for _, name, _ in named})
    counted = [name for name, p in sorted(spec.params.items()) if p.type in (ParamType.INTEGER, ParamType.NUMBER)]
    offers: list[OfferedIntent] = []
    # one alternative per value named for the first enum parameter (in the line's order); the
    # others take the value the line names first
    first = enum_params[0] if enum_params else None
    choices = [(at, value) for at, name, value in named if name == first] or [(len(words), "")]
    for at, value in choices[:MAX_OFFERS]:
        params = dict(fixed)
        if first is not None:
            params[first] = value
        for name in enum_params[1:]:
            params[name] = next(v for _, n, v in named if n == name)
        for name in counted:
            param = spec.params[name]
            others = frozenset(stem(fold(v)) for v in spec.params[first].enum) if first is not None else frozenset()
            count = _count_before(words, at, others) if first is not None else None
            if count is None:
                count = _default_count(param)
            if count is None or not _within(param, count):
                return []
            params[name] = count
        offers.append(OfferedIntent(spec=spec, params=tuple(sorted(params.items())), requested=True))
    return offers


def offered_intents(
    player_input: str,
    specs: Iterable[IntentSpec],
    *,
    forbidden: Iterable[str] = (),
    required: Iterable[str] = (),
    forbidden_terms: Iterable[tuple[str, str]] = (),
) -> tuple[OfferedIntent, ...]:
    """What the model may grant this turn (`intent_table`'s offers)."""
    return intent_table(player_input, specs, forbidden=forbidden, required=required, forbidden_terms=forbidden_terms).offered


def intent_table(
    player_input: str,
    specs: Iterable[IntentSpec],
    *,
    forbidden: Iterable[str] = (),
    required: Iterable[str] = (),
    forbidden_terms: Iterable[tuple[str, str]] = (),
) -> IntentTable:
    """What the model may grant this turn, by intent type then parameters: the intents the line
    requests, every intent without cues, and every intent a rule requires; none a rule forbids.
    `forbidden_terms`: (rule id, phrase) of the rules' `forbidden_requests` in force; a request
    worded in one is refused, not offered (`request_terms`; the first such rule, in the given
    order). An intent a rule requires stays offered, its parameters left to the model."""
    banned, needed = frozenset(forbidden), frozenset(required)
    terms = tuple(forbidden_terms)
    offers: list[OfferedIntent] = []
    refused: list[RefusedRequest] = []
    for spec in sorted(specs, key=lambda s: s.type):
        if spec.type in banned:
            continue
        requested, askings = _requested(spec, player_input) if spec.cues else ([], ())
        requested, turned_down = _refused(spec, requested, askings, terms)
        refused += turned_down
        if requested:
            offers += requested
        elif not spec.cues or spec.type in needed:
            offers.append(OfferedIntent(spec=spec))
    return IntentTable(offered=tuple(offers), refused=tuple(refused))


def refusal(dialogue: str) -> str:
    """The first of `REFUSALS` the dialogue says, or ""."""
    words = stems(dialogue)
    return next((phrase for phrase in REFUSALS if _says(words, phrase)), "")


def requested(m: EmitWorldIntentMutation, offered: tuple[OfferedIntent, ...]) -> bool:
    """Whether `m` grants something the player asked for (not an intent offered every turn or
    one a rule requires): only such a grant is held to what the reply says (`refusal`)."""
    return any(offer.requested and offer.spec.type == m.intent for offer in offered)


def describe(offer: OfferedIntent) -> str:
    """`open_gate(gate_id=north)`: the intent as the prompt and the receipts name it."""
    params = ", ".join(f"{name}={value}" for name, value in offer.params)
    return f"{offer.spec.type}({params})"


def offer_problem(m: EmitWorldIntentMutation, offered: tuple[OfferedIntent, ...]) -> str:
    """Why this intent was not on the table this turn (`intents`), or "" when it was: an
    intent the NPC may emit only on request, with the parameters the player's line fixed."""
    offers = [offer for offer in offered if offer.spec.type == m.intent]
    if any(offer.granted_by(m) for offer in offers):
        return ""
    if not offers:
        return f"the player did not ask for {m.intent}"
    return f"the player asked for {' or '.join(describe(offer) for offer in offers)}"


def grant_problem(
    m: EmitWorldIntentMutation,
    spec: IntentSpec | None,
    offered: tuple[OfferedIntent, ...],
    refused: tuple[RefusedRequest, ...],
    dialogue: str,
) -> str:
    """Why the gate does not approve this grant, or "" when it does: the intent must be allowed,
    on the table this turn, and not turned down by the reply's own words."""
    problem = intent_problem(m, spec) or offer_problem(m, offered)
    if problem:
        return refused_problem(m, refused) or problem
    said_no = refusal(dialogue) if requested(m, offered) else ""
    return f'the reply turns it down ("{said_no}")' if said_no else ""


def refused_problem(m: EmitWorldIntentMutation, refused: tuple[RefusedRequest, ...]) -> str:
    """Why a grant of a request worded in forbidden terms is not approved, or "" when `m` grants
    none of them."""
    for r in refused:
        if r.offer.granted_by(m):
            return f'the player asked for it "{r.phrase}", which rule {r.rule_id} forbids'
    return ""


def intent_problem(m: EmitWorldIntentMutation, spec: IntentSpec | None) -> str:
    """Why this intent may not be emitted, or "" when it may."""
    if spec is None:
        return f"intent {m.intent} is not allowed for this NPC"
    for name in sorted(m.params):
        if name not in spec.params:
            return f"intent {m.intent} has no parameter {name}"
    for name, param in sorted(spec.params.items()):
        if name not in m.params:
            if param.required:
                return f"intent {m.intent} needs parameter {name}"
            continue
        value = m.params[name]
        if param.type is ParamType.STRING:
            if not isinstance(value, str):
                return f"{m.intent}.{name} must be a string"
            if len(value) > param.max_length:
                return f"{m.intent}.{name} is longer than {param.max_length}"
            if param.enum and value not in param.enum:
                return f"{m.intent}.{name} must be one of {', '.join(sorted(param.enum))}"
        elif param.type is ParamType.BOOLEAN:
            if not isinstance(value, bool):
                return f"{m.intent}.{name} must be a boolean"
        else:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return f"{m.intent}.{name} must be a {param.type.value}"
            if param.type is ParamType.INTEGER and not isinstance(value, int):
                return f"{m.intent}.{name} must be a {param.type.value}"
            if param.minimum is not None and value < param.minimum:
                return f"{m.intent}.{name} is below {param.minimum}"
            if param.maximum is not None and value > param.maximum:
                return f"{m.intent}.{name} is above {param.maximum}"
    return ""
