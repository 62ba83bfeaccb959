extends "res://tests/scene_test.gd"
## The player walks away while an NPC of a LoreguardScene is still thinking its line
## (tests/godot_addon/test_scene.py runs it against a sidecar whose scripted lines take a while):
## the thinking stops at once, the sidecar stops the line (`scene.end` cancels it) and no NPC
## remembers it. Then the player asks Brom and walks away from his answer (`LoreguardNPC.cancel`):
## `line_cancelled`, and nothing of it remembered either. Exits 0 only if every check held.
##
## Environment: LOREGUARD_ADDRESS.


func _init() -> void:
	label = "scene_leave"


func _run() -> void:
	var talk := await _gate_talk(get_node("/root/Loreguard"))
	var guard: LoreguardNPC = talk.get_child(0)
	var merchant: LoreguardNPC = talk.get_child(1)
	var shown: Array[String] = []
	var thinking: Array[String] = []
	for npc: LoreguardNPC in [guard, merchant]:
		var id: String = npc.profile.id
		npc.thinking_started.connect(func() -> void: thinking.append("%s started" % id))
		npc.thinking_finished.connect(func() -> void: thinking.append("%s finished" % id))
		npc.replied.connect(func(line: LoreguardLine) -> void: shown.append("%s replied: %s" % [id, line.dialogue]))
		npc.dialogue_chunk.connect(func(text: String) -> void: shown.append("%s chunk: %s" % [id, text]))
	talk.line_spoken.connect(func(npc: LoreguardNPC, line: LoreguardLine) -> void: shown.append(line.dialogue))
	var reasons: Array[String] = []
	talk.ended.connect(func(reason: String) -> void: reasons.append(reason))
	add_child(talk)

	talk.player_present = true
	var started := await talk.begin()
	_check(started.ok, "the scene started: %s" % started)
	await _until(func() -> bool: return guard.is_thinking, 30.0)
	_check(guard.is_thinking and shown.is_empty(), "Brom is thinking his first line: %s" % [shown])
	talk.end()  # the player walks away, not waiting for the sidecar's answer
	_check(
		not guard.is_thinking and thinking == ["guard started", "guard finished"], "he stops at once: %s" % [thinking]
	)
	_check(reasons == ["ended_by_request"] and not talk.is_running, "the scene is over: %s" % [reasons])
	# Brom's next answer queues behind the dropped line on the sidecar: once it is here, the
	# dropped line's reply has come and gone.
	var after := await guard.say("Are you still there?")
	_check(after.ok, "Brom answers the player afterwards: %s" % after)
	_check(
		(
			shown == ["guard chunk: " + after.line.dialogue, "guard replied: " + after.line.dialogue]
			if after.ok
			else false
		),
		"the line spoken into the ended scene was never shown: %s" % [shown]
	)
	_check(reasons == ["ended_by_request"], "and the scene ended once: %s" % [reasons])
	var loreguard: LoreguardClient = get_node("/root/Loreguard")
	var guard_memory := await loreguard.memory("guard")
	var merchant_memory := await loreguard.memory("merchant")
	_check(
		int(guard_memory.body.get("interactions", -1)) == 1 and int(merchant_memory.body.get("interactions", -1)) == 0,
		(
			"the dropped scene line is in nobody's memory: %s, %s interactions"
			% [guard_memory.body.get("interactions"), merchant_memory.body.get("interactions")]
		)
	)
	_check(
		(merchant_memory.body.get("memory", {}).get("episodic", [null]) as Array).is_empty(),
		"Mira did not hear it either: %s" % [merchant_memory.body.get("memory", {}).get("episodic")]
	)
	await _walk_away_from_an_answer(guard, loreguard, shown)
	await _close_the_dialogue(guard, talk, loreguard)


## The player asks Brom again, and walks away from his answer (`LoreguardNPC.cancel`).
func _walk_away_from_an_answer(guard: LoreguardNPC, loreguard: LoreguardClient, shown: Array[String]) -> void:
	var cancelled: Array[bool] = []
	guard.line_cancelled.connect(func() -> void: cancelled.append(true))
	var asked := shown.size()
	guard.say("One more thing, guard.")
	await _until(func() -> bool: return guard.is_thinking, 30.0)
	_check(guard.cancel(), "Brom's answer on its way can be cancelled")
	await _until(func() -> bool: return not cancelled.is_empty(), 30.0)
	_check(
		cancelled == [true] and not guard.is_thinking and shown.size() == asked,
		"line_cancelled, the thinking ends, nothing is shown: %s" % [shown.slice(asked)]
	)
	_check(
		guard.last_result.error != null and guard.last_result.error.code == LoreguardError.CANCELLED,
		"the line's result says cancelled: %s" % guard.last_result
	)
	var guard_memory := await loreguard.memory("guard")
	_check(
		int(guard_memory.body.get("interactions", -1)) == 1,
		"Brom remembers only what was heard: %s interactions" % [guard_memory.body.get("interactions")]
	)
	_check(not guard.cancel(), "with no line on its way, there is nothing to cancel")


## A closed dialogue: the NPC node leaves the tree while its answer is on its way.
func _close_the_dialogue(guard: LoreguardNPC, talk: LoreguardScene, loreguard: LoreguardClient) -> void:
	var gone: Array[bool] = []
	guard.line_cancelled.connect(func() -> void: gone.append(true))
	guard.say("One last thing.")
	await _until(func() -> bool: return guard.is_thinking, 30.0)
	talk.remove_child(guard)
	await _until(func() -> bool: return not gone.is_empty(), 30.0)
	_check(gone == [true], "leaving the tree cancels the line on its way")
	var guard_memory := await loreguard.memory("guard")
	_check(int(guard_memory.body.get("interactions", -1)) == 1, "and Brom remembers none of it")
	guard.free()
