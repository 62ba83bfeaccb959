extends Node
## Streamed replies against a real sidecar (tests/godot_addon/test_stream.py starts it in a
## process of its own, with a scripted model): two NPCs stream at once and each gets its own
## chunks, in order, adding up to its line; then a stream is cut by killing the sidecar, which
## must end in a clear `sidecar_down` error with no `replied`. Exits 0 only if every check held.
##
## Environment: LOREGUARD_ADDRESS, LOREGUARD_TEST_OUT (the kill handshake with pytest).

const WATCHDOG_S := 120.0

var _passed: int = 0
var _failed: int = 0
var _out_dir: String = OS.get_environment("LOREGUARD_TEST_OUT")


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(
		func() -> void:
			printerr("stream: watchdog fired after %d s" % WATCHDOG_S)
			get_tree().quit(2)
	)
	await _run()
	print("stream: %d passed, %d failed" % [_passed, _failed])
	get_tree().quit(0 if _failed == 0 else 1)


func _run() -> void:
	var loreguard: LoreguardClient = get_node("/root/Loreguard")
	if not loreguard.is_connected_to_sidecar():
		await loreguard.connected
	await loreguard.load_world(load("res://world.tres"))
	var guard := _npc("guard")
	var merchant := _npc("merchant")
	var heard := {"guard": [], "merchant": []}
	var replied := {"guard": [], "merchant": []}
	var failed: Array[String] = []
	for npc in [guard, merchant]:
		var id: String = npc.profile.id
		npc.stream = true
		npc.dialogue_chunk.connect(func(text: String) -> void: heard[id].append(text))
		npc.replied.connect(func(line: LoreguardLine) -> void: replied[id].append(line.dialogue))
		npc.failed.connect(func(error: LoreguardError) -> void: failed.append(error.code))
		add_child(npc)
	await _until(func() -> bool: return guard.is_registered and merchant.is_registered, 10.0)
	# `warm_up` (on by default): each NPC asked the sidecar to warm it right after registering.
	var stats := await loreguard.stats()
	var counters: Dictionary = stats.body.get("counters", {}) if stats.ok else {}
	_check(int(counters.get("warm.requested", 0)) == 2, "each NPC asked to be warmed: %s" % [counters])

	# Both at once: replies and chunks of two requests interleave on one connection.
	var results := {}
	var ask := func(npc: LoreguardNPC, text: String) -> void: results[npc.profile.id] = await npc.say(text)
	ask.call(guard, "When does the gate close?")
	ask.call(merchant, "How much is a lantern?")
	await _until(func() -> bool: return results.size() == 2, 30.0)
	for id: String in ["guard", "merchant"]:
		var result: LoreguardResult = results[id]
		_check(result.ok, "%s answered: %s" % [id, result])
		_check(heard[id].size() >= 2, "%s streamed %d chunks: %s" % [id, heard[id].size(), heard[id]])
		_check(
			replied[id].size() == 1 and "".join(heard[id]) == replied[id][0],
			"%s: the chunks add up to the line `replied` carries: %s / %s" % [id, heard[id], replied[id]]
		)
	_check(heard["guard"][0] == "The gate closes at dusk.", "the guard's first chunk: %s" % [heard["guard"]])
	_check(heard["merchant"][0] == "Lanterns are five silver.", "the merchant's own chunks: %s" % [heard["merchant"]])

	# The client's own view: chunk bodies in `seq` order, from one attempt, before the reply.
	var bodies: Array[Dictionary] = []
	var direct := await loreguard.interact(
		{"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": "Again?"},
		-1,
		func(body: Dictionary) -> void: bodies.append(body)
	)
	var seqs := bodies.map(func(b: Dictionary) -> int: return int(b.get("seq", -1)))
	_check(direct.ok and seqs == range(bodies.size()), "chunks arrive in seq order: %s" % [seqs])
	_check(
		bodies.all(func(b: Dictionary) -> bool: return int(b.get("attempt", -1)) == direct.line.attempts),
		"every chunk names the attempt that wrote it: %s" % [bodies]
	)
	_check(
		"".join(bodies.map(func(b: Dictionary) -> String: return str(b.get("text")))) == direct.line.dialogue,
		"the chunk bodies add up to the reply's dialogue"
	)

	# A stream cut by a sidecar kill: the first sentence arrives, then the sidecar dies.
	heard["guard"].clear()
	replied["guard"].clear()
	var cut := {}
	guard.dialogue_chunk.connect(
		func(_text: String) -> void: FileAccess.open(_out_dir.path_join("kill-please"), FileAccess.WRITE).close(),
		CONNECT_ONE_SHOT
	)
	var story := func() -> void: cut["result"] = await guard.say("Tell me a long story.")
	story.call()
	await _until(func() -> bool: return cut.has("result"), 60.0)
	var broken: LoreguardResult = cut.get("result")
	_check(broken != null and not broken.ok, "the cut stream failed: %s" % broken)
	if broken != null and not broken.ok:
		_check(broken.error.code == LoreguardError.SIDECAR_DOWN, "with sidecar_down: %s" % broken.error)
		_check("connection dropped" in broken.error.message, "saying why: %s" % broken.error.message)
	_check(
		heard["guard"] == ["Once a goat got stuck in this gate."],
		"only the released sentence arrived: %s" % [heard["guard"]]
	)
	_check(replied["guard"].is_empty(), "no replied for a cut stream")
	_check(LoreguardError.SIDECAR_DOWN in failed, "the NPC emitted failed: %s" % [failed])


func _npc(npc_id: String) -> LoreguardNPC:
	var npc := LoreguardNPC.new()
	npc.profile = load("res://npcs/%s_profile.tres" % npc_id)
	npc.rules.append(load("res://npcs/%s_rules.tres" % npc_id))
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
