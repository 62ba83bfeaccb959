class_name LoreguardGovernanceText
extends RefCounted
## What the sidecar's governance did, in a designer's words: each gate, each refusal with the
## rule's id in brackets ("said a forbidden word: dragon [no_dragon]"), the fallback and why, and
## what ended each attempt. Pure static functions over the receipt's dictionaries as they come
## over the wire (docs/protocol-messages.md), read by the game's governance view and the editor's
## Loreguard tab. A code it does not know is shown as itself, never as nothing.
##
##     for failure: Dictionary in attempt["failures"]:
##         print(LoreguardGovernanceText.failure(failure))

## The gates (server/pipeline/gate/validation.py, in the order they run) as a sentence names them.
const GATES := {
	"hard_limits": "the basic checks (length, markup, speaking as the character)",
	"schema": "the reply-format check",
	"constraints": "the designer's rules",
	"canonical": "the world's facts",
	"grounding": "the numbers check",
	"knowledge": "the secrets check",
	"mutations": "the memory and actions check",
	"semantic": "the judge",
}
## The same, short enough for a table cell.
const GATES_SHORT := {
	"hard_limits": "basic checks",
	"schema": "reply format",
	"constraints": "designer rules",
	"canonical": "world facts",
	"grounding": "numbers",
	"knowledge": "secrets",
	"mutations": "memory/actions",
	"semantic": "judge",
}
## The rule ids of the gate's built-in checks (the sidecar's `*_RULE` constants and hygiene's
## finding kinds): what the line did wrong. Designer rules, facts and secrets are recognised by
## their failure's reason instead (see `failure`).
const BUILT_IN_RULES := {
	# gate.py, readout.py
	"max_raw_chars": "wrote far more than one line",
	"prompt_markup": "repeated the prompt's markup",
	"output_schema": "was not in the reply format",
	"prompt_instructions": "read its instructions out loud",
	# degenerate.py
	"repetition_loop": "got stuck saying the same words over and over",
	"repeated_ngram": "kept repeating a phrase",
	"repeated_words": "used the same few words again and again",
	"unbalanced_brackets": "left a bracket or quote open",
	"ends_mid_word": "stopped in the middle of a word",
	"special_token": "let one of the model's control tokens into the line",
	"empty_dialogue": "said nothing",
	# hygiene.py (its finding kinds are the rule ids of what it rejected)
	"empty_after_hygiene": "was only stage directions or markup, no speech",
	"inline_marker": "put markup in the line",
	"speaker_label": "started the line with a speaker's name",
	"stage_direction": "described an action instead of speaking",
	"emphasis": "used asterisks for emphasis",
	"meta_text": "spoke about itself as an AI or about the text",
	"sentence_fragment": "left a sentence unfinished",
	# register.py
	"assistant_register": "spoke like a helpful assistant, not as the character",
	"repeated_sentence": "said a sentence again that it said to another question",
	"narrates_the_player": "talked about the player instead of to them",
	"yields_to_the_player": "gave in to the player and dropped its own rules",
	# non_answers.py, parroting.py, self_repeats.py
	"non_answer": "said something that answers nothing that was asked",
	"parroting": "copied words instead of answering",
	"repeats_itself": "gave an earlier answer again, to a different question",
	# voices.py, a scene's line
	"speaks_for_others": "spoke for someone else in the scene",
	"speaks_to_itself": "spoke to itself by name, as if someone else were talking",
	"only_a_name": "said only a name",
	"names_itself_wrongly": "called itself by another name",
	"speaks_as_the_buyer": "spoke as the buyer instead of the seller",
	"speaks_as_the_player": "said the player's own words as if they were its own",
	# deeds.py, deals.py
	"grants_in_words_only": "said it did something the game was not asked to do",
	"deal_outcome": "contradicted the sale the rules decided",
	"ware_denied": "said it has none of something it sells",
	"unpriced_ware": "priced something it does not sell",
	"not_sold": "offered something it does not sell",
	# gate.py, numbers in the line against the context
	"ungrounded_numbers": "named an amount nothing in the scene backs up",
}
## Why no attempt was used (the first half of a receipt's `fallback_reason`, lifecycle.py and
## attempt.py); `critical:` and `backend:` carry details after the colon.
const GIVE_UPS := {
	"attempts_exhausted": "every attempt was refused",
	"time_budget": "it ran out of time for another attempt",
	"critical": "a critical rule was broken, so it was not tried again",
	"backend": "the model could not answer",
}
## Where the fallback line came from (the second half of `fallback_reason`, fallback.py).
## %s: the NPC's name, then what made it speak.
const FALLBACK_SOURCES := {
	"npc_trigger": "used %s's authored line for %s",
	"world_trigger": "used the world's authored line for %s",
	"npc_generic": "used %s's general fallback line",
	"world_generic": "used the world's general fallback line",
	"emergency": "used the world's emergency line (every authored line would break a rule)",
	"silence": "said nothing (every authored line, even the emergency one, would break a rule)",
	"deal_lines": "used the line authored for what the rules decided",
}
## What made the NPC speak (the protocol's trigger reasons).
const TRIGGERS := {
	"player_utterance": "a player's question",
	"zone_trigger": "the player entering a place",
	"time_trigger": "a time of day",
	"quest_trigger": "a quest event",
	"npc_interaction": "another character",
	"world_event": "a world event",
	"custom": "a scripted moment",
}
const OUTCOMES := {
	"validated": "its own line passed",
	"fallback": "refused; an authored line was spoken instead",
	"clarify": "the game must say more before it can answer",
	"halted": "halted: something broke, nothing was applied",
	"cancelled": "cancelled before anyone heard it: nothing of it was remembered",
}
## A retry's own prohibitions (retry.py `RETRY_RULE_PREFIX`): they quote a refused reply.
const RETRY_RULE_PREFIX := "retry."

