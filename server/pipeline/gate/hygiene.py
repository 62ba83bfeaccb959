"""Output hygiene: only the NPC's own words reach the player. Pure and deterministic.

Models write more than the line the NPC says: bracket markup (`[MEMORY: ...]`, `<|im_end|>`), a
speaker label copied from the prompt (`Brom:`) or another character's (`Guard: Halt!` said by
Marcus), stage directions (`*smiles*`, `(laughs)`),
meta-text (`As an AI...`, `Note: ...`) and, when generation is cut short, a trailing fragment
(`..., and the`). `scrub_dialogue` finds each one and, by the NPC's `OutputHygiene`, strips it
or rejects it; every case is an `OutputFinding` for the attempt's record, and every rejection is
also a hard failure of the gate's hard limits, so the attempt is retried.

- Meta-text is always rejected: stripping it would leave words the model said out of character.
- A stage direction that clearly names a feeling (`laughs` -> amused, `sighs` -> sad) gives the
  reply its emotion when the model left that neutral; any other is dropped.
- A trailing fragment (ending on a word no sentence ends on: "the", "with", "to") is cut back to
  the last full sentence; with none, it is rejected. A reply that opens in lower case with a word
  that continues a sentence ("so that you can proceed.") is the tail of one, and is rejected, as
  is one that opens, in any case, where no sentence of its own starts ("So as to keep the wolves
  out.", "Such as the lantern."); unless it is whole all the same: a question ("who goes
  there?") or a clause before its main one ("when the bell rings, the gate shuts.").
- A reply with nothing left once stripped fails the attempt (`empty_after_hygiene`).

It starts from `phrases.clean_dialogue` and finishes with it, and changes nothing it did not
find: an ordinary line comes back exactly as `clean_dialogue` gives it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.npc import OutputHygiene
from loreguard.schemas.output import Emotion
from loreguard.schemas.receipt import FindingAction, FindingKind, GateFailure, GateName, OutputFinding
from loreguard.schemas.rules import Severity
from loreguard.schemas.text import fold
from loreguard.server.pipeline.gate.register import without_assistant_sentences
from loreguard.text.phrases import clean_dialogue
from loreguard.text.questions import opens_as_question
from loreguard.text.words import verb_forms

#: The rule id of the failure when stripping left no dialogue; every other hygiene failure is
#: named after its finding's kind (`meta_text`, `speaker_label`, ...).
EMPTY_AFTER_HYGIENE_RULE = "empty_after_hygiene"

#: Gestures a stage direction starts with, and the feeling each clearly names (None: only an action).
GESTURES: dict[str, Emotion | None] = {
    **dict.fromkeys(("laugh", "chuckle", "giggle", "grin", "smirk", "snicker", "cackle", "chortle"), Emotion.AMUSED),
    **dict.fromkeys(("smile", "beam"), Emotion.HAPPY),
    **dict.fromkeys(("sigh", "sob", "weep", "cry", "sniffle", "sniff"), Emotion.SAD),
    **dict.fromkeys(("scowl", "growl", "snarl", "glare", "seethe", "fume"), Emotion.ANGRY),
    **dict.fromkeys(("gasp",), Emotion.SURPRISED),
    **dict.fromkeys(("tremble", "shudder", "cower", "flinch", "whimper"), Emotion.AFRAID),
    **dict.fromkeys(("narrow", "squint"), Emotion.SUSPICIOUS),
    **dict.fromkeys(
        (
            "nod", "shrug", "lean", "pause", "cough", "wink", "bow", "wave", "point", "frown", "blink",
            "whisper", "mutter", "grunt", "shake", "glance", "scratch", "cross", "stroke", "tap", "clear",
            "raise", "roll", "hum", "yawn", "stretch", "spit", "salute", "gesture", "turn", "step", "stare",
            "look", "hesitate", "mumble", "murmur", "scoff", "snort", "huff", "grumble", "wipe", "sit",
            "stand", "adjust", "rub", "pat", "tip", "smack", "clap", "bang", "eye", "peer",
        ),
        None,
    ),
}  # fmt: skip

#: Words a complete English sentence does not end on: a reply ending on one was cut short.
DANGLING_WORDS = frozenset(
    "a an the and or but nor because although unless whereas than of my your our their its whose "
    "with to for from into onto at by as is are was were be been being will would shall should could must very "
    "upon toward towards during among amongst between beneath despite except unlike via regarding concerning "
    "whether".split()
)
#: Words a reply cannot open with in lower case: it is the tail of a sentence ("so that you can
#: proceed."), the model having started in the middle.
#: Words that open a clause before the main one ("when the bell rings, ...").
SUBORDINATORS = frozenset("when if where as while because although though unless once since until after before".split())
#: Openings that never carry a sentence of their own, whatever the case: "So as to keep the
#: wolves out.", "In order to pass.", "Such as the lantern." (a reply that starts there is the
#: rest of a sentence the model never wrote).
_NO_MAIN_CLAUSE = re.compile(
    r"^\W*(?:so as to|in order to|in order for|such as|as well as|rather than|due to the fact|"
    r"which (?:is|was|means|meant) (?:why|that)|whereby|whereas)\b",
    re.IGNORECASE,
)
CONTINUING_WORDS = frozenset(
    "so and but or nor because that which who whom whose to with for from of than then while whereas unless "
    "although though if when where as by into onto".split()
)

_SQUARE = re.compile(r"\[[^\[\]\n]{0,200}\]|\[[^\[\]\n]{0,200}$")
_ANGLE = re.compile(r"<\|?/?[A-Za-z_][^<>\n]{0,80}>")
_CURLY = re.compile(r"\{+[^{}\n]{0,200}\}+")
_ASTERISK = re.compile(r"\*{1,2}([^*\n]{1,120}?)\*{1,2}")
_PAREN = re.compile(r"\(([^()\n]{1,120})\)")
_META = (
    re.compile(
        r"\bas an? (?:ai\b|artificial intelligence|(?:large )?language model|ai (?:language )?model|ai assistant|chatbot)",
        re.IGNORECASE,
    ),
    re.compile(
        r"\bi(?:'m| am) (?:just |only |merely )?an? (?:ai\b|artificial intelligence|(?:large )?language model|"
        r"ai (?:language )?model|ai assistant|chatbot|virtual assistant)",
        re.IGNORECASE,
    ),
    re.compile(
        r"(?:^|[.!?]\s+|\(\s*)(?:note|ooc|disclaimer|translation|explanation|narrator|remember|reminder|hint|tip|"
        r"(?:example|sample) (?:answer|reply|response|output|dialogue|line)|(?:npc|character'?s?) (?:reply|response|line)|"
        r"response|output|dialogue)\s*:",
        re.IGNORECASE,
    ),
    re.compile(r"\bout of character\b", re.IGNORECASE),
)
#: Labels a model puts before a line besides the NPC's own name and id.
_GENERIC_LABELS = ("npc", "assistant", "character", "dialogue", "response")
#: Any capitalised name or role of one or two words, then a colon, at the start: a speaker label.
_OTHER_LABEL = re.compile(
    r"^\s*(?:\*\*|__)?([A-Z][\w'\-]{0,30}(?: [A-Z][\w'\-]{0,30})?)(?:\s*\([^()]{0,40}\))?(?:\*\*|__)?\s*:(?:\*\*|__)?\s+(?=\S)"
)
#: Words before a colon that open a spoken line rather than name a speaker ("Listen: ...").
_NOT_LABELS = frozenset(
    "listen look well aye yes no nay now careful mark hear behold warning attention fine so right alright okay ok "
    "hmm hm oh ah see stop halt wait here there first second third last remember note rumour rumor news word "
    "truth fact gossip".split()
)
_QUOTES = {'"': '"', "\u201c": "\u201d", "\u00ab": "\u00bb", "'": "'"}
_TERMINAL = re.compile(r"[.!?\u2026\u3002\uff01\uff1f][\"'\u201d\u00bb)\]]*")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.!?;:\u2026])")
_LEADING_JUNK = re.compile(r"^[\s,;:\-\u2013\u2014]+")
_SPACES = re.compile(r"\s+")


class Scrubbed(FrozenModel):
    """A reply's dialogue after hygiene, what was found, and the hard failures it makes."""

    text: str
    #: The dialogue before hygiene (after `clean_dialogue`).
    original: str
    findings: tuple[OutputFinding, ...] = ()
    failures: tuple[GateFailure, ...] = ()
    #: The feeling the first mapped stage direction named: the reply's emotion.
    emotion: Emotion | None = None


