class_name LoreguardRecordText
extends RefCounted
## One audit record as the editor's Loreguard tab shows it: the cells of its row in the list,
## their tooltips, and the detail text (the decision in words, each attempt, the prompts, the
## scene's conversation so far). Pure static functions over the record as the sidecar sends it,
## any field of which may be missing; the words for each gate, rule and fallback are
## LoreguardGovernanceText's.


## The row cells of a record. Its id ("r6") is the one the detail's header, the game's
## `LoreguardLine.audit_record_id` and `loreguard replay` use.
static func summary(record: Dictionary) -> PackedStringArray:
	var receipt: Dictionary = _dict(record, "receipt")
	var context: Dictionary = _dict(record, "context")
	var said := str(context.get("player_input", ""))
	var scene := _dict(context, "scene_turn")
	if not scene.is_empty():
		# a scene's line answers what its speaker heard since it last spoke
		var heard := PackedStringArray()
		for line: Dictionary in _list(scene, "heard"):
			heard.append("%s: %s" % [line.get("speaker", ""), line.get("text", "")])
		said = "[scene %s #%d] %s" % [scene.get("scene_id", ""), int(scene.get("line", 0)), " / ".join(heard)]
	elif said.is_empty():
		said = "(%s)" % LoreguardGovernanceText.trigger(str(context.get("trigger_reason", "")))
	return PackedStringArray(
		[
			record_id(record),
			str(receipt.get("npc_id", "")),
			said,
			str(record.get("dialogue", "")),
			str(_list(receipt, "attempts").size()),
			refusals(record),
			"yes" if receipt.get("fallback_used", false) else "",
			"%.0f" % float(_dict(record, "timings").get("total_ms", 0.0)),
		]
	)


## "r6": the record's place in the sidecar's log.
static func record_id(record: Dictionary) -> String:
	return "r%d" % int(record.get("seq", 0))


## The gates that refused an attempt, each once, by code (`hard_limits`, `knowledge`).
static func failed_gates(record: Dictionary) -> PackedStringArray:
	var names := PackedStringArray()
	for attempt: Dictionary in _list(_dict(record, "receipt"), "attempts"):
		for check: Dictionary in _list(attempt, "gates"):
			if not check.get("passed", true) and not names.has(check.get("gate", "")):
				names.append(check.get("gate", ""))
	return names


## What refused the record's attempts, short: each gate once in words with the ids of the
## rules that failed, one gate a line, e.g. "designer rules [no_dragon]\nsecrets [password]".
static func refusals(record: Dictionary) -> String:
	var rules := {}
	for attempt: Dictionary in _list(_dict(record, "receipt"), "attempts"):
		for failure in LoreguardGovernanceText.attempt_failures(attempt):
			var gate := LoreguardGovernanceText.gate_short(str(failure.get("gate", "")))
			var ids: PackedStringArray = rules.get(gate, PackedStringArray())
			var rule := str(failure.get("rule_id")) if failure.get("rule_id") != null else ""
			if not rule.is_empty() and not ids.has(rule):
				ids.append(rule)
			rules[gate] = ids
	var parts := PackedStringArray()
	for gate: String in rules:
		var ids: PackedStringArray = rules[gate]
		parts.append(gate + (" [%s]" % ", ".join(ids) if not ids.is_empty() else ""))
	return "\n".join(parts)


## The tooltip of "Refused by": every refusal of every attempt in words, one a line.
static func refusal_details(record: Dictionary) -> String:
	var reasons := PackedStringArray()
	for attempt: Dictionary in _list(_dict(record, "receipt"), "attempts"):
		for failure in LoreguardGovernanceText.attempt_failures(attempt):
			reasons.append(
				"attempt %d: %s" % [int(attempt.get("attempt", 0)), LoreguardGovernanceText.failure(failure)]
			)
	return "\n".join(reasons)


## Why an authored fallback line was spoken instead of the model's, in words; "" when none was.
static func fallback_note(record: Dictionary) -> String:
	var receipt := _dict(record, "receipt")
	if not receipt.get("fallback_used", false):
		return ""
	var why := str(receipt.get("fallback_reason", ""))
	var trigger := str(_dict(record, "context").get("trigger_reason", ""))
	return LoreguardGovernanceText.fallback(why, str(receipt.get("npc_id", "")), trigger)