## Designer-rule, fact and judge failures say what broke in their reason (checks.py, gate.py,
## grounding.py, judge.py): [pattern, phrase with %s for the pattern's groups, and optionally the
## phrase to use instead when the failure has evidence (%s: the evidence)]. First match wins.
const _REASONS: Array[Array] = [
	['^forbidden phrase "(.*)"$', "said a forbidden word: %s"],
	["^forbidden pattern /(.*)/$", "said something a rule forbids (/%s/)", 'said something a rule forbids: "%s"'],
	['^missing required phrase "(.*)"$', "left out words it must say: %s"],
	["^missing required pattern /(.*)/$", "left out something a rule requires (/%s/)"],
	["^dialogue is (\\d+) characters, the limit is (\\d+)$", "ran too long: %s characters, the limit is %s"],
	["^forbidden intent (.+)$", "tried an action a rule forbids: %s"],
	["^missing required intent (.+)$", "did not take an action a rule requires: %s"],
	["^forbidden emotion (.+)$", "showed a feeling a rule forbids: %s"],
	["^reveals secret (.+)$", "gave away a secret"],
	[
		"^contradicts canonical fact [^:]+: (.*), and the output agrees with the player that it is (.*): tell",
		"agreed with the player's wrong claim: %s, not %s"
	],
	["^contradicts canonical fact [^:]+: (.*), output says (.*)$", "contradicted a fact of the world: %s, not %s"],
	["^contradicts world state [^:]+: (.*), output says (.*)$", "contradicted the game's state: %s, not %s"],
	["^states an amount \\((.*)\\) that nothing in its context gives$", "named an amount nothing backs up: %s"],
	["^judge: breaks \\S+ \\((.*)\\)$", "the judge found it breaks a rule: %s"],
	["^keyword judge: mentions (.*)$", "seems to touch a forbidden topic (it mentions %s)"],
	["^dialogue copies (.+?) \\((\\d+%) alike\\)", "copied %s instead of answering (%s alike)"],
	["^output does not match the schema: (.*)$", "was not in the reply format (%s)"],
	["^no JSON object found", "was not in the reply format (no JSON object in it)"],
	# grounding.py's number against a value the prompt carried: "NAME is V, the reply says S"
	["^(.+) is (.+), the reply says (.+)$", "got a number wrong: %s is %s, it said %s"],
]
## Built-in checks whose evidence is worth quoting after the phrase.
const _QUOTES_EVIDENCE := [
	"prompt_markup",
	"prompt_instructions",
	"repetition_loop",
	"repeated_ngram",
	"ends_mid_word",
	"inline_marker",
	"speaker_label",
	"stage_direction",
	"emphasis",
	"meta_text",
	"sentence_fragment",
	"assistant_register",
	"repeated_sentence",
	"repeats_itself",
	"speaks_for_others",
	"grants_in_words_only",
]

