extends "res://tests/check_run.gd"
## The status while a sidecar's model server is down (tests/godot_addon/test_model_server.py): a
## real sidecar drives a stand-in model server that fails its first requests. The first reply is
## a fallback line and the status turns MODEL_UNREACHABLE; once the model answers, READY again.

const WATCHDOG_MS := 90000

var statuses: Array[LoreguardSidecarStatus] = []


func _init() -> void:
	_run.call_deferred()


func _run() -> void:
	create_timer(WATCHDOG_MS / 1000.0).timeout.connect(
		func() -> void:
			printerr("watchdog: the model server test ran past %d ms" % WATCHDOG_MS)
			quit(2)
	)
	var client := LoreguardClient.new()
	client.autostart = false
	root.add_child(client)
	client.status_changed.connect(func(s: LoreguardSidecarStatus) -> void: statuses.append(s))
	client.start(OS.get_environment("LOREGUARD_TEST_SIDECAR"), false)
	await client.connected
	var context := {"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": "Hello?"}
	var first := await client.interact(context, 60000)
	_expect(first.ok and first.line.fallback_used, "the first reply is a fallback line: %s" % first)
	var down := client.status
	_expect(down.state == LoreguardSidecarStatus.State.MODEL_UNREACHABLE, "status: %s" % down)
	_expect(
		down.describe() == "The model server is unreachable; NPCs answer with their fallback lines.", down.describe()
	)
	_expect(down.state_name() == "model_unreachable", down.state_name())
	_expect("the model server is unreachable" in down.reason, "the reason says why: %s" % down.reason)
	# The circuit's cooldown is a millisecond: the next request is its trial, and the stand-in
	# answers it. A few tries at most, each awaited on its own reply.
	var answered := false
	for i in 5:
		var reply := await client.interact(context, 60000)
		answered = reply.ok and not reply.line.fallback_used
		if answered:
			break
	_expect(answered, "the model answered again")
	_expect(client.status.state == LoreguardSidecarStatus.State.READY, "READY again: %s" % client.status)
	var names := statuses.map(func(s: LoreguardSidecarStatus) -> String: return s.state_name())
	_expect(names.slice(-3) == ["ready", "model_unreachable", "ready"], "the statuses in order: %s" % [names])
	client.queue_free()
	_finish()
