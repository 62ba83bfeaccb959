extends Node
## The addon against a real sidecar (tests/godot_addon/test_integration.py starts it, with the
## scripted model). Registers the demo NPCs from their .tres resources, talks to them, receives
## a world intent, gets typed errors, then asks pytest to restart the sidecar and checks that
## the client reconnects and re-registers by itself. Exits 0 only if every check held.
##
## Environment: LOREGUARD_ADDRESS (the sidecar), LOREGUARD_TEST_OUT (a folder for the
## serialized bodies and the restart handshake with pytest).

const WATCHDOG_S := 120.0

var guard: LoreguardNPC
var merchant: LoreguardNPC
## What the NPCs' signals carried, by signal.
var signals := {"registered": 0, "replied": [], "intents": [], "routed": [], "failed": []}
var _passed: int = 0
var _failed: int = 0
var _out_dir: String = OS.get_environment("LOREGUARD_TEST_OUT")


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(
		func() -> void:
			printerr("integration: watchdog fired after %d s" % WATCHDOG_S)
			get_tree().quit(2)
	)
	await _run()
	print("integration: %d passed, %d failed" % [_passed, _failed])
	get_tree().quit(0 if _failed == 0 else 1)


func _run() -> void:
	var loreguard: LoreguardClient = get_node("/root/Loreguard")
	var hello := await _connect_and_register(loreguard)
	await _talk()
	await _typed_errors(loreguard, hello)
	await _after_a_restart(loreguard)


## Connected, `hello`, the world and both NPCs registered from their .tres resources.
func _connect_and_register(loreguard: LoreguardClient) -> LoreguardResult:
	if not loreguard.is_connected_to_sidecar():
		await loreguard.connected
	_check(loreguard.is_connected_to_sidecar(), "connected to %s" % loreguard.address)

	var hello := await loreguard.hello()
	_check(hello.ok and 1 in hello.body.get("protocol_versions", []), "hello names protocol 1: %s" % hello)

	var world: LoreguardWorld = load("res://world.tres")
	var loaded := await loreguard.load_world(world)
	_check(loaded.ok and loaded.body.get("world_id") == "eldmoor", "world.load from world.tres: %s" % loaded)

	guard = _npc("guard")
	merchant = _npc("merchant")
	for npc in [guard, merchant]:
		npc.registered.connect(func() -> void: signals["registered"] += 1)
		npc.replied.connect(func(line: LoreguardLine) -> void: signals["replied"].append(line))
		npc.intent_received.connect(
			func(intent: LoreguardWorldIntent) -> void: signals["intents"].append([intent.type, intent.params])
		)
		npc.failed.connect(func(error: LoreguardError) -> void: signals["failed"].append(error.code))
		add_child(npc)  # registers itself on ready
	merchant.route("give_item", func(params: Dictionary) -> void: signals["routed"].append(params))
	await _until(func() -> bool: return guard.is_registered and merchant.is_registered, 10.0)
	_check(signals["registered"] == 2, "both NPCs registered from their .tres resources")
	_write_bodies(world, [guard, merchant])
	return hello


## Lines, the replied and intent signals, the intent router.
func _talk() -> void:
	var first := await guard.say("Good evening. When does the gate close?")
	_check(first.ok and first.line.outcome == LoreguardLine.VALIDATED, "guard answers: %s" % first)
	_check(
		(
			signals["replied"].size() == 1
			and signals["replied"][0] == first.line
			and first.line.dialogue == "The gate closes at dusk, traveller."
		),
		"replied signal carries the validated line: %s" % [signals["replied"]]
	)
	_check_line(first.line, "guard", first.body)
	var second := await guard.say("Tell me about the hills.")
	_check(second.ok and second.line.attempts >= 1, "a second interaction: %s" % second)

	var sale := await merchant.say("A lantern, please. Here's 5 silver.")
	_check(sale.ok and sale.line.emotion == "happy", "merchant answers: %s" % sale)
	var expected_params := {"item": "lantern", "count": 1}
	_check(
		(
			sale.line.intents.size() == 1
			and sale.line.intents[0].type == "give_item"
			and sale.line.intents[0].params == expected_params
		),
		"the line's intents are typed: %s" % [sale.line.intents]
	)
	_check(
		signals["intents"] == [["give_item", expected_params]], "intent_received(give_item): %s" % [signals["intents"]]
	)
	_check(
		signals["routed"] == [expected_params],
		"the intent router called the routed callable: %s" % [signals["routed"]]
	)