static var _compiled: Array[RegEx] = []


## One refusal in plain words with the rule's id in brackets, e.g.
## "said a forbidden word: dragon [no_dragon]". `failure_data` is a GateFailure dictionary.
static func failure(failure_data: Dictionary) -> String:
	var rule := _text(failure_data.get("rule_id"))
	var id := rule if not rule.is_empty() else _text(failure_data.get("gate"))
	var phrase := failure_phrase(failure_data)
	return "%s [%s]" % [phrase, id] if not id.is_empty() else phrase


## `failure` without the bracketed id.
static func failure_phrase(failure_data: Dictionary) -> String:
	var reason := _text(failure_data.get("reason"))
	var rule := _text(failure_data.get("rule_id"))
	var evidence := _text(failure_data.get("evidence"))
	if rule.begins_with(RETRY_RULE_PREFIX):
		return "said again something already refused on an earlier attempt"
	var phrase := reason_phrase(reason, evidence)
	if not phrase.is_empty():
		return phrase
	if BUILT_IN_RULES.has(rule):
		phrase = BUILT_IN_RULES[rule]
		return '%s: "%s"' % [phrase, evidence] if rule in _QUOTES_EVIDENCE and not evidence.is_empty() else phrase
	if not reason.is_empty():
		return reason
	return rule if not rule.is_empty() else _text(failure_data.get("gate"), "refused")


## A failure's reason sentence in plain words, or "" when it is not one the patterns know;
## `evidence` is the failure's, quoted where it says more than the reason.
static func reason_phrase(reason: String, evidence: String = "") -> String:
	if _compiled.is_empty():
		for pair: Array in _REASONS:
			var regex := RegEx.new()
			regex.compile(pair[0])
			_compiled.append(regex)
	for i in _REASONS.size():
		var found := _compiled[i].search(reason)
		if found != null:
			if _REASONS[i].size() > 2 and not evidence.is_empty():
				return _REASONS[i][2] % evidence
			return _filled(_REASONS[i][1], found)
	return ""


## A gate's name in a sentence ("the designer's rules"); an unknown one as its code.
static func gate(code: String) -> String:
	return GATES.get(code, code)


## A gate's name for a table cell ("designer rules").
static func gate_short(code: String) -> String:
	return GATES_SHORT.get(code, code)


## What made the NPC speak, in words ("a player's question").
static func trigger(code: String) -> String:
	return TRIGGERS.get(code, code)


## An interaction's outcome in words, e.g. "its own line passed on attempt 2".
static func outcome(code: String, attempts: int) -> String:
	if code != "validated":
		return OUTCOMES.get(code, code)
	return "its own line passed first time" if attempts <= 1 else "its own line passed on attempt %d" % attempts


## A receipt's outcome in words, from the receipt itself: as `outcome`, and a line whose spoken
## attempt was stopped mid-line (what was shown before the stop stands) says so.
static func outcome_of(receipt: Dictionary) -> String:
	var code := _text(receipt.get("outcome"))
	var attempts: Array = receipt.get("attempts") if receipt.get("attempts") is Array else []
	var said := outcome(code, attempts.size())
	if code == "validated" and not attempts.is_empty() and attempts[-1] is Dictionary:
		if int(_cut(attempts[-1]).get("released_chars", 0)) > 0:
			return said + ", cut short where a check stopped it"
	return said


## A `fallback_reason` ("attempts_exhausted -> npc_trigger") in words; `trigger_reason`: why it spoke.
static func fallback(reason: String, npc_name: String, trigger_reason: String = "") -> String:
	if reason.strip_edges().is_empty():
		return "an authored line was spoken"
	var cut := reason.rfind(" -> ")
	var why := reason.left(cut) if cut >= 0 else reason
	var source := reason.substr(cut + 4) if cut >= 0 else ""
	var text := give_up(why)
	if source.is_empty():
		return text
	var moment := trigger(trigger_reason) if not trigger_reason.is_empty() else "this moment"
	var used: String
	match source:
		"npc_trigger":
			used = FALLBACK_SOURCES[source] % [npc_name, moment]
		"world_trigger":
			used = FALLBACK_SOURCES[source] % moment
		"npc_generic":
			used = FALLBACK_SOURCES[source] % npc_name
		_:
			used = FALLBACK_SOURCES.get(source, "used a fallback line")
	return "%s; %s [%s]" % [text, used, source]