def gesture(words: list[str]) -> str | None:
    """The gesture a stage direction's first or second word names ("laughs", "softly sighs")."""
    for word in words[:2]:
        stem = _gesture_of(word)
        if stem is not None:
            return stem
    return None


def _gesture_of(word: str) -> str | None:
    """`word`'s entry in GESTURES: laughs, laughing, laughed, grinning, cries, cried -> the stem."""
    return next((c for c in verb_forms(word) if c in GESTURES), None)


def _words(text: str) -> list[str]:
    return fold(text).replace("'", " ").split()


class _Scrubber:
    def __init__(self, text: str, policy: OutputHygiene, *, map_emotion: bool) -> None:
        self.text = text
        self.strict = policy is OutputHygiene.STRICT
        self.map_emotion = map_emotion
        self.findings: list[OutputFinding] = []
        self.emotion: Emotion | None = None
        self.changed = False

    def found(self, kind: FindingKind, text: str, *, reject: bool = False, emotion: Emotion | None = None) -> None:
        if reject or self.strict:
            self.findings.append(OutputFinding(kind=kind, text=text, action=FindingAction.REJECTED))
            return
        if emotion is not None and self.map_emotion and self.emotion is None:
            self.emotion = emotion
            self.findings.append(OutputFinding(kind=kind, text=text, action=FindingAction.MAPPED, emotion=emotion))
        else:
            self.findings.append(OutputFinding(kind=kind, text=text, action=FindingAction.STRIPPED))
        self.changed = True

    def direction(self, match: re.Match[str], inner: str) -> str | None:
        """A stage direction's replacement ("" when removed) or None when it is not one."""
        stem = gesture(_words(inner))
        if stem is None:
            return None
        self.found(FindingKind.STAGE_DIRECTION, match.group(0), emotion=GESTURES[stem])
        return "" if not self.strict else match.group(0)

    def markers(self) -> None:
        def square(match: re.Match[str]) -> str:
            inner = match.group(0).strip("[]")
            if ":" not in inner:
                replaced = self.direction(match, inner)
                if replaced is not None:
                    return replaced
            self.found(FindingKind.INLINE_MARKER, match.group(0))
            return "" if not self.strict else match.group(0)

        def other(match: re.Match[str]) -> str:
            self.found(FindingKind.INLINE_MARKER, match.group(0))
            return "" if not self.strict else match.group(0)

        self.text = _SQUARE.sub(square, self.text)
        self.text = _ANGLE.sub(other, self.text)
        self.text = _CURLY.sub(other, self.text)

    def directions(self) -> None:
        def asterisk(match: re.Match[str]) -> str:
            inner = match.group(1)
            replaced = self.direction(match, inner)
            if replaced is not None:
                return replaced
            if len(_words(inner)) >= 2:
                self.found(FindingKind.STAGE_DIRECTION, match.group(0))
                return "" if not self.strict else match.group(0)
            self.found(FindingKind.EMPHASIS, match.group(0))
            return inner if not self.strict else match.group(0)

        def paren(match: re.Match[str]) -> str:
            replaced = self.direction(match, match.group(1))
            return match.group(0) if replaced is None else replaced

        self.text = _ASTERISK.sub(asterisk, self.text)
        self.text = _PAREN.sub(paren, self.text)

    def label(self, names: tuple[str, ...]) -> None:
        if any(f.kind is FindingKind.SPEAKER_LABEL for f in self.findings):
            return
        match = _label_pattern(names).match(self.text)
        if match is None:
            return
        self.found(FindingKind.SPEAKER_LABEL, match.group(0).strip())
        if not self.strict:
            self.text = _unquoted(self.text[match.end() :].strip())

    def other_label(self) -> None:
        """Another character's speaker label before the line ("Guard: Halt!" said by Marcus):
        the words after it may be the NPC's, the label is not."""
        if any(f.kind is FindingKind.SPEAKER_LABEL for f in self.findings):
            return
        match = _OTHER_LABEL.match(self.text)
        if match is None or match.group(1).lower() in _NOT_LABELS:
            return
        said = self.text[match.end() :].lstrip()
        if not said or not (said[0].isupper() or said[0] in _QUOTES):
            return  # "Dawn: that's when we open." goes on the same sentence: no speaker
        self.found(FindingKind.SPEAKER_LABEL, match.group(0).strip())
        if not self.strict:
            self.text = _unquoted(self.text[match.end() :].strip())

    def meta(self) -> None:
        if any(f.kind is FindingKind.META_TEXT for f in self.findings):
            return
        plain = self.text.replace("\u2019", "'")
        for pattern in _META:
            match = pattern.search(plain)
            if match is not None:
                self.found(FindingKind.META_TEXT, match.group(0).strip(" (.!?"), reject=True)
                return

    def assistant(self) -> None:
        """Sentences in an assistant's register beside the NPC's own are not the NPC's (`register`)."""
        kept, removed = without_assistant_sentences(self.text)
        for sentence in removed:
            self.found(FindingKind.ASSISTANT_REGISTER, sentence)
        if removed and not self.strict:
            self.text = kept

    def tidy(self) -> None:
        if self.changed:
            text = _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACES.sub(" ", self.text))
            self.text = clean_dialogue(_LEADING_JUNK.sub("", text))

    def fragment(self, cut: bool = False) -> None:
        """`cut`: the output grammar ended the dialogue at its length bound, so a tail that ends
        no sentence was cut there, whatever its last word ("...and says 'no")."""
        text = self.text
        first = _words(text[:40])[:1]
        opener = text[:1].islower() and first and first[0] in CONTINUING_WORDS
        if (opener or _NO_MAIN_CLAUSE.match(text)) and not _whole_sentence(text):
            # the tail of a sentence whose start the model never wrote: nothing to cut back to
            self.found(FindingKind.SENTENCE_FRAGMENT, text[:80], reject=True)
            return
        ends = [m.end() for m in _TERMINAL.finditer(text)]
        if not text or (ends and ends[-1] == len(text)):
            return
        tail = text[ends[-1] :].strip() if ends else text
        words = _words(tail)
        if not (cut or tail[-1:] in ",;:-\u2013\u2014(" or (words and words[-1] in DANGLING_WORDS)):
            return
        if not cut and opens_as_question(tail) and tail[-1:].isalpha():
            return  # "What are you waiting for": a question without its mark, not a cut
        if not ends:
            self.found(FindingKind.SENTENCE_FRAGMENT, tail, reject=True)
            return
        self.found(FindingKind.SENTENCE_FRAGMENT, tail)
        if not self.strict:
            self.text = text[: ends[-1]]