## Typed errors: not_found, invalid, a body the client cannot encode; memory.get.
func _typed_errors(loreguard: LoreguardClient, hello: LoreguardResult) -> void:
	_check(hello.line == null, "only interact replies are read into a line")
	var unknown := await loreguard.interact(
		{"npc_id": "nobody", "trigger_reason": "player_utterance", "player_input": "hi"}
	)
	_check(
		not unknown.ok and unknown.error.code == LoreguardError.NOT_FOUND and unknown.line == null,
		"unknown NPC is not_found, with no line: %s" % unknown
	)
	var invalid := await loreguard.interact({"npc_id": "guard", "trigger_reason": "daydream"})
	_check(
		not invalid.ok and invalid.error.code == LoreguardError.INVALID and not invalid.error.details.is_empty(),
		"a bad trigger is invalid, with details: %s" % invalid
	)
	var unencodable := await loreguard.request("interact", {"npc_id": self})
	_check(
		not unencodable.ok and unencodable.error.code == LoreguardError.CLIENT,
		"an Object in a body fails on the client: %s" % unencodable
	)
	var memory := await loreguard.memory("guard")
	_check(
		memory.ok and memory.body.get("interactions") == 2,
		"memory.get counts the guard's two interactions: %s" % memory.body.get("interactions")
	)


## pytest restarts the sidecar empty: the client notices, re-registers and warms the NPCs.
func _after_a_restart(loreguard: LoreguardClient) -> void:
	# pytest stops this sidecar and starts an empty one on the same port.
	_touch("restart-please")
	await loreguard.disconnected
	_check(not loreguard.is_connected_to_sidecar(), "noticed the sidecar going away: %s" % loreguard.dealer.last_error)
	var during := await loreguard.hello()
	_check(during.ok, "a request made while disconnected is sent once reconnected: %s" % during)
	var after := await guard.say("Are you still there?")
	_check(
		after.ok and after.line.dialogue != "",
		"after the restart the guard answers (re-registered by the client): %s" % after
	)
	var merchant_after := await merchant.say("Hello again.")
	_check(merchant_after.ok, "and so does the merchant: %s" % merchant_after)
	var fresh := await loreguard.memory("guard")
	_check(
		fresh.ok and fresh.body.get("interactions") == 1,
		"the new sidecar has only the new interaction: %s" % fresh.body.get("interactions")
	)
	var restarted_stats := await loreguard.stats()
	var counters: Dictionary = restarted_stats.body.get("counters", {}) if restarted_stats.ok else {}
	_check(
		int(counters.get("warm.requested", 0)) == 2,
		"both NPCs were warmed again on the new sidecar, after re-registering: %s" % [counters]
	)
	_check(signals["failed"].is_empty(), "no NPC failed: %s" % [signals["failed"]])


## The typed line says what the wire body says, field by field.
func _check_line(line: LoreguardLine, npc_id: String, body: Dictionary) -> void:
	_check(line.body == body, "line.body is the raw reply")
	_check(
		(
			line.npc_id == npc_id
			and line.dialogue == body["dialogue"]
			and line.emotion == body["emotion"]
			and line.outcome == body["outcome"]
			and line.attempts == body["attempts"]
			and line.fallback_used == body["fallback_used"]
			and line.failed_gates == PackedStringArray(body["failed_gates"])
			and line.needs == PackedStringArray(body["needs"])
			and line.intents.size() == body["intents"].size()
		),
		"the line's fields are the body's: %s" % line
	)
	_check(
		line.audit_record_id == body["audit_record_id"] and line.audit_record_id.begins_with("r"),
		"the line names its audit record: %s" % line.audit_record_id
	)


func _npc(npc_id: String) -> LoreguardNPC:
	var npc := LoreguardNPC.new()
	npc.name = npc_id.capitalize()
	npc.profile = load("res://npcs/%s_profile.tres" % npc_id)
	npc.rules.append(load("res://npcs/%s_rules.tres" % npc_id))
	return npc


## The bodies the addon sent, for pytest to compare with the JSON the terminal demo uses.
func _write_bodies(world: LoreguardWorld, npcs: Array) -> void:
	var bodies := {"world": world.to_dict(), "npcs": {}}
	for npc: LoreguardNPC in npcs:
		bodies["npcs"][npc.profile.id] = npc.profile.to_dict(npc.rules)
	var file := FileAccess.open(_out_dir.path_join("bodies.json"), FileAccess.WRITE)
	file.store_string(JSON.stringify(bodies, " ", true, true))


func _touch(file_name: String) -> void:
	FileAccess.open(_out_dir.path_join(file_name), FileAccess.WRITE).store_string("1")


func _until(condition: Callable, timeout_s: float) -> void:
	var deadline := Time.get_ticks_msec() + int(timeout_s * 1000)
	while not condition.call() and Time.get_ticks_msec() < deadline:
		await get_tree().process_frame


func _check(ok: bool, what: String) -> void:
	if ok:
		_passed += 1
		print("  ok   ", what)
	else:
		_failed += 1
		printerr("  FAIL ", what)
