extends SceneTree
## A game run under a debugger (`--remote-debug`, pytest plays the editor's end): the client
## makes its own forwarder, and one interaction's audit record leaves through EngineDebugger.

const WATCHDOG_MS := 30000


func _init() -> void:
	_run.call_deferred()


func _run() -> void:
	create_timer(WATCHDOG_MS / 1000.0).timeout.connect(func() -> void: quit(2))
	var client := LoreguardClient.new()
	client.autostart = false
	root.add_child(client)
	print("debugger active: %s, forwarder: %s" % [EngineDebugger.is_active(), client.debug_forwarder != null])
	client.start(OS.get_environment("LOREGUARD_ADDRESS"), false)
	var reply := await client.interact(
		{"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": "Forward this, please."}
	)
	print("interact: %s" % reply)
	while client.debug_forwarder != null and client.debug_forwarder.forwarded < 1:
		await process_frame
	# Let the debugger flush its queue before quitting.
	for i in 10:
		await process_frame
	quit(0 if reply.ok else 1)
