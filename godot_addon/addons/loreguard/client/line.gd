class_name LoreguardLine
extends RefCounted
## One answer from an NPC, typed: the `interact.ok` body (the wire's InteractionResult) as game
## code reads it. LoreguardNPC's `replied` signal carries it, and `Loreguard.interact()` sets it
## as `result.line`.
##
##     var result := await $Guard.say("Can I come in?")
##     if result.ok:
##         $Panel.show_line(result.line.dialogue, result.line.emotion)

const VALIDATED := "validated"
const FALLBACK := "fallback"
const CLARIFY := "clarify"

## The NPC that answered.
var npc_id: String = ""
## The line to show: validated, or an authored fallback line when the model's was refused.
var dialogue: String = ""
## neutral, happy, sad, angry, afraid, surprised, suspicious or amused.
var emotion: String = "neutral"
## The world intents the sidecar approved, in order; the game acts on these only.
var intents: Array[LoreguardWorldIntent] = []
## True when `dialogue` is a fallback line.
var fallback_used: bool = false
## VALIDATED, FALLBACK or CLARIFY.
var outcome: String = ""
## How many times the model was asked (1 unless a gate sent it back).
var attempts: int = 0
## The gates that refused an attempt, each once, in the order they first did.
var failed_gates: PackedStringArray = []
## With outcome CLARIFY: the world-state keys (or other context) the game must provide.
var needs: PackedStringArray = []
## The interaction's audit record (`audit.tail`, `loreguard replay`); empty when none was kept.
var audit_record_id: String = ""
## The reply body as it came over the wire, receipt included (debug views read it).
var body: Dictionary = {}


## Reads an `interact.ok` body. Tolerant: a missing field keeps its default, so a newer or
## older sidecar's reply still reads.
static func from_reply(reply_body: Dictionary) -> LoreguardLine:
	var out := LoreguardLine.new()
	out.body = reply_body
	out.npc_id = str(reply_body.get("npc_id", ""))
	out.dialogue = str(reply_body.get("dialogue", ""))
	out.emotion = str(reply_body.get("emotion", "neutral"))
	var intents: Variant = reply_body.get("intents", [])
	if intents is Array:
		for intent: Variant in intents:
			if intent is Dictionary:
				out.intents.append(LoreguardWorldIntent.from_dict(intent))
	out.fallback_used = bool(reply_body.get("fallback_used", false))
	out.outcome = str(reply_body.get("outcome", ""))
	out.attempts = int(reply_body.get("attempts", 0))
	out.failed_gates = _strings(reply_body.get("failed_gates", []))
	out.needs = _strings(reply_body.get("needs", []))
	# The wire sends null when no record was kept; str(null) would read "<null>".
	var record_id: Variant = reply_body.get("audit_record_id")
	out.audit_record_id = str(record_id) if record_id != null else ""
	return out


## With a fallback line: why the model's line was refused (the receipt's fallback reason), else "".
func fallback_reason() -> String:
	var receipt: Variant = body.get("receipt")
	var reason: Variant = receipt.get("fallback_reason") if receipt is Dictionary else null
	return str(reason) if reason != null else ""


## Every refusal, in order: {"attempt": int, "gate": String, "reason": String} per gate failure
## of each attempt the model made (from the receipt; empty when every attempt passed).
func rejections() -> Array[Dictionary]:
	var out: Array[Dictionary] = []
	var receipt: Variant = body.get("receipt")
	var attempts: Variant = receipt.get("attempts", []) if receipt is Dictionary else []
	if not attempts is Array:
		return out
	for attempt: Variant in attempts:
		if not attempt is Dictionary or not attempt.get("failures") is Array:
			continue
		for failure: Variant in attempt["failures"]:
			if failure is Dictionary:
				(
					out
					. append(
						{
							"attempt": int(attempt.get("attempt", 0)),
							"gate": str(failure.get("gate", "")),
							"reason": str(failure.get("reason", "")),
						}
					)
				)
	return out


func _to_string() -> String:
	return "%s (%s, %s, %d attempt(s)): %s" % [npc_id, outcome, emotion, attempts, dialogue]


static func _strings(values: Variant) -> PackedStringArray:
	var out := PackedStringArray()
	if values is Array:
		for value: Variant in values:
			out.append(str(value))
	return out
