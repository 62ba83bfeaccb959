extends Node
## The player walks away while an NPC of a LoreguardScene is still thinking its line
## (tests/godot_addon/test_scene.py runs it against a sidecar whose scripted lines take a while):
## the thinking stops at once, and the line, when the sidecar answers it, is never shown. Exits
## 0 only if every check held.
##
## Environment: LOREGUARD_ADDRESS.

const WATCHDOG_S := 120.0

var _passed: int = 0
var _failed: int = 0


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(
		func() -> void:
			printerr("scene_leave: watchdog fired after %d s" % WATCHDOG_S)
			get_tree().quit(2)
	)
	await _run()
	print("scene_leave: %d passed, %d failed" % [_passed, _failed])
	get_tree().quit(0 if _failed == 0 else 1)


func _run() -> void:
	var loreguard: LoreguardClient = get_node("/root/Loreguard")
	if not loreguard.is_connected_to_sidecar():
		await loreguard.connected
	await loreguard.load_world(load("res://world.tres"))
	var talk := LoreguardScene.new()
	talk.name = "GateTalk"
	talk.topic = "the smith is late with the new hinge"
	talk.pause_between_lines_s = 0.0
	var guard := _npc("guard")
	var merchant := _npc("merchant")
	talk.add_child(guard)
	talk.add_child(merchant)
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


func _npc(npc_id: String) -> LoreguardNPC:
	var npc := LoreguardNPC.new()
	npc.profile = load("res://npcs/%s_profile.tres" % npc_id)
	npc.rules.append(load("res://npcs/%s_rules.tres" % npc_id))
	npc.stream = true
	return npc


func _until(condition: Callable, timeout_s: float) -> void:
	var deadline := Time.get_ticks_msec() + int(timeout_s * 1000)
	while not condition.call() and Time.get_ticks_msec() < deadline:
		await get_tree().process_frame


func _check(condition: bool, what: String) -> void:
	if condition:
		_passed += 1
		print("ok: ", what)
	else:
		_failed += 1
		printerr("FAIL: ", what)
