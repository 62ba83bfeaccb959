extends Node
## A LoreguardScene against a real sidecar (tests/godot_addon/test_scene.py runs it with a
## scripted model): Brom and Mira talk line by line, each line coming through its speaker's
## node (chunks, `replied`) and the scene's signals; the player joins and the NPC named answers;
## walking away ends the scene, and words into an ended scene fail with `invalid`. Exits 0 only
## if every check held.
##
## Environment: LOREGUARD_ADDRESS.

const WATCHDOG_S := 120.0

## The name the summary line starts with (scene_leave_test.gd, which extends this, has its own).
var label: String = "scene"
var _passed: int = 0
var _failed: int = 0


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(
		func() -> void:
			printerr("%s: watchdog fired after %d s" % [label, WATCHDOG_S])
			get_tree().quit(2)
	)
	await _run()
	print("%s: %d passed, %d failed" % [label, _passed, _failed])
	get_tree().quit(0 if _failed == 0 else 1)


func _run() -> void:
	var loreguard: LoreguardClient = get_node("/root/Loreguard")
	var talk := await _gate_talk(loreguard)
	talk.max_lines = 3
	var guard: LoreguardNPC = talk.get_child(0)
	var merchant: LoreguardNPC = talk.get_child(1)
	var chunks := {"guard": [], "merchant": []}
	var replied := {"guard": [], "merchant": []}
	for npc: LoreguardNPC in [guard, merchant]:
		var id: String = npc.profile.id
		npc.dialogue_chunk.connect(func(text: String) -> void: chunks[id].append(text))
		npc.replied.connect(func(line: LoreguardLine) -> void: replied[id].append(line.dialogue))
	var spoken: Array[String] = []
	var reasons: Array[String] = []
	talk.line_spoken.connect(
		func(npc: LoreguardNPC, line: LoreguardLine) -> void: spoken.append("%s: %s" % [npc.profile.id, line.dialogue])
	)
	talk.ended.connect(func(reason: String) -> void: reasons.append(reason))
	add_child(talk)
	_check(talk.speakers() == [guard, merchant], "the NPC children are the speakers, in tree order")

	var started := await talk.begin()
	_check(started.ok, "the scene started: %s" % started)
	await _until(func() -> bool: return not reasons.is_empty(), 60.0)
	_check(reasons == ["max_lines"], "it ran to its last line by itself: %s" % [reasons])
	_check(
		spoken == ["guard: Mira, is the smith back?", "merchant: Not yet, Brom.", "guard: Then we wait."],
		"Brom and Mira took turns: %s" % [spoken]
	)
	_check(
		(
			replied["guard"] == ["Mira, is the smith back?", "Then we wait."]
			and replied["merchant"] == ["Not yet, Brom."]
		),
		"each line came through its speaker's `replied`: %s" % [replied]
	)
	_check("".join(chunks["merchant"]) == "Not yet, Brom.", "and streamed through its `dialogue_chunk`: %s" % [chunks])
	var memory := await loreguard.memory("merchant")
	var texts: Array = memory.body.get("memory", {}).get("episodic", []).map(
		func(e: Dictionary) -> String: return e["text"]
	)
	_check('Brom: "Mira, is the smith back?"' in texts, "Mira remembers what Brom said: %s" % [texts])

	# The player comes near again, joins, and names Mira: she answers; then walks away.
	reasons.clear()
	spoken.clear()
	talk.auto_continue = false
	talk.player_present = true
	_check((await talk.begin()).ok, "a new scene under the same id once the last one ended")
	var said := await talk.say("Mira, do you sell rope?")
	_check(said.ok and said.body.get("next_speaker") == "merchant", "the NPC the player named answers next: %s" % said)
	var next := await talk.next_line()
	_check(next.ok and spoken == ["merchant: Rope, yes! Two silver."], "Mira answered the player: %s" % [spoken])
	var refused := await talk.say("Hello?", "player", "nobody")
	_check(
		not refused.ok and refused.error.code == LoreguardError.INVALID and talk.is_running,
		"words the sidecar refuses change nothing: the scene goes on: %s" % refused
	)
	await talk.end()
	_check(reasons == ["ended_by_request"] and not talk.is_running, "walking away ended it: %s" % [reasons])
	var late := await loreguard.scene_say(talk.id(), "Wait!")
	_check(not late.ok and late.error.code == LoreguardError.INVALID, "words into an ended scene: invalid: %s" % late)


## Brom and Mira's talk at the gate, not yet in the tree, once the client is connected and the
## world loaded.
func _gate_talk(loreguard: LoreguardClient) -> LoreguardScene:
	if not loreguard.is_connected_to_sidecar():
		await loreguard.connected
	await loreguard.load_world(load("res://world.tres"))
	var talk := LoreguardScene.new()
	talk.name = "GateTalk"
	talk.topic = "the smith is late with the new hinge"
	talk.pause_between_lines_s = 0.0
	talk.add_child(_npc("guard"))
	talk.add_child(_npc("merchant"))
	return talk


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