def _whole_sentence(text: str) -> bool:
    """Whether a line opening in lower case with a word that may continue a sentence is a whole
    one all the same: a question ("who goes there?") or a clause before its main one ("when the
    bell rings, the gate shuts.")."""
    end = _TERMINAL.search(text)
    first = text[: end.end()] if end else text
    words = _words(first)
    if first.rstrip().endswith("?") and (opens_as_question(first) or words[:1] == ["if"]):
        return True
    head, comma, rest = first.partition(",")
    opens_a_clause = words[0] in SUBORDINATORS or _NO_MAIN_CLAUSE.match(first) is not None
    return bool(comma) and opens_a_clause and len(_words(rest)) >= 2 and len(_words(head)) >= 2


def _unquoted(text: str) -> str:
    """`text` without the quotes around all of it, if it has them."""
    if len(text) >= 2 and _QUOTES.get(text[0]) == text[-1] and text[0] not in text[1:-1]:
        return text[1:-1]
    return text


@lru_cache(maxsize=256)
def _label_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """A speaker label naming one of `names`; compiled once per NPC (the gate asks twice a reply)."""
    alternatives = "|".join(re.escape(n) for n in sorted(set(names), key=lambda n: (-len(n), n)))
    return re.compile(rf"^\s*(?:\*\*|__)?(?:{alternatives})(?:\s*\([^()]{{0,40}}\))?(?:\*\*|__)?\s*:(?:\*\*|__)?\s*", re.I)