## Everything about one interaction, as text: the decision in words, the constraints, each
## attempt (what ended it, each refusal with its rule's id, what it said, every gate's
## verdict, the raw output), then each attempt's prompt.
static func describe(record: Dictionary) -> String:
	var receipt: Dictionary = _dict(record, "receipt")
	var context: Dictionary = _dict(record, "context")
	var npc := str(receipt.get("npc_id", ""))
	var attempts := _list(receipt, "attempts")
	var outcome := LoreguardGovernanceText.outcome_of(receipt)
	var lines := PackedStringArray()
	lines.append("%s · %s · %s" % [record_id(record), npc, outcome])
	# The NPC's own count picks its seed; said as a count so it is not read as a second id.
	lines.append(
		(
			"seed %d · %s's interaction no. %d · task %s"
			% [
				int(receipt.get("seed", 0)),
				npc,
				int(receipt.get("interaction_index", 0)) + 1,
				receipt.get("task_type", "")
			]
		)
	)
	var trigger := str(context.get("trigger_reason", ""))
	if receipt.get("fallback_reason") != null:
		lines.append("fallback: %s" % LoreguardGovernanceText.fallback(str(receipt["fallback_reason"]), npc, trigger))
	if receipt.get("halt_reason") != null:
		lines.append("halted: %s" % receipt["halt_reason"])
	var scene := _dict(context, "scene_turn")
	if scene.is_empty():
		lines.append("player (%s): %s" % [LoreguardGovernanceText.trigger(trigger), context.get("player_input", "")])
	else:
		lines.append_array(_describe_scene(scene))
	lines.append("%s (%s): %s" % [npc, record.get("emotion", ""), record.get("dialogue", "")])
	for intent: Dictionary in _list(record, "intents"):
		var shown := LoreguardGovernanceText.intent(str(intent.get("type", "")), _dict(intent, "params"))
		var payment := _dict(intent, "payment")
		if not payment.is_empty():
			shown += " for %d %s" % [int(payment.get("amount", 0)), payment.get("currency", "")]
		lines.append("approved action: %s" % shown)
	for deal: Dictionary in _list(receipt, "deals"):
		var verdict := "sold" if deal.get("granted", false) else "no sale"
		lines.append("decided by the rules: %s (%s)" % [verdict, deal.get("reason", "")])
	for warning: Dictionary in _list(receipt, "warnings"):
		lines.append("bent a soft rule: %s" % LoreguardGovernanceText.failure(warning))
	for skipped: Dictionary in _list(receipt, "skipped_fallbacks"):
		for failure: Dictionary in _list(skipped, "failures"):
			lines.append("passed over %s: %s" % [skipped.get("line", ""), LoreguardGovernanceText.failure(failure)])
	lines.append("rules in force: %s" % ", ".join(PackedStringArray(_list(receipt, "constraints"))))
	lines.append("constraints hash: %s" % receipt.get("constraints_hash", ""))
	lines.append(
		(
			"memory: %s -> %s"
			% [str(receipt.get("memory_hash_before", "")).left(16), str(receipt.get("memory_hash_after", "")).left(16)]
		)
	)
	for mutation: Dictionary in _list(receipt, "applied_mutations"):
		lines.append("applied change: %s" % JSON.stringify(mutation))
	for rejected: Dictionary in _list(receipt, "rejected_mutations"):
		lines.append("refused change: %s" % LoreguardGovernanceText.rejected_change(str(rejected.get("reason", ""))))
	for i in attempts.size():
		lines.append("")
		lines.append_array(_describe_attempt(attempts[i], LoreguardGovernanceText.attempt_used(receipt, i)))
	var prompts := _list(record, "prompts")
	for i in prompts.size():
		lines.append("")
		lines.append("--- prompt, attempt %d ---" % (i + 1))
		lines.append(str(prompts[i]))
	return "\n".join(lines)


