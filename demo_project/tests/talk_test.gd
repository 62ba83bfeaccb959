extends Node
## The demo NPCs, registered from their .tres resources, each answer one line from whatever
## model the sidecar at LOREGUARD_ADDRESS runs (tests/godot_addon/test_integration.py uses the real
## embedded model). Prints each line; exits 0 only if both answers arrived through `replied`.

const WATCHDOG_S := 600.0
const LINES := {"guard": "Good evening. When does the gate close?", "merchant": "How much is a lantern?"}


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(
		func() -> void:
			printerr("talk: watchdog fired after %d s" % WATCHDOG_S)
			get_tree().quit(2)
	)
	var loreguard: LoreguardClient = get_node("/root/Loreguard")
	await loreguard.load_world(load("res://world.tres"))
	var answered := 0
	for npc_id: String in LINES:
		var npc := LoreguardNPC.new()
		npc.profile = load("res://npcs/%s_profile.tres" % npc_id)
		npc.rules.append(load("res://npcs/%s_rules.tres" % npc_id))
		var heard: Array[LoreguardLine] = []
		npc.replied.connect(func(line: LoreguardLine) -> void: heard.append(line))
		add_child(npc)
		var result := await npc.say(LINES[npc_id])
		if result.ok and heard.size() == 1 and not heard[0].dialogue.is_empty():
			answered += 1
			var line := heard[0]
			print("talk: %s (%s, %d attempts): %s" % [npc_id, line.outcome, line.attempts, line.dialogue])
		else:
			printerr("talk: FAIL %s: %s" % [npc_id, result])
	print("talk: %d of %d answered" % [answered, LINES.size()])
	get_tree().quit(0 if answered == LINES.size() else 1)