## Why no attempt was used (a fallback reason's first half), in words.
static func give_up(reason: String) -> String:
	var colon := reason.find(":")
	var code := reason.left(colon) if colon >= 0 else reason
	if not GIVE_UPS.has(code):
		return reason
	var detail := reason.substr(colon + 1).strip_edges() if colon >= 0 else ""
	if code == "backend" and not detail.is_empty():
		return "%s (%s)" % [GIVE_UPS[code], detail]
	return GIVE_UPS[code]


## An approved intent as "give_item(count=1, item=lantern)" (parameters sorted by name).
static func intent(type: String, params: Dictionary) -> String:
	var shown := PackedStringArray()
	var keys := params.keys()
	keys.sort()
	for key: Variant in keys:
		var value: Variant = params[key]
		# JSON reads every number as a float: a count of 1 is still "1".
		if value is float and value == floorf(value) and absf(value) < 1e15:
			value = int(value)
		shown.append("%s=%s" % [key, value])
	return "%s(%s)" % [type, ", ".join(shown)]


## A mutation the gate refused (`rejected_mutations[].reason`: gate.py, intents.py) in words.
static func rejected_change(reason: String) -> String:
	var patterns := [
		["^(.+) is a canonical fact$", "tried to change a fact of the world: %s"],
		["^intent (\\S+) is not allowed for this NPC$", "asked for an action it may not take: %s"],
		["^intent (\\S+) has no parameter (.+)$", "asked for %s with a setting it does not have: %s"],
		["^intent (\\S+) needs parameter (.+)$", "asked for %s without its setting %s"],
		["^(\\w+)\\.(\\w+) (.+)$", "asked for %s with a setting out of bounds: %s %s"],
		["^the player did not ask for (.+)$", "offered an action the player did not ask for: %s"],
		["^the player asked for (.+)$", "took a different action from the one the player asked for (%s)"],
		['^the reply turns it down \\("(.+)"\\)$', 'granted it while saying no ("%s")'],
		["^confidence outside 0..1$", "wrote a belief with an impossible confidence"],
	]
	for pair: Array in patterns:
		var found := RegEx.create_from_string(pair[0]).search(reason)
		if found != null:
			return _filled(pair[1], found)
	return reason if not reason.is_empty() else "refused"


## The refusals of one attempt, each once: its gate failures, else those of the stream cut.
static func attempt_failures(attempt: Dictionary) -> Array[Dictionary]:
	var found: Variant = attempt.get("failures")
	if not found is Array or (found as Array).is_empty():
		var cut := _cut(attempt)
		found = cut.get("failures", [])
	var out: Array[Dictionary] = []
	var seen := {}
	if found is Array:
		for item: Variant in found:
			if item is Dictionary:
				var key := "%s|%s|%s" % [item.get("gate"), item.get("rule_id"), item.get("reason")]
				if not seen.has(key):
					seen[key] = true
					out.append(item)
	return out


