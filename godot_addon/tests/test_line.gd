extends "res://tests/check_run.gd"
## LoreguardLine.from_reply and LoreguardWorldIntent.from_dict on `interact.ok` bodies: every
## field read, defaults for what is missing, and malformed parts skipped rather than crashing
## the game (tests/godot_addon/test_line.py).


func _init() -> void:
	_test_full_reply()
	_test_minimal_reply()
	_test_malformed_parts()
	_finish()


func _test_full_reply() -> void:
	var body := {
		"npc_id": "merchant",
		"outcome": "validated",
		"dialogue": "One lantern, freshly oiled!",
		"emotion": "happy",
		"intents": [{"type": "give_item", "params": {"item": "lantern", "count": 1}}, {"type": "wave"}],
		"attempts": 2,
		"fallback_used": false,
		"needs": [],
		"failed_gates": ["constraints"],
		"receipt": {"npc_id": "merchant", "seed": 7},
		"audit_record_id": "r12",
	}
	var line := LoreguardLine.from_reply(body)
	_expect(line.npc_id == "merchant", "npc_id", line.npc_id)
	_expect(line.dialogue == "One lantern, freshly oiled!", "dialogue", line.dialogue)
	_expect(line.emotion == "happy", "emotion", line.emotion)
	_expect(line.outcome == LoreguardLine.VALIDATED, "outcome", line.outcome)
	_expect(line.attempts == 2, "attempts", str(line.attempts))
	_expect(not line.fallback_used, "fallback_used")
	_expect(line.failed_gates == PackedStringArray(["constraints"]), "failed_gates", str(line.failed_gates))
	_expect(line.needs.is_empty(), "needs", str(line.needs))
	_expect(line.audit_record_id == "r12", "audit_record_id", line.audit_record_id)
	_expect(line.body == body and line.body["receipt"]["seed"] == 7, "the raw body stays reachable")
	_expect(line.intents.size() == 2, "two intents", str(line.intents))
	if line.intents.size() == 2:
		var first: LoreguardWorldIntent = line.intents[0]
		_expect(first.type == "give_item", "intent type", first.type)
		_expect(first.params == {"item": "lantern", "count": 1}, "intent params", str(first.params))
		_expect(line.intents[1].type == "wave" and line.intents[1].params.is_empty(), "params default to {}")
	_expect(str(line).contains("One lantern"), "prints readably", str(line))


func _test_minimal_reply() -> void:
	# Only the schema's required fields; audit_record_id is null when no record was kept.
	var line := (
		LoreguardLine
		. from_reply(
			{
				"npc_id": "guard",
				"outcome": "clarify",
				"dialogue": "Which gate?",
				"attempts": 1,
				"fallback_used": false,
				"needs": ["gate_id"],
				"receipt": {},
				"audit_record_id": null,
			}
		)
	)
	_expect(line.outcome == LoreguardLine.CLARIFY and line.needs == PackedStringArray(["gate_id"]), "clarify")
	_expect(line.emotion == "neutral", "emotion defaults to neutral", line.emotion)
	_expect(line.intents.is_empty() and line.failed_gates.is_empty(), "no intents, no failed gates")
	_expect(line.audit_record_id == "", "a null record id reads as empty", line.audit_record_id)


func _test_malformed_parts() -> void:
	var line := LoreguardLine.from_reply(
		{"dialogue": "...", "intents": ["open_gate", {"type": "open_gate", "params": "north"}], "failed_gates": null}
	)
	_expect(line.intents.size() == 1, "a non-map intent is skipped", str(line.intents))
	_expect(line.intents.size() == 1 and line.intents[0].params == {}, "non-map params read as {}")
	_expect(line.failed_gates.is_empty(), "a null list reads as empty")
	var bare := LoreguardLine.from_reply({"intents": null})
	_expect(bare.intents.is_empty() and bare.dialogue == "" and bare.attempts == 0, "an empty body reads as defaults")