@lru_cache(maxsize=256)
def speaker_names(npc_name: str, npc_id: str) -> tuple[str, ...]:
    """What a speaker label may say: the NPC's name, each longer word of it, its id, and the
    generic labels models use."""
    parts = [w for w in re.split(r"\s+", npc_name) if len(w) >= 3 and w.lower() not in {"the", "and", "of"}]
    return (npc_name, npc_id, npc_id.replace("_", " "), *parts, *_GENERIC_LABELS)


def scrub_dialogue(
    text: str,
    *,
    npc_name: str,
    npc_id: str,
    policy: OutputHygiene = OutputHygiene.CLEAN,
    map_emotion: bool = True,
    cut_at: int | None = None,
) -> Scrubbed:
    """`text` (a reply's dialogue) cleaned or judged by `policy`; see the module's docstring.
    `map_emotion`: whether a stage direction may give the reply its emotion (the model left it
    neutral). `cut_at`: the dialogue length at which the output grammar ends the string (a
    dialogue that long was cut there)."""
    clean = clean_dialogue(text)
    scrubber = _Scrubber(clean, policy, map_emotion=map_emotion)
    scrubber.meta()  # before stripping, so meta-text inside markup or asterisks is still seen
    names = speaker_names(npc_name, npc_id)
    scrubber.markers()
    scrubber.tidy()
    scrubber.label(names)  # before stage directions: `**Brom:**` is a label, not emphasis
    scrubber.directions()
    scrubber.tidy()
    scrubber.label(names)  # a label after a direction: `*nods* Brom: ...`
    scrubber.other_label()  # another character's, only when the NPC's own was not there
    scrubber.meta()
    scrubber.assistant()
    scrubber.tidy()
    scrubber.fragment(cut=cut_at is not None and len(text) >= cut_at)
    failures = [
        GateFailure(
            gate=GateName.HARD_LIMITS,
            reason=f"dialogue holds {f.kind.value.replace('_', ' ')} {f.text[:80]!r}",
            severity=Severity.HARD,
            rule_id=f.kind.value,
            evidence=f.text[:80],
        )
        for f in scrubber.findings
        if f.action is FindingAction.REJECTED
    ]
    if not scrubber.text and clean:
        failures.append(
            GateFailure(
                gate=GateName.HARD_LIMITS,
                reason="no dialogue is left once markup, labels and stage directions are removed",
                severity=Severity.HARD,
                rule_id=EMPTY_AFTER_HYGIENE_RULE,
            )
        )
    return Scrubbed(
        text=scrubber.text, original=clean, findings=tuple(scrubber.findings), failures=tuple(failures), emotion=scrubber.emotion
    )