## A scene's line: the scene, who heard it, what its speaker heard since it last spoke.
static func _describe_scene(scene: Dictionary) -> PackedStringArray:
	var present := PackedStringArray()
	for member: Dictionary in _list(scene, "present"):
		present.append(str(member.get("name", "")))
	if scene.get("player_present", false):
		present.append("the player")
	var lines := PackedStringArray()
	lines.append(
		(
			"scene %s, line %d · heard by: %s"
			% [
				scene.get("scene_id", ""),
				int(scene.get("line", 0)),
				", ".join(present) if not present.is_empty() else "nobody"
			]
		)
	)
	if not str(scene.get("topic", "")).is_empty():
		lines.append("topic: %s" % scene["topic"])
	for line: Dictionary in _list(scene, "heard"):
		lines.append("heard %s: %s" % [line.get("speaker", ""), line.get("text", "")])
	return lines


## The conversation a scene's line belongs to, up to it, from the records listed: each line
## said, the player's and the game's words among them, in order ("" for a line outside a scene).
static func scene_transcript(all_records: Array, record: Dictionary) -> String:
	var scene := _dict(_dict(record, "context"), "scene_turn")
	if scene.is_empty():
		return ""
	var by_line := {}
	for other: Dictionary in all_records:
		var other_scene := _dict(_dict(other, "context"), "scene_turn")
		if (
			other_scene.get("scene_id") == scene.get("scene_id")
			and int(other_scene.get("line", 0)) <= int(scene["line"])
		):
			by_line[int(other_scene["line"])] = other
	var numbers := by_line.keys()
	numbers.sort()
	var lines := PackedStringArray(
		["--- scene %s, lines 1 to %d ---" % [scene.get("scene_id", ""), int(scene["line"])]]
	)
	for number: int in numbers:
		var line_record: Dictionary = by_line[number]
		for heard: Dictionary in _list(_dict(_dict(line_record, "context"), "scene_turn"), "heard"):
			if heard.get("kind") != "npc":
				lines.append("   %s: %s" % [heard.get("speaker", ""), heard.get("text", "")])
		var speaker := str(_dict(line_record, "receipt").get("npc_id", ""))
		lines.append("#%d %s: %s" % [number, speaker, line_record.get("dialogue", "")])
	return "\n".join(lines)


## One attempt: what ended it, why, what it said, each gate's verdict and the raw output.
static func _describe_attempt(attempt: Dictionary, used: bool) -> PackedStringArray:
	var lines := PackedStringArray()
	var ending := LoreguardGovernanceText.attempt_ending(attempt, used)
	lines.append("attempt %d: %s" % [int(attempt.get("attempt", 0)), ending])
	for failure in LoreguardGovernanceText.attempt_failures(attempt):
		lines.append("  • %s" % LoreguardGovernanceText.failure(failure))
	for kept_out in LoreguardGovernanceText.attempt_prevented(attempt):
		lines.append("  kept out while written: %s" % kept_out)
	lines.append("  said: “%s”" % LoreguardGovernanceText.attempt_text(attempt))
	var verdicts := PackedStringArray()
	for check: Dictionary in _list(attempt, "gates"):
		var verdict := "pass" if check.get("passed", false) else "FAIL (%d)" % int(check.get("failures", 0))
		if check.get("skipped") != null:
			verdict = "skipped: %s" % check["skipped"]
		verdicts.append("%s %s" % [LoreguardGovernanceText.gate_short(str(check.get("gate", ""))), verdict])
	lines.append("  checks: %s" % " · ".join(verdicts))
	for check: Dictionary in _list(attempt, "gates"):
		if check.get("note") != null:
			lines.append(
				"  note (%s): %s" % [LoreguardGovernanceText.gate_short(str(check.get("gate", ""))), check["note"]]
			)
	var stream := _dict(attempt, "stream")
	if not _dict(stream, "cut").is_empty():
		# A cut generation stops mid-JSON: its parse path says nothing about the model.
		lines.append("  read: not parsed whole (the generation was cut)")
	else:
		lines.append("  read: %s" % attempt.get("parse_path", ""))
	lines.append("  raw output: %s" % attempt.get("raw_output", ""))
	return lines


## `data[key]` when it is a dictionary (the wire may leave a field out or send null), else {}.
static func _dict(data: Dictionary, key: String) -> Dictionary:
	return data[key] if data.get(key) is Dictionary else {}


## `data[key]` when it is an array, else [].
static func _list(data: Dictionary, key: String) -> Array:
	return data[key] if data.get(key) is Array else []