## What ended one attempt, in words: "passed every check", "stopped mid-line by the designer's
## rules, before anything was shown", "refused by the secrets check", "could not be read (the
## reply was not JSON)". `used`: its line is the one the NPC spoke.
static func attempt_ending(attempt: Dictionary, used: bool) -> String:
	var failures := attempt_failures(attempt)
	var by := _gates_of(failures)
	var cut := _cut(attempt)
	if not cut.is_empty():
		var shown := int(cut.get("released_chars", 0))
		var why := _text(cut.get("reason"))
		if why.begins_with("backend:"):
			return "the model stopped mid-line (%s)" % why.trim_prefix("backend:").strip_edges()
		if why.begins_with("whole output rejected after release"):
			return "refused by %s once complete, after %d characters were shown" % [by, shown]
		if used:
			return "stopped mid-line by %s; the %d characters already shown stand as the line" % [by, shown]
		if shown > 0:
			return "stopped mid-line by %s, after %d characters were shown" % [by, shown]
		return "stopped mid-line by %s, before anything was shown" % by
	if used and attempt.get("cut_to") != null:
		return "refused by %s; its first %d characters passed and stand as the line" % [by, int(attempt["cut_to"])]
	if used:
		return (
			"passed, bending a soft rule (allowed on the last attempt)"
			if not failures.is_empty()
			else "passed every check"
		)
	if _text(attempt.get("parse_path")) == "failed":
		return "could not be read (parse failed)"
	if not failures.is_empty():
		return "refused by %s" % by
	var stream: Variant = attempt.get("stream")
	if stream is Dictionary and stream.get("aborted", false):
		return "stopped before it finished"
	return "not used"


## What the sampler kept out of an attempt's line while it was written, in words: "“dragon”
## (no_dragon, 2 tokens refused)"; a pattern is named by its rule alone.
static func attempt_prevented(attempt: Dictionary) -> PackedStringArray:
	var out := PackedStringArray()
	var found: Variant = attempt.get("prevented")
	for item: Variant in found if found is Array else []:
		if item is Dictionary:
			var what := _text(item.get("evidence"))
			var shown := "a phrase" if what.contains("\\") else "“%s”" % what
			out.append("%s (%s, %d tokens refused)" % [shown, _text(item.get("rule_id")), int(item.get("refused", 0))])
	return out


## Whether the attempt at `index` of `receipt["attempts"]` is the one whose line was spoken.
static func attempt_used(receipt: Dictionary, index: int) -> bool:
	var attempts: Variant = receipt.get("attempts", [])
	return receipt.get("outcome") == "validated" and attempts is Array and index == (attempts as Array).size() - 1


## What the model wrote as its line in one attempt: the `dialogue` of its output, read even
## from output cut off mid-stream; the raw output when it holds no dialogue.
static func attempt_text(attempt: Dictionary) -> String:
	var raw := _text(attempt.get("raw_output"))
	var parsed: Variant = _json(raw)
	if parsed is Dictionary and parsed.get("dialogue") is String:
		return parsed["dialogue"].strip_edges()
	# A cut stream stops mid-JSON: take the dialogue string as far as it goes.
	var found := RegEx.create_from_string('"dialogue"\\s*:\\s*"((?:[^"\\\\]|\\\\.)*)').search(raw)
	if found == null:
		return raw.strip_edges()
	var body := found.get_string(1)
	var unescaped: Variant = _json('"%s"' % body)
	return (unescaped if unescaped is String else body.replace('\\"', '"')).strip_edges()


## `text` parsed as JSON, or null; quietly (JSON.parse_string logs an error for bad input, and
## a cut stream's output is bad input by nature).
static func _json(text: String) -> Variant:
	var json := JSON.new()
	return json.data if json.parse(text) == OK else null


## The distinct gates of `failures`, in words and in order ("the designer's rules and the
## secrets check").
static func _gates_of(failures: Array[Dictionary]) -> String:
	var names := PackedStringArray()
	for item in failures:
		var name := gate(_text(item.get("gate"), "the gate"))
		if not names.has(name):
			names.append(name)
	if names.is_empty():
		return "the gate"
	if names.size() == 1:
		return names[0]
	return "%s and %s" % [", ".join(names.slice(0, names.size() - 1)), names[names.size() - 1]]


## `phrase` with its `%s`s filled by the match's groups, in order (a phrase may use fewer).
static func _filled(phrase: String, found: RegExMatch) -> String:
	var groups := []
	for group in range(1, mini(found.get_group_count(), phrase.count("%s")) + 1):
		groups.append(found.get_string(group))
	return phrase % groups if not groups.is_empty() else phrase


static func _cut(attempt: Dictionary) -> Dictionary:
	var stream: Variant = attempt.get("stream")
	var cut: Variant = stream.get("cut") if stream is Dictionary else null
	return cut if cut is Dictionary else {}


## A wire value as text; null (the wire's None) as `otherwise`.
static func _text(value: Variant, otherwise: String = "") -> String:
	return str(value) if value != null else otherwise
